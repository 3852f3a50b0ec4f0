"""Rewards of BEHAVIOUR §12 as pure JAX functions over the signals pytree, vectorised over envs.

Every reward function has the same signature

    reward_fn(signals, actions, reward_state, config) -> (reward [E], components, new_reward_state)

- `signals`: the host -> controller dict of arrays (`esper_fx.contracts.signals.SIGNAL_FIELDS`).
- `actions`: int32 [E, 5] in head order (slot, blueprint, blend, op, tempo). The *target* is the sampled
  slot for every op, WAIT included (BEHAVIOUR §12.2).
- `reward_state`: `RewardState` (phi_prev [E, S], the PBRS memory of BEHAVIOUR §12.4).
- `config`: `RewardConfig`, an immutable pytree of every constant (it may be traced or static).

`components` maps every term to an [E] float32 array; the terms sum, in the listed order, to the
reward. Every family includes the loop-level terms of BEHAVIOUR §12.8 (`governor`: −10 on a panicking step;
`auto_cull`: `auto_cull_penalty` for each of the previous step's auto-culls).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import chex
import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import HEAD_OP, HEAD_SLOT, LifecycleOp
from esper_fx.contracts.stages import SeedStage
from rl.signals import assert_signals
from rl.config import STAGE_POTENTIALS, RewardConfig, reward_fn_name

Signals = Mapping[str, jax.Array]
RewardFn = Callable[..., tuple[jax.Array, dict[str, jax.Array], "RewardState"]]

_OP_WAIT = int(LifecycleOp.WAIT)
_OP_GERMINATE = int(LifecycleOp.GERMINATE)
_OP_CULL = int(LifecycleOp.CULL)
_OP_FOSSILIZE = int(LifecycleOp.FOSSILIZE)
_GERMINATED = int(SeedStage.GERMINATED)
_BLENDING = int(SeedStage.BLENDING)
_PROBATIONARY = int(SeedStage.PROBATIONARY)
_FOSSILIZED = int(SeedStage.FOSSILIZED)

def _flatten(config: RewardConfig):
    children = tuple(getattr(config, name) for name in _REWARD_LEAVES)
    return children, (config.reward_family, config.reward_mode)


def _unflatten(static, children) -> RewardConfig:
    """Rebuilt without validation: under jit the leaves are tracers."""
    config = object.__new__(RewardConfig)
    for name, value in zip(("reward_family", "reward_mode") + _REWARD_LEAVES, tuple(static) + tuple(children)):
        object.__setattr__(config, name, value)
    return config


# RewardConfig (rl.config, no jax) as a pytree: the family and the mode static, every number a leaf.
_REWARD_LEAVES = tuple(f.name for f in dataclasses.fields(RewardConfig) if f.name not in ("reward_family", "reward_mode"))
jax.tree_util.register_pytree_node(RewardConfig, _flatten, _unflatten)


class RewardState(NamedTuple):
    """Per-env reward memory. phi_prev[e, s]: the PBRS potential last paid for slot s (0 when empty; the
    shaped reward). acc_prev[e]: the accuracy paid so far (the growth reward)."""

    phi_prev: jax.Array  # [E, S] float32
    acc_prev: jax.Array | None = None  # [E] float32: the validation accuracy paid so far (growth)

    @staticmethod
    def init(n_envs: int, n_slots: int) -> "RewardState":
        return RewardState(phi_prev=jnp.zeros((n_envs, n_slots), jnp.float32),
                           acc_prev=jnp.zeros((n_envs,), jnp.float32))


# ------------------------------------------------------------------------------------------
# The target slot, gathered from the per-slot signals
# ------------------------------------------------------------------------------------------


class Target(NamedTuple):
    """The sampled slot's seed at reward time (post-rollback, pre-action), every field [E]."""

    slot: jax.Array  # int32
    seed: jax.Array  # bool: the target holds a seed
    stage: jax.Array  # int32
    previous_stage: jax.Array  # int32
    eis: jax.Array  # float32
    age: jax.Array  # float32
    improvement: jax.Array  # I = total_improvement, float32 (0 without a seed)
    c: jax.Array  # contribution, float32 (0 when invalid)
    c_valid: jax.Array  # bool
    progress_known: jax.Array  # bool: acc_at_germination is known
    acc_at_germination: jax.Array  # float32


