"""REINFORCE with a learned baseline for the factored actor-critic, as pure jitted functions over explicit pytrees.

The policy is the MLP actor-critic of `rl.network` (`ActorCritic(recurrent=False)`: the same five action heads and
value head as PPO's, an empty carry); it acts through the shared masked heads (`rl.distributions.draw`). Its maths:

Returns, for every row (env) of `[..., T]` arrays, over its valid steps t = L−1 … 0:

    G_t = r_t + γ·(bootstrap_t        if truncated_t
                   0                  if done_t and not truncated_t
                   G_{t+1}            otherwise),        G_t = 0 at a step that is not valid.

The loss over the N valid steps of a batch, with the advantage A_t = G_t − b(s_t) (b: the value head) and
log π(a_t|s_t) = Σ_h m_h·log π_h(a_{t,h}|s_t) (m_h: the heads the taken op made matter, `dist.causal_masks`):

    L = −(1/N)·Σ_t log π(a_t|s_t)·stop_grad(A_t)  +  c_v·(1/N)·Σ_t A_t²  −  c_e·H,
    H = Σ_t Σ_h m_h·H_norm,h(s_t) / Σ_t Σ_h m_h     (the mean normalised entropy of the heads that acted).

The gradient of the first term is the policy gradient with b as its baseline (the stop-gradient keeps the policy
term from moving b); the second fits b to the returns. `update` takes one clipped Adam step on L per batch
(on-policy: the rollout was drawn by the current parameters); a batch with no valid step, or a step whose loss,
gradient or new parameters are not finite, changes nothing.

    state = init_state(key, network, obs_dim, cfg)
    actions, log_probs, value, ok = act(state, obs_norm, masks, key, slot_by_op=..., deterministic=False)
    state, metrics = update(state, rollout, cfg)
"""

from __future__ import annotations

from functools import partial
from typing import Any

import chex
import flax.struct
import jax
import jax.numpy as jnp
import optax

from esper_fx.contracts.actions import HEAD_OP, NUM_HEADS
from rl import distributions as dist
from rl.config import LearnerConfig, ReinforceConfig
from rl.network import ActorCritic, init_params
from rl.rollout import Rollout


# ------------------------------------------------------------------------------------------
# the maths
# ------------------------------------------------------------------------------------------


def discounted_returns(rewards: jax.Array, dones: jax.Array, truncated: jax.Array, bootstrap: jax.Array,
                       valid: jax.Array, gamma: float) -> jax.Array:
    """G `[..., T]`: G_t = r_t + γ·(bootstrap_t if truncated_t, 0 if done_t, else G_{t+1}); 0 where not valid."""
    chex.assert_rank(rewards, {1, 2})
    chex.assert_equal_shape([rewards, dones, truncated, bootstrap, valid])
    chex.assert_type([rewards, bootstrap, dones, truncated, valid], [float, float, bool, bool, bool])

    def body(g_next, xs):
        r, done, trunc, boot, ok = xs
        follow = jnp.where(trunc, boot, jnp.where(done, 0.0, g_next))
        g = jnp.where(ok, r + gamma * follow, 0.0)
        return g, g

    time_first = lambda x: jnp.moveaxis(x, -1, 0)  # noqa: E731
    xs = tuple(map(time_first, (rewards, dones, truncated, bootstrap, valid)))
    _, returns = jax.lax.scan(body, jnp.zeros(rewards.shape[:-1], rewards.dtype), xs, reverse=True)
    return jnp.moveaxis(returns, 0, -1)


def acted_heads(actions: jax.Array, valid: jax.Array) -> jax.Array:
    """m_h ∧ valid, bool `[..., 5]`: the heads the taken op made matter, at the valid steps."""
    chex.assert_shape(actions, jnp.shape(valid) + (NUM_HEADS,))
    chex.assert_type([actions, valid], [int, bool])
    return dist.causal_masks(actions[..., HEAD_OP]) & valid[..., None]


