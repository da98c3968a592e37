"""Application services of the control plane: one function per use case, no Powertools.

Each service takes a `ControlPlane` (the adapters, the settings, a clock and a random source)
and explicit arguments; Lambda handlers (`functions/`) and the local runtime call the same
functions. The domain decides (`spotline.domain.plan`); the services act on its decisions
through the ports (`spotline.control.ports`), which `spotline.aws` implements
(`spotline.aws.plane.build_control_plane` wires them). Nothing here imports `spotline.aws`.
"""