def _at(values: jax.Array, slot: jax.Array) -> jax.Array:
    return jnp.take_along_axis(jnp.asarray(values), slot[:, None], axis=1, mode="clip")[:, 0]


def target_view(signals: Signals, actions: jax.Array) -> Target:
    """The sampled slot's seed, gathered from the per-slot signals."""
    assert_signals(signals, actions)
    slot = jnp.asarray(actions)[:, HEAD_SLOT].astype(jnp.int32)
    seed = _at(signals["slot_occupied"], slot).astype(bool)
    f32 = lambda name: _at(signals[name], slot).astype(jnp.float32)  # noqa: E731
    return Target(
        slot=slot,
        seed=seed,
        stage=jnp.where(seed, _at(signals["slot_stage"], slot), 0).astype(jnp.int32),
        previous_stage=jnp.where(seed, _at(signals["slot_previous_stage"], slot), 0).astype(jnp.int32),
        eis=f32("slot_eis"),
        age=f32("slot_age"),
        improvement=jnp.where(seed, f32("slot_total_improvement"), 0.0),
        c=jnp.where(seed, f32("slot_contribution"), 0.0),
        c_valid=seed & _at(signals["slot_contribution_valid"], slot).astype(bool),
        progress_known=seed & _at(signals["slot_acc_at_germination_valid"], slot).astype(bool),
        acc_at_germination=f32("slot_acc_at_germination"),
    )


def _op(actions: jax.Array) -> jax.Array:
    return jnp.asarray(actions)[:, HEAD_OP].astype(jnp.int32)


def _f32(signals: Signals, name: str) -> jax.Array:
    return jnp.asarray(signals[name]).astype(jnp.float32)


def _check_target(t: Target, *per_env: jax.Array) -> None:
    """Every field of the target and every other per-env input `[E]`."""
    chex.assert_rank(t.slot, 1)
    chex.assert_equal_shape([*t, *per_env])


def _is_terminal(signals: Signals) -> jax.Array:
    return jnp.asarray(signals["epoch"]) == jnp.asarray(signals["max_epochs"])


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.3 shaped contribution reward, term by term
# ------------------------------------------------------------------------------------------


def _ratio_penalty(t: Target, discount: jax.Array, cfg: RewardConfig) -> jax.Array:
    """ρ: the anti-hacking penalty when the contribution dwarfs the seed's own improvement."""
    c, i = t.c, t.improvement
    applies = t.c_valid & (c > cfg.ratio_penalty_min_contribution) & (discount >= 0.5)
    improving = i > cfg.improvement_safe_threshold
    q = c / jnp.where(improving, i, 1.0)
    hacking = improving & (q > cfg.hacking_ratio_threshold)
    excess = (q - cfg.hacking_ratio_threshold) / cfg.hacking_ratio_threshold
    rho_ratio = jnp.where(hacking, -jnp.minimum(cfg.ratio_penalty_max, cfg.ratio_penalty_slope * excess), 0.0)
    rho_flat = -cfg.ratio_penalty_max * jnp.minimum(1.0, c / cfg.ratio_penalty_contribution_scale)
    return jnp.where(applies, jnp.where(improving, rho_ratio, rho_flat), 0.0)


def _measured_attribution(t: Target, val_acc: jax.Array, cfg: RewardConfig) -> jax.Array:
    """B for a non-fossil seed with a measured contribution c."""
    c = t.c
    discount = jnp.where(t.seed & (t.improvement < 0),
                         jax.nn.sigmoid(cfg.attribution_sigmoid_steepness * t.improvement), 1.0)
    progress = val_acc - t.acc_at_germination
    geometric = jnp.sqrt(jnp.maximum(progress * c, 0.0))
    a_known = jnp.where(progress <= 0, 0.0, jnp.where(c >= progress, geometric, c))
    a = jnp.where(t.progress_known, a_known, cfg.unknown_progress_factor * c)
    a = a * discount + _ratio_penalty(t, discount, cfg) / cfg.contribution_weight
    return jnp.where(c < 0, cfg.contribution_weight * c, cfg.contribution_weight * a)


