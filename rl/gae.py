"""Generalised advantage estimation (BEHAVIOUR §11.3), as a reverse `lax.scan` over the last axis.

For every row (env) of `[..., T]` arrays, over its valid steps t = L−1 … 0. A step ends its episode's trace
when it is terminal (`done ∧ ¬truncated`), truncated (`truncated`, at any t: the episode was cut there and
a new one may follow in the same row) or the row's last valid step:
  truncated[t]:                 v_next = bootstrap[t], keep = 1   (the value of the state it was cut at)
  terminal[t]:                  v_next = 0,            keep = 0
  last valid, neither:          v_next = 0,            keep = 1
  otherwise:                    v_next = V[t+1],       keep = 1
  δ = r_t + γ·keep·v_next − V[t];  A[t] = δ + γ·λ·A[t+1] unless step t ends its trace (then A[t] = δ);
  R[t] = A[t] + V[t].
Steps that are not valid (`valid[..., t]` False, e.g. t ≥ step_count) get A = R = 0 and never leak into
valid ones: the last valid step of a row is the one whose successor is invalid (or t = T−1). A truncation
at a row's last step, the only place the project's own loop truncates, is the same under both readings.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def valid_mask(step_count: jax.Array, num_steps: int) -> jax.Array:
    """valid[..., t] = t < step_count[...], bool `[..., T]`."""
    step_count = jnp.asarray(step_count)
    chex.assert_type(step_count, int)
    return jnp.arange(num_steps) < step_count[..., None]


def _next_state_terms(values, dones, truncated, bootstrap, valid):
    """(v_next, keep, cut) per step: the next state's value, whether it counts, and whether the step ends its
    episode's trace (terminal, truncated or the row's last valid step)."""
    valid_next = jnp.concatenate([valid[..., 1:], jnp.zeros_like(valid[..., :1])], axis=-1)
    is_last = valid & ~valid_next
    terminal = dones & ~truncated
    v_shift = jnp.concatenate([values[..., 1:], jnp.zeros_like(values[..., :1])], axis=-1)
    v_next = jnp.where(truncated, bootstrap, jnp.where(is_last, 0.0, v_shift))
    keep = 1.0 - terminal.astype(values.dtype)
    return v_next, keep, terminal | truncated | is_last


def gae(
    rewards: jax.Array,
    values: jax.Array,
    dones: jax.Array,
    truncated: jax.Array,
    bootstrap: jax.Array,
    gamma: float,
    lam: float,
    valid: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(advantages, returns), both `[..., T]`, from `[..., T]` rewards, values, flags and bootstraps."""
    rewards = jnp.asarray(rewards, jnp.float32)
    values = jnp.asarray(values, jnp.float32)
    dones = jnp.asarray(dones, bool)
    truncated = jnp.asarray(truncated, bool)
    bootstrap = jnp.asarray(bootstrap, jnp.float32)
    valid = jnp.ones(rewards.shape, bool) if valid is None else jnp.asarray(valid, bool)
    chex.assert_rank(rewards, {1, 2, 3})
    chex.assert_equal_shape([rewards, values, dones, truncated, bootstrap, valid])

    v_next, keep, cut = _next_state_terms(values, dones, truncated, bootstrap, valid)
    deltas = rewards + gamma * v_next * keep - values  # (this order: the numbers of every earlier run)

    follows = 1.0 - cut.astype(values.dtype)  # 0 where the step ends its trace: A[t+1] does not reach it

    def body(g, xs):
        delta, follows_t, valid_t = xs
        g = delta + gamma * lam * follows_t * g  # (this form: the numbers of every earlier run, bit for bit)
        g = jnp.where(valid_t, g, 0.0)
        return g, g

    time_first = lambda x: jnp.moveaxis(x, -1, 0)  # noqa: E731
    xs = tuple(map(time_first, (deltas, follows, valid)))
    _, adv = jax.lax.scan(body, jnp.zeros(rewards.shape[:-1], jnp.float32), xs, reverse=True)
    adv = jnp.moveaxis(adv, 0, -1)
    returns = jnp.where(valid, adv + values, 0.0)
    return adv, returns
