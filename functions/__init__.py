"""Lambda entry points: one thin module per function in `spotline.resources.FUNCTIONS`.

Each parses its event, makes one call into `spotline.control`, and reports metrics; the
Powertools objects and the control plane come from `functions.runtime`.

Cold start: in Lambda, Python's cyclic garbage collector is off while a handler module and its
imports load, and the module's last statement (`runtime.loaded()`) freezes what was loaded
and turns the collector back on. Loading allocates a few hundred thousand objects that live as
long as the process and no garbage worth a collection; the collector's passes over them were
40-80 ms of the API function's import (`make bench`, cold start). Frozen, they are also skipped
by every later collection. Outside Lambda (tests, the local runtime) nothing changes.
"""

import gc
import os

if os.environ.get("LAMBDA_TASK_ROOT"):
    gc.disable()
