"""Raw observation and per-slot signal fields (BEHAVIOUR §8.1–§8.4, §3.4)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.blueprints import BLUEPRINT_MENUS
from esper_fx.contracts.observation import (
    NUM_BASE_FEATURES, OBS_ACC_DELTA, OBS_ACC_HISTORY, OBS_BEST_VAL_LOSS, OBS_LOSS_DELTA, OBS_LOSS_HISTORY,
    OBS_SEED_UTILIZATION, OBS_TOTAL_PARAMS, OBS_TRAIN_LOSS, OBS_VAL_ACC, OBS_VAL_LOSS, SLOT_ALPHA,
    SLOT_BLUEPRINT_ONEHOT, SLOT_IMPROVEMENT, SLOT_IS_ACTIVE, SLOT_STAGE, TELEMETRY_BLOCK, TEL_ACCURACY,
    TEL_ACCURACY_DELTA, TEL_ALPHA, TEL_EPOCHS_IN_STAGE, TEL_EXPLODING, TEL_GRAD_HEALTH, TEL_GRAD_NORM, TEL_STAGE,
    TEL_TEMPORAL, TEL_VANISHING, obs_dim, slot_block_size,
)
from esper_fx.contracts.signals import SIGNAL_FIELDS
from esper_fx.contracts.slots import format_slot_id
from esper_fx.contracts.stages import SeedStage
from hosts.seeds.slot_report import SlotReport
from hosts.signals.assembly import build_slot_fields, stack_observations
from hosts.signals.observation import ObservationOptions, build_observation, safe
from hosts.signals.slots import SLOT_BOOL_FIELDS, SLOT_FLOAT_FIELDS, SLOT_INT_FIELDS
from hosts.signals.tracker import SignalTracker, TrackerSignals

MENU = BLUEPRINT_MENUS["cnn"]  # noop, conv_light, attention, norm, depthwise
SLOTS = ("r0c0", "r0c1", "r0c2")
HOST_PARAMS = 6418
T = 25


def report(slot: str = "r0c1", stage: SeedStage = SeedStage.TRAINING, **overrides) -> SlotReport:
    fields = dict(
        slot_id=slot, seed_id=f"env0_seed_{slot}", blueprint_id="attention", stage=stage,
        previous_stage=SeedStage.TRAINING, epochs_in_stage=2, epochs_total=6, alpha=0.4,
        current_val_accuracy=42.0, total_improvement=3.0, improvement_since_stage_start=1.5,
        contribution=None, seed_params=250, gradient_norm=0.5, gradient_measured=True, gradient_ratio=0.3,
    )
    fields.update(overrides)
    return SlotReport(**fields)


def first_signals(val_loss: float = 2.3, val_acc: float = 11.0, train_loss: float = 2.4) -> TrackerSignals:
    return SignalTracker().update(1, 40, train_loss, 10.0, val_loss, val_acc, 0, 1)


def observe(signals=None, reports=None, enabled=("r0c1",), slot_ids=SLOTS, menu=MENU,
            max_seeds=None, telemetry=True, max_epochs=T, log_params=False) -> list[float]:
    return build_observation(
        signals or first_signals(), max_epochs, HOST_PARAMS, reports or {}, enabled, slot_ids, menu,
        max_seeds, ObservationOptions(telemetry, log_params),
    )


def slot_part(obs, index):
    start = NUM_BASE_FEATURES + index * slot_block_size()
    return obs[start : start + slot_block_size()]


def telemetry_part(obs, index, num_slots=3):
    start = NUM_BASE_FEATURES + num_slots * slot_block_size() + index * TELEMETRY_BLOCK
    return obs[start : start + TELEMETRY_BLOCK]


# --- size -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "num_slots, telemetry, expected",
    [(1, False, 35), (3, False, 59), (5, False, 83), (25, False, 323), (1, True, 45), (3, True, 89), (5, True, 133)],
)
def test_observation_has_exactly_d_features(num_slots, telemetry, expected):
    slot_ids = tuple(format_slot_id(0, i) for i in range(num_slots))
    obs = observe(enabled=slot_ids[:1], slot_ids=slot_ids, telemetry=telemetry,
                  reports={slot_ids[0]: report(slot_ids[0])})
    assert len(obs) == expected == obs_dim(num_slots, telemetry)


def test_a_custom_menu_changes_the_slot_block_width():
    menu = ("noop", "norm", "attention")
    obs = observe(menu=menu, reports={"r0c1": report()})
    assert len(obs) == 23 + 3 * 10 + 3 * 10
    start = 23 + 10
    assert obs[start + SLOT_BLUEPRINT_ONEHOT : start + 7] == [0.0, 0.0, 1.0]
    assert obs[start + 7 : start + 10] == [0.0, 1.0, 0.0]  # the standard tempo


# --- base features ----------------------------------------------------------------------------


def test_first_epoch_base_features_match_the_acceptance_property():
    obs = observe(signals=first_signals(val_loss=2.3, val_acc=11.0))
    assert obs[OBS_LOSS_DELTA] == 0.0  # +inf -> safe default
    assert obs[OBS_ACC_DELTA] == 11.0
    assert obs[OBS_LOSS_HISTORY] == [0.0, 0.0, 0.0, 0.0, 2.3]
    assert obs[OBS_ACC_HISTORY] == [0.0, 0.0, 0.0, 0.0, 11.0]
    assert obs[OBS_SEED_UTILIZATION] == 0.0
    assert obs[:2] == [1.0, 40.0]


def test_nan_val_loss_falls_back_to_ten():
    obs = observe(signals=first_signals(val_loss=math.nan))
    assert obs[OBS_VAL_LOSS] == 10.0 and obs[15] == 10.0


def test_huge_val_loss_is_clipped_to_one_hundred():
    obs = observe(signals=first_signals(val_loss=1e6, train_loss=math.inf))
    assert obs[OBS_VAL_LOSS] == 100.0 and obs[15] == 100.0 and obs[OBS_BEST_VAL_LOSS] == 100.0
    assert obs[OBS_TRAIN_LOSS] == 10.0


def test_best_val_loss_feature_is_the_ten_epoch_window_minimum():
    tracker = SignalTracker()
    for t, loss in enumerate([1.0] + [2.0] * 11, start=1):
        signals = tracker.update(t, t, loss, 50.0, loss, 50.0, 0, 1)
    assert observe(signals=signals)[OBS_BEST_VAL_LOSS] == 2.0


def test_raw_features_are_not_clipped():
    signals = SignalTracker().update(200, 10**6, 1.0, 250.0, 1.0, 150.0, 0, 1)
    obs = observe(signals=signals)
    assert obs[0] == 200.0 and obs[1] == 1e6 and obs[5] == 250.0 and obs[OBS_VAL_ACC] == 150.0
    assert obs[OBS_ACC_DELTA] == 100.0  # safe feature: clipped


@pytest.mark.parametrize("value, default, expected", [
    (None, 10.0, 10.0), (math.nan, 10.0, 10.0), (math.inf, 0.0, 0.0), (-math.inf, 0.0, 0.0),
    (1e6, 10.0, 100.0), (-1e6, 0.0, -100.0), (3.5, 10.0, 3.5),
])
def test_safe_replaces_non_finite_values_then_clips(value, default, expected):
    assert safe(value, default) == expected


def test_total_params_adds_every_seed_fossils_included_but_no_empty_or_dormant_slot():
    reports = {
        "r0c0": report("r0c0", SeedStage.FOSSILIZED, seed_params=1000),
        "r0c1": report("r0c1", SeedStage.BLENDING, seed_params=200),
        "r0c2": report("r0c2", SeedStage.DORMANT, seed_params=30),
    }
    obs = observe(reports=reports, enabled=SLOTS)
    assert obs[OBS_TOTAL_PARAMS] == HOST_PARAMS + 1200


def test_log_params_observes_the_same_count_on_a_log_scale_and_nothing_else():
    reports = {"r0c0": report("r0c0", SeedStage.BLENDING, seed_params=200)}
    raw = observe(reports=reports, enabled=SLOTS)
    logged = observe(reports=reports, enabled=SLOTS, log_params=True)
    assert logged[OBS_TOTAL_PARAMS] == pytest.approx(math.log1p(HOST_PARAMS + 200))
    del logged[OBS_TOTAL_PARAMS], raw[OBS_TOTAL_PARAMS]
    assert logged == raw


def test_seed_utilization_is_total_seeds_over_max_seeds():
    reports = {"r0c0": report("r0c0", SeedStage.FOSSILIZED), "r0c1": report("r0c1")}
    assert observe(reports=reports, enabled=SLOTS, max_seeds=4)[OBS_SEED_UTILIZATION] == 0.5
    assert observe(reports=reports, enabled=SLOTS, max_seeds=None)[OBS_SEED_UTILIZATION] == 0.0


# --- slot block -------------------------------------------------------------------------------


def test_slot_block_of_a_seed_without_contribution_uses_stage_improvement():
    obs = observe(reports={"r0c1": report(stage=SeedStage.BLENDING, alpha=0.4, improvement_since_stage_start=1.5)})
    block = slot_part(obs, 1)
    assert block[SLOT_IS_ACTIVE] == 1.0 and block[SLOT_STAGE] == 4.0 and block[SLOT_ALPHA] == 0.4
    assert block[SLOT_IMPROVEMENT] == 1.5
    assert block[SLOT_BLUEPRINT_ONEHOT:SLOT_BLUEPRINT_ONEHOT + 5] == [0.0, 0.0, 1.0, 0.0, 0.0]  # attention: index 2
    assert block[SLOT_BLUEPRINT_ONEHOT + 5:] == [0.0, 1.0, 0.0]  # the standard tempo


@pytest.mark.parametrize("contribution", [0.0, -2.5, 250.0])
def test_slot_block_improvement_is_the_contribution_once_measured_unclipped(contribution):
    obs = observe(reports={"r0c1": report(contribution=contribution)})
    assert slot_part(obs, 1)[SLOT_IMPROVEMENT] == contribution


def test_blueprint_outside_the_menu_gives_an_all_zero_one_hot():
    obs = observe(reports={"r0c1": report(blueprint_id="conv_heavy")})
    assert slot_part(obs, 1)[SLOT_BLUEPRINT_ONEHOT:SLOT_BLUEPRINT_ONEHOT + 5] == [0.0] * 5
    assert slot_part(obs, 1)[SLOT_IS_ACTIVE] == 1.0


def test_fossilized_seed_has_an_active_slot_block():
    obs = observe(reports={"r0c1": report(stage=SeedStage.FOSSILIZED, alpha=1.0)})
    assert slot_part(obs, 1)[:3] == [1.0, 7.0, 1.0]


def test_blocks_are_laid_out_slots_first_then_telemetry_not_interleaved():
    reports = {sid: report(sid, alpha=0.1 * (i + 1)) for i, sid in enumerate(SLOTS)}
    obs = observe(reports=reports, enabled=SLOTS)
    assert [obs[23 + 12 * i + SLOT_ALPHA] for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    assert [obs[59 + 10 * i + TEL_ALPHA] for i in range(3)] == pytest.approx([0.1, 0.2, 0.3])


# --- telemetry block --------------------------------------------------------------------------


def test_telemetry_block_follows_the_spec_formulas():
    rep = report(stage=SeedStage.BLENDING, gradient_norm=5.0, epochs_in_stage=10, current_val_accuracy=42.0,
                 improvement_since_stage_start=-3.0, alpha=0.4)
    block = telemetry_part(observe(signals=SignalTracker().update(5, 5, 1, 1, 1, 1, 0, 0),
                                   reports={"r0c1": rep}), 1)
    assert block[TEL_GRAD_NORM] == 0.5
    assert block[TEL_GRAD_HEALTH] == 1.0
    assert block[TEL_VANISHING] == 0.0 and block[TEL_EXPLODING] == 0.0
    assert block[TEL_EPOCHS_IN_STAGE] == pytest.approx(0.2)
    assert block[TEL_ACCURACY] == pytest.approx(0.42)
    assert block[TEL_ACCURACY_DELTA] == pytest.approx(-0.3)
    assert block[TEL_STAGE] == 0.5
    assert block[TEL_ALPHA] == 0.4
    assert block[TEL_TEMPORAL] == pytest.approx(5 / 25)


def test_telemetry_caps_and_flags_at_the_extremes():
    rep = report(gradient_norm=150.0, epochs_in_stage=80, improvement_since_stage_start=40.0)
    block = telemetry_part(observe(reports={"r0c1": rep}), 1)
    assert block[TEL_GRAD_NORM] == 1.0 and block[TEL_EXPLODING] == 1.0 and block[TEL_VANISHING] == 0.0
    assert block[TEL_EPOCHS_IN_STAGE] == 1.0 and block[TEL_ACCURACY_DELTA] == 1.0


def test_vanishing_flag_needs_a_measurement():
    measured = telemetry_part(observe(reports={"r0c1": report(gradient_norm=0.0, gradient_measured=True)}), 1)
    unmeasured = telemetry_part(observe(reports={"r0c1": report(gradient_norm=0.0, gradient_measured=False)}), 1)
    assert measured[TEL_VANISHING] == 1.0 and unmeasured[TEL_VANISHING] == 0.0
    small = telemetry_part(observe(reports={"r0c1": report(gradient_norm=1e-7)}), 1)
    assert small[TEL_VANISHING] == 0.0  # strictly below 1e-7


@pytest.mark.parametrize("stage, expected", [
    (SeedStage.TRAINING, 0.3333), (SeedStage.BLENDING, 0.5),
    (SeedStage.PROBATIONARY, 0.8333), (SeedStage.FOSSILIZED, 1.0),
])
def test_stage_feature_values(stage, expected):
    block = telemetry_part(observe(reports={"r0c1": report(stage=stage)}), 1)
    assert block[TEL_STAGE] == pytest.approx(expected, abs=1e-4)


def test_temporal_position_guards_a_zero_horizon():
    block = telemetry_part(observe(reports={"r0c1": report()}, max_epochs=0), 1)
    assert block[TEL_TEMPORAL] == 1.0  # t / max(T, 1) with t = 1


# --- empty and disabled slots -----------------------------------------------------------------

@given(
    stage_by_slot=st.dictionaries(st.sampled_from(SLOTS), st.sampled_from(list(SeedStage)), max_size=3),
    enabled=st.lists(st.sampled_from(SLOTS), unique=True, max_size=3),
    telemetry=st.booleans(),
)
def test_slot_and_telemetry_blocks_are_zero_exactly_for_empty_or_disabled_slots(stage_by_slot, enabled, telemetry):
    reports = {sid: report(sid, stage) for sid, stage in stage_by_slot.items()}
    obs = observe(reports=reports, enabled=enabled, telemetry=telemetry)
    for i, sid in enumerate(SLOTS):
        seeded = sid in enabled and sid in reports and reports[sid].stage != SeedStage.DORMANT
        assert any(v != 0.0 for v in slot_part(obs, i)) == seeded
        if telemetry:
            assert any(v != 0.0 for v in telemetry_part(obs, i)) == seeded


def test_unknown_slot_ids_raise():
    with pytest.raises(ValueError):
        observe(enabled=("r0c9",))
    with pytest.raises(ValueError):
        observe(reports={"r2c0": report("r2c0")})


# --- batched tensors --------------------------------------------------------------------------


def test_stack_observations_gives_one_fresh_contiguous_float32_matrix():
    rows = [observe(), observe(reports={"r0c1": report()})]
    stacked = stack_observations(rows, "cpu")
    assert stacked.dtype == torch.float32 and stacked.shape == (2, 89) and stacked.is_contiguous()
    assert torch.equal(stacked, torch.tensor(rows, dtype=torch.float32))
    again = stack_observations(rows, "cpu")
    assert again.data_ptr() != stacked.data_ptr()


def test_stack_observations_rejects_rows_of_different_sizes():
    with pytest.raises(ValueError):
        stack_observations([observe(), observe(telemetry=False)], "cpu")


def test_slot_fields_match_the_contract_dtypes_and_shapes():
    per_env = [{"r0c1": report()}, {}, {"r0c1": report(stage=SeedStage.DORMANT)}]
    fields = build_slot_fields(per_env, ("r0c1",), SLOTS, MENU, "cpu")
    assert set(fields) == {*SLOT_BOOL_FIELDS, *SLOT_INT_FIELDS, *SLOT_FLOAT_FIELDS}
    for name, tensor in fields.items():
        assert str(tensor.dtype).removeprefix("torch.") == SIGNAL_FIELDS[name][1]
        assert SIGNAL_FIELDS[name][0] == "[E, S]"
        assert tensor.shape == (3, 3) and tensor.is_contiguous()
    storages = {t.untyped_storage().data_ptr() for t in fields.values()}
    assert len(storages) == len(fields)


def test_slot_fields_values_for_a_seed_and_for_empty_slots():
    rep = report(stage=SeedStage.BLENDING, previous_stage=SeedStage.TRAINING, epochs_in_stage=2,
                 epochs_total=6, alpha=0.25, total_improvement=3.0, improvement_since_stage_start=1.5)
    fields = build_slot_fields(
        [{"r0c1": rep}, {"r0c1": report(stage=SeedStage.DORMANT)}, {"r0c2": rep}], ("r0c1",), SLOTS, MENU, "cpu"
    )
    assert fields["slot_enabled"].tolist() == [[False, True, False]] * 3
    assert fields["slot_occupied"].tolist() == [[False, True, False], [False] * 3, [False] * 3]
    seeded = {name: tensor[0, 1].item() for name, tensor in fields.items()}
    assert seeded["slot_stage"] == 4 and seeded["slot_previous_stage"] == 3
    assert seeded["slot_eis"] == 2 and seeded["slot_age"] == 6 and seeded["slot_blueprint"] == 2
    assert seeded["slot_alpha"] == 0.25
    assert seeded["slot_total_improvement"] == 3.0 and seeded["slot_stage_improvement"] == 1.5
    assert fields["slot_blueprint"][1:].tolist() == [[-1, -1, -1]] * 2
    assert fields["slot_stage"][1:].sum().item() == 0


def test_slot_field_blueprint_outside_the_menu_is_minus_one():
    fields = build_slot_fields([{"r0c1": report(blueprint_id="conv_heavy")}], ("r0c1",), SLOTS, MENU, "cpu")
    assert fields["slot_blueprint"].tolist() == [[-1, -1, -1]]
    assert fields["slot_occupied"].tolist() == [[False, True, False]]


@pytest.mark.gpu
def test_batched_observation_and_slot_fields_on_cuda_match_cpu():
    rows = [observe(), observe(reports={"r0c1": report()})]
    on_gpu = stack_observations(rows, "cuda:0")
    assert on_gpu.device.type == "cuda" and on_gpu.is_contiguous()
    assert torch.equal(on_gpu.cpu(), stack_observations(rows, "cpu"))
    per_env = [{"r0c1": report()}, {}]
    gpu_fields = build_slot_fields(per_env, ("r0c1",), SLOTS, MENU, "cuda:0")
    cpu_fields = build_slot_fields(per_env, ("r0c1",), SLOTS, MENU, "cpu")
    for name, tensor in gpu_fields.items():
        assert tensor.device.type == "cuda" and tensor.is_contiguous()
        assert torch.equal(tensor.cpu(), cpu_fields[name])


@pytest.mark.parametrize("tempo", [0, 1, 2])
def test_the_slot_block_ends_in_the_seed_tempo_one_hot(tempo):
    obs = observe(reports={"r0c1": report(tempo=tempo)})
    assert slot_part(obs, 1)[-3:] == [1.0 if k == tempo else 0.0 for k in range(3)]


# ------------------------------------------------------------------ the fit gap (BEHAVIOUR §8.7)


@given(train=st.floats(0, 100), val=st.floats(0, 100))
def test_the_fit_gap_is_one_more_feature_at_the_end(train, val):
    signals = SignalTracker().update(1, 40, 2.4, train, 2.3, val, 0, 1)
    plain = observe(signals)
    gapped = build_observation(signals, T, HOST_PARAMS, {}, ("r0c1",), SLOTS, MENU, None,
                               ObservationOptions(True, fit_gap=True))
    assert len(gapped) == len(plain) + 1 == obs_dim(len(SLOTS), True, len(MENU), fit_gap=True)
    assert gapped[:-1] == plain  # nothing else moves
    assert gapped[-1] == pytest.approx(safe(train - val, 0.0))
    withheld = build_observation(signals, T, HOST_PARAMS, {}, ("r0c1",), SLOTS, MENU, None,
                                 ObservationOptions(True, withheld=("curves",), fit_gap=True))
    assert withheld[-1] == 0.0  # the curves withheld: so is the gap between them
