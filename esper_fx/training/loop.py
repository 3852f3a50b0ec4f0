"""The training loop (BEHAVIOUR §7): batches of E episodes in lock-step, one controller step per host epoch.

    run(config)                       every batch until n_episodes; checkpoints; the summary
      run_batch(runner, learner, b)   reset the pool, T epochs, then the end-of-batch update
        run_epoch(...)                jax signals -> one jitted step (step.py) -> actions -> pool.step

The pool is seen through the DLPack bridge (`bridged_pool.BridgedPool`): the loop holds jax arrays and
python values only. After the last epoch the bootstrap value is taken from the post-action signals;
after the batch the observation normaliser is updated once and the controller's `update` runs. Every
random stream of batch b derives from (seed, b), so a run resumed from a checkpoint repeats the
uninterrupted run. Run state and checkpoints: `run_state.py`; the per-batch rows: `history.py`.
"""

from __future__ import annotations

import math
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from esper_fx.controllers import protocol as ctl
from esper_fx.training import compile_cache, preflight
from esper_fx.outputs import report
from esper_fx.training import step
from esper_fx.config import TrainingConfig, absolute_paths
from esper_fx.distributed.auto import choose_workers, fallback_line
from esper_fx.distributed.worker import data_errors
from esper_fx.contracts import ACTION_HEADS, NUM_HEADS, EpisodePool, EventType, SignalColumn, signal_columns, unpack_signals
from esper_fx.training.bridged_pool import BridgedPool
from esper_fx.errors import ControllerError
from esper_fx.outputs.history import BatchRecord, BatchSummary, count_heads, metrics_to_python, run_summary
from esper_fx.outputs.history import SKIPPED_UPDATE, summarize_batch
from esper_fx.training.run_state import Interrupted, LearnerState, Progress, RunState, advance, fresh_learner
from esper_fx.training.run_state import interrupted, restore, save
from esper_fx.training.stopping import deferred_stops, sigterm_stops, stop_signal
from esper_fx.training.threads import limit_cpu_threads
from esper_fx.outputs.console import Console, nonfinite_warning, update_warning
from esper_fx.outputs.events import Event, lifecycle_event, reward_events
from esper_fx.outputs.metrics_csv import metric_columns
from esper_fx.outputs.run_directory import RunDirectory
from esper_fx.outputs.run_log import RunLog
from esper_fx.outputs.tensorboard_log import open_board
from esper_fx.outputs.wandb_log import open_wandb
from esper_fx.outputs.closing import closing_lines
from esper_fx.outputs.run_names import default_run_dir
from hosts.env import EnvPool
from hosts.env.pool import resolve_device
from rl import rewards
from rl import rollout as rollout_lib