def attribution(t: Target, op: jax.Array, signals: Signals, cfg: RewardConfig) -> jax.Array:
    """(1) Bounded attribution B, sign-inverted for CULL."""
    _check_target(t, op)
    fossil = t.seed & (t.stage == _FOSSILIZED)
    live = t.seed & ~fossil
    acc_delta = _f32(signals, "acc_delta")
    proxy = jnp.where(acc_delta > 0, cfg.proxy_weight * acc_delta, 0.0)
    measured = _measured_attribution(t, _f32(signals, "val_acc"), cfg)
    b = jnp.where(live, jnp.where(t.c_valid, measured, proxy), 0.0)
    b = jnp.where((op == _OP_FOSSILIZE) & t.seed & (t.improvement < 0), 0.0, b)
    return jnp.where(op == _OP_CULL, -b, b)


def blending_warning(t: Target, cfg: RewardConfig) -> jax.Array:
    """(2) A BLENDING seed that made the host worse."""
    _check_target(t)
    warn = cfg.blending_warning_base - jnp.minimum(cfg.blending_warning_per_epoch * t.eis,
                                                    cfg.blending_warning_max)
    return jnp.where(t.seed & (t.stage == _BLENDING) & (t.improvement < 0), warn, 0.0)


def probation_indecision(t: Target, op: jax.Array, b: jax.Array, cfg: RewardConfig) -> jax.Array:
    """(3) WAITing on a valuable PROBATIONARY seed: −1, −3, −9, then −10."""
    _check_target(t, op, b)
    exponent = jnp.minimum(t.eis - cfg.probation_grace_epochs, 32.0)
    penalty = jnp.maximum(-jnp.power(cfg.probation_base, exponent), -cfg.probation_max_penalty)
    applies = (t.seed & (t.stage == _PROBATIONARY) & (op == _OP_WAIT)
               & (t.eis >= cfg.probation_grace_epochs) & (b > 0))
    return jnp.where(applies, penalty, 0.0)


def stage_potential(stage: jax.Array, cfg: RewardConfig) -> jax.Array:
    """Φ_stage of BEHAVIOUR §12.4 (0 for every stage outside the table)."""
    chex.assert_type(stage, int)
    table = jnp.asarray(cfg.stage_potentials, jnp.float32)
    idx = jnp.asarray(stage, jnp.int32)
    in_range = (idx >= 0) & (idx < table.shape[0])
    return jnp.where(in_range, table[jnp.clip(idx, 0, table.shape[0] - 1)], 0.0)


def potential(stage: jax.Array, eis: jax.Array, cfg: RewardConfig) -> jax.Array:
    """φ(stage, eis) = Φ_stage + min(0.3·eis, 2.0)."""
    chex.assert_is_broadcastable(jnp.shape(eis), jnp.shape(stage))
    bonus = jnp.minimum(cfg.eis_potential_scale * jnp.asarray(eis, jnp.float32), cfg.eis_potential_max)
    return stage_potential(stage, cfg) + bonus


def pbrs(t: Target, phi_prev: jax.Array, cfg: RewardConfig) -> tuple[jax.Array, jax.Array]:
    """(4) Telescoping stage shaping [fix]: (payment [E], φ_now [E])."""
    _check_target(t)
    chex.assert_rank(phi_prev, 2)
    phi_now = potential(t.stage, t.eis, cfg)
    last = _at(phi_prev, t.slot)
    payment = cfg.pbrs_weight * (cfg.gamma * phi_now - last)
    return jnp.where(t.seed, payment, 0.0), phi_now


def rent(total_params: jax.Array, host_params: jax.Array, weight: Any, cap: Any) -> jax.Array:
    """−min(weight·ln(1 + total/host), cap) when both counts are positive, else 0."""
    chex.assert_equal_shape([total_params, host_params])
    applies = (host_params > 0) & (total_params > 0)
    ratio = total_params / jnp.where(applies, host_params, 1.0)
    return jnp.where(applies, -jnp.minimum(weight * jnp.log1p(jnp.maximum(ratio, 0.0)), cap), 0.0)


