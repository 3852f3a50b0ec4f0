"""Action execution and the end-of-epoch lifecycle step of one env (BEHAVIOUR §7.3 step 10, §7.4, §2.6, §2.10).

`execute_action` runs one decoded action on one env and returns whether it succeeded (for logs
only); `step_slots` runs `step_epoch` on every enabled slot in canonical order, counts the auto-culls
and cleans up emptied slots. Both record lifecycle events.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from esper_fx.contracts.actions import ACTION_HEADS, BLEND_NAMES, NUM_TEMPOS, TEMPO_NAMES, LifecycleOp
from esper_fx.contracts.events import EventType
from esper_fx.contracts.lifecycle import MIN_FOSSILIZE_CONTRIBUTION
from esper_fx.contracts.stages import SeedStage

from hosts.env.state import EnvState


class Action(NamedTuple):
    """One env's decoded action, in head order."""

    slot: int
    blueprint: int
    blend: int
    op: int
    tempo: int


def decode_actions(rows: Sequence[Sequence[int]], n_envs: int, num_slots: int, num_blueprints: int,
                   first_env: int = 0) -> list[Action]:
    """[E, 5] rows -> Actions; an index outside its head raises ValueError naming the head and the env
    (row i is env first_env + i: a pool running a slice of the envs passes its first one)."""
    if len(rows) != n_envs:
        raise ValueError(f"actions must have one row per env: expected {n_envs}, got {len(rows)}")
    sizes = {"slot": num_slots, "blueprint": num_blueprints, "blend": len(BLEND_NAMES), "op": len(LifecycleOp),
             "tempo": NUM_TEMPOS}
    out = []
    for env, row in enumerate(rows, start=first_env):
        if len(row) != len(ACTION_HEADS):
            raise ValueError(f"env {env}: an action row has {len(ACTION_HEADS)} entries "
                             f"({', '.join(ACTION_HEADS)}), got {row}")
        action = Action(*(int(v) for v in row))
        for head, size in sizes.items():
            value = getattr(action, head)
            if not 0 <= value < size:
                raise ValueError(f"env {env}: {head} index {value} is outside [0, {size})")
        out.append(action)
    return out


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §7.4, one op each
# ------------------------------------------------------------------------------------------


def _germinate(env: EnvState, target: str, action: Action, menu: Sequence[str], val_acc: float,
               epoch: int) -> bool:
    if env.holds_seed(target):
        return False
    counters = env.counters
    seed_id = f"env{env.index}_seed_{counters.seeds_created}"
    blueprint, blend, tempo = menu[action.blueprint], BLEND_NAMES[action.blend], TEMPO_NAMES[action.tempo]
    counters.acc_at_germination[target] = val_acc
    with env.rng.activate():  # the blueprint's init draws from this env's stream
        env.model.germinate(target, blueprint, blend=blend, seed_id=seed_id, tempo=action.tempo, accuracy=val_acc)
    counters.seeds_created += 1
    env.seed_optimizers.pop(target, None)  # stale optimizer / EMA of an earlier seed
    counters.ratio_ema.pop(target, None)
    env.event(EventType.SEED_GERMINATED, epoch, target, seed_id, f"germinated {blueprint} ({blend}, {tempo})",
              blueprint=blueprint, blend=blend, tempo=tempo)
    return True


def _fossilize(env: EnvState, target: str, epoch: int) -> bool:
    slot = env.slot(target)
    if slot.stage != SeedStage.PROBATIONARY:
        return False
    state = slot.state
    result = env.model.fossilize(target)
    if not result.passed:
        return False
    counters = env.counters
    counters.seeds_fossilized += 1
    improvement = state.metrics.total_improvement
    if improvement >= MIN_FOSSILIZE_CONTRIBUTION:
        counters.contributing_fossilized += 1
    counters.acc_at_germination.pop(target, None)
    env.event(EventType.SEED_FOSSILIZED, epoch, target, state.seed_id, "fossilized",
              contribution=state.metrics.counterfactual_contribution, total_improvement=improvement)
    return True


def _cull(env: EnvState, target: str, epoch: int) -> bool:
    """A fossil refuses with no side effect (BEHAVIOUR §2.10 [fix]): its optimizer and momentum are kept."""
    slot = env.slot(target)
    if not env.holds_seed(target) or slot.stage == SeedStage.FOSSILIZED:
        return False
    seed_id, stage = slot.state.seed_id, slot.stage
    if not env.model.cull(target, ""):
        return False
    env.forget_slot(target)
    env.event(EventType.SEED_CULLED, epoch, target, seed_id, "culled by the controller", reason="", auto=False,
              stage=stage.name)
    return True


def execute_action(env: EnvState, action: Action, *, slot_ids: Sequence[str], enabled: Sequence[str],
                   menu: Sequence[str], val_acc: float, epoch: int) -> bool:
    """Count the op, run it on the target slot (BEHAVIOUR §7.4) and count a success; returns the success."""
    op = LifecycleOp(action.op)
    counters = env.counters
    counters.action_counts[op] += 1
    target = slot_ids[action.slot]
    if target not in enabled:
        success = False  # any op on a disabled slot fails with no effect (the slot mask prevents it)
    elif op == LifecycleOp.WAIT:
        success = True
    elif op == LifecycleOp.GERMINATE:
        success = _germinate(env, target, action, menu, val_acc, epoch)
    elif op == LifecycleOp.FOSSILIZE:
        success = _fossilize(env, target, epoch)
    else:
        success = _cull(env, target, epoch)
    if success:
        counters.successful_action_counts[op] += 1
    return success


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §7.3 step 10.7: step_epoch on every enabled slot
# ------------------------------------------------------------------------------------------


def _auto_cull_reason(slot) -> str:
    culled = getattr(slot, "last_culled", None)
    return getattr(culled, "auto_cull_reason", "") or "auto_cull"


def step_slots(env: EnvState, enabled: Sequence[str], epoch: int) -> int:
    """step_epoch on every enabled slot in canonical order; returns the number of auto-culls."""
    auto_culls = 0
    for slot_id in enabled:
        slot = env.slot(slot_id)
        before, seed_id = slot.stage, env.seed_id(slot_id)
        if slot.step_epoch():
            auto_culls += 1
            reason = _auto_cull_reason(slot)
            env.event(EventType.SEED_CULLED, epoch, slot_id, seed_id or "", f"auto-cull: {reason}", reason=reason,
                      auto=True, stage=before.name if before is not None else "")
        elif slot.stage != before and before is not None and slot.stage is not None:
            env.event(EventType.SEED_STAGE_CHANGED, epoch, slot_id, seed_id or "", f"{before.name} -> {slot.stage.name}",
                      from_stage=before.name, to_stage=slot.stage.name)
    env.forget_emptied(enabled)
    return auto_culls