__all__ = ["run", "RunResult", "Interrupted", "build_pool"]


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
    it holds; it is locked while the run lives. pool: an env pool (default: `build_pool(config)`, closed
    when the run ends, however it ends). quiet: no per-batch lines and no closing table (default: both, on
    `console_stream` or stdout).

    Before anything is written, the run directory, the devices and the data are checked (a problem
    raises a `esper_fx.errors.SetupError` naming it). The process policy is the command line's: a CPU-only
    run sets torch to one thread unless OMP_NUM_THREADS is set (`training.threads`), and JAX's persistent
    compilation cache is on unless the process chose otherwise (`compile_cache.enable_once`). SIGTERM is
    handled like Ctrl-C: the last finished batch is checkpointed and `Interrupted` raised.
    """
    started = time.perf_counter()
    config = absolute_paths(with_run_dir(config, run_dir))
    preflight.check_before_writing(config)
    limit_cpu_threads(config, say=lambda line: None if quiet else print(line, flush=True))
    compile_cache.enable_once()
    spec = ctl.ControllerSpec.from_config(config)
    bundle = ctl.build(controller if controller is not None else config.controller_name, spec)
    reward = resolve_reward_fn(config, reward_fn)
    n_batches = math.ceil(config.n_episodes / config.n_envs)
    console = Console(n_batches, config.max_epochs, quiet=quiet, stream=console_stream, n_envs=config.n_envs,
                      n_episodes=config.n_episodes)
    with run_pool(config, pool, console.warning) as pool, sigterm_stops():
        # built while Ray workers start; they must be up before anything is written (a failed worker
        # leaves the run directory untouched)
        learner = fresh_learner(bundle, spec, config.seed, resolve_policy_device(config.device))
        wait_ready(pool)
        with open_run_log(config, console) as out:
            result = train_and_summarize(config, bundle, spec, reward, pool, out, n_batches, learner)
    for line in closing_lines(result, time.perf_counter() - started):
        console.line(line)
    return result


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


def train_and_summarize(config: TrainingConfig, bundle: ctl.Controller, spec: ctl.ControllerSpec, reward: Callable,
                        pool: EpisodePool, out: RunLog, n_batches: int, learner: LearnerState) -> RunResult:
    """The run inside its run directory: start (or resume), every batch, the summary and the report."""
    learner, progress = start(config, bundle, spec, out, n_batches, learner)
    out.console.start_at(progress.next_batch_idx)
    runner = Runner.build(config, spec, bundle, reward, pool, out.console)
    state = train(runner, RunState(runner.to_device(learner), progress), out, n_batches)
    out.close()
    progress = state.progress
    summary = run_summary(config.task.value, bundle.name, progress.episodes_completed, progress.history,
                          progress.best_avg_acc, progress.wall_time_s, state.checkpoint)
    # how the run ran, not what it computed: the Ray env workers it used (config.json keeps what it asked)
    summary["timing"] = {"first_action_s": out.console.first_action_s, "env_workers": pool_workers(pool),
                         **worker_time(pool)}
    report_path = None
    if out.dir is not None:
        with deferred_stops(reraise=False):  # the run is complete: a late Ctrl-C only waits for this
            if config.report:
                summary["static_host"] = static_host_reference(config, spec, reward, pool)
            out.write_summary(summary)
        if config.report:
            report_path = write_report(out)
        out.end_wandb(summary, report_path)
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
    wait = ctl.build("wait", spec)
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


@contextmanager
def open_run_log(config: TrainingConfig, console: Console):
    """The run's outputs, with its run directory claimed (created, locked, checked) for as long as it runs."""
    run_dir = None
    if config.run_dir:
        resumed = preflight.resumed_run_dir(config.resume_path)
        run_dir = RunDirectory.claim(config.run_dir, may_hold_a_run=resumed is not None and
                                     Path(config.run_dir).resolve() == resumed)
    out = RunLog(run_dir, console, open_board(config.run_dir, config.tensorboard, config.to_dict()),
                 open_wandb(config))
    try:
        yield out
    finally:
        try:
            out.close()
            out.end_wandb()  # a stopped or failed run's (a finished run's ended after its report)
        finally:  # the lock is released even if flushing the TensorBoard files failed
            if run_dir is not None:
                run_dir.close()


