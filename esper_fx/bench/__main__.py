"""`python -m esper_fx.bench`: see esper_fx.bench.cli."""

import sys

from esper_fx.bench.cli import main

sys.exit(main())
