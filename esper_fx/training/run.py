"""`run()`: a training run end to end (BEHAVIOUR §7), and the `RunResult` it returns.

    run(config)                          checks, the controller, the pool, the run directory; at the end the
                                         summary, the static-host reference and the report
      train(runner, state, out, ...)     loop.py: every batch, each written as one unit; checkpoints
        run_batch(runner, learner, p)    batch.py: reset the pool, T epochs, then the end-of-batch update
          run_epoch(...)                 epoch.py: jax signals -> one jitted step (step.py) -> actions -> pool.step

The pool is seen through the DLPack bridge (`bridged_pool.BridgedPool`): the loop holds jax arrays and
python values only.
"""

from __future__ import annotations

import math
import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bridge.jax_env import ensure_jax_env
from esper_fx.config import TrainingConfig, absolute_paths
from esper_fx.contracts.pool import EpisodePool
from esper_fx.controllers import protocol as ctl
from esper_fx.devices import policy_jax_device
from esper_fx.controllers import registry
from esper_fx.outputs import report
from esper_fx.outputs.closing import closing_lines
from esper_fx.outputs.console import Console
from esper_fx.outputs.history import BatchSummary, run_summary
from esper_fx.outputs.run_directory import RunDirectory
from esper_fx.outputs.run_log import RunLog
from esper_fx.outputs.run_names import default_run_dir
from esper_fx.outputs.tensorboard_log import open_board
from esper_fx.outputs.wandb_log import open_wandb
from esper_fx.training import compile_cache, preflight
from esper_fx.training.batch import run_batch
from esper_fx.training.clock import RunClock
from esper_fx.training.epoch import Runner, resolve_reward_fn
from esper_fx.training.loop import start, train
from esper_fx.training.pools import pool_workers, run_pool, worker_time
from esper_fx.training.run_state import LearnerState, Progress, RunState, fresh_learner
from esper_fx.stopping import deferred_stops, sigterm_stops, stop_signal
from esper_fx.training.threads import limit_cpu_threads


@dataclass
class RunResult:
    """What `esper_fx.run` returns: per-batch history, events, summary, final and best controller state."""

    history: list[BatchSummary]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    run_dir: str | None
    controller_state: Any = None
    best_controller_state: Any = None
    config: TrainingConfig | None = None
    obs_rms: Any = None  # the observation statistics the final controller acts with
    report_path: str | None = None  # <run_dir>/report.html, when written


def run(config: TrainingConfig, controller: str | ctl.Controller | Callable | None = None,
        reward_fn: Callable | str | None = None, run_dir: str | os.PathLike | bool | None = None, *,
        quiet: bool = False, pool: EpisodePool | None = None, console_stream=None) -> RunResult:
    """Train `config` end to end and return the history, events and summary.

    controller: a registered name, a Controller bundle or a constructor (default: config.controller).
    reward_fn: a name (shaped, sparse, minimal, loss) or a function with the rl.rewards signature
    (default: config.reward's family and mode). run_dir: where to write config.json, events.jsonl,
    metrics.csv, summary.json, checkpoints/, the TensorBoard scalars tb/ (unless config.tensorboard is
    off), and at the end plots/ and report.html (unless config.report is off); default config.run_dir, or
    for a new run without one `runs/<task>-<UTC time>-<hex>` under the working directory, as the command
    line does; False writes nothing. A run directory must be new or empty, unless the run resumes the run
    it holds; it is locked while the run lives. pool: an env pool (default: `pools.build_pool(config)`, closed
    when the run ends, however it ends). quiet: no per-batch lines and no closing table (default: both, on
    `console_stream` or stdout).

    Before anything is written, the run directory, the devices and the data are checked (a problem
    raises a `esper_fx.errors.SetupError` naming it). The process policy is the command line's: a CPU-only
    run sets torch to one thread unless OMP_NUM_THREADS is set (`training.threads`), and JAX's persistent
    compilation cache is on unless the process chose otherwise (`compile_cache.enable_once`). SIGTERM is
    handled like Ctrl-C: the last finished batch is checkpointed and `run_state.Interrupted` raised. The
    summary's `timing.breakdown` says where the run's wall time went, in parts that add up to it
    (`outputs.time_breakdown`; the closing lines name the three largest).
    """
    ensure_jax_env(warn=False)
    clock = RunClock()  # where the run's time goes: summary.json's timing.breakdown
    config = absolute_paths(with_run_dir(with_controller(config, controller), run_dir))
    preflight.check_before_writing(config)
    limit_cpu_threads(config, say=lambda line: None if quiet else print(line, flush=True))
    compile_cache.enable_once()
    spec = ctl.ControllerSpec.from_config(config)
    bundle = registry.build(controller if controller is not None else config.controller_name, spec)
    reward = resolve_reward_fn(config, reward_fn)
    n_batches = math.ceil(config.n_episodes / config.n_envs)
    console = Console(n_batches, config.max_epochs, quiet=quiet, stream=console_stream, n_envs=config.n_envs,
                      n_episodes=config.n_episodes)
    with run_pool(config, pool, console.warning, console.line) as pool, sigterm_stops():
        # built while Ray workers start; they must be up before anything is written (a failed worker
        # leaves the run directory untouched)
        learner = fresh_learner(bundle, spec, config.seed, policy_jax_device(config))
        pool.wait_ready()
        with open_run_log(config, console, clock) as out:
            result = train_and_summarize(config, bundle, spec, reward, pool, out, n_batches, learner, clock)
    for line in closing_lines(result, clock.wall_s()):
        console.line(line)
    return result


