"""Spotline for training frameworks: checkpoint on a Spotline request, a Spot notice or SIGTERM
with the framework's own checkpoint, and resume from it.

- `spotline.integrations.lightning`: `SpotlineCallback`, Lightning (`spotline[lightning]`);
- `spotline.integrations.transformers`: `SpotlineTrainerCallback`, Hugging Face `Trainer`
  (`spotline[transformers]`);
- `spotline.integrations.torch`: `DistributedCheckpointer`, plain PyTorch and torchrun
  (`spotline[torch]`).

Each module imports its framework only when it is imported itself; `spotline.integrations`
alone imports none.
"""
