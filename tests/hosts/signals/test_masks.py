"""Action masks (BEHAVIOUR §9.1)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.actions import LifecycleOp
from esper_fx.contracts.signals import SIGNAL_FIELDS
from esper_fx.contracts.stages import SeedStage
from hosts.seeds.slot_report import SlotReport
from hosts.signals.assembly import stack_masks
from hosts.signals.masks import MASK_FIELDS, ActionMasks, build_masks

SLOTS = ("r0c0", "r0c1", "r0c2")
WAIT, GERMINATE, CULL, FOSSILIZE = (int(op) for op in LifecycleOp)


def report(slot: str = "r0c1", stage: SeedStage = SeedStage.TRAINING, age: int = 3) -> SlotReport:
    return SlotReport(
        slot_id=slot, seed_id=f"env0_seed_{slot}", blueprint_id="conv_light", stage=stage,
        previous_stage=SeedStage.GERMINATED, epochs_in_stage=min(age, 1), epochs_total=age, alpha=0.0,
        current_val_accuracy=40.0, total_improvement=0.0, improvement_since_stage_start=0.0,
        contribution=None, seed_params=100, gradient_norm=0.1, gradient_measured=True, gradient_ratio=0.2,
    )


def masks_for(reports=None, enabled=("r0c1",), max_seeds=None, total_seeds=None) -> ActionMasks:
    reports = reports or {}
    if total_seeds is None:
        total_seeds = sum(1 for r in reports.values() if r.stage != SeedStage.DORMANT)
    return build_masks(reports, enabled, SLOTS, 5, max_seeds, total_seeds, min_cull_age=1)


def test_mask_shapes_and_constant_heads_for_the_default_config():
    masks = masks_for()
    assert [len(head) for head in masks] == [3, 5, 3, 4, 3, 12]  # slot_by_op: 4 ops x 3 slots
    assert masks.slot == (False, True, False)
    assert masks.blueprint == (False, True, True, True, True)
    assert masks.blend == (True, True, True)
    assert masks.op[WAIT]


def test_all_slots_empty_allows_germinate_only_besides_wait():
    assert masks_for().op == (True, True, False, False)


def test_seed_limit_reached_blocks_germinate():
    assert not masks_for(enabled=SLOTS, max_seeds=3, total_seeds=3).op[GERMINATE]
    assert masks_for(enabled=SLOTS, max_seeds=3, total_seeds=2).op[GERMINATE]


@pytest.mark.parametrize("max_seeds", [None, 0])
def test_max_seeds_none_or_zero_is_unlimited(max_seeds):
    assert masks_for(max_seeds=max_seeds, total_seeds=1000).op[GERMINATE]


def test_probationary_seed_allows_fossilize():
    assert masks_for({"r0c1": report(stage=SeedStage.PROBATIONARY)}).op[FOSSILIZE]


def test_fossilized_seed_blocks_germinate_fossilize_and_cull():
    op = masks_for({"r0c1": report(stage=SeedStage.FOSSILIZED, age=10)}).op
    assert op == (True, False, False, False)


def test_germinated_seed_is_cullable_only_from_age_one():
    assert not masks_for({"r0c1": report(stage=SeedStage.GERMINATED, age=0)}).op[CULL]
    assert masks_for({"r0c1": report(stage=SeedStage.GERMINATED, age=1)}).op[CULL]


@pytest.mark.parametrize(
    "stage", [SeedStage.GERMINATED, SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY]
)
def test_every_cullable_stage_with_age_one_allows_cull(stage):
    assert masks_for({"r0c1": report(stage=stage, age=1)}).op[CULL]


def test_no_enabled_slot_allows_only_wait():
    masks = masks_for({"r0c1": report(stage=SeedStage.PROBATIONARY)}, enabled=())
    assert masks.op == (True, False, False, False)
    assert any(masks.slot)  # the slot head keeps one valid entry (irrelevant for WAIT)


def test_dormant_report_counts_as_an_empty_slot():
    op = masks_for({"r0c1": report(stage=SeedStage.DORMANT, age=5)}).op
    assert op == (True, True, False, False)


def test_op_mask_is_optimistic_over_enabled_slots():
    reports = {"r0c0": report("r0c0", SeedStage.PROBATIONARY), "r0c2": report("r0c2", SeedStage.TRAINING)}
    op = masks_for(reports, enabled=SLOTS).op
    assert op == (True, True, True, True)  # r0c1 empty, r0c0 fossilizable, both cullable


def test_all_enabled_slots_occupied_blocks_germinate():
    reports = {sid: report(sid, SeedStage.TRAINING) for sid in SLOTS}
    assert not masks_for(reports, enabled=SLOTS).op[GERMINATE]


def test_reports_of_disabled_slots_are_ignored():
    op = masks_for({"r0c2": report("r0c2", SeedStage.PROBATIONARY)}, enabled=("r0c1",)).op
    assert op == (True, True, False, False)


def test_unknown_slot_ids_raise():
    with pytest.raises(ValueError):
        masks_for(enabled=("r0c7",))
    with pytest.raises(ValueError):
        masks_for({"r1c0": report("r1c0")})


stages = st.sampled_from(list(SeedStage))
slot_states = st.dictionaries(
    st.sampled_from(SLOTS), st.tuples(stages, st.integers(0, 30)), max_size=3
)


@given(
    states=slot_states,
    enabled=st.lists(st.sampled_from(SLOTS), unique=True, max_size=3),
    max_seeds=st.one_of(st.none(), st.integers(0, 4)),
    total_seeds=st.integers(0, 6),
    num_blueprints=st.integers(2, 8),
)
def test_every_head_of_every_mask_has_a_true_entry(states, enabled, max_seeds, total_seeds, num_blueprints):
    reports = {sid: report(sid, stage, age) for sid, (stage, age) in states.items()}
    masks = build_masks(reports, enabled, SLOTS, num_blueprints, max_seeds, total_seeds, min_cull_age=1)
    assert all(any(head) for head in masks)
    assert masks.op[WAIT]


@given(states=slot_states, enabled=st.lists(st.sampled_from(SLOTS), unique=True, min_size=1, max_size=3))
def test_slot_mask_is_exactly_the_enabled_slots_whatever_the_states(states, enabled):
    reports = {sid: report(sid, stage, age) for sid, (stage, age) in states.items()}
    masks = build_masks(reports, enabled, SLOTS, 5, None, len(reports), min_cull_age=1)
    assert masks.slot == tuple(sid in enabled for sid in SLOTS)


def test_stack_masks_gives_fresh_contiguous_bool_tensors_matching_the_contract():
    per_env = [masks_for(), masks_for({"r0c1": report(stage=SeedStage.PROBATIONARY)})]
    stacked = stack_masks(per_env, "cpu")
    assert tuple(stacked) == MASK_FIELDS
    for name, tensor in stacked.items():
        assert SIGNAL_FIELDS[name][1] == "bool" and tensor.dtype == torch.bool
        assert tensor.is_contiguous() and tensor.shape[0] == 2
    assert stacked["mask_slot"].shape == (2, 3) and stacked["mask_blueprint"].shape == (2, 5)
    assert stacked["mask_op"].tolist() == [[True, True, False, False], [True, False, True, True]]
    assert stacked["mask_slot_op"].shape == (2, 4, 3)
    pointers = {t.untyped_storage().data_ptr() for t in stacked.values()}
    assert len(pointers) == 6  # no two masks share storage


@pytest.mark.gpu
def test_stack_masks_on_cuda_matches_cpu():
    per_env = [masks_for(), masks_for({"r0c1": report(stage=SeedStage.PROBATIONARY)})]
    on_gpu = stack_masks(per_env, "cuda:0")
    on_cpu = stack_masks(per_env, "cpu")
    for name in MASK_FIELDS:
        assert on_gpu[name].device.type == "cuda" and on_gpu[name].is_contiguous()
        assert torch.equal(on_gpu[name].cpu(), on_cpu[name])


def _by_op(masks: ActionMasks) -> dict[int, tuple[bool, ...]]:
    n = len(masks.slot)
    return {op: masks.slot_by_op[op * n:(op + 1) * n] for op in range(4)}


def test_each_op_gets_the_slots_it_can_act_on():
    reports = {"r0c0": report("r0c0", SeedStage.PROBATIONARY, age=9), "r0c1": report("r0c1", SeedStage.TRAINING, age=2)}
    masks = build_masks(reports, SLOTS, SLOTS, 5, None, 2, min_cull_age=5)
    by_op = _by_op(masks)
    assert by_op[WAIT] == (True, True, True)
    assert by_op[GERMINATE] == (False, False, True)  # only the empty slot
    assert by_op[CULL] == (True, False, False)  # the r0c1 seed is younger than 5 epochs
    assert by_op[FOSSILIZE] == (True, False, False)  # only the PROBATIONARY seed
    empty = _by_op(build_masks({}, ("r0c1",), SLOTS, 5, None, 0, min_cull_age=1))
    assert empty[FOSSILIZE] == (False, True, False)  # no target: the enabled slots keep the row valid


def test_min_cull_age_masks_cull_for_young_seeds():
    young = {"r0c1": report(stage=SeedStage.BLENDING, age=4)}
    assert build_masks(young, ("r0c1",), SLOTS, 5, None, 1, min_cull_age=5).op[CULL] is False
    assert build_masks(young, ("r0c1",), SLOTS, 5, None, 1, min_cull_age=1).op[CULL] is True


def test_one_seed_at_a_time_waits_for_the_developing_seed():
    developing = {"r0c0": report("r0c0", SeedStage.BLENDING, age=5)}
    assert build_masks(developing, SLOTS, SLOTS, 5, None, 1, min_cull_age=1, one_seed_at_a_time=True).op[GERMINATE] is False
    assert build_masks(developing, SLOTS, SLOTS, 5, None, 1, min_cull_age=1, one_seed_at_a_time=False).op[GERMINATE] is True
    fossil = {"r0c0": report("r0c0", SeedStage.FOSSILIZED, age=12)}
    assert build_masks(fossil, SLOTS, SLOTS, 5, None, 1, min_cull_age=1, one_seed_at_a_time=True).op[GERMINATE] is True


def test_the_tempo_mask_is_the_clock_s_and_never_empty():
    assert masks_for().tempo == (True, True, True)  # without a clock: every tempo
    reports, slots = {}, ("r0c1",)
    assert build_masks(reports, slots, SLOTS, 5, None, 0, 1, tempo=(False, True, False)).tempo == (False, True, False)
    assert build_masks(reports, slots, SLOTS, 5, None, 0, 1, tempo=(False, False, False)).tempo == (True, True, True)
