"""The local control plane: the real handlers and workflows on an emulated AWS (moto), with a local fleet."""
