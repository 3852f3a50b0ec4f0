"""Contracts: stage values, the transition table, slot ids, heads and observation sizes (BEHAVIOUR §1, §8.1)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.actions import (
    ACTION_HEADS, DEFAULT_TEMPO, HEAD_OP, NUM_HEADS, TEMPO_NAMES, BlendAlgorithm, LifecycleOp, head_sizes,
)
from esper_fx.contracts.blueprints import BLUEPRINT_MENUS, BLUEPRINT_NAMES
from esper_fx.contracts.observation import obs_dim, slot_tempo_onehot
from esper_fx.contracts.signals import SIGNAL_DTYPES, SIGNAL_FIELDS
from esper_fx.contracts.slots import SlotIdError, format_slot_id, parse_slot_id, slot_sort_key, sort_slot_ids
from esper_fx.contracts.stages import (
    ACTIVE_STAGES, CULLABLE_STAGES, FAILURE_STAGES, FOSSILIZABLE_STAGES, VALID_TRANSITIONS, SeedStage,
    gate_for_target, is_valid_transition, next_stage,
)
from esper_fx.contracts.tasks import TASKS, TASK_NAMES, task_facts, task_slot_ids


def test_seed_stage_integer_values_match_spec():
    expected = {
        "UNKNOWN": 0, "DORMANT": 1, "GERMINATED": 2, "TRAINING": 3, "BLENDING": 4, "PROBATIONARY": 6,
        "FOSSILIZED": 7, "CULLED": 8, "EMBARGOED": 9, "RESETTING": 10,
    }
    assert {s.name: int(s) for s in SeedStage} == expected
    assert 5 not in {int(s) for s in SeedStage}


def test_transition_table_is_exactly_the_spec_table():
    S = SeedStage
    assert VALID_TRANSITIONS == {
        S.UNKNOWN: (S.DORMANT,),
        S.DORMANT: (S.GERMINATED,),
        S.GERMINATED: (S.TRAINING, S.CULLED),
        S.TRAINING: (S.BLENDING, S.CULLED),
        S.BLENDING: (S.PROBATIONARY, S.CULLED),
        S.PROBATIONARY: (S.FOSSILIZED, S.CULLED),
        S.FOSSILIZED: (),
        S.CULLED: (S.EMBARGOED,),
        S.EMBARGOED: (S.RESETTING,),
        S.RESETTING: (S.DORMANT,),
    }


@given(st.sampled_from(list(SeedStage)), st.sampled_from(list(SeedStage)))
def test_transition_valid_iff_target_listed(source, target):
    assert is_valid_transition(source, target) == (target in VALID_TRANSITIONS[source])


def test_fossilized_has_no_targets_and_next_stage_skips_failures():
    assert VALID_TRANSITIONS[SeedStage.FOSSILIZED] == ()
    assert next_stage(SeedStage.FOSSILIZED) is None
    assert next_stage(SeedStage.TRAINING) == SeedStage.BLENDING
    assert next_stage(SeedStage.PROBATIONARY) == SeedStage.FOSSILIZED


def test_stage_sets_match_spec():
    S = SeedStage
    assert ACTIVE_STAGES == {S.TRAINING, S.BLENDING, S.PROBATIONARY, S.FOSSILIZED}
    assert FAILURE_STAGES == {S.CULLED, S.EMBARGOED, S.RESETTING}
    assert FOSSILIZABLE_STAGES == {S.PROBATIONARY}
    assert CULLABLE_STAGES == {S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY}


def test_gate_levels_per_target():
    S = SeedStage
    assert [gate_for_target(s) for s in (S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY,
                                           S.FOSSILIZED, S.CULLED)] == [0, 1, 2, 3, 5, 0]


def test_slot_id_format_and_parse():
    assert format_slot_id(0, 0) == "r0c0"
    assert format_slot_id(10, 20) == "r10c20"
    assert parse_slot_id("r1c3") == (1, 3)
    for row, col in ((-1, 0), (0, -1)):
        with pytest.raises(SlotIdError):
            format_slot_id(row, col)
    assert issubclass(SlotIdError, ValueError)


@pytest.mark.parametrize("legacy", ["early", "mid", "late"])
def test_legacy_slot_names_are_rejected_with_migration_hint(legacy):
    with pytest.raises(ValueError) as info:
        parse_slot_id(legacy)
    assert "no longer supported" in str(info.value)
    assert "r0c0" in str(info.value)


@pytest.mark.parametrize("bad", ["slot0", "r0", "c0", "0c0", "r0c", "r-1c0", "r0c-1", "invalid", "", " r0c0"])
def test_malformed_slot_ids_raise(bad):
    with pytest.raises(ValueError):
        parse_slot_id(bad)


def test_slot_sort_is_numeric_row_major():
    assert sort_slot_ids(["r1c0", "r0c2", "r0c0"]) == ["r0c0", "r0c2", "r1c0"]
    assert sort_slot_ids(["r10c0", "r2c0"]) == ["r2c0", "r10c0"]
    assert slot_sort_key("r2c0") < slot_sort_key("r10c0")


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_slot_id_round_trips(row, col):
    assert parse_slot_id(format_slot_id(row, col)) == (row, col)


def test_action_heads_ops_and_blends():
    assert ACTION_HEADS == ("slot", "blueprint", "blend", "op", "tempo")
    assert ACTION_HEADS.index("op") == HEAD_OP and NUM_HEADS == 5
    assert TEMPO_NAMES == ("fast", "standard", "slow") and DEFAULT_TEMPO == 1
    assert [int(o) for o in LifecycleOp] == [0, 1, 2, 3]
    assert [o.name for o in LifecycleOp] == ["WAIT", "GERMINATE", "CULL", "FOSSILIZE"]
    assert [b.name for b in BlendAlgorithm] == ["LINEAR", "SIGMOID", "GATED"]


def test_blueprint_menus_per_topology():
    assert BLUEPRINT_MENUS["cnn"] == ("noop", "conv_light", "attention", "norm", "depthwise")
    assert BLUEPRINT_MENUS["transformer"] == ("noop", "lora", "attention", "norm", "mlp_small")
    for topology, menu in BLUEPRINT_MENUS.items():
        assert menu[0] == "noop"
        assert set(menu) <= set(BLUEPRINT_NAMES[topology])


def test_observation_sizes_match_spec():
    assert obs_dim(3) == 89 and obs_dim(3, telemetry=False) == 59
    assert obs_dim(5) == 133 and obs_dim(5, telemetry=False) == 83
    assert [obs_dim(s, telemetry=False) for s in (1, 3, 5, 25)] == [35, 59, 83, 323]
    assert head_sizes(3) == (3, 5, 3, 4, 3) and head_sizes(5) == (5, 5, 3, 4, 3)


def test_the_tempo_one_hot_follows_the_blueprint_one_hot():
    assert slot_tempo_onehot() == 9


def test_signal_fields_use_only_bridge_safe_dtypes():
    assert {dtype for _, dtype in SIGNAL_FIELDS.values()} <= SIGNAL_DTYPES
    assert {"obs", "mask_slot", "mask_blueprint", "mask_blend", "mask_op", "mask_tempo"} <= set(SIGNAL_FIELDS)


def test_task_tables_agree():
    assert TASK_NAMES == tuple(TASKS) and task_facts("PYTEXT") is TASKS["pytext"]
    assert task_slot_ids("cifar10_deep") == ("r0c0", "r0c1", "r0c2", "r0c3", "r0c4")

