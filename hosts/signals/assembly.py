"""Assembling the signals pytree of E envs (`esper_fx.contracts.signals.SIGNAL_FIELDS`, BEHAVIOUR §7.3 step 8).

The pool gathers one `EnvView` per env (python values only: the tracker's signals, the slot
reports and the env's counters) and `assemble_signals` turns them into the contract's dict of
fresh, contiguous float32 / int32 / bool tensors on one device. The modules beside this one work on one
env in python values: the raw observation (`observation.py`), the five masks (`masks.py`), the slots
and their `slot_*` fields (`slots.py`). Here E envs of them are stacked and moved to the device, and the
per-env scalars, the epoch's contributions and the germination accuracies are added. Which fields each group
holds, and in which order, is read from the one declaration of the signals
(`esper_fx.contracts.signals.SIGNALS`, `signal_names`); the values are keyed by signal name. `pack_signals` lays
that dict out as one [E, W] buffer per dtype (`esper_fx.contracts.signals.signal_columns`) for the hand-off to the
controller.

The DLPack bridge wants every signal tensor contiguous and freshly allocated (ARCHITECTURE §2).
Each group of fields is therefore packed into one CPU tensor, copied to the device once, and split there
into fresh contiguous tensors (device-side copies only): `upload_rows`, `upload_columns`, `upload_planes`.
The copy is `non_blocking`: from pageable memory CUDA stages the data before the call returns, so the CPU
tensor may go at once, and the host does not wait for the device's stream (no host synchronisation: the
epoch's rule, `esper_fx/training/epoch_audit.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from esper_fx.contracts.actions import LifecycleOp
from esper_fx.contracts.lifecycle import LifecycleTimings, lifecycle_timings
from esper_fx.contracts.signals import PACKED_DTYPES, SIGNAL_FIELDS, SignalColumn, signal_names
from hosts.seeds.slot_report import SlotReport
from hosts.signals.masks import MASK_FIELDS, ActionMasks, build_masks
from hosts.signals.observation import ObservationOptions, build_observation
from hosts.signals.slots import (
    SLOT_BOOL_FIELDS,
    SLOT_FLOAT_FIELDS,
    SLOT_INT_FIELDS,
    active_seed_params,
    count_seeds,
    seeded_slots,
    slot_planes,
)
from hosts.signals.tracker import TrackerSignals

# the declaration's per-env fields (one tensor per dtype crosses to the device) and its per-slot values of
# the epoch with their valid flags, in contract order
ENV_INT_FIELDS = signal_names("env", "int32")
ENV_FLOAT_FIELDS = signal_names("env", "float32")
ENV_BOOL_FIELDS = signal_names("env", "bool")
SLOT_VALUE_FIELDS = signal_names("slot_value", "float32")
SLOT_VALID_FIELDS = signal_names("slot_value", "bool")
_DTYPES = {"float32": torch.float32, "int32": torch.int32, "bool": torch.bool}


@dataclass(frozen=True)
class SignalLayout:
    """The run-constant shape of the signals: slot head, enabled slots, menu, T, max_seeds, telemetry."""

    slot_ids: tuple[str, ...]
    enabled: tuple[str, ...]
    menu: tuple[str, ...]
    max_epochs: int
    max_seeds: int | None
    use_telemetry: bool
    min_cull_age: int  # CULL is masked for younger seeds (the run's TrainingConfig.min_cull_age)
    one_seed_at_a_time: bool = False  # GERMINATE is masked while a seed is developing
    timings: LifecycleTimings = lifecycle_timings("reference", 1, None)  # the run's stage durations
    germination_deadline: bool = False  # GERMINATE (and each tempo) closes once its seed could not fossilize
    log_params: bool = False  # the observation's parameter count as ln(1 + count) (observe_log_params)
    withheld: tuple[str, ...] = ()  # what the observation withholds, a control (observe_withheld)
    fit_gap: bool = False  # the observation ends with train_acc − val_acc (observe_fit_gap)


@dataclass(frozen=True)
class EnvView:
    """One env's inputs to the signals, all python values: the tracker's signals and the slot reports (the
    observation, the masks, the slot fields and several per-env signals are computed from them), each
    per-env signal the env counts itself (named as the signal: `esper_fx.contracts.signals.SIGNALS`), and
    the per-slot value tables of the epoch (`SLOT_TABLES`: which signal each fills)."""

    tracker: TrackerSignals
    reports: Mapping[str, SlotReport]
    host_params: int
    host_max_acc: float
    num_contributing_fossilized: int
    panic: bool
    auto_culls: int  # seeds the last lifecycle step auto-culled
    contributions: Mapping[str, float]  # c of this epoch, only for cf slots still holding the same seed
    acc_at_germination: Mapping[str, float]
    seed_flop_share: float  # hosts.env.compute.ComputeMeter.seed_share (0 where the host has no FLOP count)


# EnvView's table of each per-slot value signal (slot id -> value; a slot missing from it is not valid)
SLOT_TABLES: Mapping[str, str] = {"slot_contribution": "contributions", "slot_acc_at_germination": "acc_at_germination"}


# ------------------------------------------------------------------------------------------
# host -> device: one copy per group of fields, then fresh contiguous tensors on the device
# ------------------------------------------------------------------------------------------


def upload_rows(rows: Sequence[Sequence[float]], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A [E, N] list of rows -> one fresh contiguous tensor on `device` (one host→device copy)."""
    if not rows:
        raise ValueError("upload_rows needs at least one row")
    host = torch.tensor([list(row) for row in rows], dtype=dtype)
    return host.to(device, non_blocking=True)


