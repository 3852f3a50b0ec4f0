"""`python -m esper_fx.report`: the report command (report.html from a run directory); the code lives in `esper_fx.outputs.report`."""

import sys

from esper_fx.outputs.report import main

if __name__ == "__main__":
    sys.exit(main())
