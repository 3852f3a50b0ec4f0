"""`python -m esper_fx.doctor`: the machine check; the code lives in `esper_fx.cli.doctor`."""

import sys

from esper_fx.cli.doctor import main

if __name__ == "__main__":
    sys.exit(main())
