"""Generalised advantage estimation exactly as BEHAVIOUR §11.3, as a reverse `lax.scan` over the last axis.

For every row (env) of `[..., T]` arrays, over its valid steps t = L−1 … 0, with g = 0 at the start:
  t == L−1, truncated:      v_next = bootstrap[t], nnt = 1
  t == L−1, not truncated:  v_next = 0,            nnt = 1 − done[t]
  t <  L−1:                 v_next = V[t+1],       nnt = 1 − (done[t] ∧ ¬truncated[t])
  if done[t] ∧ ¬truncated[t]: g = 0 first
  δ = r_t + γ·v_next·nnt − V[t];  g = δ + γ·λ·nnt·g;  A[t] = g;  R[t] = A[t] + V[t].
Steps that are not valid (`valid[..., t]` False, e.g. t ≥ step_count) get A = R = 0 and never leak into
valid ones: the last valid step of a row is the one whose successor is invalid (or t = T−1).
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
    """(v_next, nnt, terminal) per step, following the three cases of BEHAVIOUR §11.3."""
    valid_next = jnp.concatenate([valid[..., 1:], jnp.zeros_like(valid[..., :1])], axis=-1)
    is_last = valid & ~valid_next
    terminal = dones & ~truncated
    v_shift = jnp.concatenate([values[..., 1:], jnp.zeros_like(values[..., :1])], axis=-1)
    zero = jnp.zeros_like(values)
    v_last = jnp.where(truncated, bootstrap, zero)
    nnt_last = jnp.where(truncated, 1.0, 1.0 - dones.astype(values.dtype))
    v_next = jnp.where(is_last, v_last, v_shift)
    nnt = jnp.where(is_last, nnt_last, 1.0 - terminal.astype(values.dtype))
    return v_next, nnt, terminal


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

    v_next, nnt, terminal = _next_state_terms(values, dones, truncated, bootstrap, valid)
    deltas = rewards + gamma * v_next * nnt - values

    def body(g, xs):
        delta, nnt_t, terminal_t, valid_t = xs
        g = jnp.where(terminal_t, 0.0, g)
        g = delta + gamma * lam * nnt_t * g
        g = jnp.where(valid_t, g, 0.0)
        return g, g

    time_first = lambda x: jnp.moveaxis(x, -1, 0)  # noqa: E731
    xs = tuple(map(time_first, (deltas, nnt, terminal, valid)))
    _, adv = jax.lax.scan(body, jnp.zeros(rewards.shape[:-1], jnp.float32), xs, reverse=True)
    adv = jnp.moveaxis(adv, 0, -1)
    returns = jnp.where(valid, adv + values, 0.0)
    return adv, returns
