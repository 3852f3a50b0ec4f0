"""One batch of E episodes in lock-step: T epochs (`epoch.py`), then the end-of-batch update (BEHAVIOUR §7.6).

    learner, progress, summary, events, components = run_batch(runner, learner, progress)

`run_batch` resets the pool for batch b, runs its epochs, lets a Ray pool build the next batch's envs
during the update, discards the envs the governor rolled back when asked (`EpisodeState.rolled_back`),
updates the observation normaliser and the controller once, and returns the batch's row, its events and
its reward components; nothing is written here (`loop.py` writes them).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from esper_fx.config import TrainingConfig
from esper_fx.contracts.events import EventType
from esper_fx.outputs.console import nonfinite_warning, update_warning
from esper_fx.outputs.events import Event
from esper_fx.outputs.history import SKIPPED_UPDATE, BatchRecord, BatchSummary, metrics_to_python, summarize_batch
from esper_fx.training import step
from esper_fx.training.clock import Lap
from esper_fx.training.epoch import BatchTally, Runner, run_epoch
from esper_fx.training import compile_cache
from esper_fx.training.run_state import LearnerState, Progress, advance
from rl import rollout as rollout_lib


def run_batch(runner: Runner, learner: LearnerState, progress: Progress
              ) -> tuple[LearnerState, Progress, BatchSummary, list[Event], dict[str, float]]:
    """E episodes of T epochs and the end-of-batch update: the new state, the batch's row, its events and
    its reward components (written by `write_batch`; nothing is written here)."""
    config, b = runner.config, progress.next_batch_idx
    n_active = batch_envs(config, progress.episodes_completed)
    started, batch_lap = time.perf_counter(), Lap()
    entropy_coef = config.entropy_coefficient(int(np.asarray(getattr(learner.controller, "train_steps", 0))))
    episode = runner.to_device(runner.episode_fn(learner.reward_norm, n_active))
    signals = runner.pool.begin(b, n_active)
    record = BatchTally.start(runner.spec)
    for t in range(1, config.max_epochs + 1):
        episode, signals = run_epoch(runner, learner, episode, signals, b, t, record)
    n_next = batch_envs(config, progress.episodes_completed + n_active)
    if n_next > 0:  # Ray workers build the next batch's envs during the update
        runner.pool.prefetch(b + 1, n_next)
    runner.console.before_update(compile_cache.cold_note("update"))
    update_lap = Lap()
    learner, ppo, skipped = end_of_batch(runner, learner._replace(reward_norm=episode.reward_norm),
                                         episode.rollout, b, episode.rolled_back)
    record.update_s, record.update_compile_s = update_lap.wall(), update_lap.compiled()
    record.compile_s = batch_lap.compiled()
    batch = record.finish(runner.pool, episode, ppo, skipped)
    summary = summarize_batch(batch, b, progress.episodes_completed, progress.recent_avg_acc, config.menu,
                              config.slot_ids, entropy_coef, time.perf_counter() - started,
                              mixed=bool(config.task_mix))
    learner, progress = advance(learner, progress, summary)
    return learner, progress, summary, batch_events(batch, summary), batch.reward_components


def batch_envs(config: TrainingConfig, episodes_completed: int) -> int:
    """The envs the next batch runs once `episodes_completed` episodes are done (0: none is left)."""
    return max(0, min(config.n_envs, config.n_episodes - episodes_completed))


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
    """The counts that are not zero, as ints."""
    return {k: int(v) for k, v in counts.items() if int(v)}


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
