"""The signals are declared once (`esper_fx.contracts.signals.SIGNALS`): the contract's dict, the host's
lists of each part's fields and the order of the assembled signals are the declaration's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from esper_fx.contracts.blueprints import BLUEPRINT_MENUS
from esper_fx.contracts.signals import PARTS, SIGNAL_FIELDS, SIGNALS, signal_columns, signal_names
from esper_fx.contracts.stages import SeedStage
from hosts.seeds.slot_report import SlotReport
from hosts.signals import assembly
from hosts.signals.assembly import SLOT_TABLES, EnvView, SignalLayout, assemble_signals, env_values, pack_signals
from hosts.signals.masks import MASK_FIELDS, ActionMasks
from hosts.signals.slots import SLOT_BOOL_FIELDS, SLOT_FLOAT_FIELDS, SLOT_INT_FIELDS
from hosts.signals.tracker import SignalTracker

MENU = BLUEPRINT_MENUS["cnn"]
SLOTS = ("r0c0", "r0c1", "r0c2")
T = 25


def test_the_contracts_dict_is_the_declaration_in_its_order():
    assert list(SIGNAL_FIELDS) == [s.name for s in SIGNALS]
    assert len(set(SIGNAL_FIELDS)) == len(SIGNALS) == 39
    assert all(SIGNAL_FIELDS[s.name] == (s.shape, s.dtype) for s in SIGNALS)
    assert {s.part for s in SIGNALS} == set(PARTS)
    # a few fixed points of the contract order, which the packed columns follow
    assert [s.name for s in SIGNALS[:2]] == ["obs", "mask_slot"]
    assert [s.name for s in SIGNALS[-2:]] == ["slot_acc_at_germination", "slot_acc_at_germination_valid"]


def test_each_part_lists_its_fields_in_the_declarations_order_and_the_parts_cover_it_once():
    host_lists = {
        ("observation", None): ("obs",),
        ("mask", None): MASK_FIELDS,
        ("env", "int32"): assembly.ENV_INT_FIELDS,
        ("env", "float32"): assembly.ENV_FLOAT_FIELDS,
        ("env", "bool"): assembly.ENV_BOOL_FIELDS,
        ("slot", "bool"): SLOT_BOOL_FIELDS,
        ("slot", "int32"): SLOT_INT_FIELDS,
        ("slot", "float32"): SLOT_FLOAT_FIELDS,
        ("slot_value", "float32"): assembly.SLOT_VALUE_FIELDS,
        ("slot_value", "bool"): assembly.SLOT_VALID_FIELDS,
    }
    for (part, dtype), names in host_lists.items():
        assert names == signal_names(part, dtype), (part, dtype)
        declared = [s.name for s in SIGNALS if s.name in names]
        assert list(names) == declared  # in contract order
    listed = [name for names in host_lists.values() for name in names]
    assert sorted(listed) == sorted(SIGNAL_FIELDS)  # every signal in exactly one list
    with pytest.raises(ValueError, match="no signal part"):
        signal_names("per_env")


def test_the_host_side_values_are_keyed_by_the_declarations_names():
    assert [f"mask_{f}".replace("slot_by_op", "slot_op") for f in ActionMasks._fields] == list(MASK_FIELDS)
    assert tuple(SLOT_TABLES) == assembly.SLOT_VALUE_FIELDS
    assert assembly.SLOT_VALID_FIELDS == tuple(f"{name}_valid" for name in SLOT_TABLES)
    view_fields = {f.name for f in dataclasses.fields(EnvView)}
    assert set(SLOT_TABLES.values()) <= view_fields
    # every other field of a view is the tracker, the reports, or a per-env signal of the same name
    own = view_fields - {"tracker", "reports"} - set(SLOT_TABLES.values())
    assert own <= set(signal_names("env")) and own


def _view(reports=None, panic=False, contributions=None) -> EnvView:
    tracker = SignalTracker().update(3, 120, 2.4, 10.0, 2.3, 11.0, len(reports or {}), 2)
    return EnvView(tracker=tracker, reports=reports or {}, host_params=6418, host_max_acc=12.5,
                   num_contributing_fossilized=1, panic=panic, auto_culls=2, contributions=contributions or {},
                   acc_at_germination={"r0c1": 9.5}, seed_flop_share=0.25)


def _report(**overrides) -> SlotReport:
    fields = dict(
        slot_id="r0c1", seed_id="s1", blueprint_id=MENU[1], stage=SeedStage.TRAINING,
        previous_stage=SeedStage.GERMINATED, epochs_in_stage=2, epochs_total=4, alpha=0.0,
        total_improvement=1.5, improvement_since_stage_start=0.5, current_val_accuracy=11.0,
        contribution=None, seed_params=250, gradient_norm=0.5, gradient_measured=True, gradient_ratio=0.3,
    )
    fields.update(overrides)
    return SlotReport(**fields)


def test_the_assembled_signals_are_the_declarations_fields_in_its_order_with_its_shapes_and_dtypes():
    layout = SignalLayout(SLOTS, ("r0c1", "r0c2"), MENU, T, None, True, 1)
    views = [_view(), _view({"r0c1": _report()}, panic=True, contributions={"r0c1": 0.75})]
    signals = assemble_signals(views, layout, torch.device("cpu"))
    assert list(signals) == list(SIGNAL_FIELDS)
    dtypes = {"float32": torch.float32, "int32": torch.int32, "bool": torch.bool}
    columns = signal_columns(len(SLOTS), len(MENU), signals["obs"].shape[1])
    for s in SIGNALS:
        tensor = signals[s.name]
        assert tensor.dtype == dtypes[s.dtype], s.name
        assert tuple(tensor.shape) == (2,) + columns[s.name].shape, s.name
    values = env_values(views[1], layout)
    assert set(values) == set(signal_names("env"))
    for name in signal_names("env"):
        assert signals[name][1].item() == pytest.approx(values[name]), name
    assert signals["num_contributing_fossilized"].tolist() == [1, 1] and signals["panic"].tolist() == [False, True]
    assert signals["total_seeds"].tolist() == [0, 1] and signals["seed_params"].tolist() == [0.0, 250.0]
    assert signals["slot_contribution"][1].tolist() == [0.0, 0.75, 0.0]
    assert signals["slot_contribution_valid"][1].tolist() == [False, True, False]
    assert signals["slot_acc_at_germination_valid"].tolist() == [[False] * 3, [False, True, False]]
    assert signals["slot_stage"][1].tolist() == [0, int(SeedStage.TRAINING), 0]
    assert signals["slot_blueprint"][1].tolist() == [-1, 1, -1]
    packed = pack_signals(signals, columns)
    for name, column in columns.items():  # the packing reads each field back where the declaration puts it
        assert torch.equal(packed[column.dtype][:, column.start:column.stop].reshape(signals[name].shape),
                           signals[name].to(packed[column.dtype].dtype))
