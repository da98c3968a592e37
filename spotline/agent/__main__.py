"""`python -m spotline.agent -- cmd args...` (see spotline.agent.wrapper)."""

import sys

from spotline.agent.wrapper import main

sys.exit(main())