def start(config: TrainingConfig, bundle: ctl.Controller, spec: ctl.ControllerSpec, out: RunLog,
          n_batches: int, learner: LearnerState) -> tuple[LearnerState, Progress]:
    """A fresh learner, or the one of `config.resume_path`; metrics.csv's header, config.json (on a resume,
    metrics.csv, events.jsonl and the TensorBoard scalars truncated to the restored batches); the opening
    events. A checkpoint that cannot be used is reported before anything is written."""
    progress, manifest = Progress(), None
    restart = config.resume_path is not None and preflight.restartable_run(config.resume_path) is not None
    if config.resume_path and not restart:
        learner, progress, manifest = restore(config, bundle, learner)
    if out.dir is not None:
        out.dir.write_config(config.to_dict())
        out.dir.use_columns(metric_columns(config.n_envs, update_metric_names(bundle, spec, learner)))
        if config.resume_path:
            with deferred_stops():  # tb/: the kept scalars are written before the old files go
                out.truncate_history(progress.next_batch_idx)
        else:
            out.dir.start_metrics()
    if restart:
        out.console.warning(f"{config.resume_path} holds no checkpoint yet: the run restarts from batch 0")
    if manifest is not None:
        if manifest.get("_warning"):
            out.console.warning(f"checkpoint fallback: {manifest['_warning']}")
        out.console.line(f"Checkpoint loaded from {manifest['_path']} (next batch {progress.next_batch_idx})")
        out.log([Event(EventType.CHECKPOINT_LOADED, message=manifest["_path"], batch=progress.next_batch_idx,
                       severity="warning" if manifest.get("_warning") else "info",
                       data={"fallback": manifest["_warning"]} if manifest.get("_warning") else {})])
    out.log([Event(EventType.TRAINING_STARTED, message=f"{config.task.value} / {bundle.name}",
                   data={"n_batches": n_batches, "start_batch": progress.next_batch_idx})])
    return learner, progress


def update_metric_names(bundle: ctl.Controller, spec: ctl.ControllerSpec, learner: LearnerState) -> list[str] | None:
    """The names of the metrics the controller's update reports (traced, not run), as metrics.csv's PPO
    columns; None for a controller that does not learn, or whose update cannot be traced abstractly."""
    if not bundle.learns:
        return None
    rollout = step.new_episode(bundle, spec, learner.reward_norm, spec.n_envs).rollout
    try:
        _, metrics = jax.eval_shape(bundle.update, learner.controller, rollout, jax.random.PRNGKey(0))
    except Exception:  # noqa: BLE001 - a custom update that only runs on concrete values: columns grow
        return None
    return sorted(set(metrics) | {"early_stopped"})


def train(runner: "Runner", state: RunState, out: RunLog, n_batches: int) -> RunState:
    """Every remaining batch, each written as one unit (its events, its metrics.csv row, its TensorBoard
    scalars and, every `checkpoint_every` batches, its checkpoint), then a final checkpoint. Ctrl-C or
    SIGTERM checkpoints the last written batch and raises `Interrupted`."""
    config = runner.config
    checkpoints = None if out.dir is None else out.dir.checkpoint_dir
    try:
        while state.progress.next_batch_idx < n_batches:
            learner, progress, summary, events, components = run_batch(runner, state.learner, state.progress)
            with deferred_stops():  # a stop waits for the write: the checkpoint never runs ahead of the files
                state = write_batch(runner, out, state._replace(learner=learner, progress=progress), summary,
                                     events, n_batches, components)
        if checkpoints is not None and state.progress.history:
            with deferred_stops():
                path = save(checkpoints, config, runner.controller, state.learner, state.progress, final=True)
                state = state.saved(path)
                out.log([Event(EventType.CHECKPOINT_SAVED, batch=state.progress.next_batch_idx - 1,
                               message=str(path))])
    except KeyboardInterrupt as stop:
        out.close()
        raise interrupted(checkpoints, out.path, config, runner.controller, state, stop_signal(stop)) from None
    return state


def write_batch(runner: "Runner", out: RunLog, state: RunState, summary: BatchSummary, events: list[Event],
                 n_batches: int, reward_components: dict[str, float] | None = None) -> RunState:
    """Write a finished batch: console lines and warnings, events, its metrics.csv row, its TensorBoard
    scalars, and its periodic checkpoint. Runs with stops deferred, so the checkpoint of a batch always comes
    with its row, its events and its scalars."""
    out.batch_done(summary, events, runner.config.n_episodes, reward_components)
    b = summary.batch
    if out.dir is not None and (b + 1) % runner.config.checkpoint_every == 0 and b + 1 < n_batches:
        path = save(out.dir.checkpoint_dir, runner.config, runner.controller, state.learner, state.progress)
        state = state.saved(path)
        out.console.line(f"Checkpoint saved: {path}")
        out.log([Event(EventType.CHECKPOINT_SAVED, batch=b, message=str(path))])
    return state


