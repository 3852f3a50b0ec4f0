"""The fixed-shape rollout buffer of BEHAVIOUR §11.2, held in JAX as one pytree `[E, T, ...]`.

One row per env with T step slots. Each step stores the normalised obs (what the policy saw) and the
raw obs (for the observation-normaliser update), actions and old log-probs per head `[5]`, V(s_t), the
normalised and raw rewards, done / truncated flags, the bootstrap value, whether a new episode starts at
the step, the pre-action masks per head, and, at step 0, the initial carry of the env (training re-runs each
row from it, BEHAVIOUR §10.2, zeroing the carry where an episode starts inside the row, as the actor did: a
row may hold several episodes; the project's loop gives each row one).
`valid[e, t] = t < step_count[e]`; invalid steps keep all-True dummy masks so the masked softmax stays
defined, and every consumer must exclude them.

`append` is pure and jitted. Writing past T raises RuntimeError("... exceeded max_steps ...") when the step
index is concrete; under an outer jit the write is dropped, `overflow` is set, and `check_rollout` raises.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import flax.struct
import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import head_sizes
from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS
from rl.config import PPOConfig
from rl.distributions import Masks, same_kind
from rl.gae import valid_mask
from rl.heads import HeadSpec


class StepData(NamedTuple):
    """One step for every env: `[E, ...]` arrays, carry = the pre-step carry ((h, c) or ())."""

    obs: jax.Array  # [E, D] normalised
    raw_obs: jax.Array  # [E, D]
    actions: jax.Array  # [E, 5] int32
    log_probs: jax.Array  # [E, 5]
    values: jax.Array  # [E]
    rewards: jax.Array  # [E] normalised
    raw_rewards: jax.Array  # [E]
    dones: jax.Array  # [E] bool
    truncated: jax.Array  # [E] bool
    bootstrap: jax.Array  # [E]
    masks: Masks  # [E, n_head] bool each
    carry: tuple = ()
    starts: jax.Array | None = None  # [E] bool: a new episode begins at this step (its carry was reset); None: no


@flax.struct.dataclass
class Rollout:
    obs: jax.Array  # [E, T, D] normalised
    raw_obs: jax.Array  # [E, T, D]
    actions: jax.Array  # [E, T, H] int32 (H heads: the growth contract's 5)
    log_probs: jax.Array  # [E, T, H]
    values: jax.Array  # [E, T]
    rewards: jax.Array  # [E, T] normalised
    raw_rewards: jax.Array  # [E, T]
    dones: jax.Array  # [E, T] bool
    truncated: jax.Array  # [E, T] bool
    bootstrap: jax.Array  # [E, T]
    starts: jax.Array  # [E, T] bool: a new episode begins at step t (the carry is zeroed before it)
    masks: Masks  # [E, T, n_head] bool each
    carry0: tuple  # initial carry per env: (h [E, H], c [E, H]) or ()
    step_count: jax.Array  # [E] int32
    overflow: jax.Array  # [] bool: an append past T was dropped

    @property
    def n_envs(self) -> int:
        return self.obs.shape[0]

    @property
    def max_steps(self) -> int:
        return self.obs.shape[1]

    @property
    def valid(self) -> jax.Array:
        """valid[e, t] = t < step_count[e], bool `[E, T]`."""
        return valid_mask(self.step_count, self.max_steps)

    def n_transitions(self) -> int:
        """len(buffer): the sum of the step counts (concrete rollouts only)."""
        return int(jnp.sum(self.step_count))


def init(
    n_envs: int,
    max_steps: int,
    obs_dim: int,
    num_slots: int = 1,
    num_blueprints: int = DEFAULT_NUM_BLUEPRINTS,
    hidden_dim: int | None = PPOConfig.lstm_hidden_dim,
    heads: HeadSpec | None = None,
) -> Rollout:
    """An empty rollout; `hidden_dim=None` gives the empty carry of the MLP variant. `heads`: the policy's
    (`rl.heads`; None: the growth contract's for `num_slots` and `num_blueprints`, its masks a `Masks`)."""
    e, t = n_envs, max_steps
    f32 = lambda *s: jnp.zeros((e, t) + s, jnp.float32)  # noqa: E731
    flag = lambda: jnp.zeros((e, t), bool)  # noqa: E731
    if heads is None:
        masks = Masks(*(jnp.ones((e, t, n), bool) for n in head_sizes(num_slots, num_blueprints)))
    else:
        masks = heads.all_allowed((e, t))
    n_heads = len(masks)
    carry = () if hidden_dim is None else (jnp.zeros((e, hidden_dim)), jnp.zeros((e, hidden_dim)))
    return Rollout(
        obs=f32(obs_dim), raw_obs=f32(obs_dim), actions=jnp.zeros((e, t, n_heads), jnp.int32),
        log_probs=f32(n_heads), values=f32(), rewards=f32(), raw_rewards=f32(), dones=flag(), truncated=flag(),
        bootstrap=f32(), starts=flag(), masks=masks, carry0=carry, step_count=jnp.zeros((e,), jnp.int32),
        overflow=jnp.zeros((), bool),
    )


def _exceeded(t: int, max_steps: int) -> RuntimeError:
    return RuntimeError(f"Rollout exceeded max_steps: step index {t} with max_steps={max_steps}")


@jax.jit
def _append(rollout: Rollout, t: jax.Array, step: StepData, active: jax.Array) -> Rollout:
    in_range = (t >= 0) & (t < rollout.max_steps)
    write = active & in_range

    def put(buf, new):
        expand = write.reshape(write.shape + (1,) * (new.ndim - 1))
        return buf.at[:, t].set(jnp.where(expand, new.astype(buf.dtype), buf[:, t]), mode="drop")

    fields = ("obs", "raw_obs", "actions", "log_probs", "values", "rewards", "raw_rewards", "dones",
              "truncated", "bootstrap")
    updates = {name: put(getattr(rollout, name), getattr(step, name)) for name in fields}
    updates["starts"] = put(rollout.starts, jnp.zeros((rollout.n_envs,), bool) if step.starts is None else step.starts)
    updates["masks"] = same_kind(rollout.masks, [put(b, n) for b, n in zip(rollout.masks, step.masks)])
    first = write & (t == 0)
    updates["carry0"] = jax.tree.map(
        lambda old, new: jnp.where(first[:, None], new.astype(old.dtype), old), rollout.carry0, step.carry
    )
    updates["step_count"] = jnp.where(write, (t + 1).astype(jnp.int32), rollout.step_count)
    updates["overflow"] = rollout.overflow | jnp.any(active & ~in_range)
    return rollout.replace(**updates)


def append(rollout: Rollout, t, step: StepData, active: jax.Array | None = None) -> Rollout:
    """Store step `t` for every env where `active [E]` (default all). Pure; the work is jitted."""
    _check_step(rollout, step)
    if not isinstance(t, jax.core.Tracer):
        t_int = int(t)
        if t_int >= rollout.max_steps or t_int < 0:
            raise _exceeded(t_int, rollout.max_steps)
    active = jnp.ones((rollout.n_envs,), bool) if active is None else jnp.asarray(active, bool)
    return _append(rollout, jnp.asarray(t, jnp.int32), step, active)


def _check_step(rollout: Rollout, step: StepData) -> None:
    e = rollout.n_envs
    chex.assert_shape([step.obs, step.raw_obs], (e, rollout.obs.shape[-1]))
    chex.assert_shape([step.actions, step.log_probs], (e, rollout.actions.shape[-1]))
    chex.assert_type(step.actions, int)
    chex.assert_shape([step.values, step.rewards, step.raw_rewards, step.dones, step.truncated, step.bootstrap], (e,))
    if step.starts is not None:
        chex.assert_shape(step.starts, (e,))
    chex.assert_shape(list(step.masks), [(e, buf.shape[-1]) for buf in rollout.masks])


def check_rollout(rollout: Rollout) -> None:
    """Raise RuntimeError if an append under jit went past T (concrete rollouts only)."""
    if bool(rollout.overflow):
        raise RuntimeError(f"Rollout exceeded max_steps: an append past max_steps={rollout.max_steps} was dropped")


def discard_envs(rollout: Rollout, keep: jax.Array) -> Rollout:
    """Mark every step of the envs with `keep [E]` False as invalid (step_count 0)."""
    chex.assert_shape(keep, rollout.step_count.shape)
    return rollout.replace(step_count=jnp.where(jnp.asarray(keep, bool), rollout.step_count, 0))
