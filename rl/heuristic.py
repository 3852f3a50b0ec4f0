"""The rule-based controller of BEHAVIOUR §13 in jnp, vectorised over envs.

`decide(state, signals, params) -> (actions [E, 5] int32, new_state)` reads the signals pytree
(`esper_fx.contracts.signals.SIGNAL_FIELDS`) and keeps one decision state per env. `params` is static
(hashable): build it with `HeuristicParams.from_config` or `HeuristicParams.from_training_config` from
the settings of `rl.config.HeuristicConfig`, and jit with `jax.jit(decide, static_argnums=2)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp

from esper_fx.contracts.actions import BLEND_NAMES, DEFAULT_TEMPO, TEMPO_NAMES, LifecycleOp
from esper_fx.contracts.stages import SeedStage
from esper_fx.contracts.tasks import task_facts
from rl.config import HeuristicConfig, check_rotation
from rl.signals import assert_signals

Signals = Mapping[str, jax.Array]

# BEHAVIOUR §13.1: penalty entries below this value are deleted (reset to 0) after a decay.
PENALTY_DELETE_BELOW = 0.1
# Initial decision state (BEHAVIOUR §13.1): no cull seen yet, no decay yet.
INITIAL_LAST_CULL_EPOCH = -100
INITIAL_LAST_DECAY_EPOCH = -1
# Blueprint head value emitted when the op does not use it (BEHAVIOUR §13.2).
UNUSED_BLUEPRINT = 1
# The settings counted in epochs, written for the reference's episodes: a run's lifecycle scales them.
EPOCH_WAITS = ("min_epochs_before_germinate", "cull_after_epochs_without_improvement", "embargo_epochs_after_cull")

_WAIT = int(LifecycleOp.WAIT)
_GERMINATE = int(LifecycleOp.GERMINATE)
_CULL = int(LifecycleOp.CULL)
_FOSSILIZE = int(LifecycleOp.FOSSILIZE)
_GERMINATED = int(SeedStage.GERMINATED)
_TRAINING = int(SeedStage.TRAINING)
_BLENDING = int(SeedStage.BLENDING)
_PROBATIONARY = int(SeedStage.PROBATIONARY)
_FOSSILIZED = int(SeedStage.FOSSILIZED)


class HeuristicParams(NamedTuple):
    """Static heuristic settings: the `HeuristicConfig` (its thresholds, read as `params.rules.<name>`)
    resolved against the blueprint menu."""

    rules: HeuristicConfig  # the thresholds, as configured (frozen, hashable)
    rotation: tuple[int, ...]  # blueprint-menu indices, in rotation order
    blend_index: int  # index of rules.blend in ("linear", "sigmoid", "gated")
    num_blueprints: int  # B = len(menu)
    tempo_index: int = DEFAULT_TEMPO  # index of rules.tempo in ("fast", "standard", "slow")

    @classmethod
    def from_config(cls, heuristic: HeuristicConfig, menu: Sequence[str]) -> "HeuristicParams":
        """Resolve a `HeuristicConfig` against a blueprint menu; the rotation must lie in the menu."""
        menu = tuple(menu)
        rotation = heuristic.rotation(menu)
        check_rotation(rotation, menu)
        return cls(rules=heuristic, rotation=tuple(menu.index(name) for name in rotation),
                   blend_index=BLEND_NAMES.index(heuristic.blend), num_blueprints=len(menu),
                   tempo_index=TEMPO_NAMES.index(heuristic.tempo))

    @classmethod
    def from_training_config(cls, config: Any) -> "HeuristicParams":
        """The run's heuristic: its settings, with their epoch waits in the run's lifecycle (BEHAVIOUR §2.14:
        unchanged under the reference's clock, scaled to the episode under the proportional one)."""
        timings = config.lifecycle_timings
        horizon = task_facts(config.task).lifecycle_horizon
        waits = {name: timings.scale_epochs(getattr(config.heuristic, name), horizon) for name in EPOCH_WAITS}
        return cls.from_config(dataclasses.replace(config.heuristic, **waits), config.menu)


class HeuristicState(NamedTuple):
    """One decision state per env (BEHAVIOUR §13.1), reset at every episode start."""

    penalties: jax.Array  # [E, B] float32, indexed by blueprint-menu entry; 0 = no penalty
    rotation_index: jax.Array  # [E] int32
    germination_count: jax.Array  # [E] int32
    last_cull_epoch: jax.Array  # [E] int32
    last_decay_epoch: jax.Array  # [E] int32


def init_state(n_envs: int, num_blueprints: int) -> HeuristicState:
    return HeuristicState(
        penalties=jnp.zeros((n_envs, num_blueprints), jnp.float32),
        rotation_index=jnp.zeros((n_envs,), jnp.int32),
        germination_count=jnp.zeros((n_envs,), jnp.int32),
        last_cull_epoch=jnp.full((n_envs,), INITIAL_LAST_CULL_EPOCH, jnp.int32),
        last_decay_epoch=jnp.full((n_envs,), INITIAL_LAST_DECAY_EPOCH, jnp.int32),
    )


class Decision(NamedTuple):
    """One decision per env, every field [E] int32 (blueprint meaningful only for GERMINATE)."""

    op: jax.Array
    slot: jax.Array
    blueprint: jax.Array


def assert_state(state: HeuristicState, n_envs: int | None = None) -> None:
    """penalties `[E, B]` float, the other fields `[E]` int."""
    e = state.penalties.shape[0] if n_envs is None else n_envs
    chex.assert_rank(state.penalties, 2)
    chex.assert_shape(state.penalties, (e, state.penalties.shape[1]))
    chex.assert_shape([state.rotation_index, state.germination_count, state.last_cull_epoch,
                       state.last_decay_epoch], (e,))
    chex.assert_type([state.penalties, state.rotation_index], [float, int])


def decay_penalties(state: HeuristicState, epoch: jax.Array, params: HeuristicParams) -> HeuristicState:
    """Rule 1: once per new epoch, penalties ×decay and entries below 0.1 are deleted."""
    assert_state(state)
    chex.assert_shape(epoch, state.rotation_index.shape)
    due = epoch > state.last_decay_epoch
    decayed = state.penalties * params.rules.blueprint_penalty_decay
    decayed = jnp.where(decayed < PENALTY_DELETE_BELOW, 0.0, decayed)
    return state._replace(
        penalties=jnp.where(due[:, None], decayed, state.penalties),
        last_decay_epoch=jnp.where(due, epoch, state.last_decay_epoch),
    )


def next_blueprint(penalties: jax.Array, rotation_index: jax.Array, params: HeuristicParams):
    """BEHAVIOUR §13.3: (menu index [E], new rotation index [E]) for the next germination."""
    chex.assert_rank([penalties, rotation_index], [2, 1])
    chex.assert_axis_dimension(penalties, 0, rotation_index.shape[0])
    rotation = jnp.asarray(params.rotation, jnp.int32)
    n = rotation.shape[0]
    positions = (rotation_index[:, None] + jnp.arange(n)[None, :]) % n  # attempt order
    candidates = rotation[positions]  # [E, n]
    usable = jnp.take_along_axis(penalties, candidates, axis=1) < params.rules.blueprint_penalty_threshold
    first = jnp.argmax(usable, axis=1)
    found = usable.any(axis=1)
    chosen = jnp.take_along_axis(candidates, first[:, None], axis=1)[:, 0]
    least = rotation[jnp.argmin(penalties[:, rotation], axis=1)]  # ties: rotation order
    blueprint = jnp.where(found, chosen, least)
    return blueprint, rotation_index + jnp.where(found, first + 1, n).astype(jnp.int32)


def _first(mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(index of the first True per row, whether any is True)."""
    return jnp.argmax(mask, axis=1).astype(jnp.int32), mask.any(axis=1)


def fits(signals: Signals, min_fit_gap: float | None) -> jax.Array:
    """[E] bool: the host fits its data, train_acc − val_acc ≥ `min_fit_gap` pp (BEHAVIOUR §8.7); every env
    when the rule is off (None)."""
    gap = jnp.asarray(signals["train_acc"], jnp.float32) - jnp.asarray(signals["val_acc"], jnp.float32)
    return jnp.ones_like(gap, bool) if min_fit_gap is None else gap >= min_fit_gap


def germination(state: HeuristicState, signals: Signals, params: HeuristicParams):
    """Rule 2 (no live seed): (Decision, new rotation index)."""
    assert_state(state, assert_signals(signals)[0])
    epoch = jnp.asarray(signals["epoch"], jnp.int32)
    enabled = jnp.asarray(signals["slot_enabled"], bool)
    empty = enabled & ~jnp.asarray(signals["slot_occupied"], bool)
    target, has_empty = _first(empty)
    go = ((epoch - state.last_cull_epoch >= params.rules.embargo_epochs_after_cull)
          & ((jnp.asarray(signals["host_stabilized"]) != 0) | (not params.rules.wait_for_stable_host))
          & (epoch >= params.rules.min_epochs_before_germinate)
          & (jnp.asarray(signals["plateau_epochs"]) >= params.rules.plateau_epochs_to_germinate)
          & fits(signals, params.rules.min_fit_gap)
          & has_empty)
    blueprint, advanced = next_blueprint(state.penalties, state.rotation_index, params)
    decision = Decision(
        op=jnp.where(go, _GERMINATE, _WAIT).astype(jnp.int32),
        slot=target,
        blueprint=jnp.where(go, blueprint, UNUSED_BLUEPRINT).astype(jnp.int32),
    )
    return decision, jnp.where(go, advanced, state.rotation_index)


def live_seeds(signals: Signals) -> jax.Array:
    """[E, S] bool: an enabled slot holding a seed that is not FOSSILIZED."""
    assert_signals(signals)
    occupied = jnp.asarray(signals["slot_occupied"], bool) & jnp.asarray(signals["slot_enabled"], bool)
    return occupied & (jnp.asarray(signals["slot_stage"]) != _FOSSILIZED)


def _probation_op(signals: Signals, params: HeuristicParams) -> jax.Array:
    """PROBATIONARY rule per slot: ransomware -> CULL; else imp > threshold -> FOSSILIZE; else CULL."""
    c = jnp.asarray(signals["slot_contribution"], jnp.float32)
    c_valid = jnp.asarray(signals["slot_contribution_valid"], bool)
    improvement = jnp.asarray(signals["slot_total_improvement"], jnp.float32)
    ransomware = (c_valid & (c > params.rules.ransomware_contribution_threshold)
                  & (improvement < params.rules.ransomware_improvement_threshold))
    imp = jnp.where(c_valid, c, improvement)
    keep = ~ransomware & (imp > params.rules.min_improvement_to_fossilize)
    return jnp.where(keep, _FOSSILIZE, _CULL)


def management(signals: Signals, params: HeuristicParams) -> Decision:
    """Rule 3 (live seeds): the first live seed in canonical order that matches a rule decides."""
    assert_signals(signals)
    live = live_seeds(signals)
    stage = jnp.asarray(signals["slot_stage"])
    eis = jnp.asarray(signals["slot_eis"])
    drop = jnp.asarray(signals["slot_stage_improvement"], jnp.float32)
    germinated = live & (stage == _GERMINATED)
    failing = (live & ((stage == _TRAINING) | (stage == _BLENDING))
               & (eis >= params.rules.cull_after_epochs_without_improvement)
               & (drop < -params.rules.cull_if_accuracy_drops_by))
    probation = live & (stage == _PROBATIONARY)
    per_slot_op = jnp.where(germinated, _WAIT, jnp.where(failing, _CULL, _probation_op(signals, params)))
    target, matched = _first(germinated | failing | probation)
    op = jnp.take_along_axis(per_slot_op, target[:, None], axis=1)[:, 0]
    return Decision(op=jnp.where(matched, op, _WAIT).astype(jnp.int32), slot=target,
                    blueprint=jnp.full_like(target, UNUSED_BLUEPRINT))


def record_culls(state: HeuristicState, decision: Decision, signals: Signals,
                 params: HeuristicParams) -> HeuristicState:
    """Rule 4: a CULL decision starts the embargo and penalises the culled seed's blueprint."""
    assert_state(state, assert_signals(signals)[0])
    chex.assert_equal_shape([*decision, state.rotation_index])
    epoch = jnp.asarray(signals["epoch"], jnp.int32)
    cull = decision.op == _CULL
    blueprint = jnp.take_along_axis(jnp.asarray(signals["slot_blueprint"], jnp.int32),
                                    decision.slot[:, None], axis=1)[:, 0]
    hit = jax.nn.one_hot(blueprint, state.penalties.shape[1], dtype=bool)  # all False for -1
    add = jnp.where(cull[:, None] & hit, params.rules.blueprint_penalty_on_cull, 0.0)
    return state._replace(
        penalties=(state.penalties + add).astype(jnp.float32),
        last_cull_epoch=jnp.where(cull, epoch, state.last_cull_epoch),
    )


def _select(take_first: jax.Array, a: Decision, b: Decision) -> Decision:
    return Decision(*(jnp.where(take_first, x, y) for x, y in zip(a, b)))


def decide(state: HeuristicState, signals: Signals, params: HeuristicParams):
    """One heuristic decision per env: (actions [E, 5] int32 in head order, new state)."""
    assert_state(state, assert_signals(signals)[0])
    epoch = jnp.asarray(signals["epoch"], jnp.int32)
    state = decay_penalties(state, epoch, params)
    any_live = live_seeds(signals).any(axis=1)
    grow, rotation_index = germination(state, signals, params)
    decision = _select(any_live, management(signals, params), grow)
    first_enabled, _ = _first(jnp.asarray(signals["slot_enabled"], bool))
    decision = decision._replace(slot=jnp.where(decision.op == _WAIT, first_enabled, decision.slot))
    germinated = decision.op == _GERMINATE
    state = state._replace(
        rotation_index=jnp.where(germinated, rotation_index, state.rotation_index),
        germination_count=state.germination_count + germinated.astype(jnp.int32),
    )
    state = record_culls(state, decision, signals, params)
    blend = jnp.full_like(decision.op, params.blend_index)
    tempo = jnp.full_like(decision.op, params.tempo_index)
    actions = jnp.stack([decision.slot, decision.blueprint, blend, decision.op, tempo], axis=1).astype(jnp.int32)
    return actions, state


__all__ = [
    "Decision", "HeuristicParams", "HeuristicState", "PENALTY_DELETE_BELOW", "decay_penalties", "decide",
    "germination", "init_state", "live_seeds", "management", "next_blueprint", "record_culls",
]
