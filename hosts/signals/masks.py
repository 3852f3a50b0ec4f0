"""Action masks of the four heads (slot, blueprint, blend, op), SPEC §9.1. True = allowed.

`build_masks` computes one env's masks as tuples of python bools; `stack_masks` turns E of them
into the four `mask_*` signal tensors ([E, ·] bool, each freshly allocated and contiguous on the
target device, uploaded with one host→device copy).
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, Sequence

import torch

from esper_fx.contracts import (
    CULLABLE_STAGES,
    FOSSILIZABLE_STAGES,
    MIN_CULL_AGE,
    NUM_BLENDS,
    LifecycleOp,
    SeedStage,
)

from hosts.seeds.slot_report import SlotReport
from hosts.signals.occupancy import check_slot_ids, seeded_slots
from hosts.signals.device_upload import upload_columns

MASK_FIELDS: tuple[str, ...] = ("mask_slot", "mask_blueprint", "mask_blend", "mask_op")


class ActionMasks(NamedTuple):
    """One env's masks, each a tuple of bools in head-index order."""

    slot: tuple[bool, ...]  # [S]
    blueprint: tuple[bool, ...]  # [B]
    blend: tuple[bool, ...]  # [3]
    op: tuple[bool, ...]  # [4]: WAIT, GERMINATE, CULL, FOSSILIZE


def slot_mask(slot_ids: Sequence[str], enabled_slot_ids: Iterable[str]) -> tuple[bool, ...]:
    """True exactly at the enabled slots' canonical indices.

    With no enabled slot (rejected by the config; only WAIT is then allowed) index 0 stays valid so
    the head keeps one True entry; the slot head is irrelevant to WAIT (§9.4).
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
    min_cull_age: int = MIN_CULL_AGE,
) -> tuple[bool, ...]:
    """Optimistic: an op is allowed if any enabled slot allows it; WAIT always. CULL needs a seed at
    least `min_cull_age` epochs old (the reference's 1 by default; runs pass their config's value)."""
    enabled = set(enabled_slot_ids)
    seeds = seeded_slots(reports, enabled).values()
    ops = [False] * len(LifecycleOp)
    ops[LifecycleOp.WAIT] = True
    ops[LifecycleOp.GERMINATE] = len(seeds) < len(enabled) and not _seed_limit_reached(max_seeds, total_seeds)
    ops[LifecycleOp.CULL] = any(_can_cull(rep, min_cull_age) for rep in seeds)
    ops[LifecycleOp.FOSSILIZE] = any(SeedStage(rep.stage) in FOSSILIZABLE_STAGES for rep in seeds)
    return tuple(ops)


def build_masks(
    reports: Mapping[str, SlotReport],
    enabled_slot_ids: Iterable[str],
    slot_ids: Sequence[str],
    num_blueprints: int,
    max_seeds: int | None,
    total_seeds: int,
    min_cull_age: int = MIN_CULL_AGE,
) -> ActionMasks:
    """The four masks of one env from its current slot states (§9.1)."""
    enabled = tuple(enabled_slot_ids)
    check_slot_ids(slot_ids, enabled, reports)
    return ActionMasks(
        slot=slot_mask(slot_ids, enabled),
        blueprint=blueprint_mask(num_blueprints),
        blend=(True,) * NUM_BLENDS,
        op=op_mask(reports, enabled, max_seeds, total_seeds, min_cull_age),
    )


def stack_masks(masks: Sequence[ActionMasks], device: torch.device | str) -> dict[str, torch.Tensor]:
    """E envs' masks -> {mask_slot [E,S], mask_blueprint [E,B], mask_blend [E,3], mask_op [E,4]} bool."""
    if not masks:
        raise ValueError("stack_masks needs at least one env")
    rows = [sum((tuple(head) for head in env), ()) for env in masks]
    widths = [len(head) for head in masks[0]]
    packed = torch.tensor(rows, dtype=torch.bool)
    return dict(zip(MASK_FIELDS, upload_columns(packed, widths, device)))
