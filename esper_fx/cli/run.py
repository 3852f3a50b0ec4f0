"""Runs a validated configuration from the command line: summary, training, final table, exit code.

Imports only the configuration at module level: jax and torch load when a run starts, so a bad command
line is rejected without them. Exit codes (the table in `esper_fx.errors`): 0 done; 2 a configuration or
environment problem, found before anything is written where it can be (one line on stderr naming the
field, file or device); 1 a run that cannot go on (one line); 130 Ctrl-C and 143 SIGTERM, after a
checkpoint of the last finished batch and the command that resumes it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from esper_fx.training import compile_cache
from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import ACTION_HEADS
from esper_fx.distributed.auto import choose_workers
from esper_fx.command import EXIT_OK, EXIT_RUN_FAILED, EXIT_SETUP_ERROR
from esper_fx.errors import RunDirectoryError, RunFailure, SetupError
from esper_fx.stopping import exit_code, stop_signal
from rl.config import REWARD_SETTINGS
from esper_fx.training.threads import limit_cpu_threads


def config_summary(config: TrainingConfig) -> list[str]:
    """The pre-training summary of BEHAVIOUR §14.4 (at least 8 lines): the run, the controller's own settings
    (`controller_lines`), the slots and reward, the telemetry, the data, the workers, the run directory."""
    changed = [f"reward.{key}={value}" for key, value in config.to_dict()["reward"].items()
               if key not in REWARD_SETTINGS]  # the reward's constants changed from their defaults
    return [
        f"esper_fx: task={config.task.value} ({config.topology}), controller={config.controller_name}, "
        f"seed={config.seed}",
        f"Episodes: {config.n_episodes}, envs: {config.n_envs}, max_epochs: {config.max_epochs}, "
        f"amp={'on (' + config.amp_dtype.value + ')' if config.amp else 'off'}",
        *controller_lines(config),
        f"Slots: {', '.join(config.enabled_slots)} of {config.num_slots}; reward: "
        f"{config.reward.reward_family.value}/{config.reward.reward_mode.value}"
        f"{' (' + ', '.join(changed) + ')' if changed else ''}; menu: {', '.join(config.menu[1:])}",
        f"Telemetry: {'enabled' if config.use_telemetry else 'disabled'} (level "
        f"{config.telemetry_level.value}), obs dim {config.state_dim}"
        f"{'; withheld (a control): ' + ', '.join(config.observe_withheld) if config.observe_withheld else ''}",
        f"Data: split={config.data_split.value}, path={config.data_path.value}, device={config.device}",
        f"Env workers: {choose_workers(config).describe()}",
        f"Run dir: {config.run_dir or '(none)'}",
    ]


def controller_lines(config: TrainingConfig) -> list[str]:
    """The summary's lines of the run's controller: a learning controller's `learner` settings, then its own
    section's (PPO's, REINFORCE's); a scripted one's section (the heuristic's, the oracle's schedule)."""
    name, learner = config.controller_name, config.learner
    learns = [f"Learner: gamma={learner.gamma:g}, lambda={learner.gae_lambda:g}, "
              f"last epoch {'bootstraps' if learner.horizon_bootstrap else 'ends the episode'}"]
    if name in ("ppo_lstm", "ppo_mlp"):
        ppo = config.ppo
        if ppo.entropy_anneal_episodes and (ppo.entropy_coef_start is not None or ppo.entropy_coef_end is not None):
            start, end = ppo.entropy_endpoints
            entropy = f"{start:g} -> {end:g} over {ppo.entropy_anneal_episodes} episodes"
        else:
            entropy = f"{ppo.entropy_coef:g}"
        weighted = [f"{head} {w:g}" for head, w in zip(ACTION_HEADS, ppo.entropy_head_weights) if w != 1.0]
        weights = f"; head weights {', '.join(weighted)}, the others 1" if weighted else ""
        core = "LSTM" if name == "ppo_lstm" else "MLP"
        return [*learns,
                f"PPO: lr={ppo.lr:g}, clip={ppo.clip_ratio:g}, value_coef={ppo.value_coef:g}, "
                f"max_grad_norm={ppo.max_grad_norm:g}",
                f"Entropy: {entropy} (min {ppo.entropy_coef_min:g}){weights}",
                f"Update: epochs={ppo.update_epochs}, minibatches={ppo.num_minibatches}",
                f"{core}: hidden={ppo.lstm_hidden_dim}, chunk={config.max_epochs}"]
    if name == "reinforce":
        r = config.reinforce
        return [*learns, f"REINFORCE: lr={r.lr:g}, value_coef={r.value_coef:g}, entropy_coef={r.entropy_coef:g}, "
                f"max_grad_norm={r.max_grad_norm:g}", f"MLP: hidden={r.hidden_dim}"]
    if name == "heuristic":
        h = config.heuristic
        return [f"Heuristic: germinate after {h.plateau_epochs_to_germinate} flat epochs (from epoch "
                f"{h.min_epochs_before_germinate}), cull after {h.cull_after_epochs_without_improvement} or "
                f"{h.cull_if_accuracy_drops_by:g} pp lost, blend {h.blend} at {h.tempo}"]
    if name == "oracle":
        o = config.oracle
        then = f", then {o.then_blueprint} in {o.then_slot}" if o.two_seeds else ""
        return [f"Oracle: {o.blueprint} in {o.slot} at epoch {o.germinate_epoch}, blend {o.blend} at {o.tempo}"
                f"{then}; fossilized when allowed, never culled"]
    return [f"Controller: {name} (no settings of its own in the config)"]


def run_from_cli(config: TrainingConfig, quiet: bool = False, compile_cache_dir: str | None = None,
                 compile_cache_enabled: bool | None = None) -> int:
    """Run `config` and return the exit code: 0 done, 2 a configuration or environment problem (one line on
    stderr), 1 a run that cannot go on (one line), 130 / 143 stopped by Ctrl-C / SIGTERM (after a
    checkpoint of the last finished batch, with the command that resumes it). Prints the summary, the final
    table and where everything is. The compilation cache follows
    `compile_cache.resolve_dir(compile_cache_dir, compile_cache_enabled)`."""
    try:
        return _run(config, quiet, compile_cache_dir, compile_cache_enabled)
    except KeyboardInterrupt as stop:  # during start-up, before run() could take over
        return _stopped_outside_training(config, stop_signal(stop))
    except Exception as exc:  # noqa: BLE001 - sorted below; anything else is a bug and keeps its traceback
        code = _error_exit_code(exc)
        if code is None:
            raise
        hint = "" if isinstance(exc, RunDirectoryError) else _resume_hint(config)  # (its message advises already)
        print(f"esper_fx.train: error: {one_line(exc)}{hint}", file=sys.stderr)
        return code


def _run(config: TrainingConfig, quiet: bool, compile_cache_dir: str | None,
         compile_cache_enabled: bool | None) -> int:
    from esper_fx.training.preflight import check_before_writing

    check_before_writing(config)  # before the summary: a refused run directory or a missing GPU is the one line
    for line in config_summary(config):
        print(line, flush=True)
    limit_cpu_threads(config, lambda line: print(line, flush=True))
    cache_dir = compile_cache.enable(compile_cache_dir, enabled=compile_cache_enabled)
    note = compile_cache.start_note(cache_dir)
    if note is not None and not quiet:
        print(note, flush=True)
    said = None if quiet or cache_dir is None else (lambda: print(compile_cache.first_miss_note(cache_dir),
                                                                flush=True))
    from esper_fx.training.run import run
    from esper_fx.training.run_state import Interrupted
    from esper_fx.outputs.closing import closing_lines

    started = time.perf_counter()
    try:
        with compile_cache.counting(on_first_miss=said) as cache_stats:
            result = run(config, quiet=quiet)
    except Interrupted as exc:
        print(f"\nInterrupted ({signal.Signals(exc.signum).name}).", file=sys.stderr)
        if exc.checkpoint:
            print(f"Checkpoint written: {exc.checkpoint}", file=sys.stderr)
            print(f"Resume with: python -m esper_fx.train --resume {exc.run_dir}", file=sys.stderr)
            print(f"Report of the finished batches: python -m esper_fx.report {exc.run_dir}", file=sys.stderr)
        else:
            print("No batch had finished, so there is nothing to resume.", file=sys.stderr)
        return exc.exit_code
    if quiet:  # run() says its closing lines itself unless quiet; the command line always ends with them
        for line in closing_lines(result, time.perf_counter() - started):
            print(line)
    print(cache_stats.describe(cache_dir))
    return EXIT_OK


def _error_exit_code(exc: BaseException) -> int | None:
    """2 for a configuration or environment problem, 1 for a run that cannot go on, None for a bug."""
    if isinstance(exc, (SetupError, OSError)):
        return EXIT_SETUP_ERROR
    if isinstance(exc, RunFailure):
        return EXIT_RUN_FAILED
    return None


def one_line(exc: BaseException) -> str:
    """An exception as one line: an OSError with its file, anything else its first line."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:2000]


def _resume_hint(config: TrainingConfig) -> str:
    """'; the run can be resumed with ...' when the run directory holds a checkpoint."""
    if not _has_checkpoint(config.run_dir):
        return ""
    return f" (the run directory keeps its last checkpoint: python -m esper_fx.train --resume {config.run_dir})"


def _has_checkpoint(run_dir: str | None) -> bool:
    if not run_dir or not os.path.isdir(os.path.join(run_dir, "checkpoints")):
        return False
    from esper_fx.outputs.checkpoint import has_checkpoint

    return has_checkpoint(run_dir)


def _stopped_outside_training(config: TrainingConfig, signum: int) -> int:
    """A stop while the run was starting (or closing): nothing new to save; say whether a checkpoint exists."""
    name = signal.Signals(signum).name
    if _has_checkpoint(config.run_dir):
        print(f"\nInterrupted ({name}) outside training; the run directory keeps its last checkpoint.\n"
              f"Resume with: python -m esper_fx.train --resume {config.run_dir}", file=sys.stderr)
    else:
        print(f"\nInterrupted ({name}) before the first batch finished: nothing to resume.", file=sys.stderr)
    return exit_code(signum)