def upload_columns(packed: torch.Tensor, widths: Sequence[int], device: torch.device | str) -> list[torch.Tensor]:
    """Split a [E, Σwidths] CPU tensor into fresh contiguous [E, w] tensors on `device`."""
    if sum(widths) != packed.shape[1]:
        raise ValueError(f"column widths {list(widths)} do not add up to {packed.shape[1]}")
    on_device = packed.to(device, non_blocking=True)
    out, start = [], 0
    for width in widths:
        out.append(on_device[:, start : start + width].clone(memory_format=torch.contiguous_format))
        start += width
    return out


def upload_planes(packed: torch.Tensor, device: torch.device | str) -> list[torch.Tensor]:
    """Split a [k, E, S] CPU tensor into k fresh contiguous [E, S] tensors on `device`."""
    on_device = packed.to(device, non_blocking=True)
    return [on_device[i].clone(memory_format=torch.contiguous_format) for i in range(packed.shape[0])]


# ------------------------------------------------------------------------------------------
# E envs' observations, masks and slot fields, stacked on the device
# ------------------------------------------------------------------------------------------


def stack_observations(rows: Sequence[Sequence[float]], device: torch.device | str) -> torch.Tensor:
    """E observations -> one fresh contiguous float32 [E, D] tensor on `device` (one copy)."""
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise ValueError(f"observations of different sizes cannot be stacked: {sorted(widths)}")
    return upload_rows(rows, torch.float32, device)


def stack_masks(masks: Sequence[ActionMasks], device: torch.device | str) -> dict[str, torch.Tensor]:
    """E envs' masks -> {mask_slot [E,S], mask_blueprint [E,B], mask_blend [E,3], mask_op [E,4],
    mask_tempo [E,3], mask_slot_op [E,4,S]} bool."""
    if not masks:
        raise ValueError("stack_masks needs at least one env")
    masks = [m if m.slot_by_op else m._replace(slot_by_op=m.slot * len(LifecycleOp)) for m in masks]
    rows = [sum((tuple(head) for head in env), ()) for env in masks]
    widths = [len(head) for head in masks[0]]
    packed = torch.tensor(rows, dtype=torch.bool)
    out = dict(zip(MASK_FIELDS, upload_columns(packed, widths, device)))
    slot_op = out["mask_slot_op"]
    out["mask_slot_op"] = slot_op.view(slot_op.shape[0], len(LifecycleOp), -1)  # a contiguous view, no copy
    return out


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
    envs = [slot_planes(reports, enabled, slot_ids, menu) for reports in reports_per_env]
    fields: dict[str, torch.Tensor] = {}
    for group, (names, dtype) in enumerate(
        ((SLOT_BOOL_FIELDS, torch.bool), (SLOT_INT_FIELDS, torch.int32), (SLOT_FLOAT_FIELDS, torch.float32))
    ):
        planes = upload_planes(_to_planes([env[group] for env in envs], dtype), device)
        fields.update(zip(names, planes))
    return fields


# ------------------------------------------------------------------------------------------
# the per-env and per-slot extras, and the whole signals dict
# ------------------------------------------------------------------------------------------


def env_values(view: EnvView, layout: SignalLayout) -> dict[str, int | float | bool]:
    """One env's per-env signals by name (python values; the declaration's order is applied by the caller)."""
    t = view.tracker
    active, fossilized = count_seeds(view.reports, layout.enabled)
    return {
        "epoch": t.epoch, "max_epochs": layout.max_epochs, "val_acc": t.val_acc, "val_loss": t.val_loss,
        "train_acc": t.train_acc, "train_loss": t.train_loss, "acc_delta": t.accuracy_delta,
        "loss_delta": t.loss_delta, "host_max_acc": view.host_max_acc, "plateau_epochs": t.plateau_epochs,
        "host_stabilized": t.host_stabilized, "host_params": view.host_params,
        "seed_params": active_seed_params(view.reports, layout.enabled), "seed_flop_share": view.seed_flop_share,
        "num_contributing_fossilized": view.num_contributing_fossilized, "total_seeds": active + fossilized,
        "panic": bool(view.panic), "auto_culls": view.auto_culls,
    }


