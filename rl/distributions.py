"""Masked categorical distributions for the five factored action heads (BEHAVIOUR §9.2–§9.4).

Every function here is a pure jnp function over logits `[..., n]` and bool masks `[..., n]`
(True = allowed). Masked logits are replaced by −1e4 (finite in fp16 and bf16); sampling is
independent per head (deterministic mode: argmax); log-probs are kept per head; the entropy is
normalised by ln(n_valid) (BEHAVIOUR §9.3); the causal relevance masks m_h come from the taken op (§9.4).

Validation is split in two: `assert_head` / `assert_heads` (chex shape and dtype assertions, at
trace time) open every function here; `row_is_valid` is a jittable bool per row (BEHAVIOUR §9.2).
Sampling inside jit can never pick a masked index while the row has a valid one; a row with none is
reported by `row_is_valid`.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import ACTION_HEADS, HEAD_OP, LifecycleOp
from rl.config import ENTROPY_LOG_FLOOR, MASKED_LOGIT



class Masks(NamedTuple):
    """Per-head action masks, bool, True = allowed; each `[..., n_head]`, heads in contract order."""

    slot: jax.Array
    blueprint: jax.Array
    blend: jax.Array
    op: jax.Array
    tempo: jax.Array

    @classmethod
    def from_signals(cls, signals) -> "Masks":
        """The five `mask_*` fields of a signals pytree."""
        return cls(*(signals[f"mask_{head}"] for head in ACTION_HEADS))


def same_kind(masks: Sequence[jax.Array], new: Sequence[jax.Array]) -> Sequence[jax.Array]:
    """`new` as the same kind of sequence as `masks`: `Masks` for the growth contract's five, else a tuple."""
    return type(masks)(*new) if hasattr(type(masks), "_fields") else tuple(new)


# ------------------------------------------------------------------------------------------
# one head
# ------------------------------------------------------------------------------------------


def assert_head(logits: jax.Array, mask: jax.Array) -> None:
    """Shape and type assertions of one head: float logits `[..., n]`, a mask that broadcasts to them."""
    chex.assert_type(logits, float)
    chex.assert_is_broadcastable(jnp.shape(mask), jnp.shape(logits))


def masked_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Logits with disallowed entries replaced by −1e4 (same dtype as `logits`)."""
    assert_head(logits, mask)
    return jnp.where(mask, logits, jnp.asarray(MASKED_LOGIT, dtype=logits.dtype))


def log_probs(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Log-softmax of the masked logits, `[..., n]`."""
    assert_head(logits, mask)
    return jax.nn.log_softmax(masked_logits(logits, mask), axis=-1)


