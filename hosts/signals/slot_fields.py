"""The per-slot `slot_*` fields of the signals (`esper_fx.contracts.SIGNAL_FIELDS`, BEHAVIOUR §7.3 step 8).

`build_slot_fields` turns E envs' slot reports into [E, S] float32 / int32 / bool tensors, each freshly
allocated and contiguous on the target device. `assembly.assemble_signals` adds the rest of the signals.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from esper_fx.contracts import SeedStage
from hosts.seeds.slot_report import SlotReport
from hosts.signals.device_upload import upload_planes
from hosts.signals.occupancy import check_slot_ids, seeded_slots

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


def _env_planes(
    reports: Mapping[str, SlotReport], enabled: tuple[str, ...], slot_ids: Sequence[str], menu: Sequence[str]
) -> tuple[list[list[bool]], list[list[int]], list[list[float]]]:
    """One env's fields as [field][slot] lists, grouped by dtype."""
    check_slot_ids(slot_ids, enabled, reports)
    seeds = seeded_slots(reports, enabled)
    per_slot = [seeds.get(sid) for sid in slot_ids]
    bools = [[sid in enabled for sid in slot_ids], [rep is not None for rep in per_slot]]
    ints = [list(col) for col in zip(*(_int_values(rep, menu) for rep in per_slot))]
    floats = [list(col) for col in zip(*(_float_values(rep) for rep in per_slot))]
    return bools, ints, floats


def _to_planes(per_env: list[list[list]], dtype: torch.dtype) -> torch.Tensor:
    """[E][field][S] nested lists -> a [field, E, S] CPU tensor."""
    return torch.tensor(per_env, dtype=dtype).permute(1, 0, 2).contiguous()


def build_slot_fields(
    reports_per_env: Sequence[Mapping[str, SlotReport]],
    enabled_slot_ids: Iterable[str],
    slot_ids: Sequence[str],
    menu: Sequence[str],
    device: torch.device | str,
) -> dict[str, torch.Tensor]:
    """The per-slot signal fields of E envs ([E, S] each; empty or disabled slots give 0 / −1 / False)."""
    if not reports_per_env:
        raise ValueError("build_slot_fields needs at least one env")
    enabled = tuple(enabled_slot_ids)
    envs = [_env_planes(reports, enabled, slot_ids, menu) for reports in reports_per_env]
    fields: dict[str, torch.Tensor] = {}
    for group, (names, dtype) in enumerate(
        ((SLOT_BOOL_FIELDS, torch.bool), (SLOT_INT_FIELDS, torch.int32), (SLOT_FLOAT_FIELDS, torch.float32))
    ):
        planes = upload_planes(_to_planes([env[group] for env in envs], dtype), device)
        fields.update(zip(names, planes))
    return fields