# ----------------------------------------------------------------------------------------------
# one batch of episodes
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Runner:
    """What lives for the whole run: config, controller, the bridged pool, the jitted step functions."""

    config: TrainingConfig
    spec: ctl.ControllerSpec
    controller: ctl.Controller
    pool: BridgedPool
    console: Console
    device: jax.Device
    step_fn: Callable
    bootstrap_fn: Callable | None
    episode_fn: Callable
    columns: dict[str, SignalColumn]

    @classmethod
    def build(cls, config: TrainingConfig, spec: ctl.ControllerSpec, controller: ctl.Controller,
              reward_fn: Callable, pool: EpisodePool, console: Console) -> "Runner":
        reward_config = config.reward
        columns = signal_columns(spec.num_slots, spec.num_blueprints, spec.obs_dim)
        bootstraps = controller.learns and config.ppo.horizon_bootstrap
        return cls(config, spec, controller, pool if isinstance(pool, BridgedPool) else BridgedPool(pool, columns),
                   console, resolve_policy_device(config.device),
                   step.make_step(controller, reward_fn, reward_config, columns, spec.max_epochs,
                               config.ppo.horizon_bootstrap),
                   step.make_bootstrap(controller, columns) if bootstraps else None,
                   step.make_new_episode(controller, spec), columns)

    def to_device(self, tree: Any) -> Any:
        """Everything the jitted functions see is put on the policy device (jax calls such an array
        "committed"), so jit's cache key (which includes that) is the same at every call and nothing
        recompiles."""
        return jax.device_put(tree, self.device)


def run_batch(runner: Runner, learner: LearnerState, progress: Progress
              ) -> tuple[LearnerState, Progress, BatchSummary, list[Event], dict[str, float]]:
    """E episodes of T epochs and the end-of-batch update: the new state, the batch's row, its events and
    its reward components (written by `write_batch`; nothing is written here)."""
    config, b = runner.config, progress.next_batch_idx
    n_active = batch_envs(config, progress.episodes_completed)
    started = time.perf_counter()
    entropy_coef = config.entropy_coefficient(int(np.asarray(getattr(learner.controller, "train_steps", 0))))
    episode = runner.to_device(runner.episode_fn(learner.reward_norm, n_active))
    signals = runner.pool.begin(b, n_active)
    record = BatchTally.start(runner.spec)
    for t in range(1, config.max_epochs + 1):
        episode, signals = run_epoch(runner, learner, episode, signals, b, t, record)
    n_next = batch_envs(config, progress.episodes_completed + n_active)
    if n_next > 0:  # Ray workers build the next batch's envs during the update
        runner.pool.prefetch(b + 1, n_next)
    update_started = time.perf_counter()
    learner, ppo, skipped = end_of_batch(runner, learner._replace(reward_norm=episode.reward_norm),
                                         episode.rollout, b, episode.rolled_back)
    record.update_s = time.perf_counter() - update_started
    batch = record.finish(runner.pool, episode, ppo, skipped)
    summary = summarize_batch(batch, b, progress.episodes_completed, progress.recent_avg_acc, config.menu,
                              config.slot_ids, entropy_coef, time.perf_counter() - started,
                              mixed=bool(config.task_mix))
    learner, progress = advance(learner, progress, summary)
    return learner, progress, summary, batch_events(batch, summary), batch.reward_components


def batch_envs(config: TrainingConfig, episodes_completed: int) -> int:
    """The envs the next batch runs once `episodes_completed` episodes are done (0: none is left)."""
    return max(0, min(config.n_envs, config.n_episodes - episodes_completed))


