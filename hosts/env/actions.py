"""Actions checked and executed, every slot stepped at the epoch's end (BEHAVIOUR §7.3 step 10, §7.4, §2.6, §2.10).

The actions take one form from the controller to the slots: a numpy integer array [E, NUM_HEADS], its
columns in `contracts.actions.ACTION_HEADS` order (slot, blueprint, blend, op, tempo). `checked_actions`
refuses anything else and any index outside its head, naming the head and the env; `execute_action` runs
one env's row and returns whether it succeeded (for logs only); `step_slots` runs `step_epoch` on every
enabled slot in canonical order, counts the auto-culls and cleans up emptied slots. Both record lifecycle
events.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from esper_fx.contracts.actions import ACTION_HEADS, BLEND_NAMES, NUM_HEADS, TEMPO_NAMES, LifecycleOp
from esper_fx.contracts.events import EventType
from esper_fx.contracts.lifecycle import MIN_FOSSILIZE_CONTRIBUTION
from esper_fx.contracts.stages import SeedStage

from hosts.env.state import EnvState


def check_action_form(actions, n_envs: int) -> None:
    """TypeError unless `actions` is a numpy integer array; ValueError unless it is [n_envs, NUM_HEADS]."""
    heads = ", ".join(ACTION_HEADS)
    if not isinstance(actions, np.ndarray):
        raise TypeError(f"actions must be a numpy integer array [E, {NUM_HEADS}] ({heads}), "
                        f"got {type(actions).__module__}.{type(actions).__qualname__}")
    if not np.issubdtype(actions.dtype, np.integer):
        raise TypeError(f"actions must be a numpy integer array [E, {NUM_HEADS}] ({heads}), got dtype {actions.dtype}")
    if actions.shape != (n_envs, NUM_HEADS):
        raise ValueError(f"actions must be [{n_envs}, {NUM_HEADS}], one row per env ({heads}), "
                         f"got shape {list(actions.shape)}")


def checked_actions(actions, n_envs: int, sizes: Sequence[int], first_env: int = 0) -> np.ndarray:
    """The epoch's actions as the pool executes and reports them: a read-only int32 copy of `actions`, which
    must be a numpy integer array [n_envs, NUM_HEADS] with head h's index in [0, sizes[h])
    (`contracts.actions.head_sizes`). `first_env` numbers row 0 in the error (a pool's slice starts there)."""
    check_action_form(actions, n_envs)
    outside = (actions < 0) | (actions >= np.asarray(sizes))
    if outside.any():
        row, head = (int(i) for i in np.argwhere(outside)[0])
        raise ValueError(f"env {first_env + row}: {ACTION_HEADS[head]} index {actions[row, head]} is outside "
                         f"[0, {sizes[head]})")
    out = actions.astype(np.int32)
    out.flags.writeable = False
    return out


# ------------------------------------------------------------------------------------------
# BEHAVIOUR §7.4, one op each
# ------------------------------------------------------------------------------------------


def _germinate(env: EnvState, target: str, blueprint: str, blend: str, tempo_index: int, val_acc: float,
               epoch: int) -> bool:
    if env.holds_seed(target):
        return False
    counters = env.counters
    seed_id = f"env{env.index}_seed_{counters.seeds_created}"
    tempo = TEMPO_NAMES[tempo_index]
    counters.acc_at_germination[target] = val_acc
    with env.rng.activate():  # the blueprint's init draws from this env's stream
        env.model.germinate(target, blueprint, blend=blend, seed_id=seed_id, tempo=tempo_index, accuracy=val_acc)
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


def execute_action(env: EnvState, row: np.ndarray, *, slot_ids: Sequence[str], enabled: Sequence[str],
                   menu: Sequence[str], val_acc: float, epoch: int) -> bool:
    """Count the op of `row` (the env's row of `checked_actions`), run it on the target slot (BEHAVIOUR §7.4)
    and count a success; returns the success."""
    slot, blueprint, blend, op, tempo = row.tolist()
    op = LifecycleOp(op)
    counters = env.counters
    counters.action_counts[op] += 1
    target = slot_ids[slot]
    if target not in enabled:
        success = False  # any op on a disabled slot fails with no effect (the slot mask prevents it)
    elif op == LifecycleOp.WAIT:
        success = True
    elif op == LifecycleOp.GERMINATE:
        success = _germinate(env, target, menu[blueprint], BLEND_NAMES[blend], tempo, val_acc, epoch)
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
