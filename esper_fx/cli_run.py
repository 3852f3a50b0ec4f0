"""Runs a validated configuration from the command line: summary, training, final table, exit code."""

from __future__ import annotations

import sys
import time

from esper_fx.config import TrainingConfig

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def run_from_cli(config: TrainingConfig, quiet: bool = False) -> int:
    from esper_fx.train import config_summary

    for line in config_summary(config):
        print(line, flush=True)
    from esper_fx.loop import Interrupted, run
    from esper_fx.telemetry import final_table

    started = time.perf_counter()
    try:
        result = run(config, quiet=quiet)
    except Interrupted as exc:
        print("\nInterrupted.", file=sys.stderr)
        if exc.checkpoint:
            print(f"Checkpoint written: {exc.checkpoint}", file=sys.stderr)
            print(f"Resume with: python -m esper_fx.train --resume {exc.run_dir}", file=sys.stderr)
        else:
            print("No batch had finished, so there is nothing to resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
    print()
    print(final_table(result.history))
    s = result.summary
    print(f"\nDone in {time.perf_counter() - started:.1f} s: {s['episodes']} episodes, final accuracy "
          f"{s['final_avg_accuracy']:.2f}% (best rolling {s['best_rolling_avg_accuracy']:.2f}%), seeds "
          f"germinated {s['seeds_created']}, fossilized {s['seeds_fossilized']}, culled {s['seeds_culled']}")
    if result.run_dir:
        print(f"Run directory: {result.run_dir}")
    return EXIT_OK