def policy_gradient_loss(log_probs: jax.Array, heads: jax.Array, advantages: jax.Array,
                         valid: jax.Array) -> jax.Array:
    """−(1/N)·Σ_t (Σ_h m_h·log π_h)·stop_grad(A_t) over the N valid steps."""
    chex.assert_equal_shape([log_probs, heads])
    chex.assert_equal_shape([advantages, valid])
    chex.assert_type([log_probs, heads, advantages, valid], [float, bool, float, bool])
    log_pi = jnp.sum(jnp.where(heads, log_probs, 0.0), axis=-1)
    term = log_pi * jax.lax.stop_gradient(advantages)
    return -jnp.sum(jnp.where(valid, term, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def baseline_loss(values: jax.Array, returns: jax.Array, valid: jax.Array) -> jax.Array:
    """(1/N)·Σ_t (G_t − b(s_t))² over the N valid steps."""
    chex.assert_equal_shape([values, returns, valid])
    chex.assert_type([values, returns, valid], [float, float, bool])
    return jnp.sum(jnp.where(valid, (returns - values) ** 2, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def mean_entropy(entropy: jax.Array, heads: jax.Array) -> jax.Array:
    """H = Σ m_h·H_norm,h / Σ m_h: the mean normalised entropy of the heads that acted (0 when none did)."""
    chex.assert_equal_shape([entropy, heads])
    chex.assert_type([entropy, heads], [float, bool])
    return jnp.sum(jnp.where(heads, entropy, 0.0)) / jnp.maximum(jnp.sum(heads), 1)


def reinforce_loss(log_probs: jax.Array, entropy: jax.Array, values: jax.Array, returns: jax.Array,
                   heads: jax.Array, valid: jax.Array, value_coef: float, entropy_coef: float
                   ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(L, its terms) with L = policy_gradient_loss + c_v·baseline_loss − c_e·mean_entropy; A = G − b."""
    chex.assert_equal_shape([log_probs, entropy, heads])
    chex.assert_equal_shape([values, returns, valid])
    advantages = returns - values
    l_pol = policy_gradient_loss(log_probs, heads, advantages, valid)
    l_v = baseline_loss(values, returns, valid)
    h = mean_entropy(entropy, heads)
    loss = l_pol + value_coef * l_v - entropy_coef * h
    n = jnp.maximum(jnp.sum(valid), 1)
    return loss, {"loss": loss, "policy_loss": l_pol, "value_loss": l_v, "entropy": h,
                  "mean_return": jnp.sum(jnp.where(valid, returns, 0.0)) / n,
                  "mean_advantage": jnp.sum(jnp.where(valid, advantages, 0.0)) / n}


# ------------------------------------------------------------------------------------------
# the state, acting and the update
# ------------------------------------------------------------------------------------------


@flax.struct.dataclass
class ReinforceState:
    """The policy's parameters, Adam's state over them, the updates taken, and the network (static)."""

    params: Any
    opt_state: Any
    train_steps: jax.Array  # int32 scalar: completed updates
    network: ActorCritic = flax.struct.field(pytree_node=False)


def make_network(num_slots: int, num_blueprints: int, cfg: ReinforceConfig) -> ActorCritic:
    """The MLP actor-critic of `rl.network` at width `cfg.hidden_dim`."""
    return ActorCritic(num_slots=num_slots, num_blueprints=num_blueprints, recurrent=False, hidden_dim=cfg.hidden_dim)


def optimizer(cfg: ReinforceConfig) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))


def init_state(key: jax.Array, network: ActorCritic, obs_dim: int, cfg: ReinforceConfig) -> ReinforceState:
    params = init_params(network, key, obs_dim)
    return ReinforceState(params, optimizer(cfg).init(params), jnp.zeros((), jnp.int32), network)


@partial(jax.jit, static_argnames=("deterministic",))
def act(state: ReinforceState, obs: jax.Array, masks: dist.Masks, key: jax.Array,
        slot_by_op: jax.Array | None = None, deterministic: bool = False):
    """One step for normalised obs `[E, D]`: (actions `[E, 5]`, log-probs `[E, 5]`, value `[E]`, ok `[E]`);
    `deterministic`: every head's argmax within its mask."""
    chex.assert_rank(obs, 2)
    out, _ = state.network.apply({"params": state.params}, obs, (), method=state.network.step)
    actions, log_probs, ok = dist.draw(key, out.logits, masks, slot_by_op, deterministic)
    return actions, log_probs, out.value, ok


@jax.jit
def value(state: ReinforceState, obs: jax.Array) -> jax.Array:
    """b(s) `[E]` for normalised obs `[E, D]`."""
    out, _ = state.network.apply({"params": state.params}, obs, (), method=state.network.step)
    return out.value


def batch_loss(params: Any, network: ActorCritic, rollout: Rollout, returns: jax.Array,
               cfg: ReinforceConfig) -> tuple[jax.Array, dict[str, jax.Array]]:
    """`reinforce_loss` of a whole rollout `[E, T, ...]` under `params`."""
    chex.assert_rank(rollout.obs, 3)
    out, _ = network.apply({"params": params}, rollout.obs, ())
    valid = rollout.valid
    heads = acted_heads(rollout.actions, valid)
    log_probs = dist.heads_log_prob(out.logits, rollout.masks, rollout.actions)
    entropy = dist.heads_entropy(out.logits, rollout.masks)
    return reinforce_loss(log_probs, entropy, out.value, returns, heads, valid, cfg.value_coef, cfg.entropy_coef)


@partial(jax.jit, static_argnames=("cfg", "learner"))
def update(state: ReinforceState, rollout: Rollout, cfg: ReinforceConfig,
           learner: LearnerConfig = LearnerConfig()) -> tuple[ReinforceState, dict]:
    """One clipped Adam step on the batch's loss, its returns discounted by the `learner`'s γ. Metrics: loss,
    policy_loss, value_loss, entropy, mean_return,
    mean_advantage, grad_norm (before clipping), n_transitions, skipped (no valid step: nothing changed) and
    nonfinite_skipped (a loss, gradient or new parameter that was not finite: nothing changed)."""
    chex.assert_rank([state.train_steps, rollout.obs, rollout.step_count], [0, 3, 1])
    valid = rollout.valid
    returns = discounted_returns(rollout.rewards, rollout.dones, rollout.truncated, rollout.bootstrap, valid,
                                 learner.gamma)
    (loss, aux), grads = jax.value_and_grad(batch_loss, has_aux=True)(state.params, state.network, rollout,
                                                                       returns, cfg)
    updates, opt_state = optimizer(cfg).update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    n = jnp.sum(valid).astype(jnp.int32)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves((loss, grads, params))]))
    take = finite & (n > 0)
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(take, a, b), new, old)  # noqa: E731
    new_state = state.replace(params=keep(params, state.params), opt_state=keep(opt_state, state.opt_state),
                              train_steps=state.train_steps + take.astype(jnp.int32))
    return new_state, {**aux, "grad_norm": optax.tree.norm(grads), "n_transitions": n, "skipped": n == 0,
                       "nonfinite_skipped": (n > 0) & ~finite}
