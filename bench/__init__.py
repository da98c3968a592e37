"""Benchmarks: `python -m bench` (what `make bench` runs)."""

import os
import sys

# A benchmark process runs the simulator's compiled build when `SPOTLINE_NATIVE_TREE` names it
# (`bench.native`): the build's tree goes first on the path, before anything imports `spotline`.
_NATIVE_TREE = os.environ.get("SPOTLINE_NATIVE_TREE")
if _NATIVE_TREE and "spotline" not in sys.modules:
    sys.path.insert(0, _NATIVE_TREE)