def fossilize_shaping(t: Target, cfg: RewardConfig) -> jax.Array:
    """BEHAVIOUR §12.5 fossilize shaping, before the op cost (first matching rule)."""
    _check_target(t)
    i, c = t.improvement, t.c
    ransomware = t.c_valid & (c > cfg.fossilize_ransomware_contribution) & (i < cfg.fossilize_ransomware_improvement)
    regression = (cfg.fossilize_regression_base
                  - jnp.minimum(cfg.fossilize_regression_scale * jnp.abs(i), cfg.fossilize_regression_max)
                  + jnp.where(ransomware, cfg.fossilize_ransomware_penalty, 0.0))
    legitimacy = jnp.minimum(1.0, t.eis / cfg.legitimacy_epochs)
    earned = (cfg.fossilize_base_bonus + cfg.fossilize_contribution_scale * c) * legitimacy
    contributing = t.c_valid & (c >= cfg.min_fossilize_contribution)
    value = jnp.where(i < 0, regression, jnp.where(contributing, earned, cfg.fossilize_noncontributing_penalty))
    valid_target = t.seed & (t.stage == _PROBATIONARY)
    return jnp.where(valid_target, value, cfg.invalid_fossilize_penalty)


def cull_shaping(t: Target, cfg: RewardConfig) -> jax.Array:
    """BEHAVIOUR §12.5 cull shaping, before the op cost (first matching rule). A seed younger than the run's
    `min_cull_age` pays −0.3·(min_cull_age − age) (with the reference's age of 1: −0.3 at age 0)."""
    _check_target(t)
    c = t.c
    good_seed = jnp.maximum(cfg.cull_good_seed_penalty - cfg.cull_good_seed_scale * c, cfg.cull_max_penalty)
    by_c = jnp.where(c < cfg.cull_hurting_threshold, cfg.cull_hurting_bonus,
                     jnp.where(c < 0, cfg.cull_acceptable_bonus, good_seed))
    by_c = jnp.where(t.c_valid, by_c, 0.0)
    young = cfg.cull_young_penalty * (cfg.min_cull_age - t.age)
    value = jnp.where(t.age < cfg.min_cull_age, young, by_c)
    value = jnp.where(t.stage == _FOSSILIZED, cfg.cull_fossilized_penalty, value)
    return jnp.where(t.seed, value, cfg.cull_empty_penalty)


def germination_bonus(cfg: RewardConfig) -> jax.Array:
    """+0.3·γ·Φ(GERMINATED): the PBRS step empty -> germinated, paid in action shaping."""
    chex.assert_rank(jnp.asarray(cfg.pbrs_weight), 0)
    return cfg.pbrs_weight * cfg.gamma * stage_potential(jnp.int32(_GERMINATED), cfg)


def action_shaping(t: Target, op: jax.Array, cfg: RewardConfig) -> jax.Array:
    """(6) Per-op shaping including the op cost (WAIT: 0)."""
    _check_target(t, op)
    germinate = jnp.where(t.seed, cfg.germinate_with_seed_penalty, germination_bonus(cfg)) + cfg.germinate_cost
    fossilize = fossilize_shaping(t, cfg) + cfg.fossilize_cost
    cull = cull_shaping(t, cfg) + cfg.cull_cost
    return jnp.select([op == _OP_GERMINATE, op == _OP_FOSSILIZE, op == _OP_CULL],
                      [germinate, fossilize, cull], 0.0)


def contribution_terminal(signals: Signals, cfg: RewardConfig) -> jax.Array:
    """(7) At t == T: 0.05·val_acc + 3.0·num_contributing_fossilized."""
    assert_signals(signals)
    bonus = (cfg.terminal_acc_weight * _f32(signals, "val_acc")
             + cfg.fossilize_terminal_scale * _f32(signals, "num_contributing_fossilized"))
    return jnp.where(_is_terminal(signals), bonus, 0.0)


def loop_terms(signals: Signals, cfg: RewardConfig) -> dict[str, jax.Array]:
    """BEHAVIOUR §12.8: −10 on a panicking step, plus the penalty of the previous step's auto-culls."""
    assert_signals(signals)
    panic = jnp.asarray(signals["panic"]).astype(bool)
    return {
        "governor": jnp.where(panic, cfg.governor_punishment, 0.0).astype(jnp.float32),
        "auto_cull": auto_cull_penalty(signals, cfg),
    }


