"""SeedSlot lifecycle, gates, forward semantics and blending (BEHAVIOUR §1.1–1.3, §2)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from esper_fx.contracts.stages import VALID_TRANSITIONS, SeedStage
from hosts.seeds.blending import GatedBlend, LinearBlend, SigmoidBlend
from esper_fx.contracts.lifecycle import lifecycle_timings
from hosts.seeds.lifecycle import SeedClock, SeedState, evaluate_gate
from hosts.seeds.slot import SeedSlot
from tests.hosts.lifecycle_helpers import CIFAR_CLOCK, drive_to, epoch

S = SeedStage


def cnn_slot(channels=8, clock=CIFAR_CLOCK):
    torch.manual_seed(0)
    return SeedSlot("r0c1", channels, "cnn", clock)


def tf_slot(dim=16, clock=CIFAR_CLOCK):
    torch.manual_seed(0)
    return SeedSlot("r0c1", dim, "transformer", clock)


# ------------------------------------------------------------------ BEHAVIOUR §1.1–1.2 stages and transitions


def test_stage_integer_values():
    assert [int(s) for s in S] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert VALID_TRANSITIONS[S.FOSSILIZED] == ()


@given(st.sampled_from(list(S)), st.sampled_from(list(S)))
def test_seed_state_transition_succeeds_iff_pair_is_listed(source, target):
    state = SeedState("s", "b", "r0c0", stage=source)
    ok = state.transition(target)
    assert ok == (target in VALID_TRANSITIONS[source])
    assert state.stage == (target if ok else source)
    if ok:
        assert state.previous_stage == source


def test_transition_resets_stage_baseline_and_records_previous():
    state = SeedState("s", "b", "r0c0", stage=S.GERMINATED)
    state.metrics.record_accuracy(40.0)
    state.metrics.record_accuracy(42.0)
    assert state.transition(S.TRAINING)
    assert state.previous_stage == S.GERMINATED and state.previous_epochs_in_stage == 2
    assert state.metrics.epochs_in_current_stage == 0
    assert state.metrics.accuracy_at_stage_start == 42.0
    assert state.stage_entered_at == 2


def test_stage_history_keeps_at_most_100_entries():
    state = SeedState("s", "b", "r0c0", stage=S.CULLED)
    cycle = [S.EMBARGOED, S.RESETTING, S.DORMANT, S.GERMINATED, S.CULLED]
    for _ in range(30):
        for target in cycle:
            assert state.transition(target)
    assert len(state.stage_history) == 100


def test_metrics_derived_properties():
    state = SeedState("s", "b", "r0c0")
    m = state.metrics
    m.record_accuracy(40.0)
    assert m.initial_val_accuracy == 40.0 and m.accuracy_at_stage_start == 40.0
    m.record_accuracy(45.0)
    m.accuracy_at_stage_start = 43.0
    assert m.total_improvement == 5.0 and m.improvement_since_stage_start == 2.0
    assert m.blending_delta == 0.0  # BLENDING never reached
    m.accuracy_at_blending_start, m.blending_started = 44.0, True
    assert m.blending_delta == 1.0
    assert m.best_val_accuracy == 45.0 and m.epochs_total == 2


# ------------------------------------------------------------------ BEHAVIOUR §2.8 timeline


def run_timeline(contribution, fossilize_at_g9):
    slot = cnn_slot()
    slot.germinate("conv_light", seed_id="env0_seed_0", blend="sigmoid")
    assert slot.stage == S.GERMINATED
    slot.step_epoch()  # epoch g
    stages, contributions = {0: slot.stage}, {}

    def decide(s):
        if fossilize_at_g9 and s.stage == S.PROBATIONARY:
            return s.fossilize()
        return None

    for offset in range(1, 15):
        if slot.state is None:
            break
        auto, result = epoch(slot, 50.0 + offset, contribution=contribution, decide=decide)
        stages[offset] = slot.stage
        contributions[offset] = None if slot.state is None else slot.state.metrics.counterfactual_contribution
        if result is not None and result.passed:
            stages["fossilized_at"] = offset
        if auto:
            stages["auto_culled_at"] = offset
    return slot, stages, contributions


def test_timeline_with_every_gate_passing_and_fossilize_at_g9():
    slot, stages, contributions = run_timeline(contribution=2.0, fossilize_at_g9=True)
    assert stages[0] == S.TRAINING
    assert [stages[k] for k in (1, 2)] == [S.TRAINING, S.TRAINING]
    assert stages[3] == S.BLENDING
    assert [stages[k] for k in (4, 5, 6, 7)] == [S.BLENDING] * 4
    assert stages[8] == S.PROBATIONARY
    assert stages["fossilized_at"] == 9 and stages[9] == S.FOSSILIZED
    assert contributions[4] is None and contributions[5] == 2.0  # first measured in the 2nd BLENDING epoch
    assert slot.alpha == 1.0 and slot.is_active


def test_timeline_without_fossilize_auto_culls_with_probation_timeout_at_g13():
    slot, stages, _ = run_timeline(contribution=0.5, fossilize_at_g9=False)
    assert all(stages[k] == S.PROBATIONARY for k in range(8, 13))
    assert stages["auto_culled_at"] == 13 and stages[13] is None
    assert slot.state is None and slot.seed is None
    assert slot.last_culled.auto_culled and slot.last_culled.auto_cull_reason == "probation_timeout"


def test_fossilize_at_g9_fails_when_contribution_below_one():
    slot, stages, _ = run_timeline(contribution=0.5, fossilize_at_g9=True)
    assert "fossilized_at" not in stages and stages["auto_culled_at"] == 13


def test_forward_alpha_follows_the_timeline_table():
    slot = cnn_slot()
    slot.germinate("conv_light")
    slot.step_epoch()
    h = torch.zeros(1, 8, 2, 2)
    seen = []
    for offset in range(1, 9):
        epoch(slot, 50.0 + offset)
        if slot.alpha_schedule is not None:
            seen.append(slot.alpha_schedule.forward_alpha(h).item())
    assert seen == pytest.approx([0.00247, 0.02660, 0.23148, 0.76852, 0.97340], abs=1e-5)
    assert slot.stage == S.PROBATIONARY and slot.alpha == 1.0 and slot.alpha_schedule is None


def test_tinystories_dwell_keeps_training_for_five_epochs():
    slot = cnn_slot(clock=SeedClock.for_run(lifecycle_timings("reference", 50, 50), 0))
    assert slot.dwell_epochs == 5 and slot.probation_timeout == 5
    slot.germinate("norm")
    slot.step_epoch()
    for offset in range(1, 5):
        epoch(slot, 50.0 + offset)
        assert slot.stage == S.TRAINING
    epoch(slot, 60.0)
    assert slot.stage == S.BLENDING


def test_no_clock_means_dwell_1_blend_5_timeout_5():
    slot = SeedSlot("r0c0", 8, "cnn")
    assert (slot.dwell_epochs, slot.clock.blend_ticks(), slot.probation_timeout) == (1, 5, 5)


def test_the_fast_tempo_blends_in_three_epochs_and_reaches_probationary():
    slot = cnn_slot()
    slot.germinate("norm", blend="linear", tempo=0)
    slot.step_epoch()
    drive_to(slot, S.BLENDING, blend="linear")
    assert slot.state.blending_steps_total == 3
    for k, expected in ((1, 1 / 3), (2, 2 / 3)):
        epoch(slot, 70.0)
        assert slot.alpha == pytest.approx(expected)
    epoch(slot, 70.0)
    assert slot.stage == S.PROBATIONARY


def test_training_stays_without_gradient_activity():
    slot = cnn_slot()
    slot.germinate("conv_light")
    slot.step_epoch()
    for offset in range(1, 20):
        epoch(slot, 50.0 + 2 * offset, ratio=0.0)
    assert slot.stage == S.TRAINING


# ------------------------------------------------------------------ BEHAVIOUR §2.12 schedules


def test_sigmoid_and_linear_progress_tables():
    sig, lin, gated = SigmoidBlend(5), LinearBlend(5), GatedBlend(5, 8, "cnn")
    assert [sig.progress_alpha(k) for k in range(6)] == pytest.approx(
        [0.00247, 0.02660, 0.23148, 0.76852, 0.97340, 0.99753], abs=1e-5
    )
    assert [lin.progress_alpha(k) for k in range(6)] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert [gated.progress_alpha(k) for k in range(8)] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1, 1, 1])


@pytest.mark.parametrize("blend, expected", [("sigmoid", 0.97340), ("linear", 0.8), ("gated", 0.8)])
def test_state_alpha_forced_to_one_on_probationary_entry(blend, expected):
    slot = cnn_slot()
    drive_to(slot, S.BLENDING, blend=blend)
    assert slot.alpha == 0.0  # start_blending does not reset state.alpha, it stays 0 from TRAINING
    for _ in range(4):
        epoch(slot, 80.0)
    assert slot.alpha == pytest.approx(expected, abs=1e-5) and slot.state.metrics.alpha_ramp_step == 4
    epoch(slot, 80.0)
    assert slot.stage == S.PROBATIONARY and slot.alpha == 1.0 and slot.state.metrics.current_alpha == 1.0


def test_gated_forward_alpha_is_per_sample():
    sched = GatedBlend(5, 8, "cnn")
    assert sched.forward_alpha(torch.randn(3, 8, 4, 4)).shape == (3, 1, 1, 1)
    tsched = GatedBlend(5, 16, "transformer")
    assert tsched.forward_alpha(torch.randn(3, 5, 16)).shape == (3, 1, 1)


def test_unknown_blend_raises():
    with pytest.raises(ValueError):
        cnn_slot().germinate("norm", blend="cosine")


def test_blend_accepts_algorithm_index():
    slot = cnn_slot()
    slot.germinate("norm", blend=2)
    assert slot.blend == "gated"


# ------------------------------------------------------------------ BEHAVIOUR §2.5 gates


def g2_state(improvement, eis, ratio):
    state = SeedState("s", "b", "r0c0", stage=S.TRAINING)
    m = state.metrics
    m.accuracy_at_stage_start, m.current_val_accuracy = 50.0, 50.0 + improvement
    m.epochs_in_current_stage, m.seed_gradient_norm_ratio = eis, ratio
    return state


def test_g2_thresholds():
    assert not evaluate_gate(g2_state(0.6, 3, 0.0999), S.BLENDING).passed
    passed = evaluate_gate(g2_state(0.6, 3, 0.10), S.BLENDING)
    assert passed.passed and passed.gate == 2 and passed.score == pytest.approx(0.12)
    assert not evaluate_gate(g2_state(0.4, 3, 0.5), S.BLENDING).passed
    assert not evaluate_gate(g2_state(2.0, 2, 0.5), S.BLENDING).passed
    assert evaluate_gate(g2_state(-1.0, 3, 0.5), S.BLENDING).score == 0.0


def g5_result(c):
    state = SeedState("s", "b", "r0c0", stage=S.PROBATIONARY)
    state.metrics.counterfactual_contribution = c
    return evaluate_gate(state, S.FOSSILIZED)


@pytest.mark.parametrize("c", [0.5, 0.0, -5.0])
def test_g5_fails_with_insufficient_contribution(c):
    result = g5_result(c)
    assert not result.passed and "insufficient_contribution" in result.checks_failed and result.gate == 5


@pytest.mark.parametrize("c, score", [(1.0, 0.1), (5.0, 0.5), (20.0, 1.0)])
def test_g5_passes_with_sufficient_contribution(c, score):
    result = g5_result(c)
    assert result.passed and "sufficient_contribution" in result.checks_passed and result.score == score


def test_g5_without_contribution_fails_not_available():
    result = g5_result(None)
    assert not result.passed and result.checks_failed[0] == "counterfactual_not_available"


def test_g3_needs_three_epochs_and_alpha_095():
    state = SeedState("s", "b", "r0c0", stage=S.BLENDING)
    state.alpha, state.metrics.epochs_in_current_stage = 0.95, 3
    assert evaluate_gate(state, S.PROBATIONARY).passed
    state.alpha = 0.94
    assert not evaluate_gate(state, S.PROBATIONARY).passed
    state.alpha, state.metrics.epochs_in_current_stage = 1.0, 2
    assert not evaluate_gate(state, S.PROBATIONARY).passed


def test_g0_and_g1():
    assert not evaluate_gate(SeedState("", "b", "r0c0"), S.GERMINATED).passed
    assert not evaluate_gate(SeedState("s", "", "r0c0"), S.GERMINATED).passed
    assert evaluate_gate(SeedState("s", "b", "r0c0"), S.GERMINATED).passed
    assert evaluate_gate(SeedState("s", "b", "r0c0", stage=S.GERMINATED), S.TRAINING).passed
    assert not evaluate_gate(SeedState("s", "b", "r0c0", stage=S.TRAINING), S.TRAINING).passed
    assert evaluate_gate(SeedState("s", "b", "r0c0"), S.CULLED).passed  # no gate: passes


def test_advance_stage_rejects_illegal_target_and_changes_nothing():
    slot = cnn_slot()
    slot.germinate("norm")
    result = slot.advance_stage(S.FOSSILIZED)
    assert not result.passed and "invalid_transition" in result.checks_failed
    assert slot.stage == S.GERMINATED
    assert slot.advance_stage().passed and slot.stage == S.TRAINING  # first non-failure target
    assert not SeedSlot("r0c0", 8, "cnn").advance_stage().passed  # empty slot


def test_fossilize_only_from_probationary():
    slot = cnn_slot()
    slot.germinate("norm")
    slot.step_epoch()
    slot.set_contribution(5.0)
    assert not slot.fossilize().passed and slot.stage == S.TRAINING


# ------------------------------------------------------------------ BEHAVIOUR §2.6 probation auto-cull


def probationary_slot(contribution, eis):
    slot = cnn_slot()
    drive_to(slot, S.PROBATIONARY)
    slot.set_contribution(contribution)
    for _ in range(eis):
        slot.record_accuracy(70.0)
    return slot


def test_negative_contribution_auto_culls():
    slot = probationary_slot(-0.1, 1)
    assert slot.step_epoch() is True
    assert slot.state is None and slot.last_culled.auto_cull_reason == "negative_counterfactual"


def test_zero_contribution_auto_culls():
    assert probationary_slot(0.0, 0).step_epoch() is True


def test_no_contribution_times_out_at_eis_5_only():
    slot = probationary_slot(None, 4)
    assert slot.step_epoch() is False and slot.stage == S.PROBATIONARY
    slot.record_accuracy(70.0)
    assert slot.step_epoch() is True and slot.last_culled.auto_cull_reason == "probation_timeout"


def test_small_positive_contribution_stays_until_timeout():
    slot = probationary_slot(0.5, 0)
    for _ in range(4):
        slot.record_accuracy(70.0)
        assert slot.step_epoch() is False
    slot.record_accuracy(70.0)
    assert slot.step_epoch() is True


def test_step_epoch_on_empty_slot_returns_false():
    assert cnn_slot().step_epoch() is False


def test_fossil_step_epoch_does_nothing():
    slot = cnn_slot()
    drive_to(slot, S.FOSSILIZED)
    for _ in range(10):
        slot.record_accuracy(10.0)
        slot.set_contribution(-5.0)
        assert slot.step_epoch() is False
    assert slot.stage == S.FOSSILIZED


# ------------------------------------------------------------------ BEHAVIOUR §2.2 forward and backward


@pytest.mark.parametrize("make, shape", [(cnn_slot, (4, 8, 6, 6)), (tf_slot, (2, 5, 16))])
def test_ste_output_equals_input_and_seed_gets_gradient(make, shape):
    slot = make()
    slot.germinate("conv_light" if slot.topology == "cnn" else "mlp_small")
    slot.step_epoch()
    assert slot.stage == S.TRAINING and slot.isolate_gradients
    if slot.topology == "transformer":
        torch.nn.init.normal_(slot.seed.fc2.weight)  # leave the zero init so the seed has a gradient path
    h = torch.randn(*shape, requires_grad=True)
    out = slot(h)
    assert torch.equal(out, h)
    out.sum().backward()
    assert torch.equal(h.grad, torch.ones_like(h))
    assert all(p.grad is not None for p in slot.seed_parameters())
    assert any(p.grad.abs().sum() > 0 for p in slot.seed_parameters())


def test_empty_and_germinated_slots_are_identity():
    slot = cnn_slot()
    h = torch.randn(2, 8, 4, 4)
    assert slot(h) is h
    slot.germinate("conv_light")
    assert slot(h) is h


def blending_slot(alpha, isolate=True):
    slot = cnn_slot()
    drive_to(slot, S.BLENDING, blend="linear")
    slot.alpha_schedule = None  # forward uses state.alpha
    slot.set_alpha(alpha)
    slot.isolate_gradients = isolate
    return slot


def test_blend_alpha_zero_gives_h_exactly():
    slot = blending_slot(0.0)
    h = torch.randn(3, 8, 5, 5)
    assert torch.equal(slot(h), h)


def test_blend_alpha_one_gives_seed_output_exactly():
    slot = blending_slot(1.0)
    h = torch.randn(3, 8, 5, 5)
    assert torch.equal(slot(h), slot.seed(h))


def test_partial_alpha_gives_gradients_to_both_sides():
    slot = blending_slot(0.4)
    h = torch.randn(3, 8, 5, 5, requires_grad=True)
    out = slot(h)
    assert torch.allclose(out, h + 0.4 * (slot.seed(h) - h), atol=1e-6)
    out.square().sum().backward()
    assert h.grad.abs().sum() > 0
    assert all(p.grad.abs().sum() > 0 for p in slot.seed_parameters())
    assert torch.allclose(h.grad, 0.6 * 2 * out.detach(), atol=1e-5)  # isolated: direct path only


@given(st.floats(allow_nan=False))
def test_set_alpha_clips_any_float(value):
    slot = cnn_slot()
    slot.germinate("norm")
    slot.set_alpha(value)
    assert slot.alpha == min(1.0, max(0.0, value))
    assert slot.state.metrics.current_alpha == slot.alpha


def test_set_alpha_infinities_and_nan():
    slot = cnn_slot()
    slot.germinate("norm")
    slot.set_alpha(math.inf)
    assert slot.alpha == 1.0
    slot.set_alpha(-math.inf)
    assert slot.alpha == 0.0
    with pytest.raises(ValueError):
        slot.set_alpha(math.nan)
    assert slot.alpha == 0.0
    with pytest.raises(RuntimeError):
        cnn_slot().set_alpha(0.5)


def test_out_of_range_schedule_alpha_is_clamped_in_forward():
    slot = blending_slot(1.0)
    slot.state.alpha = 3.0  # bypass set_alpha on purpose
    h = torch.randn(2, 8, 3, 3)
    assert torch.equal(slot(h), slot.seed(h))


# ------------------------------------------------------------------ BEHAVIOUR §2.3 isolation lifecycle


@pytest.mark.parametrize("topology, blending_isolated", [("cnn", True), ("transformer", False)])
def test_isolation_flag_follows_the_lifecycle(topology, blending_isolated):
    slot = SeedSlot("r0c0", 16, topology, CIFAR_CLOCK)
    slot.germinate("norm")
    assert not slot.isolate_gradients
    slot.step_epoch()
    assert slot.isolate_gradients
    drive_to(slot, S.BLENDING)
    assert slot.isolate_gradients == blending_isolated
    drive_to(slot, S.PROBATIONARY)
    assert slot.isolate_gradients == blending_isolated
    assert slot.cull()
    assert not slot.isolate_gradients


def test_isolated_probationary_cnn_slot_blocks_upstream_gradient_with_zeros():
    slot = cnn_slot()
    drive_to(slot, S.PROBATIONARY)
    h = torch.randn(2, 8, 4, 4, requires_grad=True)
    slot(h).sum().backward()
    assert h.grad is not None and torch.count_nonzero(h.grad) == 0


# ------------------------------------------------------------------ BEHAVIOUR §2.11 force_alpha


@pytest.mark.parametrize("stage", [S.BLENDING, S.PROBATIONARY, S.FOSSILIZED])
def test_force_alpha_zero_gives_h_and_restores(stage):
    slot = cnn_slot()
    drive_to(slot, stage, blend="gated")
    if stage == S.BLENDING:
        epoch(slot, 90.0)
    before = (slot.alpha, slot.alpha_schedule, slot.state.metrics.current_alpha)
    h = torch.randn(2, 8, 4, 4)
    with slot.force_alpha(0.0):
        assert slot.alpha == 0.0 and slot.alpha_schedule is None
        assert torch.equal(slot(h), h)
    assert (slot.alpha, slot.alpha_schedule, slot.state.metrics.current_alpha) == before


def test_force_alpha_restores_after_exception():
    slot = cnn_slot()
    drive_to(slot, S.BLENDING)
    epoch(slot, 90.0)
    alpha, schedule = slot.alpha, slot.alpha_schedule
    with pytest.raises(KeyError):
        with slot.force_alpha(0.0):
            raise KeyError("boom")
    assert slot.alpha == alpha and slot.alpha_schedule is schedule
    h = torch.randn(2, 8, 4, 4)
    assert not torch.equal(slot(h), h)  # the forced path is off again


def test_force_alpha_on_empty_slot_does_nothing():
    slot = cnn_slot()
    with slot.force_alpha(0.0):
        pass
    assert slot.state is None


def test_force_alpha_nonzero_uses_scalar():
    slot = cnn_slot()
    drive_to(slot, S.PROBATIONARY)
    h = torch.randn(2, 8, 4, 4)
    with slot.force_alpha(0.25):
        out = slot(h)
    assert torch.allclose(out, torch.lerp(h, slot.seed(h), 0.25))
    assert slot.alpha == 1.0


# ------------------------------------------------------------------ BEHAVIOUR §2.9 germinate, §2.10 cull


def test_germinate_records_counts_and_default_seed_id():
    slot = cnn_slot(16)
    slot.germinate("conv_light", host_param_count=6418)
    m = slot.state.metrics
    assert slot.state.seed_id == "r0c1-conv_light" and slot.stage == S.GERMINATED
    assert (m.seed_param_count, m.host_param_count) == (2336, 6418)
    assert slot.state.previous_stage == S.DORMANT


def test_germinate_occupied_slot_raises_runtime_error():
    slot = cnn_slot()
    slot.germinate("norm")
    with pytest.raises(RuntimeError):
        slot.germinate("conv_light")
    assert slot.state.blueprint_id == "norm"


def test_germinate_unknown_blueprint_lists_available():
    with pytest.raises(ValueError, match="conv_light"):
        cnn_slot().germinate("lora")


def test_germinate_empty_seed_id_fails_g0_and_leaves_slot_empty():
    slot = cnn_slot()
    with pytest.raises(RuntimeError):
        slot.germinate("norm", seed_id="")
    assert slot.state is None and slot.seed is None


def test_shape_probe_does_not_draw_from_global_rng():
    slot = cnn_slot()
    rng = torch.get_rng_state()
    slot.germinate("noop")  # no parameters to initialise: only the probe could draw
    assert torch.equal(torch.get_rng_state(), rng)
    module = SeedSlot("r0c0", 16, "transformer")
    rng = torch.get_rng_state()
    module._probe_shape(torch.nn.Dropout(0.5), "dropout")
    assert torch.equal(torch.get_rng_state(), rng)


def test_shape_probe_restores_module_mode():
    slot = cnn_slot()
    dropout = torch.nn.Dropout(0.5).train()
    slot._probe_shape(dropout, "dropout")
    assert dropout.training


def test_shape_changing_module_is_rejected():
    slot = cnn_slot()
    with pytest.raises(ValueError):
        slot._probe_shape(torch.nn.Conv2d(8, 4, 1), "bad")


def test_cull_empties_slot_at_once_and_allows_regermination():
    slot = cnn_slot()
    drive_to(slot, S.BLENDING, blend="gated")
    assert slot.cull("")
    assert (slot.state, slot.seed, slot.alpha_schedule, slot.isolate_gradients) == (None, None, None, False)
    assert slot.last_culled.stage == S.CULLED and not slot.last_culled.auto_culled
    slot.germinate("norm")
    assert slot.stage == S.GERMINATED
    assert not SeedSlot("r0c0", 8, "cnn").cull()


def test_cull_refused_for_fossil_and_nothing_changes():
    slot = cnn_slot()
    drive_to(slot, S.FOSSILIZED)
    seed, state = slot.seed, slot.state
    snapshot = (state.stage, state.alpha, state.metrics.epochs_total, state.auto_culled, slot.isolate_gradients)
    assert slot.cull("") is False
    assert slot.cull("probation_timeout") is False
    assert slot.seed is seed and slot.state is state
    assert (state.stage, state.alpha, state.metrics.epochs_total, state.auto_culled,
            slot.isolate_gradients) == snapshot


# ------------------------------------------------------------------ gated blend [fix] (BEHAVIOUR §2.12)


def test_gate_parameters_separate_from_seed_parameters_and_receive_gradient():
    slot = cnn_slot()
    drive_to(slot, S.BLENDING, blend="gated")
    gate = slot.gate_parameters()
    assert gate and not {id(p) for p in gate} & {id(p) for p in slot.seed_parameters()}
    assert slot.seed_param_count() == slot.state.metrics.seed_param_count == 592
    h = torch.randn(4, 8, 4, 4, requires_grad=True)
    slot(h).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in gate)
    report = slot.report()
    assert report.seed_params == 592


def test_gate_is_gone_after_probationary():
    slot = cnn_slot()
    drive_to(slot, S.PROBATIONARY, blend="gated")
    assert slot.gate_parameters() == []


def test_non_gated_blends_have_no_gate_parameters():
    slot = cnn_slot()
    drive_to(slot, S.BLENDING, blend="sigmoid")
    assert slot.gate_parameters() == []


# ------------------------------------------------------------------ report and telemetry


def test_report_fields():
    slot = cnn_slot()
    assert slot.report() is None
    drive_to(slot, S.PROBATIONARY)
    slot.record_gradient_norm(0.5)
    slot.set_gradient_ratio(0.3)
    r = slot.report()
    m = slot.state.metrics
    assert (r.slot_id, r.stage, r.previous_stage, r.alpha) == ("r0c1", S.PROBATIONARY, S.BLENDING, 1.0)
    assert (r.epochs_in_stage, r.epochs_total) == (m.epochs_in_current_stage, m.epochs_total)
    assert r.total_improvement == m.total_improvement and r.contribution == 2.0
    assert (r.gradient_norm, r.gradient_measured, r.gradient_ratio) == (0.5, True, 0.3)
    assert r.seed_params == 592 and not r.auto_culled


def test_telemetry_starts_unmeasured():
    slot = cnn_slot()
    slot.germinate("norm")
    assert slot.report().gradient_measured is False and slot.report().gradient_norm == 0.0


def test_slot_follows_device_and_dtype_moves():
    slot = cnn_slot().to(torch.float64)
    slot.germinate("conv_light")
    assert slot.device == torch.device("cpu")
    assert all(p.dtype == torch.float64 for p in slot.seed_parameters())
    drive_to(slot, S.BLENDING, blend="gated")
    assert all(p.dtype == torch.float64 for p in slot.gate_parameters())
    h = torch.randn(2, 8, 4, 4, dtype=torch.float64)
    assert slot(h).dtype == torch.float64


def test_lifecycle_timing_rules():
    clock = lambda h: SeedClock.for_run(lifecycle_timings("reference", 25, h), 0)  # noqa: E731
    assert clock(25).dwell == 2 and clock(50).dwell == 5 and clock(None).dwell == 1
    assert clock(25).probation_timeout == 5 and clock(50).probation_timeout == 5
    assert clock(75).probation_timeout == 7


def test_plant_fossil_builds_a_permanent_fully_blended_seed():
    """static_final: a seed FOSSILIZED before any epoch, α = 1, trained with the host, never culled."""
    slot = SeedSlot("r0c0", 16, "cnn", CIFAR_CLOCK)
    slot.plant_fossil("conv_light", "s0", host_param_count=826)
    assert slot.stage == SeedStage.FOSSILIZED and slot.alpha == 1.0
    assert slot.state.metrics.epochs_total == 0 and slot.state.metrics.seed_param_count == 2336
    assert not slot.isolate_gradients and slot.alpha_schedule is None
    h = torch.randn(2, 16, 8, 8, requires_grad=True)
    out = slot(h)
    assert torch.allclose(out, slot.seed(h))  # lerp(h, s, 1) = s: the seed is fully in the network
    out.sum().backward()
    assert h.grad is not None and all(p.grad is not None for p in slot.seed_parameters())
    assert slot.cull("policy") is False and slot.stage == SeedStage.FOSSILIZED
