"""`python -m esper_fx.prove`: the prove command (train PPO, compare it with the baselines on held-out seeds); the code lives in `esper_fx.cli.prove`."""

import sys

from esper_fx.cli.prove import main

if __name__ == "__main__":
    sys.exit(main())
