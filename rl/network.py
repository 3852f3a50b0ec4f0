"""The factored actor-critic of BEHAVIOUR §10 as a Flax linen module.

obs [E, L, D] → Linear(D→128) → LayerNorm → ReLU → LSTM(128→H), scanned over L from a given carry
(h, c) → LayerNorm = z → one head per action head of its `HeadSpec` and a value head, each Linear(H→64) →
ReLU → Linear(64→n): for the growth contract slot S, blueprint B, blend 3, op 4, tempo 3, and value 1. The LSTM has fused kernels W_x [128×4H], W_h [H×4H] and one bias [4H] (gate order
i, f, g, o; forget slice = 2.0). Init: orthogonal √2 for hidden Linears, 0.01 for the policy outputs,
1.0 for the value output, one orthogonal matrix each for W_x and W_h; zero biases. LayerNorm eps 1e-5.
`recurrent=False` gives the BEHAVIOUR §10.3 MLP ablation (Linear(128→H) + ReLU, empty carry).

Acting runs the same code with L = 1. The scan body resets the carry to zeros at steps flagged in
`resets [E, L]`: where an episode starts inside a row (the project's loop gives each row one episode; a
standard environment's driver does not).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from esper_fx.contracts.blueprints import DEFAULT_NUM_BLUEPRINTS
from rl import distributions as dist
from rl.heads import HeadSpec, growth_heads
from rl.config import (
    FEATURE_DIM,
    HEAD_HIDDEN,
    LAYER_NORM_EPS,
    LSTM_FORGET_BIAS,
    POLICY_OUT_GAIN,
    VALUE_OUT_GAIN,
    PPOConfig,
)

SQRT2 = math.sqrt(2.0)

Carry = tuple  # (h [E, H], c [E, H]) for the LSTM, () for the MLP


class PolicyOutput(NamedTuple):
    """Per-head (masked) logits, each `[E, L, n]`, and the value `[E, L]`."""

    logits: tuple[jax.Array, ...]  # one per head, in the order of its `HeadSpec`
    value: jax.Array


def _orthogonal(gain: float):
    return nn.initializers.orthogonal(scale=gain)


def _forget_bias_init(hidden_dim: int):
    def init(key, shape, dtype=jnp.float32):
        del key
        return jnp.zeros(shape, dtype).at[hidden_dim:2 * hidden_dim].set(LSTM_FORGET_BIAS)

    return init


def lstm_cell(w_h: jax.Array, carry: Carry, x_proj: jax.Array) -> tuple[Carry, jax.Array]:
    """One LSTM step given the input projection x·W_x + b `[E, 4H]`: gates (i, f, g, o)."""
    h, c = carry
    chex.assert_equal_shape([h, c])
    chex.assert_shape(x_proj, h.shape[:-1] + (4 * h.shape[-1],))
    i, f, g, o = jnp.split(x_proj + h @ w_h, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return (h, c), h


class LSTM(nn.Module):
    """Single-layer LSTM with fused W_x, W_h and one bias, scanned over axis 1 of `[E, L, F]`."""

    hidden_dim: int

    @nn.compact
    def __call__(self, x: jax.Array, carry: Carry, resets: jax.Array) -> tuple[jax.Array, Carry]:
        hd = self.hidden_dim
        w_x = self.param("w_x", _orthogonal(1.0), (x.shape[-1], 4 * hd))
        w_h = self.param("w_h", _orthogonal(1.0), (hd, 4 * hd))
        bias = self.param("bias", _forget_bias_init(hd), (4 * hd,))
        x_proj = x @ w_x + bias

        def body(carry, inputs):
            xp, reset = inputs
            carry = jax.tree.map(lambda s: jnp.where(reset[:, None], jnp.zeros_like(s), s), carry)
            return lstm_cell(w_h, carry, xp)

        carry, hs = jax.lax.scan(body, carry, (jnp.swapaxes(x_proj, 0, 1), jnp.swapaxes(resets, 0, 1)))
        return jnp.swapaxes(hs, 0, 1), carry


class Head(nn.Module):
    """Linear(→hidden) → ReLU → Linear(→n), orthogonal √2 then `out_gain`, zero biases."""

    n: int
    hidden: int
    out_gain: float

    @nn.compact
    def __call__(self, z: jax.Array) -> jax.Array:
        zeros = nn.initializers.zeros
        x = nn.relu(nn.Dense(self.hidden, kernel_init=_orthogonal(SQRT2), bias_init=zeros, name="hidden")(z))
        return nn.Dense(self.n, kernel_init=_orthogonal(self.out_gain), bias_init=zeros, name="out")(x)


def head_module(name: str) -> str:
    """The module of the head `name` (`slot` → `slot_head`)."""
    return f"{name}_head"


VALUE_MODULE = "value_head"


class ActorCritic(nn.Module):
    """Factored recurrent (or MLP) actor-critic of BEHAVIOUR §10. Call with obs `[E, L, D]` and a carry.

    Its action heads are `heads` (an `rl.heads.HeadSpec`, one `<name>_head` module each); without one, the
    growth contract's five for `num_slots` and `num_blueprints` (`rl.heads.growth_heads`)."""

    num_slots: int = 1
    num_blueprints: int = DEFAULT_NUM_BLUEPRINTS
    recurrent: bool = True
    hidden_dim: int = PPOConfig.lstm_hidden_dim
    feature_dim: int = FEATURE_DIM
    head_hidden: int = HEAD_HIDDEN
    heads: HeadSpec | None = None

    @property
    def head_spec(self) -> HeadSpec:
        """The heads this network acts with."""
        return self.heads if self.heads is not None else growth_heads(self.num_slots, self.num_blueprints)

    def setup(self) -> None:
        zeros = nn.initializers.zeros
        self.feature = nn.Dense(self.feature_dim, kernel_init=_orthogonal(SQRT2), bias_init=zeros)
        self.feature_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPS)
        if self.recurrent:
            self.lstm = LSTM(self.hidden_dim)
        else:
            self.mlp = nn.Dense(self.hidden_dim, kernel_init=_orthogonal(SQRT2), bias_init=zeros)
        self.core_norm = nn.LayerNorm(epsilon=LAYER_NORM_EPS)
        spec = self.head_spec
        for name, n in zip(spec.names, spec.sizes):  # `<name>_head`: the growth contract's slot_head, op_head, ...
            setattr(self, head_module(name), Head(n, self.head_hidden, POLICY_OUT_GAIN))
        self.value_head = Head(1, self.head_hidden, VALUE_OUT_GAIN)

    def initial_carry(self, n_envs: int) -> Carry:
        """Zero carry (h, c), each `[n_envs, H]`, or () for the MLP variant."""
        if not self.recurrent:
            return ()
        zeros = jnp.zeros((n_envs, self.hidden_dim), jnp.float32)
        return (zeros, zeros)

    def __call__(
        self,
        obs: jax.Array,
        carry: Carry,
        masks: dist.Masks | None = None,
        resets: jax.Array | None = None,
    ) -> tuple[PolicyOutput, Carry]:
        """obs `[E, L, D]` → (PolicyOutput with `[E, L, ·]` logits and `[E, L]` value, new carry)."""
        chex.assert_rank(obs, 3)
        chex.assert_type(obs, float)
        x = nn.relu(self.feature_norm(self.feature(obs)))
        if self.recurrent:
            if resets is None:
                resets = jnp.zeros(obs.shape[:2], bool)
            x, carry = self.lstm(x, carry, resets)
        else:
            x = nn.relu(self.mlp(x))
        z = self.core_norm(x)
        logits = tuple(getattr(self, head_module(name))(z) for name in self.head_spec.names)
        if masks is not None:
            logits = tuple(dist.masked_logits(lg, m) for lg, m in zip(logits, masks))
        value = self.value_head(z)[..., 0]
        return PolicyOutput(logits, value), carry

    def step(self, obs: jax.Array, carry: Carry, masks: dist.Masks | None = None) -> tuple[PolicyOutput, Carry]:
        """One step for acting: obs `[E, D]` → PolicyOutput with `[E, n]` logits and `[E]` value."""
        chex.assert_rank(obs, 2)
        out, carry = self(obs[:, None, :], carry, None if masks is None else _add_time(masks))
        return jax.tree.map(lambda a: a[:, 0], out), carry


def _add_time(masks: dist.Masks) -> dist.Masks:
    return dist.same_kind(masks, [m[:, None, :] for m in masks])


@partial(jax.jit, static_argnames=("network", "obs_dim"))
def init_params(network: ActorCritic, key: jax.Array, obs_dim: int):
    """Initial parameters for observations of size `obs_dim` (jitted)."""
    obs = jnp.zeros((1, 1, obs_dim), jnp.float32)
    return network.init(key, obs, network.initial_carry(1))["params"]


def param_count(params) -> int:
    return int(sum(x.size for x in jax.tree.leaves(params)))
