"""The episode loop (SPEC §7): E envs in lock-step, one jitted controller step per epoch, PPO per batch.

One RL step is one host epoch. Per epoch: the env pool trains and validates every env and returns
the signals pytree (torch) → `bridge.to_jax` → one jitted step (normalise the observation with the
frozen statistics, act, reward, normalise the reward, append to the rollout) → `bridge.to_torch`
→ the pool executes the actions and steps every slot. After the last epoch the bootstrap value is
taken from the post-action signals; after the batch the observation normaliser is updated once and
the controller's `update` runs. Every random stream of batch b derives from (seed, b), so a run
resumed from a checkpoint reproduces the uninterrupted run.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import dataclasses  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, NamedTuple  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bridge import to_jax, to_torch  # noqa: E402
from esper_fx import checkpoint as ckpt  # noqa: E402
from esper_fx import contracts as C  # noqa: E402
from esper_fx import controllers as ctl  # noqa: E402
from esper_fx.config import TrainingConfig  # noqa: E402
from esper_fx.telemetry import Console, Event, EventType, RunDirectory, final_table, format_batch_lines  # noqa: E402
from rl import rewards as R  # noqa: E402
from rl import rollout as rollout_lib  # noqa: E402
from rl.normalize import RewardNormalizer, RunningMeanStd  # noqa: E402

ROLLING_WINDOW = 10
OPS = [op.name for op in C.LifecycleOp]


class Interrupted(Exception):
    """Raised by `run` after SIGINT once a checkpoint of the last finished batch is on disk."""

    def __init__(self, run_dir: str | None, checkpoint: str | None):
        self.run_dir = run_dir
        self.checkpoint = checkpoint
        super().__init__(f"interrupted; checkpoint: {checkpoint}")


# ----------------------------------------------------------------------------------------------
# state carried between batches (all of it goes into a checkpoint)
# ----------------------------------------------------------------------------------------------


class LearnerState(NamedTuple):
    """The JAX pytrees of a run: saved with orbax."""

    controller: Any
    obs_rms: RunningMeanStd
    reward_norm: RewardNormalizer
    best_controller: Any
    root_key: jax.Array


@dataclass
class Progress:
    """Python bookkeeping of a run: saved in the manifest."""

    next_batch_idx: int = 0
    episodes_completed: int = 0
    best_avg_acc: float = 0.0
    recent_avg_acc: list[float] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    wall_time_s: float = 0.0


@dataclass
class RunResult:
    """What `esper_fx.run` returns: per-batch history, events, summary, final and best controller state."""

    history: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    run_dir: str | None
    controller_state: Any = None
    best_controller_state: Any = None
    config: TrainingConfig | None = None


# ----------------------------------------------------------------------------------------------
# the jitted controller step
# ----------------------------------------------------------------------------------------------


class StepOut(NamedTuple):
    actions: jax.Array
    carry: Any
    reward_norm: RewardNormalizer
    reward_state: Any
    rollout: Any
    reward: jax.Array
    components: dict
    reward_sum: jax.Array


def make_step(controller: ctl.Controller, reward_fn: Callable, reward_config: Any) -> Callable:
    """normalise → act → reward → normalise reward → append; one jitted function per run."""
    learns = controller.learns

    def step(cstate, carry, obs_rms, reward_norm, reward_state, rollout, reward_sum, signals, key, t, is_last):
        obs_norm = obs_rms.normalize(signals["obs"])
        sig = {**signals, "obs_norm": obs_norm}
        actions, aux, new_carry = controller.act(cstate, carry, sig, key)
        actions = actions.astype(jnp.int32)
        reward, components, new_reward_state = reward_fn(signals, actions, reward_state, reward_config)
        if learns:
            reward_norm, reward_n = reward_norm.update_and_normalize(reward)
            rollout = rollout_lib.append(
                rollout, t, obs=obs_norm, raw_obs=signals["obs"], actions=actions,
                log_probs=aux["log_probs"], values=aux["value"], rewards=reward_n, raw_rewards=reward,
                done=is_last, masks=tuple(signals[f"mask_{h}"] for h in C.ACTION_HEADS), carry=carry,
            )
        return StepOut(actions, new_carry, reward_norm, new_reward_state, rollout, reward, components,
                       reward_sum + reward)

    return jax.jit(step)


def make_bootstrap(controller: ctl.Controller) -> Callable:
    def bootstrap(cstate, carry, obs_rms, signals):
        sig = {**signals, "obs_norm": obs_rms.normalize(signals["obs"])}
        return controller.value(cstate, carry, sig)

    return jax.jit(bootstrap)


# ----------------------------------------------------------------------------------------------
# keys: every random stream of batch b derives from (root key, b)
# ----------------------------------------------------------------------------------------------

UPDATE_STREAM = 1_000_003


def act_key(root_key: jax.Array, batch_idx: int, epoch: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root_key, batch_idx), epoch)


def update_key(root_key: jax.Array, batch_idx: int) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root_key, UPDATE_STREAM), batch_idx)
