"""Action masks of the five heads (slot, blueprint, blend, op, tempo), BEHAVIOUR §9.1. True = allowed.

`build_masks` computes one env's masks as tuples of python bools; `hosts.signals.assembly.stack_masks`
turns E of them into the `mask_*` signal tensors.

[fix] Besides the four head masks, `slot_by_op` (`mask_slot_op`, [E, 4, S]) says which slots each op can
act on: any enabled slot for WAIT, an empty one for GERMINATE, a seed old enough to cull for CULL, a
PROBATIONARY seed for FOSSILIZE. A controller that draws its op first can draw the slot under that op's
mask, so no op is spent on a slot where it cannot act (LEARNING.md). With `one_seed_at_a_time`, GERMINATE
waits until no seed is still developing (every seed present is a fossil), the reference's later rule; with
a germination deadline it also closes once a new seed could no longer be fossilized before the episode
ends (`contracts.lifecycle.LifecycleTimings.germinate_until`), and the tempo mask keeps only the tempos the lifecycle
allows whose seed could still be fossilized in time (`LifecycleTimings.tempo_mask`).
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, Sequence


from esper_fx.contracts.actions import NUM_BLENDS, NUM_TEMPOS, LifecycleOp
from esper_fx.contracts.signals import signal_names
from esper_fx.contracts.stages import CULLABLE_STAGES, FOSSILIZABLE_STAGES, SeedStage

from hosts.seeds.slot_report import SlotReport
from hosts.signals.slots import check_slot_ids, seeded_slots

MASK_FIELDS: tuple[str, ...] = signal_names("mask")  # ActionMasks' heads, in order


class ActionMasks(NamedTuple):
    """One env's masks, each a tuple of bools in head-index order."""

    slot: tuple[bool, ...]  # [S]
    blueprint: tuple[bool, ...]  # [B]
    blend: tuple[bool, ...]  # [3]
    op: tuple[bool, ...]  # [4]: WAIT, GERMINATE, CULL, FOSSILIZE
    tempo: tuple[bool, ...] = (True,) * NUM_TEMPOS  # [3]: fast, standard, slow
    slot_by_op: tuple[bool, ...] = ()  # [4 * S]: op-major, the slots each op can act on


def slot_mask(slot_ids: Sequence[str], enabled_slot_ids: Iterable[str]) -> tuple[bool, ...]:
    """True exactly at the enabled slots' canonical indices.

    With no enabled slot (rejected by the config; only WAIT is then allowed) index 0 stays valid so
    the head keeps one True entry; the slot head is irrelevant to WAIT (BEHAVIOUR §9.4).
    """
    enabled = set(enabled_slot_ids)
    mask = tuple(sid in enabled for sid in slot_ids)
    if not any(mask):
        return (True,) + (False,) * (len(slot_ids) - 1)
    return mask


def blueprint_mask(num_blueprints: int) -> tuple[bool, ...]:
    """Everything except index 0 (noop)."""
    if num_blueprints < 2:
        raise ValueError(f"a blueprint menu needs noop plus at least one blueprint (got {num_blueprints})")
    return (False,) + (True,) * (num_blueprints - 1)


def _seed_limit_reached(max_seeds: int | None, total_seeds: int) -> bool:
    """max_seeds None (or 0) means unlimited."""
    return max_seeds is not None and max_seeds > 0 and total_seeds >= max_seeds


def _can_cull(report: SlotReport, min_cull_age: int) -> bool:
    return SeedStage(report.stage) in CULLABLE_STAGES and report.epochs_total >= min_cull_age


def op_mask(
    reports: Mapping[str, SlotReport],
    enabled_slot_ids: Iterable[str],
    max_seeds: int | None,
    total_seeds: int,
    min_cull_age: int,
    one_seed_at_a_time: bool = False,
    germination_open: bool = True,
) -> tuple[bool, ...]:
    """Optimistic: an op is allowed if any enabled slot allows it; WAIT always. CULL needs a seed at
    least `min_cull_age` epochs old (the run's `TrainingConfig.min_cull_age`; the reference's was 1).
    `germination_open` False (a seed germinated now could not be fossilized before the episode ends)
    masks GERMINATE."""
    enabled = set(enabled_slot_ids)
    seeds = seeded_slots(reports, enabled).values()
    developing = any(SeedStage(rep.stage) != SeedStage.FOSSILIZED for rep in seeds)
    ops = [False] * len(LifecycleOp)
    ops[LifecycleOp.WAIT] = True
    ops[LifecycleOp.GERMINATE] = (germination_open and len(seeds) < len(enabled)
                                  and not _seed_limit_reached(max_seeds, total_seeds)
                                  and not (one_seed_at_a_time and developing))
    ops[LifecycleOp.CULL] = any(_can_cull(rep, min_cull_age) for rep in seeds)
    ops[LifecycleOp.FOSSILIZE] = any(SeedStage(rep.stage) in FOSSILIZABLE_STAGES for rep in seeds)
    return tuple(ops)


def slot_by_op_mask(
    reports: Mapping[str, SlotReport], enabled_slot_ids: Iterable[str], slot_ids: Sequence[str], min_cull_age: int
) -> tuple[bool, ...]:
    """[4 * S], op-major: the slots WAIT / GERMINATE / CULL / FOSSILIZE can act on. An op with no such
    slot (and so masked itself) keeps the enabled slots, so every row has an allowed entry."""
    enabled = slot_mask(slot_ids, enabled_slot_ids)
    seeds = seeded_slots(reports, set(enabled_slot_ids))
    by_op = {
        LifecycleOp.WAIT: enabled,
        LifecycleOp.GERMINATE: tuple(e and s not in seeds for e, s in zip(enabled, slot_ids)),
        LifecycleOp.CULL: tuple(e and s in seeds and _can_cull(seeds[s], min_cull_age)
                                for e, s in zip(enabled, slot_ids)),
        LifecycleOp.FOSSILIZE: tuple(e and s in seeds and SeedStage(seeds[s].stage) in FOSSILIZABLE_STAGES
                                     for e, s in zip(enabled, slot_ids)),
    }
    return sum((row if any(row) else enabled for row in (by_op[op] for op in LifecycleOp)), ())


def build_masks(
    reports: Mapping[str, SlotReport],
    enabled_slot_ids: Iterable[str],
    slot_ids: Sequence[str],
    num_blueprints: int,
    max_seeds: int | None,
    total_seeds: int,
    min_cull_age: int,
    one_seed_at_a_time: bool = False,
    germination_open: bool = True,
    tempo: Sequence[bool] = (True,) * NUM_TEMPOS,
) -> ActionMasks:
    """The five masks of one env from its current slot states (BEHAVIOUR §9.1); `tempo` is the lifecycle's
    tempo mask for this epoch (`contracts.lifecycle.LifecycleTimings.tempo_mask`)."""
    enabled = tuple(enabled_slot_ids)
    check_slot_ids(slot_ids, enabled, reports)
    return ActionMasks(
        slot=slot_mask(slot_ids, enabled),
        blueprint=blueprint_mask(num_blueprints),
        blend=(True,) * NUM_BLENDS,
        op=op_mask(reports, enabled, max_seeds, total_seeds, min_cull_age, one_seed_at_a_time,
                   germination_open),
        tempo=tuple(bool(t) for t in tempo) if any(tempo) else (True,) * NUM_TEMPOS,
        slot_by_op=slot_by_op_mask(reports, enabled, slot_ids, min_cull_age),
    )

