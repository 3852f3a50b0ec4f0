"""`python -m esper_fx.cli.flag_table`: print README's table of `python -m esper_fx.train`'s flags (a test keeps
README's copy equal to it)."""

from __future__ import annotations

import sys

from esper_fx.cli.parser import flag_table
from esper_fx.cli.train import build_parser


def main() -> int:
    print(flag_table(build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