def run_epoch(runner: Runner, learner: LearnerState, episode: step.EpisodeState, signals: dict, b: int, t: int,
              record: "BatchTally") -> tuple[step.EpisodeState, dict | None]:
    """One host epoch: the controller step on `signals`, the actions in the pool, the next signals."""
    last = t == runner.config.max_epochs
    started = time.perf_counter()
    episode, out = runner.step_fn(episode, learner.controller, learner.obs_rms, signals, learner.root_key,
                                  np.array([b, t], np.int32))
    decision = np.asarray(out.decision)  # the epoch's one read-back: [E, 6] = actions, ok
    runner.console.action_ready(b, t)
    check_actions(decision[:, NUM_HEADS] != 0, b, t, learner.controller, signals, runner.columns)
    record.controller_s += time.perf_counter() - started
    if last:
        record.seed_params = host_field(signals, runner.columns, "seed_params")
        record.host_params = host_field(signals, runner.columns, "host_params")
    result = runner.pool.step(decision[:, :NUM_HEADS], bootstrap=last and runner.bootstrap_fn is not None)
    if result.bootstrap is not None:
        values = runner.bootstrap_fn(learner.controller, episode.carry, learner.obs_rms, result.bootstrap)
        episode = step.with_bootstrap(episode, values)
    record.epoch_done(result, out, b, t, runner.config.telemetry_level == "debug")
    runner.console.epoch_done(b, t, runner.pool.steps_per_epoch * len(result.actions))
    return episode, result.signals


def host_field(packed: dict, columns: dict[str, SignalColumn], name: str) -> list[float]:
    """One per-env field of packed jax signals as python floats (one small read-back)."""
    column = columns[name]
    return [float(v) for v in np.asarray(packed[column.dtype])[:, column.start].tolist()]


def check_actions(ok: np.ndarray, b: int, t: int, controller_state: Any = (), signals: dict | None = None,
                  columns: dict[str, SignalColumn] | None = None) -> None:
    """Every env got a valid action; otherwise a ControllerError naming the batch, epoch, envs and cause.
    `signals` are the epoch's packed signals, `columns` their packing."""
    ok = np.asarray(ok)
    if bool(np.all(ok)):
        return
    envs = np.flatnonzero(~ok).tolist()
    raise ControllerError(f"batch {b} epoch {t}: the controller produced no valid action for envs {envs}: "
                          f"{invalid_action_cause(controller_state, signals, columns, envs)}")


def invalid_action_cause(controller_state: Any, signals: dict | None, columns: dict[str, SignalColumn] | None,
                         envs: list[int]) -> str:
    """Why a policy can have produced no valid action: NaN parameters, a NaN observation, or the masks."""
    bad = [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_leaves_with_path(controller_state)
           if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.inexact) and not bool(np.all(np.isfinite(leaf)))]
    if bad:
        return (f"its state holds NaN or inf values ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}), "
                f"e.g. from a damaged checkpoint or a diverged custom update")
    obs = None if signals is None or columns is None else np.asarray(unpack_signals(signals, columns)["obs"])
    if obs is not None and obs.ndim == 2 and not np.all(np.isfinite(obs[envs])):
        return "their observation holds NaN or inf values"
    return "a head had no valid entry under the action masks, or its logits were not finite"


def end_of_batch(runner: Runner, learner: LearnerState, rollout: Any, b: int, rolled_back: jax.Array
                 ) -> tuple[LearnerState, dict[str, Any] | None, dict[str, int]]:
    """BEHAVIOUR §7.6: optional discard of the `rolled_back` [E] envs, one normaliser update with all E·T raw
    rows, then the update. Also returns how many observation rows and rewards the normalisers left out for
    holding NaN or inf."""
    if not runner.controller.learns:
        return learner, None, {}
    rollout_lib.check_rollout(rollout)
    skipped = {"rewards": int(jnp.sum(rollout.valid & ~jnp.isfinite(rollout.raw_rewards)))}
    if runner.config.discard_rolled_back_envs:
        rollout = rollout_lib.discard_envs(rollout, ~rolled_back)
    if int(jnp.sum(rollout.step_count)) == 0:
        return learner, dict(SKIPPED_UPDATE), nonzero(skipped)
    obs_rms, skipped["observation_rows"] = learner.obs_rms.update_counted(rollout.raw_obs)
    cstate, metrics = runner.controller.update(learner.controller, rollout, step.update_key(learner.root_key, b))
    skipped = {k: int(v) for k, v in skipped.items()}
    return (learner._replace(controller=cstate, obs_rms=obs_rms), metrics_to_python(jax.device_get(metrics)),
            nonzero(skipped))


