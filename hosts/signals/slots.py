"""The slots as the signals see them (BEHAVIOUR §3.4, §7.3 step 8, §9.1): which hold a seed, seed counts
and parameters, and each slot's `slot_*` signal fields.

Occupancy is decided here once, so that the observation, the masks, the slot fields and the pool agree: a
slot holds a seed iff it is enabled, it has a report, and the report's stage is not DORMANT. A report for a
slot that is not enabled cannot occur in a real run (only enabled slots get a SeedSlot, BEHAVIOUR §3.3) and
is ignored everywhere.

`slot_planes` gives one env's `slot_*` fields (`esper_fx.contracts.signals.SIGNAL_FIELDS`) as python lists;
`hosts.signals.assembly.build_slot_fields` stacks E envs of them into [E, S] device tensors.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from esper_fx.contracts.stages import SeedStage
from hosts.seeds.slot_report import SlotReport

# ------------------------------------------------------------------------------------------
# occupancy: which slots hold a seed
# ------------------------------------------------------------------------------------------


def check_slot_ids(
    slot_ids: Sequence[str], enabled_slot_ids: Iterable[str], reports: Mapping[str, SlotReport]
) -> None:
    """Raise ValueError for an enabled slot or a report that names a slot outside `slot_ids`."""
    known = set(slot_ids)
    if len(known) != len(slot_ids):
        raise ValueError(f"slot_ids contains duplicates: {list(slot_ids)}")
    unknown_enabled = sorted(set(enabled_slot_ids) - known)
    if unknown_enabled:
        raise ValueError(f"enabled slots {unknown_enabled} are not in slot_ids {list(slot_ids)}")
    unknown_reports = sorted(set(reports) - known)
    if unknown_reports:
        raise ValueError(f"reports for slots {unknown_reports} that are not in slot_ids {list(slot_ids)}")


def holds_seed(report: SlotReport | None) -> bool:
    """A report counts as a seed iff it exists and its stage is not DORMANT (BEHAVIOUR §9.1)."""
    return report is not None and SeedStage(report.stage) != SeedStage.DORMANT


def seeded_slots(
    reports: Mapping[str, SlotReport], enabled_slot_ids: Iterable[str]
) -> dict[str, SlotReport]:
    """slot id -> report for every enabled slot holding a seed (any stage, FOSSILIZED included)."""
    enabled = set(enabled_slot_ids)
    return {sid: rep for sid, rep in reports.items() if sid in enabled and holds_seed(rep)}


def count_seeds(reports: Mapping[str, SlotReport], enabled_slot_ids: Iterable[str]) -> tuple[int, int]:
    """(active, fossilized): seeds present and not FOSSILIZED, and FOSSILIZED seeds (BEHAVIOUR §3.4)."""
    seeds = seeded_slots(reports, enabled_slot_ids).values()
    fossilized = sum(1 for rep in seeds if SeedStage(rep.stage) == SeedStage.FOSSILIZED)
    return len(seeds) - fossilized, fossilized


def count_available_slots(reports: Mapping[str, SlotReport], enabled_slot_ids: Iterable[str]) -> int:
    """The number of enabled empty slots (the tracker's `available_slots`)."""
    enabled = set(enabled_slot_ids)
    return len(enabled) - len(seeded_slots(reports, enabled))


def active_seed_params(reports: Mapping[str, SlotReport], enabled_slot_ids: Iterable[str]) -> int:
    """Σ seed_params over every slot holding a seed, fossils included (BEHAVIOUR §3.4)."""
    return sum(int(rep.seed_params) for rep in seeded_slots(reports, enabled_slot_ids).values())


# ------------------------------------------------------------------------------------------
# the `slot_*` signal fields of one env
# ------------------------------------------------------------------------------------------


SLOT_BOOL_FIELDS: tuple[str, ...] = ("slot_enabled", "slot_occupied")
SLOT_INT_FIELDS: tuple[str, ...] = (
    "slot_stage", "slot_previous_stage", "slot_eis", "slot_age", "slot_blueprint",
)
SLOT_FLOAT_FIELDS: tuple[str, ...] = ("slot_alpha", "slot_total_improvement", "slot_stage_improvement")

NO_BLUEPRINT = -1
_EMPTY_INTS = (int(SeedStage.UNKNOWN), int(SeedStage.UNKNOWN), 0, 0, NO_BLUEPRINT)
_EMPTY_FLOATS = (0.0, 0.0, 0.0)


def blueprint_index(blueprint_id: str, menu: Sequence[str]) -> int:
    """The blueprint's menu index, or −1 when it is not in the menu."""
    return menu.index(blueprint_id) if blueprint_id in menu else NO_BLUEPRINT


def _int_values(report: SlotReport | None, menu: Sequence[str]) -> tuple[int, ...]:
    """stage, previous_stage, eis, age, blueprint index (in SLOT_INT_FIELDS order)."""
    if report is None:
        return _EMPTY_INTS
    return (
        int(report.stage),
        int(report.previous_stage),
        int(report.epochs_in_stage),
        int(report.epochs_total),
        blueprint_index(report.blueprint_id, menu),
    )


def _float_values(report: SlotReport | None) -> tuple[float, ...]:
    """alpha, total improvement, improvement since stage start (in SLOT_FLOAT_FIELDS order)."""
    if report is None:
        return _EMPTY_FLOATS
    return (float(report.alpha), float(report.total_improvement), float(report.improvement_since_stage_start))


def slot_planes(
    reports: Mapping[str, SlotReport], enabled: tuple[str, ...], slot_ids: Sequence[str], menu: Sequence[str]
) -> tuple[list[list[bool]], list[list[int]], list[list[float]]]:
    """One env's `slot_*` fields as [field][slot] lists, grouped by dtype (bool, int, float), in the
    SLOT_*_FIELDS order; empty or disabled slots give 0 / −1 / False."""
    check_slot_ids(slot_ids, enabled, reports)
    seeds = seeded_slots(reports, enabled)
    per_slot = [seeds.get(sid) for sid in slot_ids]
    bools = [[sid in enabled for sid in slot_ids], [rep is not None for rep in per_slot]]
    ints = [list(col) for col in zip(*(_int_values(rep, menu) for rep in per_slot))]
    floats = [list(col) for col in zip(*(_float_values(rep) for rep in per_slot))]
    return bools, ints, floats
