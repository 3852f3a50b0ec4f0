"""PPO for the factored actor-critic (BEHAVIOUR §11), as pure jitted functions over explicit pytrees.

- `PPOConfig` (`rl.config`): every hyperparameter of BEHAVIOUR §11.1 (static, hashable); `n_envs` (the run's env
  count, static) sets the entropy anneal's length in updates.
- `TrainState`: params, Optax state (over the raveled parameter vector), train_steps, the network (static).
- `act` / `value` / `evaluate`: one policy step, the bootstrap value, a full-sequence re-run (BEHAVIOUR §10.2).
- Losses (BEHAVIOUR §11.6–11.7): per-head clipped surrogate with causal masks summed over heads, clipped value
  loss (0.5 factor) or plain MSE, normalised-entropy bonus, the KL3 approx_kl and op-head ratio stats.
- `update(train_state, rollout, key, cfg, n_envs)` (BEHAVIOUR §11.5), one jitted call: GAE per env, explained
  variance, global advantage normalisation, then update_epochs × num_minibatches steps over permuted env
  groups (array-split semantics). approx_kl is checked before every gradient step (stop above
  1.5·target_kl, ending the whole update; with `kl_per_head`, the largest per-head KL is checked
  instead); a non-finite loss, gradient, new parameter or optimizer moment skips the step (the previous
  parameters and optimizer state are kept) and ends the update.
  `train_steps` increments unless there was no valid transition at all.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from esper_fx.contracts.actions import ACTION_HEADS, HEAD_OP
from rl import distributions as dist
from rl.config import ADAM_B1, ADAM_B2, ADV_EPS, EV_MIN_VAR, LearnerConfig, PPOConfig, lr_factor
from rl.config import entropy_coefficient as entropy_schedule
from rl.gae import gae
from rl.heads import HeadSpec, growth_relevance
from rl.network import VALUE_MODULE, ActorCritic, Carry, head_module, init_params
from rl.rollout import Rollout



def _names(heads: HeadSpec | None) -> tuple[str, ...]:
    """The heads' names; None: the growth contract's."""
    return ACTION_HEADS if heads is None else heads.names


# ------------------------------------------------------------------------------------------
# configuration and state
# ------------------------------------------------------------------------------------------


@flax.struct.dataclass
class TrainState:
    """params: the network's parameter tree. opt_state: the Optax state over the *raveled* parameter
    vector (`ravel_pytree(params)[0]`); one flat array keeps the jitted update small."""

    params: Any
    opt_state: Any
    train_steps: jax.Array  # int32 scalar: completed updates
    network: ActorCritic = flax.struct.field(pytree_node=False)


def _module_of(path) -> str:
    return str(getattr(path[0], "key", path[0]))


def _value_head_mask(params) -> Any:
    """True on the value head's leaves (the only ones that get weight decay)."""
    return jax.tree_util.tree_map_with_path(lambda path, _: _module_of(path) == VALUE_MODULE, params)


def param_segments(params, heads: HeadSpec | None = None) -> np.ndarray:
    """Static per-element module index of the raveled params: the action heads 0..H−1, the value head H, the
    trunk H + 1 (the growth contract: 0..5 and 6)."""
    modules = tuple(head_module(name) for name in _names(heads)) + (VALUE_MODULE,)
    parts = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = _module_of(path)
        parts.append(np.full(int(np.prod(leaf.shape)), modules.index(name) if name in modules else len(modules)))
    return np.concatenate(parts).astype(np.int32)


def flat_decay_mask(params, heads: HeadSpec | None = None) -> np.ndarray:
    """1.0 on the raveled value-head elements, 0.0 elsewhere (static, from shapes only)."""
    return (param_segments(params, heads) == len(_names(heads))).astype(np.float32)