def nonzero(counts: dict[str, Any]) -> dict[str, int]:
    return {k: int(v) for k, v in counts.items() if int(v)}


# ----------------------------------------------------------------------------------------------
# what a batch records, epoch by epoch
# ----------------------------------------------------------------------------------------------


@dataclass
class BatchTally:
    """A batch's running tally, epoch by epoch: events (for the logs), action counts, reward components,
    timing; `finish` turns it into the batch's `BatchRecord`."""

    head_counts: dict[str, list[int]]
    events: list[Event]
    reward_events: list[Event]
    seed_params: list[float]
    components: list[dict]  # per epoch: reward term -> [E] (jax arrays, read back once per batch)
    controller_s: float = 0.0
    update_s: float = 0.0
    host_params: list[float] = field(default_factory=list)  # per env, at the last epoch

    @classmethod
    def start(cls, spec: ctl.ControllerSpec) -> "BatchTally":
        heads = {h: [0] * n for h, n in zip(ACTION_HEADS, spec.head_sizes)}
        return cls(heads, [], [], [], [])

    def epoch_done(self, result: Any, out: step.StepOut, b: int, t: int, debug: bool) -> None:
        count_heads(self.head_counts, result.actions, ACTION_HEADS)
        self.components.append(out.components)
        self.events += [lifecycle_event(ev, b) for ev in result.events]
        if debug:
            components = {k: np.asarray(v) for k, v in out.components.items()}
            self.reward_events += reward_events(np.asarray(out.reward), components, result.actions, b, t)

    def finish(self, pool: BridgedPool, episode: step.EpisodeState, ppo: dict[str, Any] | None,
               nonfinite: dict[str, int]) -> BatchRecord:
        return BatchRecord(
            env_results=pool.episode_results(), env_rewards=[float(r) for r in np.asarray(episode.reward_sum)],
            events=self.events, head_counts=self.head_counts, ppo=ppo,
            timing={**pool.timing, "controller_s": self.controller_s, "update_s": self.update_s},
            seed_params=self.seed_params, reward_events=self.reward_events, nonfinite=nonfinite,
            reward_components=episode_component_means(self.components),
        )


def episode_component_means(per_epoch: list[dict]) -> dict[str, float]:
    """Each reward term summed over the episode's epochs, averaged over envs (one readback)."""
    per_epoch = jax.device_get(per_epoch)
    if not per_epoch:
        return {}
    return {name: float(np.mean(np.sum([np.asarray(c[name], np.float64) for c in per_epoch], axis=0)))
            for name in per_epoch[0]}


def batch_events(batch: BatchRecord, summary: BatchSummary) -> list[Event]:
    """The batch's lifecycle events, BATCH_COMPLETED, PPO_UPDATE_COMPLETED (a warning when the update was
    skipped or a step refused), NONFINITE_SKIPPED if the normalisers left data out, and (debug)
    REWARD_COMPUTED."""
    events = batch.events + [Event(EventType.BATCH_COMPLETED, batch=summary.batch, data=summary.event_data())]
    if batch.ppo is not None:
        warning = update_warning(batch.ppo)
        events.append(Event(EventType.PPO_UPDATE_COMPLETED, batch=summary.batch, data=batch.ppo,
                            message=warning or "", severity="warning" if warning else "info"))
    if batch.nonfinite:
        events.append(Event(EventType.NONFINITE_SKIPPED, batch=summary.batch, data=dict(batch.nonfinite),
                            message=nonfinite_warning(batch.nonfinite), severity="warning"))
    return events + batch.reward_events