def with_controller(config: TrainingConfig, controller: str | ctl.Controller | Callable | None) -> TrainingConfig:
    """The config naming the controller `run` trains: a registered name given to `run` (or a bundle built
    under one) is recorded as the config's `controller`, so config.json, the checkpoint and a resume name the
    controller that trained (a custom constructor keeps the config's name)."""
    name = controller if isinstance(controller, str) else getattr(controller, "name", None)
    if not isinstance(name, str):
        return config
    try:
        canonical = registry.NAMES.canonical(name)
    except ValueError:
        if isinstance(controller, str):
            raise
        return config
    return config if canonical == config.controller_name else config.replace(controller=canonical)


def with_run_dir(config: TrainingConfig, run_dir: str | os.PathLike | bool | None) -> TrainingConfig:
    """The config with the run directory `run` was asked for (see its docstring): False none, a path that
    path, None the config's own or, for a new run without one, a fresh `runs/<task>-...`."""
    if run_dir is False:
        return config.replace(run_dir=None)
    if run_dir is not None and run_dir is not True:
        return config.replace(run_dir=str(run_dir))
    if config.run_dir is None and config.resume_path is None:
        return config.replace(run_dir=default_run_dir(config.task.value))
    return config


@contextmanager
def open_run_log(config: TrainingConfig, console: Console, clock: RunClock | None = None):
    """The run's outputs, with its run directory claimed (created, locked, checked) for as long as it runs;
    opening TensorBoard and W&B is the `clock`'s `logging`."""
    run_dir = None
    if config.run_dir:
        resumed = preflight.resumed_run_dir(config.resume_path)
        run_dir = RunDirectory.claim(config.run_dir, may_hold_a_run=resumed is not None and
                                     Path(config.run_dir).resolve() == resumed)
    with (clock or RunClock()).part("logging"):
        board, wandb = open_board(config.run_dir, config.tensorboard, config.to_dict()), open_wandb(config)
    out = RunLog(run_dir, console, board, wandb)
    try:
        yield out
    finally:
        try:
            out.close()
            out.end_wandb()  # a stopped or failed run's (a finished run's ended after its report)
        finally:  # the lock is released even if flushing the TensorBoard files failed
            if run_dir is not None:
                run_dir.close()


