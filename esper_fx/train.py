"""`python -m esper_fx.train`: the train command; the code lives in `esper_fx.cli.train`."""

import sys

from esper_fx.cli.train import main

if __name__ == "__main__":
    sys.exit(main())