def _decay_on_flat_mask(weight_decay: float, mask: np.ndarray) -> optax.GradientTransformation:
    def update(updates, state, params):
        return updates + weight_decay * mask * params, state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def make_optimizer(cfg: PPOConfig, decay_mask=None, lr: Any = None) -> optax.GradientTransformation:
    """chain(clip_by_global_norm, Adam(eps 1e-5)); decoupled weight decay on the value head if > 0.

    `decay_mask`: None for a params tree (the value head is found by name), or a flat 0/1 vector
    (`flat_decay_mask`) when the optimizer runs on the raveled parameter vector, as `update` does. `lr`: the
    rate of this update (`update_lr`; default cfg.lr); the optimizer's state does not depend on it.
    """
    lr = cfg.lr if lr is None else lr
    clip = optax.clip_by_global_norm(cfg.max_grad_norm)
    if cfg.weight_decay <= 0:
        return optax.chain(clip, optax.adam(lr, b1=ADAM_B1, b2=ADAM_B2, eps=cfg.adam_eps))
    decay = (optax.add_decayed_weights(cfg.weight_decay, mask=_value_head_mask) if decay_mask is None
             else _decay_on_flat_mask(cfg.weight_decay, decay_mask))
    return optax.chain(
        clip,
        optax.scale_by_adam(b1=ADAM_B1, b2=ADAM_B2, eps=cfg.adam_eps),
        decay,
        optax.scale_by_learning_rate(lr),
    )


def update_lr(cfg: PPOConfig, train_steps: jax.Array) -> Any:
    """Adam's rate for the update after `train_steps` completed ones: cfg.lr × the schedule's factor
    (`rl.config.lr_factor`); exactly cfg.lr (a Python float) under `constant`."""
    if cfg.lr_anneal == "constant":
        return cfg.lr
    steps = jnp.asarray(train_steps, jnp.float32)
    return cfg.lr * jnp.asarray(lr_factor(cfg, steps, jnp.where, jnp.minimum, jnp.maximum), jnp.float32)


def init_train_state(key: jax.Array, network: ActorCritic, obs_dim: int, cfg: PPOConfig) -> TrainState:
    params = init_params(network, key, obs_dim)
    flat, _ = ravel_pytree(params)
    opt_state = make_optimizer(cfg, flat_decay_mask(params, network.head_spec)).init(flat)
    return TrainState(params, opt_state, jnp.zeros((), jnp.int32), network)


def entropy_coefficient(cfg: PPOConfig, n_envs: int, train_steps: jax.Array) -> jax.Array:
    """β after the given number of completed updates (BEHAVIOUR §11.8, `rl.config.entropy_coefficient`), in jnp."""
    chex.assert_rank(train_steps, 0)
    steps = jnp.asarray(train_steps, jnp.float32)
    return jnp.asarray(entropy_schedule(cfg, n_envs, steps, jnp.minimum, jnp.maximum), jnp.float32)


# ------------------------------------------------------------------------------------------
# acting and evaluation (BEHAVIOUR §10.2)
# ------------------------------------------------------------------------------------------


class ActOutput(NamedTuple):
    actions: jax.Array  # [E, 5] int32 (slot, blueprint, blend, op, tempo)
    log_probs: jax.Array  # [E, 5] per head
    value: jax.Array  # [E]
    carry: Carry  # post-step carry
    ok: jax.Array  # [E] bool: every head had a valid action and finite logits


class Evaluation(NamedTuple):
    log_probs: jax.Array  # [E, L, 5]
    values: jax.Array  # [E, L]
    entropy: jax.Array  # [E, L, 5] normalised (or raw, in nats: `PPOConfig.entropy_mode`)


@partial(jax.jit, static_argnames=("network", "deterministic"))
def policy_step(network, params, obs, masks, carry, key, deterministic: bool = False,
                slot_by_op: jax.Array | None = None) -> ActOutput:
    """One acting step with explicit network and params; obs are already normalised `[E, D]`. With
    `slot_by_op [E, 4, S]` the op is drawn first and the slot under that op's mask."""
    chex.assert_rank(obs, 2)
    chex.assert_equal_shape_prefix([obs, *masks], 1)
    out, new_carry = network.apply({"params": params}, obs, carry, method=network.step)
    actions, log_probs, ok = dist.draw(key, out.logits, masks, slot_by_op, deterministic)
    return ActOutput(actions, log_probs, out.value, new_carry, ok)


def act(state: TrainState, obs, masks: dist.Masks, carry: Carry, key, deterministic: bool = False,
        slot_by_op: jax.Array | None = None) -> ActOutput:
    """One policy step (no gradients): per-head actions and log-probs, value, new carry, validity."""
    chex.assert_rank(obs, 2)
    return policy_step(state.network, state.params, obs, masks, carry, key, deterministic, slot_by_op)


@partial(jax.jit, static_argnames=("network",))
def _value(network, params, obs, carry) -> jax.Array:
    out, _ = network.apply({"params": params}, obs, carry, method=network.step)
    return out.value