def train_and_summarize(config: TrainingConfig, bundle: ctl.Controller, spec: ctl.ControllerSpec, reward: Callable,
                        pool: EpisodePool, out: RunLog, n_batches: int, learner: LearnerState,
                        clock: RunClock | None = None) -> RunResult:
    """The run inside its run directory: start (or resume), every batch, the summary and the report.

    `clock` (started with the run) times it: summary.json's `timing.breakdown` (`outputs.time_breakdown`)
    splits the run's wall time into parts that add up to it. summary.json is written before the report, which
    draws that breakdown, and again once the report and the W&B run are done, with their time in it."""
    clock = clock or RunClock()
    learner, progress = start(config, bundle, spec, out, n_batches, learner, clock)
    out.console.start_at(progress.next_batch_idx)
    runner = Runner.build(config, spec, bundle, reward, pool, out.console)
    first_batch, state = progress.next_batch_idx, RunState(runner.to_device(learner), progress)
    clock.lap("setup")  # everything so far that no other part took
    state = train(runner, state, out, n_batches, clock)
    with clock.part("logging"):
        out.close()
    progress = state.progress
    summary = run_summary(config.task.value, bundle.name, progress.episodes_completed, progress.history,
                          progress.best_avg_acc, progress.wall_time_s, state.checkpoint)
    # how the run ran, not what it computed: the Ray env workers it used (config.json keeps what it asked)
    summary["timing"] = {"first_action_s": out.console.first_action_s, "env_workers": pool_workers(pool),
                         **worker_time(pool)}
    batches = progress.history[first_batch:]  # this process's (a resumed run's earlier ones ran elsewhere)
    report_path = None
    if out.dir is not None:
        with deferred_stops(reraise=False):  # the run is complete: a late Ctrl-C only waits for this
            if config.report:
                with clock.part("static_host"):
                    summary["static_host"] = static_host_reference(config, spec, reward, pool)
            summary["timing"]["breakdown"] = clock.breakdown(batches)  # (the report's bar: the run until now)
            with clock.part("logging"):
                out.write_summary(summary)
        if config.report:
            with clock.part("report"):
                report_path = write_report(out)
        with clock.part("logging"):
            out.end_wandb(summary, report_path)
    summary["timing"]["breakdown"] = clock.breakdown(batches)
    if out.dir is not None:
        with deferred_stops(reraise=False):
            out.dir.write_summary(summary)  # the final breakdown (the report's time and W&B's end in it)
    return RunResult(history=progress.history, events=out.events, summary=summary, run_dir=out.path,
                     controller_state=state.learner.controller, best_controller_state=state.learner.best_controller,
                     config=config, obs_rms=state.learner.obs_rms, report_path=report_path)


def static_host_reference(config: TrainingConfig, spec: ctl.ControllerSpec, reward: Callable,
                          pool: EpisodePool) -> dict[str, Any] | None:
    """The report's reference line: the host trained alone (the `wait` controller) in one more batch of the
    run's envs, on the batch index after the last (env seeds no episode of the run trained on). Its
    `accuracy` is that batch's avg_accuracy, the learning curve's own measure; a reference level, not a
    paired comparison (that is `prove`). None for a task mix, whose episodes draw different hosts."""
    if config.task_mix:
        return None
    wait = registry.build("wait", spec)
    runner = Runner.build(config, spec, wait, reward, pool, Console(1, config.max_epochs, quiet=True))
    learner = runner.to_device(fresh_learner(wait, spec, config.seed, runner.device))
    batch = math.ceil(config.n_episodes / config.n_envs)
    # counted as the run's last batch, so that no next batch is prefetched
    progress = Progress(next_batch_idx=batch, episodes_completed=config.n_episodes - config.n_envs)
    summary = run_batch(runner, learner, progress)[2]
    return {"accuracy": summary.avg_accuracy, "env_accuracies": summary.env_accuracies, "batch": batch,
            "controller": wait.name}


def write_report(out: RunLog) -> str | None:
    """plots/ and report.html of the finished run (its path, or None). The run is complete and on disk, so
    neither a failure nor a stop (Ctrl-C, SIGTERM) during the report ends it badly: either leaves a warning
    with the command that writes the report later."""
    try:
        return report.write_report_or_warn(out.path, out.console.line)
    except KeyboardInterrupt as stop:
        out.console.warning(f"report not written ({signal.Signals(stop_signal(stop)).name}): "
                            f"python -m esper_fx.report {out.path}")
        return None
