"""Contracts: stage values, the transition table, slot ids, heads and observation sizes (BEHAVIOUR §1, §8.1)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esper_fx import contracts
from esper_fx.contracts import SeedStage


def test_seed_stage_integer_values_match_spec():
    expected = {
        "UNKNOWN": 0, "DORMANT": 1, "GERMINATED": 2, "TRAINING": 3, "BLENDING": 4, "PROBATIONARY": 6,
        "FOSSILIZED": 7, "CULLED": 8, "EMBARGOED": 9, "RESETTING": 10,
    }
    assert {s.name: int(s) for s in SeedStage} == expected
    assert 5 not in {int(s) for s in SeedStage}


def test_transition_table_is_exactly_the_spec_table():
    S = SeedStage
    assert contracts.VALID_TRANSITIONS == {
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
    assert contracts.is_valid_transition(source, target) == (target in contracts.VALID_TRANSITIONS[source])


def test_fossilized_has_no_targets_and_next_stage_skips_failures():
    assert contracts.VALID_TRANSITIONS[SeedStage.FOSSILIZED] == ()
    assert contracts.next_stage(SeedStage.FOSSILIZED) is None
    assert contracts.next_stage(SeedStage.TRAINING) == SeedStage.BLENDING
    assert contracts.next_stage(SeedStage.PROBATIONARY) == SeedStage.FOSSILIZED


def test_stage_sets_match_spec():
    S = SeedStage
    assert contracts.ACTIVE_STAGES == {S.TRAINING, S.BLENDING, S.PROBATIONARY, S.FOSSILIZED}
    assert contracts.FAILURE_STAGES == {S.CULLED, S.EMBARGOED, S.RESETTING}
    assert contracts.FOSSILIZABLE_STAGES == {S.PROBATIONARY}
    assert contracts.CULLABLE_STAGES == {S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY}


def test_gate_levels_per_target():
    S = SeedStage
    assert [contracts.gate_for_target(s) for s in (S.GERMINATED, S.TRAINING, S.BLENDING, S.PROBATIONARY,
                                           S.FOSSILIZED, S.CULLED)] == [0, 1, 2, 3, 5, 0]


def test_slot_id_format_and_parse():
    assert contracts.format_slot_id(0, 0) == "r0c0"
    assert contracts.format_slot_id(10, 20) == "r10c20"
    assert contracts.parse_slot_id("r1c3") == (1, 3)
    for row, col in ((-1, 0), (0, -1)):
        with pytest.raises(contracts.SlotIdError):
            contracts.format_slot_id(row, col)
    assert issubclass(contracts.SlotIdError, ValueError)


@pytest.mark.parametrize("legacy", ["early", "mid", "late"])
def test_legacy_slot_names_are_rejected_with_migration_hint(legacy):
    with pytest.raises(ValueError) as info:
        contracts.parse_slot_id(legacy)
    assert "no longer supported" in str(info.value)
    assert "r0c0" in str(info.value)


@pytest.mark.parametrize("bad", ["slot0", "r0", "c0", "0c0", "r0c", "r-1c0", "r0c-1", "invalid", "", " r0c0"])
def test_malformed_slot_ids_raise(bad):
    with pytest.raises(ValueError):
        contracts.parse_slot_id(bad)


def test_slot_sort_is_numeric_row_major():
    assert contracts.sort_slot_ids(["r1c0", "r0c2", "r0c0"]) == ["r0c0", "r0c2", "r1c0"]
    assert contracts.sort_slot_ids(["r10c0", "r2c0"]) == ["r2c0", "r10c0"]
    assert contracts.slot_sort_key("r2c0") < contracts.slot_sort_key("r10c0")


@given(st.integers(0, 10_000), st.integers(0, 10_000))
def test_slot_id_round_trips(row, col):
    assert contracts.parse_slot_id(contracts.format_slot_id(row, col)) == (row, col)


def test_action_heads_ops_and_blends():
    assert contracts.ACTION_HEADS == ("slot", "blueprint", "blend", "op", "tempo")
    assert contracts.ACTION_HEADS.index("op") == contracts.HEAD_OP and contracts.NUM_HEADS == 5
    assert contracts.TEMPO_NAMES == ("fast", "standard", "slow") and contracts.DEFAULT_TEMPO == 1
    assert [int(o) for o in contracts.LifecycleOp] == [0, 1, 2, 3]
    assert [o.name for o in contracts.LifecycleOp] == ["WAIT", "GERMINATE", "CULL", "FOSSILIZE"]
    assert [b.name for b in contracts.BlendAlgorithm] == ["LINEAR", "SIGMOID", "GATED"]


def test_blueprint_menus_per_topology():
    assert contracts.BLUEPRINT_MENUS["cnn"] == ("noop", "conv_light", "attention", "norm", "depthwise")
    assert contracts.BLUEPRINT_MENUS["transformer"] == ("noop", "lora", "attention", "norm", "mlp_small")
    for topology, menu in contracts.BLUEPRINT_MENUS.items():
        assert menu[0] == "noop"
        assert set(menu) <= set(contracts.BLUEPRINT_NAMES[topology])


def test_observation_sizes_match_spec():
    assert contracts.obs_dim(3) == 89 and contracts.obs_dim(3, telemetry=False) == 59
    assert contracts.obs_dim(5) == 133 and contracts.obs_dim(5, telemetry=False) == 83
    assert [contracts.obs_dim(s, telemetry=False) for s in (1, 3, 5, 25)] == [35, 59, 83, 323]
    assert contracts.head_sizes(3) == (3, 5, 3, 4, 3) and contracts.head_sizes(5) == (5, 5, 3, 4, 3)


@given(st.integers(1, 30), st.integers(2, 9), st.booleans())
def test_observation_blocks_tile_the_vector(num_slots, num_blueprints, telemetry):
    dim = contracts.obs_dim(num_slots, telemetry, num_blueprints)
    last_slot_end = contracts.slot_block_start(num_slots - 1, num_blueprints) + contracts.slot_block_size(num_blueprints)
    if telemetry:
        assert contracts.telemetry_block_start(0, num_slots, num_blueprints) == last_slot_end
        assert contracts.telemetry_block_start(num_slots - 1, num_slots, num_blueprints) + 10 == dim
    else:
        assert last_slot_end == dim


def test_default_layout_indices():
    assert contracts.slot_block_start(0) == 23 and contracts.slot_block_start(2) == 47
    assert contracts.telemetry_block_start(0, 3) == 59 and contracts.telemetry_block_start(2, 3) == 79
    assert contracts.slot_tempo_onehot() == 9


def test_signal_fields_use_only_bridge_safe_dtypes():
    assert {dtype for _, dtype in contracts.SIGNAL_FIELDS.values()} <= contracts.SIGNAL_DTYPES
    assert {"obs", "mask_slot", "mask_blueprint", "mask_blend", "mask_op", "mask_tempo"} <= set(contracts.SIGNAL_FIELDS)


def test_task_tables_agree():
    assert contracts.TASK_NAMES == tuple(contracts.TASKS) and contracts.task_facts("PYTEXT") is contracts.TASKS["pytext"]
    assert contracts.task_slot_ids("cifar10_deep") == ("r0c0", "r0c1", "r0c2", "r0c3", "r0c4")

