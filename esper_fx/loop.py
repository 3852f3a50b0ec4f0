"""The training loop (SPEC §7): batches of E episodes in lock-step, one controller step per host epoch.

    run(config)                       every batch until n_episodes; checkpoints; the summary
      run_batch(runner, learner, b)   reset the pool, T epochs, then the end-of-batch update
        run_epoch(...)                jax signals -> one jitted step (step.py) -> actions -> pool.step

The pool is seen through the DLPack bridge (`env_bridge.BridgedPool`): the loop holds jax arrays and
python values only. After the last epoch the bootstrap value is taken from the post-action signals;
after the batch the observation normaliser is updated once and the controller's `update` runs. Every
random stream of batch b derives from (seed, b), so a run resumed from a checkpoint repeats the
uninterrupted run. Run state and checkpoints: `run_state.py`; the per-batch rows: `history.py`.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# One OpenBLAS thread (unless set): JAX's CPU LAPACK kernels (the QR of the controller's orthogonal
# initialisation) run on scipy's OpenBLAS, whose spinning worker threads stalled that initialisation for
# 3-8 s instead of 10 ms whenever other processes kept the cores busy. The parameters are bit-identical.
# It takes effect if set before that library loads, which happens at the first LAPACK call.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import math  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any, Callable  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from esper_fx import controllers as ctl  # noqa: E402
from esper_fx import step as S  # noqa: E402
from esper_fx.config import TrainingConfig  # noqa: E402
from esper_fx.contracts import ACTION_HEADS, EventType, SignalColumn, signal_columns  # noqa: E402
from esper_fx.env_bridge import BridgedPool  # noqa: E402
from esper_fx.history import BatchRecord, BatchSummary, count_heads, metrics_to_python, run_summary  # noqa: E402
from esper_fx.history import SKIPPED_UPDATE, summarize_batch  # noqa: E402
from esper_fx.run_state import Interrupted, LearnerState, Progress, advance, fresh_learner, interrupted  # noqa: E402
from esper_fx.run_state import restore, save  # noqa: E402
from esper_fx.telemetry import Console, Event, RunLog, lifecycle_event, reward_events  # noqa: E402
from hosts.env import EnvPool  # noqa: E402
from rl import rewards as R  # noqa: E402
from rl import rollout as rollout_lib  # noqa: E402

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


def run(config: TrainingConfig, controller: str | ctl.Controller | Callable | None = None,
        reward_fn: Callable | str | None = None, run_dir: str | os.PathLike | None = None, *,
        quiet: bool = True, pool: Any = None, console_stream=None) -> RunResult:
    """Train `config` end to end and return the history, events and summary.

    controller: a registered name, a Controller bundle or a constructor (default: config.controller).
    reward_fn: a name (shaped, sparse, minimal, loss) or a function with the rl.rewards signature
    (default: config.reward's family and mode). run_dir: where to write config.json, events.jsonl,
    metrics.csv, summary.json and checkpoints/ (default: config.run_dir; None writes nothing).
    pool: an env pool (default: `build_pool(config)`).
    """
    if run_dir is not None:
        config = config.replace(run_dir=str(run_dir))
    spec = ctl.ControllerSpec.from_config(config)
    bundle = ctl.build(controller if controller is not None else config.controller_name, spec)
    n_batches = math.ceil(config.n_episodes / config.n_envs)
    out = RunLog(config.run_dir, Console(n_batches, config.max_epochs, quiet=quiet, stream=console_stream))
    learner, progress = start(config, bundle, spec, out, n_batches)
    runner = Runner.build(config, spec, bundle, resolve_reward_fn(config, reward_fn),
                          pool if pool is not None else build_pool(config), out.console)
    learner = runner.commit(learner)
    learner, progress, checkpoint = train(runner, learner, progress, out, n_batches)
    out.console.close()
    summary = run_summary(config.task.value, bundle.name, progress.episodes_completed, progress.history,
                          progress.best_avg_acc, progress.wall_time_s, checkpoint)
    if out.dir is not None:
        out.dir.write_summary(summary)
    return RunResult(history=progress.history, events=out.events, summary=summary, run_dir=out.path,
                     controller_state=learner.controller, best_controller_state=learner.best_controller,
                     config=config)


def start(config: TrainingConfig, bundle: ctl.Controller, spec: ctl.ControllerSpec, out: RunLog,
          n_batches: int) -> tuple[LearnerState, Progress]:
    """A fresh learner, or the one of `config.resume_path`; config.json; the opening events."""
    learner, progress, manifest = fresh_learner(bundle, spec, config.seed), Progress(), None
    if config.resume_path:
        learner, progress, manifest = restore(config, bundle, learner)
        if out.dir is not None:
            out.dir.truncate_history(progress.next_batch_idx)
    if out.dir is not None:
        out.dir.write_config(config.to_dict())
    if manifest is not None:
        out.console.line(f"Checkpoint loaded from {manifest['_path']} (next batch {progress.next_batch_idx})")
        out.log([Event(EventType.CHECKPOINT_LOADED, message=manifest["_path"], batch=progress.next_batch_idx)])
    out.log([Event(EventType.TRAINING_STARTED, message=f"{config.task.value} / {bundle.name}",
                   data={"n_batches": n_batches, "start_batch": progress.next_batch_idx})])
    return learner, progress


def train(runner: "Runner", learner: LearnerState, progress: Progress, out: RunLog,
          n_batches: int) -> tuple[LearnerState, Progress, str | None]:
    """Every remaining batch, a checkpoint every `checkpoint_every` and a final one. Ctrl-C checkpoints
    the last finished batch and raises `Interrupted`."""
    config, checkpoint = runner.config, None
    checkpoints = None if out.dir is None else out.dir.checkpoint_dir
    try:
        while progress.next_batch_idx < n_batches:
            b = progress.next_batch_idx
            learner, progress = run_batch(runner, learner, progress, out)
            if checkpoints is not None and (b + 1) % config.checkpoint_every == 0 and b + 1 < n_batches:
                checkpoint = str(save(checkpoints, config, runner.controller, learner, progress))
                out.console.line(f"Checkpoint saved: {checkpoint}")
                out.log([Event(EventType.CHECKPOINT_SAVED, batch=b, message=checkpoint)])
    except KeyboardInterrupt:
        out.console.close()
        raise interrupted(checkpoints, out.path, config, runner.controller, learner, progress) from None
    if checkpoints is not None and progress.history:
        checkpoint = str(save(checkpoints, config, runner.controller, learner, progress, final=True))
        out.log([Event(EventType.CHECKPOINT_SAVED, batch=progress.next_batch_idx - 1, message=checkpoint)])
    return learner, progress, checkpoint


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
              reward_fn: Callable, pool: Any, console: Console) -> "Runner":
        reward_config = R.RewardConfig.from_training_config(config)
        columns = signal_columns(spec.num_slots, spec.num_blueprints, spec.obs_dim)
        return cls(config, spec, controller, pool if isinstance(pool, BridgedPool) else BridgedPool(pool, columns),
                   console, resolve_policy_device(config.device),
                   S.make_step(controller, reward_fn, reward_config, columns, spec.max_epochs),
                   S.make_bootstrap(controller, columns) if controller.learns else None,
                   S.make_new_episode(controller, spec), columns)

    def commit(self, tree: Any) -> Any:
        """Everything the jitted functions see is committed to the policy device, so jit's cache key
        (which includes committedness) is the same at every call and nothing recompiles."""
        return jax.device_put(tree, self.device)


def run_batch(runner: Runner, learner: LearnerState, progress: Progress,
              out: RunLog) -> tuple[LearnerState, Progress]:
    """E episodes of T epochs, the end-of-batch update, and the batch's row, events and metrics."""
    config, b = runner.config, progress.next_batch_idx
    n_active = min(config.n_envs, config.n_episodes - progress.episodes_completed)
    started = time.perf_counter()
    entropy_coef = config.entropy_coefficient(int(np.asarray(getattr(learner.controller, "train_steps", 0))))
    episode = runner.commit(runner.episode_fn(learner.reward_norm, n_active))
    signals = runner.pool.reset(b, n_active)
    record = EpochLog.start(runner.spec, n_active)
    for t in range(1, config.max_epochs + 1):
        episode, signals = run_epoch(runner, learner, episode, signals, b, t, record)
    learner, ppo = end_of_batch(runner, learner._replace(reward_norm=episode.reward_norm), episode.rollout, b,
                                record.panicked)
    batch = record.finish(runner.pool, episode, ppo)
    summary = summarize_batch(batch, b, progress.episodes_completed, progress.recent_avg_acc, config.menu,
                              config.slot_ids, entropy_coef, time.perf_counter() - started)
    learner, progress = advance(learner, progress, summary)
    out.batch_done(summary, batch_events(batch, summary), config.n_episodes)
    return learner, progress


def run_epoch(runner: Runner, learner: LearnerState, episode: S.EpisodeState, signals: dict, b: int, t: int,
              record: "EpochLog") -> tuple[S.EpisodeState, dict | None]:
    """One host epoch: the controller step on `signals`, the actions in the pool, the next signals."""
    last = t == runner.config.max_epochs
    started = time.perf_counter()
    episode, out = runner.step_fn(episode, learner.controller, learner.obs_rms, signals, learner.root_key,
                                  np.array([b, t], np.int32))
    decision = np.asarray(out.decision)  # the epoch's one read-back: [E, 5] = actions, ok
    check_actions(decision[:, 4] != 0, b, t)
    record.controller_s += time.perf_counter() - started
    if last:
        record.seed_params = host_field(signals, runner.columns, "seed_params")
    result = runner.pool.step(decision[:, :4], bootstrap=last and runner.controller.learns)
    if result.bootstrap is not None:
        values = runner.bootstrap_fn(learner.controller, episode.carry, learner.obs_rms, result.bootstrap)
        episode = S.with_bootstrap(episode, values)
    record.epoch_done(result, out, b, t, runner.config.telemetry_level == "debug")
    runner.console.epoch_done(b, t, runner.pool.steps_per_epoch * len(result.actions))
    return episode, result.signals


def host_field(packed: dict, columns: dict[str, SignalColumn], name: str) -> list[float]:
    """One per-env field of packed jax signals as python floats (one small read-back)."""
    column = columns[name]
    return [float(v) for v in np.asarray(packed[column.dtype])[:, column.start].tolist()]


def check_actions(ok: np.ndarray, b: int, t: int) -> None:
    ok = np.asarray(ok)
    if not bool(np.all(ok)):
        raise RuntimeError(f"batch {b} epoch {t}: the controller produced an invalid action (a head with no "
                           f"valid entry or non-finite logits) for envs {np.flatnonzero(~ok).tolist()}")


def end_of_batch(runner: Runner, learner: LearnerState, rollout: Any, b: int,
                 panicked: np.ndarray) -> tuple[LearnerState, dict[str, Any] | None]:
    """§7.6: optional discard, one normaliser update with all E·T raw rows, then the update."""
    if not runner.controller.learns:
        return learner, None
    rollout_lib.check_rollout(rollout)
    if runner.config.discard_rolled_back_envs and panicked.any():
        rollout = rollout_lib.discard_envs(rollout, jnp.asarray(~panicked))
    if int(jnp.sum(rollout.step_count)) == 0:
        return learner, dict(SKIPPED_UPDATE)
    obs_rms = learner.obs_rms.update(rollout.raw_obs)
    cstate, metrics = runner.controller.update(learner.controller, rollout, S.update_key(learner.root_key, b))
    return learner._replace(controller=cstate, obs_rms=obs_rms), metrics_to_python(jax.device_get(metrics))


# ----------------------------------------------------------------------------------------------
# what a batch records, epoch by epoch
# ----------------------------------------------------------------------------------------------


@dataclass
class EpochLog:
    """A batch's running record: events, action counts, panicking envs, controller time."""

    head_counts: dict[str, list[int]]
    events: list[Event]
    reward_events: list[Event]
    panicked: np.ndarray  # [E] bool: envs the governor rolled back this batch
    seed_params: list[float]
    controller_s: float = 0.0

    @classmethod
    def start(cls, spec: ctl.ControllerSpec, n_envs: int) -> "EpochLog":
        heads = {h: [0] * n for h, n in zip(ACTION_HEADS, spec.head_sizes)}
        return cls(heads, [], [], np.zeros(n_envs, bool), [])

    def epoch_done(self, result: Any, out: S.StepOut, b: int, t: int, debug: bool) -> None:
        count_heads(self.head_counts, result.actions, ACTION_HEADS)
        for ev in result.events:
            if ev.event_type == EventType.GOVERNOR_ROLLBACK:
                self.panicked[ev.env_id] = True
            self.events.append(lifecycle_event(ev, b))
        if debug:
            components = {k: np.asarray(v) for k, v in out.components.items()}
            self.reward_events += reward_events(np.asarray(out.reward), components, result.actions, b, t)

    def finish(self, pool: BridgedPool, episode: S.EpisodeState, ppo: dict[str, Any] | None) -> BatchRecord:
        return BatchRecord(
            env_results=pool.episode_results(), env_rewards=[float(r) for r in np.asarray(episode.reward_sum)],
            events=self.events, head_counts=self.head_counts, ppo=ppo,
            timing={**pool.timing, "controller_s": self.controller_s}, seed_params=self.seed_params,
            reward_events=self.reward_events,
        )


def batch_events(batch: BatchRecord, summary: BatchSummary) -> list[Event]:
    """The batch's lifecycle events, BATCH_COMPLETED, PPO_UPDATE_COMPLETED and (debug) REWARD_COMPUTED."""
    events = batch.events + [Event(EventType.BATCH_COMPLETED, batch=summary.batch, data=summary.event_data())]
    if batch.ppo is not None:
        events.append(Event(EventType.PPO_UPDATE_COMPLETED, batch=summary.batch, data=batch.ppo))
    return events + batch.reward_events


# ----------------------------------------------------------------------------------------------
# setup
# ----------------------------------------------------------------------------------------------


def resolve_reward_fn(config: TrainingConfig, reward_fn: Callable | str | None) -> Callable:
    if reward_fn is None:
        return R.dispatch(config)
    if isinstance(reward_fn, str):
        return R.get_reward_fn(reward_fn)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be a name or a function (got {reward_fn!r})")
    return reward_fn


def resolve_policy_device(name: str) -> jax.Device:
    """The JAX device for `device` ("auto" = the first GPU if JAX has one, else the CPU)."""
    if name == "auto":
        for platform in ("gpu", "cuda"):
            try:
                return jax.devices(platform)[0]
            except RuntimeError:
                continue
        return jax.devices("cpu")[0]
    kind, _, index = name.partition(":")
    platform = "gpu" if kind == "cuda" else kind
    try:
        devices = jax.devices(platform)
    except RuntimeError as exc:
        raise RuntimeError(f"device {name!r} is not available to JAX: {exc}") from None
    return devices[int(index or 0)]


def build_pool(config: TrainingConfig) -> EnvPool:
    """The run's env pool, built from the config's pool fields."""
    return EnvPool(config)
