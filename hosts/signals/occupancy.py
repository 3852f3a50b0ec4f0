"""Which slots hold a seed, as seen by the observation, the masks and the signals (BEHAVIOUR §3.4, §9.1).

Shared by `hosts.signals.observation`, `hosts.signals.masks` and `hosts.signals.slot_fields` so that all three agree: a slot
holds a seed iff it is enabled, it has a report, and the report's stage is not DORMANT. A report
for a slot that is not enabled cannot occur in a real run (only enabled slots get a SeedSlot,
BEHAVIOUR §3.3) and is ignored everywhere.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from esper_fx.contracts import SeedStage

from hosts.seeds.slot_report import SlotReport


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
