"""`python -m esper_fx.prove`: the prove command (train PPO, compare it with the baselines on held-out seeds); the code lives in `esper_fx.cli.prove`."""

import sys

from esper_fx.cli.prove import main, run_as_command  # noqa: F401 (main: the command as a function)

if __name__ == "__main__":
    sys.exit(run_as_command())