# ----------------------------------------------------------------------------------------------
# setup
# ----------------------------------------------------------------------------------------------


def resolve_reward_fn(config: TrainingConfig, reward_fn: Callable | str | None) -> Callable:
    if reward_fn is None:
        return rewards.dispatch(config)
    if isinstance(reward_fn, str):
        return rewards.get_reward_fn(reward_fn)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be a name or a function (got {reward_fn!r})")
    return reward_fn


def resolve_policy_device(name: str) -> jax.Device:
    """The JAX device for `device`. "auto" follows torch's choice (`hosts.env.pool.resolve_device`: cuda:0
    when torch sees CUDA, else the CPU), so both halves agree; `preflight.check_devices` refuses an "auto"
    for which JAX has no GPU while torch has one."""
    if name == "auto":
        name = str(resolve_device("auto"))
    kind, _, index = name.partition(":")
    platform = "gpu" if kind == "cuda" else kind
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        raise RuntimeError(f"device {name!r} is not available to JAX: {exc}") from None
    return devices[int(index or 0)]


def build_pool(config: TrainingConfig, say: Callable[[str], None] = print) -> Any:
    """The run's env pool, built from the config's pool fields: in this process (`env_workers` 0), or that
    many Ray actors (`esper_fx.distributed.pool.RayEnvPool`; close it). `auto` decides the number at this
    point (`esper_fx.distributed.auto.choose_workers`); when it chose Ray and Ray cannot start, `say` gets
    one line and the pool is the in-process one. A dataset that cannot be loaded, or that does not fit the
    configuration (a batch larger than the training split), raises DataError, in this process or from a
    worker; a dataset of image files is read here first when Ray workers will (`preflight.check_data`)."""
    choice = choose_workers(config)
    if choice.n > 0:
        from esper_fx.distributed.pool import RayEnvPool, RayStartError

        preflight.check_data(config)  # before Ray and any worker start: a bad file is the in-process line
        try:
            return RayEnvPool(config.replace(env_workers=choice.n))
        except (ImportError, RayStartError) as exc:
            if not choice.auto:
                raise
            say(fallback_line(exc))
    with data_errors():
        return EnvPool(config)


def worker_time(pool: Any) -> dict[str, float]:
    """A Ray pool's epochs as its workers timed them: the slowest worker's own time summed over the steps
    (`worker_s`) and the driver's time in those steps (`pool_step_s`); the rest of the run's wall time is
    serial in the driver (docs/PERFORMANCE.md, issue 28). Empty for the in-process pool."""
    stats = getattr(pool, "stats", None)
    if not isinstance(stats, dict) or "step_worker_s" not in stats:
        return {}
    return {"worker_s": float(stats["step_worker_s"]), "pool_step_s": float(stats["step_wall_s"])}


def wait_ready(pool: Any) -> None:
    """Wait until a Ray pool's workers are up (their start overlaps the driver's own); the in-process pool
    is ready when built."""
    ready = getattr(pool, "wait_ready", None)
    if ready is not None:
        ready()


def pool_workers(pool: Any) -> int:
    """The Ray env workers a pool runs (0: the in-process pool)."""
    return int(getattr(pool, "n_workers", 0) or 0)


@contextmanager
def run_pool(config: TrainingConfig, pool: EpisodePool | None = None, say: Callable[[str], None] = print):
    """The caller's pool as is, or `build_pool(config)`, closed (Ray actors and a local Ray stopped) when
    the run ends, whether it finishes, fails or is stopped."""
    if pool is not None:
        yield pool
        return
    pool = build_pool(config, say)
    try:
        yield pool
    finally:
        close = getattr(pool, "close", None)
        if close is not None:
            close()
