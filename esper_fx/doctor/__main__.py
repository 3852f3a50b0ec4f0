"""`python -m esper_fx.doctor`: see esper_fx.doctor.cli."""

import sys

from esper_fx.doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