def auto_cull_penalty(signals: Signals, cfg: RewardConfig) -> jax.Array:
    """BEHAVIOUR §12.8: `auto_cull_penalty` for each seed the last lifecycle step auto-culled (`auto_culls`)."""
    culls = _f32(signals, "auto_culls")
    return jnp.where(culls > 0, cfg.auto_cull_penalty * culls, 0.0)


def next_phi_prev(signals: Signals, t: Target, op: jax.Array, phi_prev: jax.Array, phi_now: jax.Array,
                  cfg: RewardConfig) -> jax.Array:
    """The PBRS memory after this step (BEHAVIOUR §12.4, §7.4).

    Every empty slot has phi_prev 0. A target holding a seed stores φ_now, unless the op culls it
    (a CULL of a non-fossil always succeeds and empties the slot: 0). GERMINATE into an empty target
    stores Φ(GERMINATED) = 1.0, the potential its entry bonus paid for.
    """
    _check_target(t, op, phi_now)
    chex.assert_equal_shape([phi_prev, signals["slot_occupied"]])
    occupied = jnp.asarray(signals["slot_occupied"]).astype(bool)
    phi = jnp.where(occupied, phi_prev, 0.0).astype(jnp.float32)
    culled = (op == _OP_CULL) & (t.stage != _FOSSILIZED)
    seeded = jnp.where(culled, 0.0, phi_now)
    germinated = jnp.where(op == _OP_GERMINATE, stage_potential(jnp.int32(_GERMINATED), cfg), 0.0)
    value = jnp.where(t.seed, seeded, germinated).astype(jnp.float32)
    rows = jnp.arange(phi.shape[0])
    return phi.at[rows, jnp.clip(t.slot, 0, phi.shape[1] - 1)].set(value)


def _check_inputs(signals: Signals, actions: jax.Array, reward_state: RewardState) -> None:
    """A reward function's inputs: the signals, actions int `[E, 5]`, the PBRS memory `[E, S]`."""
    chex.assert_shape(reward_state.phi_prev, assert_signals(signals, actions))


def _total(components: dict[str, jax.Array]) -> jax.Array:
    total = jnp.zeros_like(next(iter(components.values())), dtype=jnp.float32)
    for value in components.values():
        total = total + value
    return total


def _finish(components: dict[str, jax.Array], state: RewardState):
    components = {k: jnp.asarray(v, jnp.float32) for k, v in components.items()}
    return _total(components), components, state


def shaped(signals: Signals, actions: jax.Array, reward_state: RewardState, config: RewardConfig):
    """The SHAPED contribution reward (BEHAVIOUR §12.3) with telescoping PBRS and the loop-level terms."""
    _check_inputs(signals, actions, reward_state)
    t, op = target_view(signals, actions), _op(actions)
    b = attribution(t, op, signals, config)
    pbrs_paid, phi_now = pbrs(t, reward_state.phi_prev, config)
    components = {
        "attribution": b,
        "blending_warning": blending_warning(t, config),
        "probation": probation_indecision(t, op, b, config),
        "pbrs": pbrs_paid,
        "rent": rent(_f32(signals, "seed_params"), _f32(signals, "host_params"),
                     config.rent_weight, config.max_rent),
        "action_shaping": action_shaping(t, op, config),
        "terminal": contribution_terminal(signals, config),
        **loop_terms(signals, config),
    }
    new_state = reward_state._replace(phi_prev=next_phi_prev(signals, t, op, reward_state.phi_prev, phi_now, config))
    return _finish(components, new_state)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.6 SPARSE and MINIMAL
# ------------------------------------------------------------------------------------------


def sparse_terminal(signals: Signals, cfg: RewardConfig) -> jax.Array:
    """scale·clip(host_max_acc/100 − w·total_params/budget, −1, 1) at t == T, else 0."""
    assert_signals(signals)
    score = (_f32(signals, "host_max_acc") / 100.0
             - cfg.param_penalty_weight * (_f32(signals, "seed_params") / cfg.param_budget))
    value = cfg.sparse_reward_scale * jnp.clip(score, -1.0, 1.0)
    return jnp.where(_is_terminal(signals), value, 0.0)


def sparse(signals: Signals, actions: jax.Array, reward_state: RewardState, config: RewardConfig):
    """SPARSE (BEHAVIOUR §12.6): the terminal score only, plus the loop-level terms. phi_prev is untouched."""
    _check_inputs(signals, actions, reward_state)
    components = {"sparse": sparse_terminal(signals, config), **loop_terms(signals, config)}
    return _finish(components, reward_state)


