"""The batch loop (BEHAVIOUR §7): start or resume, then every batch of E episodes, each written as one unit.

    learner, progress = start(config, bundle, spec, out, n_batches, learner)   # fresh, or a checkpoint's
    state = train(runner, RunState(learner, progress), out, n_batches)        # every batch; the final checkpoint

Every random stream of batch b derives from (seed, b), so a run resumed from a checkpoint repeats the
uninterrupted run. One batch: `batch.py`; run state and checkpoints: `run_state.py`; the per-batch rows:
`outputs/history.py`; the run around the loop (`run()`): `run.py`.
"""

from __future__ import annotations

import jax

from esper_fx.config import TrainingConfig
from esper_fx.contracts.events import EventType
from esper_fx.controllers import protocol as ctl
from esper_fx.outputs.events import Event
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.metrics_csv import metric_columns
from esper_fx.outputs.run_log import RunLog
from esper_fx.training import preflight, step
from esper_fx.training.batch import run_batch
from esper_fx.training.clock import RunClock
from esper_fx.training.epoch import Runner
from esper_fx.training.run_state import LearnerState, Progress, RunState, interrupted, restore, save
from esper_fx.stopping import deferred_stops, stop_signal


def start(config: TrainingConfig, bundle: ctl.Controller, spec: ctl.ControllerSpec, out: RunLog,
          n_batches: int, learner: LearnerState, clock: RunClock | None = None) -> tuple[LearnerState, Progress]:
    """A fresh learner, or the one of `config.resume_path`; metrics.csv's header, config.json (on a resume,
    metrics.csv, events.jsonl and the TensorBoard scalars truncated to the restored batches); the opening
    events. A checkpoint that cannot be used is reported before anything is written. `clock`: the run's
    (reading the checkpoint is its `checkpoints` part)."""
    clock = clock or RunClock()
    progress, manifest = Progress(), None
    restart = config.resume_path is not None and preflight.restartable_run(config.resume_path) is not None
    if config.resume_path and not restart:
        with clock.part("checkpoints"):
            learner, progress, manifest = restore(config, bundle, learner)
    if out.dir is not None:
        # a resume keeps the first start's provenance, in the directory of the run it continues
        out.dir.write_config(config.to_dict(), preflight.resumed_run_dir(config.resume_path),
                             progress.next_batch_idx)
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


def train(runner: Runner, state: RunState, out: RunLog, n_batches: int, clock: RunClock | None = None) -> RunState:
    """Every remaining batch, each written as one unit (its events, its metrics.csv row, its TensorBoard
    scalars and, every `checkpoint_every` batches, its checkpoint), then a final checkpoint. Ctrl-C or
    SIGTERM checkpoints the last written batch and raises `Interrupted`. `clock`: the run's, which times the
    writes (the batches time themselves: `BatchSummary.timing`)."""
    config = runner.config
    clock = clock or RunClock()
    checkpoints = None if out.dir is None else out.dir.checkpoint_dir
    try:
        while state.progress.next_batch_idx < n_batches:
            learner, progress, summary, events, components = run_batch(runner, state.learner, state.progress)
            with deferred_stops():  # a stop waits for the write: the checkpoint never runs ahead of the files
                state = write_batch(runner, out, state._replace(learner=learner, progress=progress), summary,
                                     events, n_batches, components, clock)
        if checkpoints is not None and state.progress.history:
            with deferred_stops(), clock.part("checkpoints"):
                path = save(checkpoints, config, runner.controller, state.learner, state.progress, final=True)
                state = state.saved(path)
                out.log([Event(EventType.CHECKPOINT_SAVED, batch=state.progress.next_batch_idx - 1,
                               message=str(path))])
    except KeyboardInterrupt as stop:
        out.close()
        raise interrupted(checkpoints, out.path, config, runner.controller, state, stop_signal(stop)) from None
    return state


def write_batch(runner: Runner, out: RunLog, state: RunState, summary: BatchSummary, events: list[Event],
                 n_batches: int, reward_components: dict[str, float] | None = None,
                 clock: RunClock | None = None) -> RunState:
    """Write a finished batch: console lines and warnings, events, its metrics.csv row, its TensorBoard
    scalars, and its periodic checkpoint. Runs with stops deferred, so the checkpoint of a batch always comes
    with its row, its events and its scalars. `clock` takes the writes' time (`logging`, `checkpoints`)."""
    clock = clock or RunClock()
    with clock.part("logging"):
        out.batch_done(summary, events, runner.config.n_episodes, reward_components)
    b = summary.batch
    if out.dir is not None and (b + 1) % runner.config.checkpoint_every == 0 and b + 1 < n_batches:
        with clock.part("checkpoints"):
            path = save(out.dir.checkpoint_dir, runner.config, runner.controller, state.learner, state.progress)
        state = state.saved(path)
        out.console.line(f"Checkpoint saved: {path}")
        out.log([Event(EventType.CHECKPOINT_SAVED, batch=b, message=str(path))])
    return state
