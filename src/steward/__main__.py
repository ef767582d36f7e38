"""``python -m steward run <name | module:ATTR> [flags]``: host a controller (see
:mod:`steward.launcher`); ``python -m steward list``: the declared controllers."""

import sys

from steward.launcher import main

sys.exit(main())