def value(state: TrainState, obs, carry: Carry) -> jax.Array:
    """V(s) `[E]` for normalised obs `[E, D]` from `carry` (the truncation bootstrap)."""
    chex.assert_rank(obs, 2)
    return _value(state.network, state.params, obs, carry)


def evaluate(network: ActorCritic, params, obs, actions, masks: dist.Masks, carry0: Carry, resets=None,
             entropy_mode: str = "normalised") -> Evaluation:
    """Re-run whole sequences `[E, L, D]` from `carry0` (zeroed before the steps flagged in `resets [E, L]`,
    where an episode starts inside a row): per-head log-probs, values, entropies (`entropy_mode`)."""
    chex.assert_rank(obs, 3)
    chex.assert_shape(actions, obs.shape[:2] + (len(masks),))
    out, _ = network.apply({"params": params}, obs, carry0, resets=resets)
    return Evaluation(
        dist.heads_log_prob(out.logits, masks, actions),
        out.value,
        dist.heads_entropy(out.logits, masks, normalised=entropy_mode == "normalised"),
    )


# ------------------------------------------------------------------------------------------
# advantages and statistics (BEHAVIOUR §11.3–11.5)
# ------------------------------------------------------------------------------------------


def _masked_mean_var(x: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(n, mean, unbiased variance) of `x` over `valid` entries (variance 0 when n < 2)."""
    n = jnp.sum(valid)
    mean = jnp.sum(jnp.where(valid, x, 0.0)) / jnp.maximum(n, 1)
    ss = jnp.sum(jnp.where(valid, (x - mean) ** 2, 0.0))
    return n, mean, jnp.where(n > 1, ss / jnp.maximum(n - 1, 1), 0.0)


def normalize_advantages(adv: jax.Array, valid: jax.Array) -> jax.Array:
    """(A − mean)/(std + 1e-8) over valid steps, unbiased std; std = 1 with one transition [fix]."""
    chex.assert_equal_shape([adv, valid])
    chex.assert_type([adv, valid], [float, bool])
    n, mean, var = _masked_mean_var(adv, valid)
    std = jnp.where(n > 1, jnp.sqrt(var), 1.0)
    return jnp.where(valid, (adv - mean) / (std + ADV_EPS), 0.0)


def explained_variance(returns: jax.Array, values: jax.Array, valid: jax.Array) -> jax.Array:
    """1 − Var(R − V)/Var(R) over valid steps (unbiased); 0 if Var(R) ≤ 1e-8 or fewer than 2 steps."""
    chex.assert_equal_shape([returns, values, valid])
    chex.assert_type([returns, values, valid], [float, float, bool])
    n, _, var_r = _masked_mean_var(returns, valid)
    _, _, var_d = _masked_mean_var(returns - values, valid)
    ok = (n >= 2) & (var_r > EV_MIN_VAR)
    return jnp.where(ok, 1.0 - var_d / jnp.where(ok, var_r, 1.0), 0.0)


# ------------------------------------------------------------------------------------------
# losses (BEHAVIOUR §11.6–11.7)
# ------------------------------------------------------------------------------------------


class Batch(NamedTuple):
    """Training data for a group of env rows `[G, T, ...]`; `valid` marks the steps that count."""

    obs: jax.Array
    actions: jax.Array  # [G, T, 5]
    old_log_probs: jax.Array  # [G, T, 5]
    old_values: jax.Array  # [G, T]
    advantages: jax.Array  # [G, T] normalised
    returns: jax.Array  # [G, T]
    masks: dist.Masks
    carry0: Carry
    valid: jax.Array  # [G, T] bool
    starts: jax.Array | None = None  # [G, T] bool: the carry is zeroed before these steps (an episode starts)


def head_weights(actions: jax.Array, valid: jax.Array, heads: HeadSpec | None = None) -> jax.Array:
    """m_h ∧ valid, bool `[..., H]`: each head's relevance at each valid step (`HeadSpec.relevant`; None: the
    growth contract's causal masks, BEHAVIOUR §9.4)."""
    chex.assert_shape(actions, jnp.shape(valid) + (len(_names(heads)),))
    chex.assert_type([actions, valid], [int, bool])
    relevant = growth_relevance(actions) if heads is None else heads.relevant(actions)
    return relevant & valid[..., None]


def _head_counts(m: jax.Array) -> jax.Array:
    """n_h = max(Σ_t m_h, 1), `[5]`."""
    return jnp.maximum(jnp.sum(m, axis=tuple(range(m.ndim - 1))), 1).astype(jnp.float32)


def _check_per_head(per_head: jax.Array, m: jax.Array) -> None:
    """A per-head quantity `[..., H]` (float) and its causal mask of the same shape (bool)."""
    chex.assert_equal_shape([per_head, m])
    chex.assert_type([per_head, m], [float, bool])


def policy_loss(log_ratio: jax.Array, adv: jax.Array, m: jax.Array, clip_ratio: float) -> tuple[jax.Array, jax.Array]:
    """(Σ_h L_h, L_h `[5]`) with L_h = −(1/n_h)·Σ m_h·min(r·A_h, clip(r, 1±ε)·A_h)."""
    _check_per_head(log_ratio, m)
    chex.assert_shape(adv, log_ratio.shape[:-1])
    ratio = jnp.exp(log_ratio)
    adv_h = jnp.where(m, adv[..., None], 0.0)
    surr = jnp.minimum(ratio * adv_h, jnp.clip(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * adv_h)
    axes = tuple(range(m.ndim - 1))
    per_head = -jnp.sum(jnp.where(m, surr, 0.0), axis=axes) / _head_counts(m)
    return jnp.sum(per_head), per_head


def value_loss(values, old_values, returns, valid, clip_value: bool = PPOConfig.clip_value,
               value_clip: float = PPOConfig.value_clip):
    """0.5·mean max((v−R)², (v_c−R)²) with v_c = v_old + clip(v − v_old, ±clip); unclipped 0.5·mean (v−R)²
    (one convention, the ½ of a squared error, either way)."""
    chex.assert_equal_shape([values, old_values, returns, valid])
    chex.assert_type([values, old_values, returns, valid], [float, float, float, bool])
    n = jnp.maximum(jnp.sum(valid), 1)
    sq = (values - returns) ** 2
    if clip_value:
        v_c = old_values + jnp.clip(values - old_values, -value_clip, value_clip)
        sq = jnp.maximum(sq, (v_c - returns) ** 2)
    return jnp.sum(jnp.where(valid, 0.5 * sq, 0.0)) / n


def entropy_weights(cfg: PPOConfig, n_heads: int) -> Any:
    """Each head's weight in the entropy bonus: `entropy_head_weights`, one per head; left at its default (every
    head 1, whatever the heads) a plain 1."""
    weights = cfg.entropy_head_weights
    if all(w == 1.0 for w in weights):
        return 1.0
    if len(weights) != n_heads:
        raise ValueError(f"entropy_head_weights has {len(weights)} weights; the policy has {n_heads} heads")
    return weights


def entropy_bonus(entropy: jax.Array, m: jax.Array, weights: Any = 1.0) -> tuple[jax.Array, jax.Array]:
    """(L_ent = −Σ_h w_h·E_h, E_h `[5]`) with E_h = (1/n_h)·Σ m_h·H_norm,h and w_h each head's weight
    (`PPOConfig.entropy_head_weights`; 1 for every head by default)."""
    _check_per_head(entropy, m)
    w = jnp.broadcast_to(jnp.asarray(weights, entropy.dtype), entropy.shape[-1:])
    axes = tuple(range(m.ndim - 1))
    per_head = jnp.sum(jnp.where(m, entropy, 0.0), axis=axes) / _head_counts(m)
    return -jnp.sum(w * per_head), per_head


def approx_kl(log_ratio: jax.Array, m: jax.Array, valid: jax.Array) -> jax.Array:
    """(1/N)·Σ_h Σ_t m_h·((r − 1) − ln r), the KL3 estimator of KL(old‖new)."""
    _check_per_head(log_ratio, m)
    chex.assert_shape(valid, log_ratio.shape[:-1])
    k3 = jnp.expm1(log_ratio) - log_ratio
    return jnp.sum(jnp.where(m, k3, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


def approx_kl_per_head(log_ratio: jax.Array, m: jax.Array) -> jax.Array:
    """KL_h = (1/n_h)·Σ_t m_h·((r − 1) − ln r), `[5]`: each head's KL3 over the steps where it acted.

    The whole-batch `approx_kl` divides a head's terms by every valid step, so a head that acts on a few
    steps (blueprint, blend and tempo act on GERMINATE only) can move far while the total stays small."""
    _check_per_head(log_ratio, m)
    k3 = jnp.expm1(log_ratio) - log_ratio
    return jnp.sum(jnp.where(m, k3, 0.0), axis=tuple(range(m.ndim - 1))) / _head_counts(m)


def op_ratio_stats(log_ratio_op: jax.Array, valid: jax.Array, clip_ratio: float) -> dict[str, jax.Array]:
    """clip_fraction (|r_op − 1| > ε) and ratio mean / max / min over valid steps, op head only."""
    chex.assert_type([log_ratio_op, valid], [float, bool])
    chex.assert_is_broadcastable(jnp.shape(log_ratio_op), jnp.shape(valid))
    r = jnp.exp(log_ratio_op)
    n = jnp.maximum(jnp.sum(valid), 1)
    return {
        "clip_fraction": jnp.sum(valid & (jnp.abs(r - 1.0) > clip_ratio)) / n,
        "ratio_mean": jnp.sum(jnp.where(valid, r, 0.0)) / n,
        "ratio_max": jnp.max(jnp.where(valid, r, -jnp.inf)),
        "ratio_min": jnp.min(jnp.where(valid, r, jnp.inf)),
    }


def loss_from_evaluation(ev: Evaluation, batch: Batch, beta, cfg: PPOConfig,
                         heads: HeadSpec | None = None) -> tuple[jax.Array, dict]:
    """Total loss L = L_pol + value_coef·L_V + β·L_ent, and its diagnostics, from re-run outputs; `heads`: the
    policy's (`ActorCritic.head_spec`; None: the growth contract's)."""
    chex.assert_equal_shape([ev.log_probs, batch.old_log_probs, ev.entropy])
    chex.assert_equal_shape([ev.values, batch.old_values, batch.returns, batch.advantages, batch.valid])
    m = head_weights(batch.actions, batch.valid, heads)
    ratio_head = HEAD_OP if heads is None else heads.ratio_head
    log_ratio = jnp.where(m, ev.log_probs - batch.old_log_probs, 0.0)
    l_pol, pol_h = policy_loss(log_ratio, batch.advantages, m, cfg.clip_ratio)
    l_v = value_loss(ev.values, batch.old_values, batch.returns, batch.valid, cfg.clip_value, cfg.value_clip)
    l_ent, ent_h = entropy_bonus(ev.entropy, m, entropy_weights(cfg, m.shape[-1]))
    loss = l_pol + cfg.value_coef * l_v + beta * l_ent
    aux = {
        "loss": loss, "policy_loss": l_pol, "value_loss": l_v, "entropy": jnp.mean(ent_h),
        "approx_kl": approx_kl(log_ratio, m, batch.valid),
        "approx_kl_head_max": jnp.max(approx_kl_per_head(log_ratio, m)),
        **op_ratio_stats(log_ratio[..., ratio_head], batch.valid, cfg.clip_ratio),
        "entropy_per_head": ent_h, "policy_loss_per_head": pol_h,
    }
    return loss, aux


def ppo_loss(params, network: ActorCritic, batch: Batch, beta, cfg: PPOConfig) -> tuple[jax.Array, dict]:
    """The BEHAVIOUR §11.6 loss of a minibatch under `params` (re-running its sequences from carry0, the carry
    zeroed where an episode starts inside a row, as the actor's was)."""
    chex.assert_rank(batch.obs, 3)
    ev = evaluate(network, params, batch.obs, batch.actions, batch.masks, batch.carry0, batch.starts,
                  cfg.entropy_mode)
    return loss_from_evaluation(ev, batch, beta, cfg, network.head_spec)


def flat_grad_norms(flat_grads: jax.Array, segments: np.ndarray, n_heads: int = len(ACTION_HEADS)
                    ) -> dict[str, jax.Array]:
    """Global and per-head L2 norms (before clipping) of a raveled gradient; `segments` from
    `param_segments`. grad_norm_per_head is `[6]`: slot, blueprint, blend, op, tempo heads, value head."""
    chex.assert_rank(flat_grads, 1)
    chex.assert_equal_shape([flat_grads, segments])
    per_module = jax.ops.segment_sum(flat_grads**2, segments, num_segments=n_heads + 2)
    return {"grad_norm": jnp.sqrt(jnp.sum(per_module)), "grad_norm_per_head": jnp.sqrt(per_module[:-1])}


def named_metrics(metrics: dict, names: tuple[str, ...] = ACTION_HEADS) -> dict:
    """Expand the `*_per_head` arrays into one scalar per head (`entropy_slot`, `grad_norm_value`, …)."""
    chex.assert_rank([v for k, v in metrics.items() if k.endswith("_per_head")], 1)
    out = {k: v for k, v in metrics.items() if not k.endswith("_per_head")}
    for key, heads in (("entropy_per_head", names), ("policy_loss_per_head", names),
                       ("grad_norm_per_head", names + ("value",))):
        if key in metrics:
            base = key[: -len("_per_head")]
            out.update({f"{base}_{name}": metrics[key][i] for i, name in enumerate(heads)})
    return out


# ------------------------------------------------------------------------------------------
# the update (BEHAVIOUR §11.5)
# ------------------------------------------------------------------------------------------


def _sanitize_invalid_steps(batch: Batch) -> Batch:
    """Zeros (and all-True masks) at invalid steps, so nothing stored there can reach a loss or gradient."""
    def clean(x, fill):
        v = batch.valid.reshape(batch.valid.shape + (1,) * (x.ndim - 2))
        return jnp.where(v, x, jnp.asarray(fill, x.dtype))

    return batch._replace(
        obs=clean(batch.obs, 0), actions=clean(batch.actions, 0), old_log_probs=clean(batch.old_log_probs, 0),
        old_values=clean(batch.old_values, 0), advantages=clean(batch.advantages, 0),
        returns=clean(batch.returns, 0), masks=dist.same_kind(batch.masks, [clean(m, True) for m in batch.masks]),
        starts=None if batch.starts is None else clean(batch.starts, False),
    )


def build_training_data(rollout: Rollout, learner: LearnerConfig) -> tuple[Batch, dict]:
    """Full-buffer Batch `[E, T]` with normalised advantages (GAE with the learner's γ and λ), and the pre-update
    statistics."""
    chex.assert_rank([rollout.obs, rollout.rewards], [3, 2])
    chex.assert_equal_shape([rollout.rewards, rollout.values, rollout.dones, rollout.truncated, rollout.bootstrap])
    valid = rollout.valid
    adv, ret = gae(rollout.rewards, rollout.values, rollout.dones, rollout.truncated, rollout.bootstrap,
                   learner.gamma, learner.gae_lambda, valid)
    batch = Batch(
        obs=rollout.obs, actions=rollout.actions, old_log_probs=rollout.log_probs, old_values=rollout.values,
        advantages=normalize_advantages(adv, valid), returns=ret, masks=rollout.masks,
        carry0=rollout.carry0, valid=valid, starts=rollout.starts,
    )
    batch = _sanitize_invalid_steps(batch)
    stats = {"explained_variance": explained_variance(ret, rollout.values, valid),
             "n_transitions": jnp.sum(valid).astype(jnp.int32)}
    return batch, stats


def env_permutations(key: jax.Array, env_valid: jax.Array, update_epochs: int) -> jax.Array:
    """One permutation per epoch `[U, E]`: valid envs first, in random order (key folded with u)."""
    chex.assert_rank(env_valid, 1)
    chex.assert_type(env_valid, bool)
    def perm(u):
        noise = jax.random.uniform(jax.random.fold_in(key, u), env_valid.shape)
        return jnp.argsort(jnp.where(env_valid, noise, 2.0))
    return jax.vmap(perm)(jnp.arange(1, update_epochs + 1))


def group_rows(perm: jax.Array, n_valid_envs: jax.Array, group: jax.Array, num_minibatches: int):
    """Rows of group `group` under array-split of the first n valid envs into min(M, n) groups.

    Returns (env indices `[G]`, row used `[G]`) with static G = ceil(E/M) ≥ every group's size.
    """
    chex.assert_rank([perm, n_valid_envs, group], [1, 0, 0])
    chex.assert_type(perm, int)
    n_envs = perm.shape[0]
    size_max = -(-n_envs // num_minibatches)
    m_eff = jnp.maximum(jnp.minimum(num_minibatches, n_valid_envs), 1)
    q, r = n_valid_envs // m_eff, n_valid_envs % m_eff
    size = jnp.where(group < m_eff, q + (group < r), 0)
    start = group * q + jnp.minimum(group, r)
    pos = start + jnp.arange(size_max)
    return perm[jnp.clip(pos, 0, n_envs - 1)], jnp.arange(size_max) < size


def gather_group(data: Batch, idx: jax.Array, rows_ok: jax.Array) -> Batch:
    """The rows `idx [G]` of every field; rows with `rows_ok` False count as invalid."""
    chex.assert_rank(idx, 1)
    chex.assert_equal_shape([idx, rows_ok])
    batch = jax.tree.map(lambda x: x[idx], data)
    return batch._replace(valid=batch.valid & rows_ok[:, None])


class _LoopState(NamedTuple):
    flat_params: jax.Array  # raveled params
    opt_state: Any
    stopped: jax.Array  # bool
    early_stop: jax.Array  # int32 [2]: (u, group) or (-1, -1)
    nonfinite: jax.Array  # bool
    n_steps: jax.Array  # int32
    sums: dict  # metric sums over executed steps
    check: dict  # metrics of the latest KL check


class _Static(NamedTuple):
    """What every minibatch step needs besides the data (shapes and config only)."""

    network: ActorCritic
    unravel: Any
    segments: np.ndarray
    tx: optax.GradientTransformation
    cfg: PPOConfig


def _minibatch_step(loop: _LoopState, batch: Batch, u, g, beta, static: _Static) -> _LoopState:
    """KL check, then (unless stopped or non-finite) one clipped Adam step on this group."""
    cfg = static.cfg

    def loss_fn(flat):
        return ppo_loss(static.unravel(flat), static.network, batch, beta, cfg)

    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(loop.flat_params)
    metrics = {**aux, **flat_grad_norms(grads, static.segments, static.network.head_spec.n)}
    kl = aux["approx_kl_head_max"] if cfg.kl_per_head else aux["approx_kl"]
    kl_stop = jnp.asarray(False) if cfg.kl_stop is None else kl > cfg.kl_stop
    updates, opt_state = static.tx.update(grads, loop.opt_state, loop.flat_params)
    new_params = loop.flat_params + updates
    # the step is taken only if everything it reads and writes is finite: a NaN or inf loss, gradient,
    # new parameter or optimizer moment (an overflowing step) keeps the previous ones
    finite = (jnp.isfinite(loss) & jnp.all(jnp.isfinite(grads)) & jnp.all(jnp.isfinite(new_params))
              & _all_finite(opt_state))
    take = ~kl_stop & finite
    return _LoopState(
        flat_params=jnp.where(take, new_params, loop.flat_params),
        opt_state=jax.tree.map(lambda new, old: jnp.where(take, new, old), opt_state, loop.opt_state),
        stopped=~take,
        early_stop=jnp.where(kl_stop, jnp.stack([u + 1, g]).astype(jnp.int32), loop.early_stop),
        nonfinite=~kl_stop & ~finite,
        n_steps=loop.n_steps + take.astype(jnp.int32),
        sums=jax.tree.map(lambda s, x: s + jnp.where(take, x, 0.0), loop.sums, metrics),
        check=metrics,
    )


def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _metric_template(static: _Static, flat_params, data: Batch, beta) -> dict:
    def metrics(flat):
        aux = ppo_loss(static.unravel(flat), static.network, data, beta, static.cfg)[1]
        return {**aux, **flat_grad_norms(flat, static.segments, static.network.head_spec.n)}

    return jax.tree.map(lambda s: jnp.zeros(s.shape, jnp.float32), jax.eval_shape(metrics, flat_params))


def _run_epochs(state: TrainState, data: Batch, key, beta, cfg: PPOConfig) -> tuple[Any, _LoopState]:
    """update_epochs × num_minibatches iterations of `_minibatch_step` as one lax.scan.

    Returns (the new params tree, the final loop state)."""
    flat_params, unravel = ravel_pytree(state.params)
    heads = state.network.head_spec
    static = _Static(state.network, unravel, param_segments(state.params, heads),
                     make_optimizer(cfg, flat_decay_mask(state.params, heads), update_lr(cfg, state.train_steps)),
                     cfg)
    n_groups = cfg.num_minibatches
    env_valid = jnp.any(data.valid, axis=1)
    n_valid_envs = jnp.sum(env_valid)
    perms = env_permutations(key, env_valid, cfg.update_epochs)
    zeros = _metric_template(static, flat_params, data, beta)
    init = _LoopState(flat_params, state.opt_state, jnp.asarray(False), jnp.full((2,), -1, jnp.int32),
                      jnp.asarray(False), jnp.zeros((), jnp.int32), zeros, zeros)

    def body(loop, k):
        u, g = k // n_groups, k % n_groups
        idx, rows_ok = group_rows(perms[u], n_valid_envs, g, n_groups)
        active = ~loop.stopped & jnp.any(rows_ok)
        step = lambda lp: _minibatch_step(lp, gather_group(data, idx, rows_ok), u, g, beta, static)  # noqa: E731
        return jax.lax.cond(active, step, lambda lp: lp, loop), None

    loop, _ = jax.lax.scan(body, init, jnp.arange(cfg.update_epochs * n_groups))
    return unravel(loop.flat_params), loop


def _finish_metrics(loop: _LoopState, stats: dict, beta, skipped, names: tuple[str, ...] = ACTION_HEADS) -> dict:
    n = jnp.maximum(loop.n_steps, 1).astype(jnp.float32)
    averaged = jax.tree.map(lambda s, c: jnp.where(loop.n_steps > 0, s / n, c), loop.sums, loop.check)
    return {
        **named_metrics(averaged, names), **stats,
        "entropy_coef": beta,
        "early_stop": loop.early_stop,
        "early_stopped": loop.early_stop[0] >= 0,
        "nonfinite_skipped": loop.nonfinite,
        "n_steps_taken": loop.n_steps,
        "skipped": skipped,
    }


def after_update(params, network: ActorCritic, data: Batch, beta, cfg: PPOConfig) -> dict:
    """The updated policy against the rollout's: approx_kl (KL3 of old‖new over the whole batch) and the
    causally masked normalised entropy, overall and per head, measured after the last gradient step."""
    aux = ppo_loss(params, network, data, beta, cfg)[1]
    per_head = {f"entropy_after_{h}": aux["entropy_per_head"][i] for i, h in enumerate(network.head_spec.names)}
    return {"approx_kl_after": aux["approx_kl"], "entropy_after": aux["entropy"], **per_head}


@partial(jax.jit, static_argnames=("cfg", "n_envs", "learner"))
def update(state: TrainState, rollout: Rollout, key: jax.Array, cfg: PPOConfig, n_envs: int,
           learner: LearnerConfig = LearnerConfig()) -> tuple[TrainState, dict]:
    """One PPO update over the whole rollout (BEHAVIOUR §11.5), its advantages and returns by the `learner`'s γ
    and λ. Returns (new state, metrics of jnp values).

    Metrics, averaged over the executed gradient steps (or from the last KL check if none ran):
    loss, policy_loss, value_loss, entropy (mean over heads of the causally masked mean normalised
    entropy), entropy_{head}, policy_loss_{head}, approx_kl, clip_fraction and ratio_mean/max/min
    (op head), grad_norm and grad_norm_{slot,blueprint,blend,op,tempo,value} (before clipping). Also
    explained_variance, n_transitions, entropy_coef (β), early_stop (int32 [2]: (u, group), or (−1, −1)),
    early_stopped, nonfinite_skipped, n_steps_taken and skipped (no valid transition: nothing changed).
    And, measured after the update over the whole batch (`after_update`, unless cfg.update_diagnostics is
    off): approx_kl_after, entropy_after and entropy_after_{head}; with a learning-rate schedule, the
    update's rate `lr`.
    `esper_fx.outputs.history.metrics_to_python` turns them into Python values.
    """
    chex.assert_rank([state.train_steps, rollout.obs, rollout.step_count], [0, 3, 1])
    data, stats = build_training_data(rollout, learner)
    skipped = stats["n_transitions"] == 0
    beta = entropy_coefficient(cfg, n_envs, state.train_steps)
    params, loop = _run_epochs(state, data, key, beta, cfg)
    new_state = state.replace(
        params=params, opt_state=loop.opt_state,
        train_steps=state.train_steps + jnp.where(skipped, 0, 1).astype(jnp.int32),
    )
    metrics = _finish_metrics(loop, stats, beta, skipped, state.network.head_spec.names)
    if cfg.lr_anneal != "constant":
        metrics["lr"] = jnp.asarray(update_lr(cfg, state.train_steps), jnp.float32)
    if not cfg.update_diagnostics:
        return new_state, metrics
    return new_state, {**metrics, **after_update(params, state.network, data, beta, cfg)}