def minimal(signals: Signals, actions: jax.Array, reward_state: RewardState, config: RewardConfig):
    """MINIMAL (BEHAVIOUR §12.6): SPARSE plus −0.1 for culling a seed younger than 5 epochs."""
    _check_inputs(signals, actions, reward_state)
    t, op = target_view(signals, actions), _op(actions)
    early = (op == _OP_CULL) & t.seed & (t.age < config.early_cull_age)
    components = {
        "sparse": sparse_terminal(signals, config),
        "early_cull": jnp.where(early, config.early_cull_penalty, 0.0),
        **loop_terms(signals, config),
    }
    return _finish(components, reward_state)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.7 LOSS family
# ------------------------------------------------------------------------------------------


def loss_progress(signals: Signals, cfg: RewardConfig) -> jax.Array:
    """[fix] +5·x for x = clip(loss_delta/std, −5, 5), halved when x < 0; 0 when not finite."""
    assert_signals(signals)
    delta = _f32(signals, "loss_delta")
    finite = jnp.isfinite(delta)
    x = jnp.clip(jnp.where(finite, delta, 0.0) / cfg.typical_loss_delta_std,
                 -cfg.max_loss_delta, cfg.max_loss_delta)
    x = jnp.where(x < 0, cfg.regression_penalty_scale * x, x)
    return jnp.where(finite, cfg.loss_delta_weight * x, 0.0)


def loss_terminal(signals: Signals, cfg: RewardConfig) -> jax.Array:
    """At t == T: clip((baseline − val_loss)/(baseline − target), 0, 1)·weight (0 if val_loss is not finite)."""
    assert_signals(signals)
    val_loss = _f32(signals, "val_loss")
    score = jnp.clip((cfg.baseline_loss - val_loss) / (cfg.baseline_loss - cfg.target_loss), 0.0, 1.0)
    applies = _is_terminal(signals) & jnp.isfinite(val_loss)
    return jnp.where(applies, cfg.terminal_loss_weight * score, 0.0)


def loss(signals: Signals, actions: jax.Array, reward_state: RewardState, config: RewardConfig):
    """The LOSS family (BEHAVIOUR §12.7): progress, rent after a grace period, stage term, terminal."""
    _check_inputs(signals, actions, reward_state)
    t = target_view(signals, actions)
    in_grace = t.seed & (t.age < config.grace_epochs)
    compute_rent = rent(_f32(signals, "seed_params"), _f32(signals, "host_params"),
                        config.compute_rent_weight, config.max_rent_penalty)
    stage_term = config.stage_potential_weight * (
        config.gamma * stage_potential(t.stage, config) - stage_potential(t.previous_stage, config))
    components = {
        "loss_progress": loss_progress(signals, config),
        "rent": jnp.where(in_grace, 0.0, compute_rent),
        "stage": jnp.where(t.seed, stage_term, 0.0),
        "terminal": loss_terminal(signals, config),
        **loop_terms(signals, config),
    }
    return _finish(components, reward_state)


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §12.1 dispatch
# ------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------
# The growth reward (LEARNING.md): committed accuracy
# ------------------------------------------------------------------------------------------


def at_risk(signals: Signals, actions: jax.Array, cfg: RewardConfig) -> jax.Array:
    """Σ over the seeds still live after this step's action (not fossilized, not culled, not fossilized by
    the action) of max(c, 0): the accuracy the env would lose if they were removed now, `[E]`."""
    stage = jnp.asarray(signals["slot_stage"])
    c = _f32(signals, "slot_contribution")
    live = jnp.asarray(signals["slot_occupied"]).astype(bool) & (stage != _FOSSILIZED)
    measured = live & jnp.asarray(signals["slot_contribution_valid"]).astype(bool)
    target = jnp.arange(stage.shape[1])[None, :] == jnp.asarray(actions)[:, HEAD_SLOT, None]
    op = _op(actions)[:, None]
    fossilizing = target & (op == _OP_FOSSILIZE) & (stage == _PROBATIONARY) & (c >= cfg.min_fossilize_contribution)
    culling = target & (op == _OP_CULL)
    held = measured & ~fossilizing & ~culling
    return jnp.sum(jnp.where(held, jnp.maximum(c, 0.0), 0.0), axis=1)