def _per_env_fields(views: Sequence[EnvView], layout: SignalLayout, device) -> dict[str, torch.Tensor]:
    values = [env_values(v, layout) for v in views]
    out: dict[str, torch.Tensor] = {}
    for names, dtype in ((ENV_INT_FIELDS, torch.int32), (ENV_FLOAT_FIELDS, torch.float32),
                         (ENV_BOOL_FIELDS, torch.bool)):
        rows = [[env[name] for name in names] for env in values]
        packed = torch.tensor(rows, dtype=dtype).t().contiguous()  # [fields, E]
        out.update(zip(names, upload_planes(packed, device)))
    return out


def _slot_values(view: EnvView, layout: SignalLayout) -> tuple[list[list[float]], list[list[bool]]]:
    """The per-slot values and their valid flags, [field][slot] in SLOT_VALUE_FIELDS order (each flag is its
    value's name + "_valid", SLOT_VALID_FIELDS)."""
    seeds = seeded_slots(view.reports, layout.enabled)
    values, valid = [], []
    for name in SLOT_VALUE_FIELDS:
        table = getattr(view, SLOT_TABLES[name])
        present = [sid in seeds and sid in table for sid in layout.slot_ids]
        valid.append(present)
        values.append([float(table[sid]) if ok else 0.0 for sid, ok in zip(layout.slot_ids, present)])
    return values, valid


def _per_slot_extras(views: Sequence[EnvView], layout: SignalLayout, device) -> dict[str, torch.Tensor]:
    pairs = [_slot_values(v, layout) for v in views]
    values = torch.tensor([p[0] for p in pairs], dtype=torch.float32).permute(1, 0, 2).contiguous()
    valid = torch.tensor([p[1] for p in pairs], dtype=torch.bool).permute(1, 0, 2).contiguous()
    out = dict(zip(SLOT_VALUE_FIELDS, upload_planes(values, device)))
    out.update(zip(SLOT_VALID_FIELDS, upload_planes(valid, device)))
    return out


def _observations(views: Sequence[EnvView], layout: SignalLayout, device) -> torch.Tensor:
    options = ObservationOptions(layout.use_telemetry, layout.log_params, tuple(layout.withheld), layout.fit_gap)
    rows = [
        build_observation(v.tracker, layout.max_epochs, v.host_params, v.reports, layout.enabled,
                          layout.slot_ids, layout.menu, layout.max_seeds, options)
        for v in views
    ]
    return stack_observations(rows, device)


def _masks(views: Sequence[EnvView], layout: SignalLayout, device) -> dict[str, torch.Tensor]:
    masks = [
        build_masks(v.reports, layout.enabled, layout.slot_ids, len(layout.menu), layout.max_seeds,
                    sum(count_seeds(v.reports, layout.enabled)), layout.min_cull_age, layout.one_seed_at_a_time,
                    not layout.germination_deadline or v.tracker.epoch <= layout.timings.germinate_until(),
                    layout.timings.tempo_mask(v.tracker.epoch, layout.germination_deadline))
        for v in views
    ]
    return stack_masks(masks, device)


def assemble_signals(views: Sequence[EnvView], layout: SignalLayout, device: torch.device) -> dict[str, torch.Tensor]:
    """The SIGNAL_FIELDS dict for E envs, in contract order, every tensor fresh and contiguous on `device`."""
    if not views:
        raise ValueError("assemble_signals needs at least one env")
    fields = {"obs": _observations(views, layout, device)}
    fields.update(_masks(views, layout, device))
    fields.update(_per_env_fields(views, layout, device))
    fields.update(build_slot_fields([v.reports for v in views], layout.enabled, layout.slot_ids, layout.menu,
                                    device))
    fields.update(_per_slot_extras(views, layout, device))
    missing = set(SIGNAL_FIELDS) ^ set(fields)
    if missing:
        raise AssertionError(f"signals do not match SIGNAL_FIELDS: {sorted(missing)}")
    return {name: fields[name] for name in SIGNAL_FIELDS}


def pack_signals(signals: Mapping[str, torch.Tensor], columns: Mapping[str, SignalColumn]) -> dict[str, torch.Tensor]:
    """{dtype: [E, W]}: each dtype's fields side by side in `columns` order, one fresh contiguous tensor each
    (a buffer whose dtype has no field is [E, 0])."""
    any_field = next(iter(signals.values()))
    e = any_field.shape[0]
    parts: dict[str, list[torch.Tensor]] = {dtype: [] for dtype in PACKED_DTYPES}
    for name, column in sorted(columns.items(), key=lambda item: (item[1].dtype, item[1].start)):
        field = signals[name].reshape(e, -1)
        if field.shape[1] != column.stop - column.start:
            raise ValueError(f"signal {name!r} has {field.shape[1]} columns, the packing expects "
                             f"{column.stop - column.start}")
        parts[column.dtype].append(field)
    return {dtype: torch.cat(fields, dim=1) if fields else any_field.new_empty((e, 0), dtype=_DTYPES[dtype])
            for dtype, fields in parts.items()}

