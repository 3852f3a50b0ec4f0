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

from esper_fx.contracts.signals import signal_names
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


# the declaration's slot fields of each dtype, in contract order
SLOT_BOOL_FIELDS: tuple[str, ...] = signal_names("slot", "bool")
SLOT_INT_FIELDS: tuple[str, ...] = signal_names("slot", "int32")
SLOT_FLOAT_FIELDS: tuple[str, ...] = signal_names("slot", "float32")

NO_BLUEPRINT = -1
_EMPTY = {"slot_stage": int(SeedStage.UNKNOWN), "slot_previous_stage": int(SeedStage.UNKNOWN), "slot_eis": 0,
          "slot_age": 0, "slot_blueprint": NO_BLUEPRINT, "slot_alpha": 0.0, "slot_total_improvement": 0.0,
          "slot_stage_improvement": 0.0}  # an empty or disabled slot's int and float fields


def blueprint_index(blueprint_id: str, menu: Sequence[str]) -> int:
    """The blueprint's menu index, or −1 when it is not in the menu."""
    return menu.index(blueprint_id) if blueprint_id in menu else NO_BLUEPRINT


def slot_values(report: SlotReport | None, menu: Sequence[str]) -> dict[str, int | float]:
    """One slot's int and float `slot_*` fields by name, from the report of the seed it holds (None: empty)."""
    if report is None:
        return dict(_EMPTY)
    return {
        "slot_stage": int(report.stage),
        "slot_previous_stage": int(report.previous_stage),
        "slot_eis": int(report.epochs_in_stage),
        "slot_age": int(report.epochs_total),
        "slot_blueprint": blueprint_index(report.blueprint_id, menu),
        "slot_alpha": float(report.alpha),
        "slot_total_improvement": float(report.total_improvement),
        "slot_stage_improvement": float(report.improvement_since_stage_start),
    }


def slot_planes(
    reports: Mapping[str, SlotReport], enabled: tuple[str, ...], slot_ids: Sequence[str], menu: Sequence[str]
) -> tuple[list[list[bool]], list[list[int]], list[list[float]]]:
    """One env's `slot_*` fields as [field][slot] lists, grouped by dtype (bool, int, float), in the
    SLOT_*_FIELDS order; empty or disabled slots give 0 / −1 / False."""
    check_slot_ids(slot_ids, enabled, reports)
    seeds = seeded_slots(reports, enabled)
    per_slot = [seeds.get(sid) for sid in slot_ids]
    flags = {"slot_enabled": [sid in enabled for sid in slot_ids],
             "slot_occupied": [rep is not None for rep in per_slot]}
    values = [slot_values(rep, menu) for rep in per_slot]
    bools = [flags[name] for name in SLOT_BOOL_FIELDS]
    ints = [[slot[name] for slot in values] for name in SLOT_INT_FIELDS]
    floats = [[slot[name] for slot in values] for name in SLOT_FLOAT_FIELDS]
    return bools, ints, floats