def probs(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax of the masked logits, `[..., n]` (masked entries underflow to 0)."""
    assert_head(logits, mask)
    return jax.nn.softmax(masked_logits(logits, mask), axis=-1)


def masked_log_prob(logits: jax.Array, mask: jax.Array, action: jax.Array) -> jax.Array:
    """Log-probability of integer `action [...]` under the masked distribution, `[...]`."""
    assert_head(logits, mask)
    chex.assert_type(action, int)
    chex.assert_shape(action, jnp.shape(logits)[:-1])
    lp = log_probs(logits, mask)
    return jnp.take_along_axis(lp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def sample(key: jax.Array, logits: jax.Array, mask: jax.Array, deterministic: bool = False) -> jax.Array:
    """One int32 action per row. Gumbel-max over the allowed entries only (argmax when deterministic).

    Disallowed entries score −inf after the noise is added, so they cannot win while the row has
    any allowed entry, however negative the allowed logits are.
    """
    assert_head(logits, mask)
    scores = logits.astype(jnp.float32)
    if not deterministic:
        scores = scores + jax.random.gumbel(key, logits.shape, dtype=jnp.float32)
    return jnp.argmax(jnp.where(mask, scores, -jnp.inf), axis=-1).astype(jnp.int32)


def normalized_entropy(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """H / max(ln n_valid, 1e-8) over the valid entries, `[...]`; exactly 0 with one valid action."""
    assert_head(logits, mask)
    lp = log_probs(logits, mask)
    p = jnp.exp(lp)
    entropy = -jnp.sum(jnp.where(mask, p * lp, 0.0), axis=-1)
    n_valid = jnp.maximum(jnp.sum(mask, axis=-1), 1)
    denom = jnp.maximum(jnp.log(n_valid.astype(lp.dtype)), ENTROPY_LOG_FLOOR)
    h_norm = jnp.clip(entropy / denom, 0.0, 1.0)
    return jnp.where(n_valid <= 1, jnp.zeros_like(h_norm), h_norm)


def entropy(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """H = −Σ p·ln p over the valid entries, in nats, `[...]` (0 with one valid action)."""
    assert_head(logits, mask)
    lp = log_probs(logits, mask)
    return -jnp.sum(jnp.where(mask, jnp.exp(lp) * lp, 0.0), axis=-1)


def row_is_valid(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Jittable: True per row iff the row has an allowed entry and every logit is finite."""
    assert_head(logits, mask)
    return jnp.any(mask, axis=-1) & jnp.all(jnp.isfinite(logits), axis=-1)


# ------------------------------------------------------------------------------------------
# the five heads together (actions and log-probs are `[..., 5]` in head order)
# ------------------------------------------------------------------------------------------


def assert_heads(logits: Sequence[jax.Array], masks: Sequence[jax.Array]) -> None:
    """One `check_head` per head, the heads sharing their leading axes."""
    assert len(logits) == len(masks), f"{len(logits)} heads of logits, {len(masks)} of masks"
    for lg, m in zip(logits, masks):
        assert_head(lg, m)
    chex.assert_equal_shape_prefix(list(logits), jnp.ndim(logits[0]) - 1)


def pad_heads(logits: Sequence[jax.Array], masks: Sequence[jax.Array]) -> tuple[jax.Array, jax.Array]:
    """Stack the heads into `[..., 5, n_max]` logits and masks; padding entries are masked out.

    A padded entry gets probability exactly 0 (its −1e4 logit underflows), so every per-head
    quantity computed on the stack equals the one computed head by head, in one op instead of five.
    """
    assert_heads(logits, masks)
    n_max = max(lg.shape[-1] for lg in logits)

    def pad(x, value):
        widths = [(0, 0)] * (x.ndim - 1) + [(0, n_max - x.shape[-1])]
        return jnp.pad(x, widths, constant_values=value)

    return (jnp.stack([pad(lg, 0) for lg in logits], axis=-2),
            jnp.stack([pad(jnp.asarray(m, bool), False) for m in masks], axis=-2))


def sample_heads(
    key: jax.Array, logits: Sequence[jax.Array], masks: Sequence[jax.Array], deterministic: bool = False
) -> tuple[jax.Array, jax.Array]:
    """Sample every head independently: (actions int32 `[..., 5]`, log-probs `[..., 5]`)."""
    assert_heads(logits, masks)
    stacked, stacked_mask = pad_heads(logits, masks)
    actions = sample(key, stacked, stacked_mask, deterministic)
    return actions, masked_log_prob(stacked, stacked_mask, actions)


def condition_slot(masks: Masks, slot_by_op: jax.Array, op: jax.Array) -> Masks:
    """`masks` with the slot mask of the drawn op: `slot_by_op [..., 4, S]` at `op [...]`."""
    chex.assert_rank(slot_by_op, jnp.ndim(op) + 2)
    chex.assert_type(op, int)
    slot = jnp.take_along_axis(jnp.asarray(slot_by_op, bool), op[..., None, None].astype(jnp.int32), axis=-2)
    return masks._replace(slot=slot[..., 0, :])


def sample_heads_op_first(
    key: jax.Array, logits: Sequence[jax.Array], masks: Masks, slot_by_op: jax.Array, deterministic: bool = False
) -> tuple[jax.Array, jax.Array, Masks]:
    """Draw the op, then every other head with the slot mask of that op ([fix] LEARNING.md).

    π(a|s) = π_op(op|s)·π_slot(slot|s, mask(op))·π_bp·π_blend·π_tempo: still one network pass, the heads only
    coupled through the mask. Returns (actions `[..., 5]`, log-probs `[..., 5]`, the masks used), and the
    masks used are the ones the update must score the actions with.
    """
    key_op, key_rest = jax.random.split(key)
    first, _ = sample_heads(key_op, logits, masks, deterministic)
    op = first[..., HEAD_OP]
    used = condition_slot(masks, slot_by_op, op)
    actions, _ = sample_heads(key_rest, logits, used, deterministic)
    actions = actions.at[..., HEAD_OP].set(op)
    return actions, heads_log_prob(logits, used, actions), used


def draw(key: jax.Array, logits: Sequence[jax.Array], masks: Masks, slot_by_op: jax.Array | None = None,
         deterministic: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A policy's action from its per-head logits: (actions `[..., 5]`, log-probs `[..., 5]`, ok `[...]`).

    Every head independently (`sample_heads`), or with `slot_by_op [..., 4, S]` the op first and the slot
    under that op's mask (`sample_heads_op_first`); `deterministic` takes each head's argmax within its mask
    (greedy acting). `ok` is `heads_valid` under the masks the actions were drawn with."""
    if slot_by_op is None:
        actions, log_prob = sample_heads(key, logits, masks, deterministic)
        return actions, log_prob, heads_valid(logits, masks)
    actions, log_prob, used = sample_heads_op_first(key, logits, masks, slot_by_op, deterministic)
    return actions, log_prob, heads_valid(logits, used)


def heads_log_prob(logits: Sequence[jax.Array], masks: Sequence[jax.Array], actions: jax.Array) -> jax.Array:
    """Per-head log-probs `[..., 5]` of the taken `actions [..., 5]`."""
    assert_heads(logits, masks)
    chex.assert_shape(actions, jnp.shape(logits[0])[:-1] + (len(logits),))
    return masked_log_prob(*pad_heads(logits, masks), actions)


def heads_entropy(logits: Sequence[jax.Array], masks: Sequence[jax.Array], normalised: bool = True) -> jax.Array:
    """Per-head entropies `[..., 5]`: normalised by ln n_valid (BEHAVIOUR §9.3), or raw in nats."""
    assert_heads(logits, masks)
    return (normalized_entropy if normalised else entropy)(*pad_heads(logits, masks))


def heads_valid(logits: Sequence[jax.Array], masks: Sequence[jax.Array]) -> jax.Array:
    """Jittable: True per row iff every head's row is valid (`row_is_valid`), `[...]`."""
    assert_heads(logits, masks)
    return jnp.all(row_is_valid(*pad_heads(logits, masks)), axis=-1)


# ------------------------------------------------------------------------------------------
# causal relevance (BEHAVIOUR §9.4)
# ------------------------------------------------------------------------------------------


def causal_masks(op: jax.Array) -> jax.Array:
    """m_h from the taken op, bool `[..., 5]`: slot unless WAIT; blueprint, blend, tempo on GERMINATE; op
    always."""
    op = jnp.asarray(op)
    chex.assert_type(op, int)
    slot = op != LifecycleOp.WAIT
    germinate = op == LifecycleOp.GERMINATE
    return jnp.stack([slot, germinate, germinate, jnp.ones_like(slot), germinate], axis=-1)
