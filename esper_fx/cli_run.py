"""Runs a validated configuration from the command line: summary, training, final table, exit code."""

from __future__ import annotations

import sys
import time

from esper_fx.config import TrainingConfig

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def _limit_cpu_threads(config: TrainingConfig) -> None:
    """On CPU-only runs use one torch intra-op thread unless OMP_NUM_THREADS says otherwise.

    The hosts are tiny: on a small CPU, OpenMP oversubscription made epochs up to 10x slower as soon
    as anything else ran on the machine, while one thread lost little when it was idle.
    """
    import os

    devices = [config.device, *(config.env_devices or ())]
    if os.environ.get("OMP_NUM_THREADS") or any(str(d).startswith("cuda") for d in devices):
        return
    import torch

    if config.device == "auto" and torch.cuda.is_available():
        return
    torch.set_num_threads(1)
    print("CPU run: 1 torch thread (set OMP_NUM_THREADS to use more)", flush=True)


def run_from_cli(config: TrainingConfig, quiet: bool = False) -> int:
    from esper_fx.train import config_summary

    for line in config_summary(config):
        print(line, flush=True)
    _limit_cpu_threads(config)
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
