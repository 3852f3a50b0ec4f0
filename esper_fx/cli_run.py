"""Runs a validated configuration from the command line (wired to the training loop in esper_fx.loop)."""

from __future__ import annotations

import sys

from esper_fx.config import TrainingConfig


def run_from_cli(config: TrainingConfig, quiet: bool = False) -> int:
    from esper_fx.train import config_summary

    for line in config_summary(config):
        print(line)
    try:
        from esper_fx import loop  # noqa: F401
    except ImportError:
        print("esper_fx.train: the training loop is not available in this build yet", file=sys.stderr)
        return 1
    return loop.main_from_cli(config, quiet=quiet)
