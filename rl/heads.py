"""The action heads a policy has: `HeadSpec`, read by the network (`rl.network`), the rollout (`rl.rollout`) and
the PPO loss (`rl.ppo`). The growth contract is one spec (`growth_heads`); a plain task of n actions is another
(`discrete`), and needs no masks (`all_allowed`).

    spec = discrete(2)                                  # CartPole: one head of 2 actions, every one allowed
    spec = growth_heads(num_slots=3, num_blueprints=5)  # slot, blueprint, blend, op, tempo

A spec says which heads a step's action made count (`relevance`: the growth contract's op decides, BEHAVIOUR
§9.4; by default every head at every step) and which head the clip fraction and ratio statistics read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import ACTION_HEADS, HEAD_OP, head_sizes
from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS
from rl import distributions as dist


def growth_relevance(actions: jax.Array) -> jax.Array:
    """The growth contract's m_h `[..., 5]`, from the taken op (`distributions.causal_masks`, BEHAVIOUR §9.4)."""
    return dist.causal_masks(jnp.asarray(actions)[..., HEAD_OP])


@dataclass(frozen=True)
class HeadSpec:
    """names and sizes of the heads (in action-column order); `relevance`: actions `[..., H]` int → bool
    `[..., H]`, the heads a step's action made count (None: every head); `ratio_head`: the head whose ratio
    the clip fraction and ratio statistics read. Frozen and hashable: a static field of the network."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    relevance: Callable[[jax.Array], jax.Array] | None = None
    ratio_head: int = 0

    def __post_init__(self) -> None:
        if not self.names or len(self.names) != len(self.sizes) or len(set(self.names)) != len(self.names):
            raise ValueError(f"a head spec needs distinct names, one size each (got {self.names}, {self.sizes})")
        if any(int(n) < 1 for n in self.sizes):
            raise ValueError(f"every head needs at least one action (got sizes {self.sizes})")
        if not 0 <= self.ratio_head < len(self.names):
            raise ValueError(f"ratio_head {self.ratio_head} is not a head of {self.names}")

    @property
    def n(self) -> int:
        return len(self.names)

    def relevant(self, actions: jax.Array) -> jax.Array:
        """The heads each action made count, bool `[..., H]`."""
        if self.relevance is None:
            return jnp.ones(jnp.shape(actions), bool)
        return self.relevance(actions)

    def all_allowed(self, shape: tuple[int, ...]) -> tuple[jax.Array, ...]:
        """Masks allowing every action, one `shape + (size,)` per head: a task without masks."""
        return tuple(jnp.ones(tuple(shape) + (n,), bool) for n in self.sizes)


def growth_heads(num_slots: int, num_blueprints: int = DEFAULT_NUM_BLUEPRINTS) -> HeadSpec:
    """The growth contract's five heads (slot, blueprint, blend, op, tempo), their relevance set by the op."""
    return HeadSpec(ACTION_HEADS, tuple(head_sizes(num_slots, num_blueprints)), growth_relevance, HEAD_OP)


def discrete(n: int, name: str = "action") -> HeadSpec:
    """One head of `n` actions, every one counting at every step."""
    return HeadSpec((name,), (int(n),))
