"""Runs a validated configuration from the command line: summary, training, final table, exit code.

Imports only the configuration at module level: jax and torch load when a run starts, so a bad command
line is rejected without them.
"""

from __future__ import annotations

import os
import sys
import time

from esper_fx import compile_cache
from esper_fx.config import TrainingConfig
from esper_fx.tensorboard_log import TB_SUBDIR

EXIT_OK = 0
EXIT_INTERRUPTED = 130


def limit_cpu_threads(config: TrainingConfig, say=print) -> None:
    """On CPU-only runs use one torch intra-op thread unless OMP_NUM_THREADS says otherwise.

    The hosts are tiny: on a small CPU, OpenMP oversubscription made epochs up to 10x slower as soon
    as anything else ran on the machine, while one thread lost little when it was idle.
    """
    devices = [config.device, *(config.env_devices or ())]
    if os.environ.get("OMP_NUM_THREADS") or any(str(d).startswith("cuda") for d in devices):
        return
    import torch

    if config.device == "auto" and torch.cuda.is_available():
        return
    torch.set_num_threads(1)
    say("CPU run: 1 torch thread (set OMP_NUM_THREADS to use more)")


def config_summary(config: TrainingConfig) -> list[str]:
    """The pre-training summary of §14.4 (at least 8 lines)."""
    ppo = config.ppo
    if ppo.entropy_anneal_episodes and (ppo.entropy_coef_start is not None or ppo.entropy_coef_end is not None):
        start, end = ppo.entropy_endpoints
        entropy = f"{start:g} -> {end:g} over {ppo.entropy_anneal_episodes} episodes"
    else:
        entropy = f"{ppo.entropy_coef:g}"
    return [
        f"esper_fx: task={config.task.value} ({config.topology}), controller={config.controller_name}, "
        f"seed={config.seed}",
        f"Episodes: {config.n_episodes}, envs: {config.n_envs}, max_epochs: {config.max_epochs}",
        f"PPO: lr={ppo.lr:g}, gamma={ppo.gamma:g}, lambda={ppo.gae_lambda:g}, "
        f"clip={ppo.clip_ratio:g}, value_coef={ppo.value_coef:g}, max_grad_norm={ppo.max_grad_norm:g}",
        f"Entropy: {entropy} (min {ppo.entropy_coef_min:g})",
        f"Update: epochs={ppo.update_epochs}, minibatches={ppo.num_minibatches}, "
        f"amp={'on (' + config.amp_dtype.value + ')' if config.amp else 'off'}",
        f"LSTM: hidden={ppo.lstm_hidden_dim}, chunk={config.chunk_length}",
        f"Slots: {', '.join(config.enabled_slots)} of {config.num_slots}; reward: "
        f"{config.reward.reward_family.value}/{config.reward.reward_mode.value}; menu: {', '.join(config.menu[1:])}",
        f"Telemetry: {'enabled' if config.use_telemetry else 'disabled'} (level "
        f"{config.telemetry_level.value}), obs dim {config.state_dim}",
        f"Data: split={config.data_split.value}, path={config.data_path.value}, device={config.device}",
        f"Run dir: {config.run_dir or '(none)'}",
    ]


def run_from_cli(config: TrainingConfig, quiet: bool = False, compile_cache_dir: str | None = None,
                 compile_cache_enabled: bool | None = None) -> int:
    """Print the summary, run, print the final table and where everything is. The compilation cache
    follows `compile_cache.resolve_dir(compile_cache_dir, compile_cache_enabled)`."""
    for line in config_summary(config):
        print(line, flush=True)
    limit_cpu_threads(config, lambda line: print(line, flush=True))
    cache_dir = compile_cache.enable(compile_cache_dir, enabled=compile_cache_enabled)
    from esper_fx.loop import Interrupted, run
    from esper_fx.telemetry import final_table

    started = time.perf_counter()
    try:
        with compile_cache.counting() as cache_stats:
            result = run(config, quiet=quiet)
    except Interrupted as exc:
        print("\nInterrupted.", file=sys.stderr)
        if exc.checkpoint:
            print(f"Checkpoint written: {exc.checkpoint}", file=sys.stderr)
            print(f"Resume with: python -m esper_fx.train --resume {exc.run_dir}", file=sys.stderr)
            print(f"Report of the finished batches: python -m esper_fx.report {exc.run_dir}", file=sys.stderr)
        else:
            print("No batch had finished, so there is nothing to resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
    print()
    print(final_table(result.history))
    s = result.summary
    print(f"\nDone in {time.perf_counter() - started:.1f} s: {s['episodes']} episodes, final accuracy "
          f"{s['final_avg_accuracy']:.2f}% (best rolling {s['best_rolling_avg_accuracy']:.2f}%), seeds "
          f"germinated {s['seeds_created']}, fossilized {s['seeds_fossilized']}, culled {s['seeds_culled']}")
    for line in where_lines(result, cache_stats.describe(cache_dir)):
        print(line)
    return EXIT_OK


def where_lines(result, cache_line: str) -> list[str]:
    """The run's last lines: the compilation cache, TensorBoard, the run directory, the report."""
    lines = [cache_line]
    first_action = (result.summary.get("timing") or {}).get("first_action_s")
    if first_action is not None:
        lines.append(f"First action after {first_action:.1f} s")
    if result.run_dir:
        if result.config is not None and result.config.tensorboard:
            lines.append(f"TensorBoard: tensorboard --logdir {os.path.join(result.run_dir, TB_SUBDIR)}")
        lines.append(f"Run directory: {result.run_dir}")
    if result.report_path:
        lines.append(f"Report: {result.report_path}")
    return lines