def committed_accuracy(signals: Signals, actions: jax.Array, cfg: RewardConfig) -> jax.Array:
    """A = val_acc − w_commit·at_risk, `[E]` pp: the accuracy the env keeps if its live seeds go."""
    return _f32(signals, "val_acc") - cfg.growth_commit_weight * at_risk(signals, actions, cfg)


def growth(signals: Signals, actions: jax.Array, reward_state: RewardState, config: RewardConfig):
    """GROWTH: r_t = w·(acc_t − acc_{t−1}), and at t = T also −w·w_commit·at_risk_T; plus rent, the rollback
    penalty and the auto-cull penalty of the previous step.

    acc_0 = 0, so the accuracy terms telescope to w·acc_T and the episode's return is w·A_T (the committed
    accuracy at the end, `committed_accuracy`) + Σ rent + penalties: the accuracy the grown network keeps,
    with a seed counted only once it is fossilized (w_commit = 1; a FOSSILIZE on the last step counts).
    Nothing is paid for churn: a germinate → cull cycle moves the return only through what the seed did to
    val_acc. The accuracy is paid as it rises, so keeping a seed that helps is rewarded at once, and leaving
    it unfossilized is charged at the end. Rent: −w_rent·ln(1 + seed_params/host_params) per step, and a
    FLOP rent −w_flop·φ per step, φ = `seed_flop_share` (the live seeds' FLOPs per training step over the
    host's), so a seed pays w_flop per epoch for each host's worth of compute it adds (w_flop = 0: none).
    """
    chex.assert_rank(actions, 2)
    acc = _f32(signals, "val_acc")
    previous = reward_state.acc_prev
    previous = jnp.zeros_like(acc) if previous is None else previous  # a state built for PBRS only
    risk = config.growth_commit_weight * at_risk(signals, actions, config)
    panic = jnp.asarray(signals["panic"]).astype(bool)
    components = {
        "accuracy": config.growth_accuracy_weight * (acc - previous),
        "uncommitted": jnp.where(_is_terminal(signals), -config.growth_accuracy_weight * risk, 0.0),
        "rent": rent(_f32(signals, "seed_params"), _f32(signals, "host_params"), config.growth_rent_weight,
                     jnp.inf),
        "flop_rent": -config.flop_rent_weight * _f32(signals, "seed_flop_share"),
        "governor": jnp.where(panic, config.growth_rollback_penalty, 0.0),
        "auto_cull": auto_cull_penalty(signals, config),
    }
    return _finish(components, reward_state._replace(acc_prev=acc))


REWARD_FNS: Mapping[str, RewardFn] = {"shaped": shaped, "sparse": sparse, "minimal": minimal, "loss": loss,
                                      "growth": growth}


def get_reward_fn(name: str) -> RewardFn:
    """The reward function called `name` (shaped, sparse, minimal or loss)."""
    key = str(getattr(name, "value", name)).lower()
    if key not in REWARD_FNS:
        raise ValueError(f"unknown reward function {name!r}; available: {list(REWARD_FNS)}")
    return REWARD_FNS[key]


def dispatch(config_or_family: Any, mode: str | None = None) -> RewardFn:
    """BEHAVIOUR §12.1 (`rl.config.reward_fn_name`): the reward function of a family and a mode.

    Accepts a TrainingConfig (its reward), a `RewardConfig`, or a family name plus a mode.
    """
    settings = getattr(config_or_family, "reward", config_or_family)
    if isinstance(settings, RewardConfig):
        return REWARD_FNS[settings.reward_fn_name]
    return REWARD_FNS[reward_fn_name(config_or_family, "shaped" if mode is None else mode)]


__all__ = [
    "REWARD_FNS", "RewardConfig", "RewardState", "STAGE_POTENTIALS",
    "Target", "action_shaping", "attribution", "cull_shaping", "dispatch", "fossilize_shaping",
    "at_risk", "committed_accuracy", "get_reward_fn", "growth", "loss", "minimal", "potential", "rent",
    "shaped", "sparse", "stage_potential", "target_view",
]
