"""The signals pytree as the controller side reads it: chex assertions of its shapes and dtypes.

`esper_fx.contracts.signals.SIGNAL_FIELDS` is the one list of fields; the per-env ones are `[E]`, the per-slot
ones `[E, S]`. The rewards and the heuristic open with `assert_signals`.
"""

from __future__ import annotations

from typing import Mapping

import chex
import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import NUM_HEADS
from esper_fx.contracts.signals import SIGNAL_FIELDS

PER_ENV_FIELDS: tuple[str, ...] = tuple(k for k, (shape, _) in SIGNAL_FIELDS.items() if shape == "[E]")
PER_SLOT_FIELDS: tuple[str, ...] = tuple(k for k, (shape, _) in SIGNAL_FIELDS.items() if shape == "[E, S]")


def assert_signals(signals: Mapping[str, jax.Array], actions: jax.Array | None = None) -> tuple[int, int]:
    """The per-env fields are `[E]`, the per-slot fields `[E, S]`, `actions` (if given) int `[E, 5]`.
    Returns (E, S)."""
    e, s = jnp.shape(signals["slot_occupied"])
    chex.assert_shape([signals[k] for k in PER_ENV_FIELDS if k in signals], (e,))
    chex.assert_shape([signals[k] for k in PER_SLOT_FIELDS if k in signals], (e, s))
    if actions is not None:
        chex.assert_shape(actions, (e, NUM_HEADS))
        chex.assert_type(actions, int)
    return e, s
