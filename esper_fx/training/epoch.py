"""One host epoch of E envs, the step that training and evaluation share (BEHAVIOUR §7.3).

    runner = Runner.build(config, spec, controller, reward_fn, pool, console)   # once per run
    record = BatchTally.start(spec)                                              # once per batch
    episode, signals = run_epoch(runner, learner, episode, signals, b, t, record)

`run_epoch`: the jax signals -> one jitted step (`step.py`: act, reward, rollout) -> the actions read back
once -> `pool.step` -> the next signals (after the last epoch, with `horizon_bootstrap`, the value of the
post-action signals instead); the epoch's events, action counts, reward components and timing go into the
batch's `BatchTally`. `resolve_reward_fn` says what a `Runner`'s reward is built from; its device is the
run's policy device as JAX names it (`esper_fx.devices`). The batch around the epochs: `batch.py`; the run
around the batches: `loop.py`, `run.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import ACTION_HEADS, NUM_HEADS
from esper_fx.contracts.pool import EpisodePool
from esper_fx.contracts.signals import SignalColumn, signal_columns, unpack_signals
from esper_fx.controllers import protocol as ctl
from esper_fx.devices import policy_jax_device
from esper_fx.errors import ControllerError
from esper_fx.outputs.console import Console
from esper_fx.outputs.events import Event, lifecycle_event, reward_events
from esper_fx.outputs.history import BatchRecord, count_heads
from esper_fx.stopping import raise_pending
from esper_fx.training import step
from esper_fx.training.bridged_pool import BridgedPool
from esper_fx.training.clock import Lap
from esper_fx.training.run_state import LearnerState
from rl import rewards


class StepFunctions(NamedTuple):
    """The jitted functions a `Runner` calls and the signals' packing they read. Built once per run, or once
    per evaluation arm for all its episodes (`esper_fx.evaluation.episodes.Arm`): a function built again is
    traced again."""

    step_fn: Callable
    bootstrap_fn: Callable | None  # V(post-action signals) after the last epoch; None without horizon_bootstrap
    episode_fn: Callable
    columns: dict[str, SignalColumn]

    @classmethod
    def build(cls, config: TrainingConfig, spec: ctl.ControllerSpec, controller: ctl.Controller,
              reward_fn: Callable) -> "StepFunctions":
        columns = signal_columns(spec.num_slots, spec.num_blueprints, spec.obs_dim)
        bootstraps = controller.learns and config.learner.horizon_bootstrap
        return cls(step.make_step(controller, reward_fn, config.reward, columns, spec.max_epochs,
                                  config.learner.horizon_bootstrap),
                   step.make_bootstrap(controller, columns) if bootstraps else None,
                   step.make_new_episode(controller, spec), columns)


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
              reward_fn: Callable | None, pool: EpisodePool, console: Console,
              functions: StepFunctions | None = None) -> "Runner":
        """The run's runner over `pool` (bridged here unless it is already); its jitted functions are
        `functions` where the caller built them before (`reward_fn` is then not read), else built now."""
        if functions is None:
            functions = StepFunctions.build(config, spec, controller, reward_fn)
        bridged = pool if isinstance(pool, BridgedPool) else BridgedPool(pool, functions.columns)
        return cls(config, spec, controller, bridged, console, policy_jax_device(config), *functions)

    def to_device(self, tree: Any) -> Any:
        """Everything the jitted functions see is put on the policy device (jax calls such an array
        "committed"), so jit's cache key (which includes that) is the same at every call and nothing
        recompiles."""
        return jax.device_put(tree, self.device)


def resolve_reward_fn(config: TrainingConfig, reward_fn: Callable | str | None) -> Callable:
    """The reward function asked for: None the config's (`rewards.dispatch`), a name the registered one
    (`rewards.get_reward_fn`), else the function itself."""
    if reward_fn is None:
        return rewards.dispatch(config)
    if isinstance(reward_fn, str):
        return rewards.get_reward_fn(reward_fn)
    if not callable(reward_fn):
        raise TypeError(f"reward_fn must be a name or a function (got {reward_fn!r})")
    return reward_fn


def run_epoch(runner: Runner, learner: LearnerState, episode: step.EpisodeState, signals: dict, b: int, t: int,
              record: "BatchTally") -> tuple[step.EpisodeState, dict | None]:
    """One host epoch: the controller step on `signals`, the actions in the pool, the next signals."""
    last = t == runner.config.max_epochs
    lap = Lap()
    episode, out = runner.step_fn(episode, learner.controller, learner.obs_rms, signals, learner.root_key,
                                  np.array([b, t], np.int32))
    decision = np.asarray(out.decision)  # the epoch's one read-back: [E, 6] = actions, ok
    runner.console.action_ready(b, t)
    check_actions(decision[:, NUM_HEADS] != 0, b, t, learner.controller, signals, runner.columns)
    record.controller_s += lap.wall()
    record.controller_compile_s += lap.compiled()
    if last:
        record.seed_params = host_field(signals, runner.columns, "seed_params")
        record.host_params = host_field(signals, runner.columns, "host_params")
    result = runner.pool.step(decision[:, :NUM_HEADS], bootstrap=last and runner.bootstrap_fn is not None)
    if result.bootstrap is not None:
        values = runner.bootstrap_fn(learner.controller, episode.carry, learner.obs_rms, result.bootstrap)
        episode = step.with_bootstrap(episode, values)
    record.epoch_done(result, out, b, t, runner.config.telemetry_level == "debug")
    runner.console.epoch_done(b, t, runner.pool.steps_per_epoch * len(result.actions))
    raise_pending()  # a safe point: a stop held where it would have been lost is raised here
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
    controller_compile_s: float = 0.0  # the JAX compilation inside controller_s, update_s and the whole batch
    update_compile_s: float = 0.0
    compile_s: float = 0.0
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
            timing={**pool.timing, "controller_s": self.controller_s, "update_s": self.update_s,
                    "compile_s": self.compile_s, "controller_compile_s": self.controller_compile_s,
                    "update_compile_s": self.update_compile_s},
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
