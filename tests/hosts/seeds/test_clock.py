"""The seed lifecycle's clock (BEHAVIOUR §2.14): the reference's durations and the proportional ones, the
tempo, and a slot driven by each."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.contracts.actions import NUM_TEMPOS
from esper_fx.contracts.lifecycle import PROPORTIONAL_EPISODE, TEMPO_BLEND_EPOCHS, lifecycle_timings
from esper_fx.contracts.stages import SeedStage
from hosts.seeds.lifecycle import SeedClock
from hosts.seeds.slot import SeedSlot
from tests.hosts.lifecycle_helpers import epoch

S = SeedStage
EPISODES = st.integers(1, 400)
STEPS = st.integers(1, 64)


# ------------------------------------------------------------------ the durations


@settings(deadline=None)
@given(t=EPISODES, steps=STEPS, horizon=st.sampled_from([None, 25, 50]))
def test_every_duration_is_at_least_one_step(t, steps, horizon):
    for lifecycle in ("reference", "proportional"):
        timings = lifecycle_timings(lifecycle, t, horizon)
        assert min(timings.dwell, timings.min_stage, timings.probation_timeout, timings.legitimacy) >= 1
        for tempo in range(NUM_TEMPOS):
            assert timings.blend_ticks(tempo, t * steps) >= 1
            assert timings.blend_epochs(tempo) >= 1
            assert timings.earliest_fossilize_age(tempo) >= 3


@settings(deadline=None)
@given(t=st.integers(1, 399), steps=STEPS)
def test_proportional_durations_never_shrink_as_the_episode_grows(t, steps):
    short, long = lifecycle_timings("proportional", t, 25), lifecycle_timings("proportional", t + 1, 25)
    for name in ("dwell", "min_stage", "probation_timeout", "legitimacy"):
        assert getattr(long, name) >= getattr(short, name), name
    for tempo in range(NUM_TEMPOS):
        assert long.blend_ticks(tempo, (t + 1) * steps) >= short.blend_ticks(tempo, t * steps)
        assert long.earliest_fossilize_age(tempo) >= short.earliest_fossilize_age(tempo)


@settings(deadline=None)
@given(steps=STEPS)
def test_at_the_reference_episode_length_the_proportional_durations_are_the_reference_ones(steps):
    timings = lifecycle_timings("proportional", PROPORTIONAL_EPISODE, 25)
    assert (timings.dwell, timings.min_stage, timings.probation_timeout, timings.legitimacy) == (10, 3, 15, 5)
    assert [timings.blend_ticks(k, PROPORTIONAL_EPISODE * steps) for k in range(NUM_TEMPOS)] == [
        b * steps for b in TEMPO_BLEND_EPOCHS]
    assert timings.earliest_fossilize_age(1) == 10 + 5 + 1


@settings(deadline=None)
@given(t=st.integers(6, 400), steps=STEPS)
def test_a_seed_germinated_early_reaches_full_weight_within_a_fifth_of_the_episode(t, steps):
    """From its germination: its dwell in TRAINING (whole epochs), then the standard ramp: at most 20% of the
    episode's T·K training steps (a step for rounding: a ramp lasts one step at least) from T = 6 epochs on,
    and 10% + 0.5/T on long ones."""
    timings = lifecycle_timings("proportional", t, 25)
    full_weight = timings.dwell * steps + timings.blend_ticks(1, t * steps)
    assert full_weight <= 0.2 * t * steps + 1
    if t >= 15:
        assert full_weight <= (0.1 + 0.5 / t) * t * steps + 1


def test_the_quickstart_episode_under_each_clock():
    reference, proportional = lifecycle_timings("reference", 12, 25), lifecycle_timings("proportional", 12, 25)
    assert (reference.dwell, reference.min_stage, reference.probation_timeout) == (2, 3, 5)
    assert reference.earliest_fossilize_age() == 9 and reference.germinate_until() == 3
    assert reference.tempos == (1,) and not reference.ramp_per_step and not reference.release_on_fossilize
    assert (proportional.dwell, proportional.min_stage, proportional.probation_timeout) == (1, 1, 2)
    assert [proportional.blend_ticks(k, 384) for k in range(3)] == [8, 13, 20]
    assert proportional.earliest_fossilize_age() == 3 and proportional.germinate_until() == 9
    assert proportional.tempos == (0, 1, 2) and proportional.ramp_per_step and proportional.release_on_fossilize


def test_the_tempo_mask_keeps_the_tempos_that_can_still_fossilize():
    reference = lifecycle_timings("reference", 12, 25)
    assert reference.tempo_mask(1, True) == (False, True, False)
    assert reference.tempo_mask(11, True) == (False, True, False)  # none in time: the allowed ones stay
    long = lifecycle_timings("proportional", 60, 25)  # blends of 1.2, 2 and 3.2 epochs
    assert long.tempo_mask(40, False) == (True, True, True)
    ages = [long.earliest_fossilize_age(k) for k in range(3)]
    assert ages == sorted(ages) and ages[0] < ages[2]
    assert long.tempo_mask(60 - ages[1], True) == (True, True, False)


def test_an_unknown_lifecycle_is_refused_by_name():
    with pytest.raises(ValueError, match="lifecycle must be one of"):
        lifecycle_timings("fast", 12, 25)
    with pytest.raises(ValueError, match="training steps"):
        SeedClock.for_run(lifecycle_timings("proportional", 12, 25), 0)


# ------------------------------------------------------------------ a slot on each clock


def _slot(clock: SeedClock) -> SeedSlot:
    torch.manual_seed(0)
    return SeedSlot("r0c1", 8, "cnn", clock)


def _train_steps(slot: SeedSlot, n: int) -> list[float]:
    alphas = []
    for _ in range(n):
        slot.tick_step()
        alphas.append(slot.alpha)
    return alphas


def test_the_proportional_ramp_ticks_per_training_step_and_the_stage_moves_at_the_epoch_end():
    clock = SeedClock.for_run(lifecycle_timings("proportional", 12, 25), 12 * 32)  # ramps of 8, 13, 20 steps
    slot = _slot(clock)
    slot.germinate("norm", blend="linear", accuracy=20.0)
    slot.step_epoch()  # GERMINATED -> TRAINING
    assert _train_steps(slot, 32) == [0.0] * 32  # TRAINING: the ramp does not move
    epoch(slot, 21.0)  # G2: +1 pp since germination, after one epoch
    assert slot.stage == S.BLENDING and slot.state.blending_steps_total == 13
    alphas = _train_steps(slot, 32)
    assert alphas[:13] == pytest.approx([k / 13 for k in range(1, 14)]) and alphas[13:] == [1.0] * 19
    assert slot.stage == S.BLENDING  # until the epoch's step_epoch
    epoch(slot, 30.0, contribution=5.0)
    assert slot.stage == S.PROBATIONARY and slot.alpha == 1.0
    slot.record_accuracy(31.0)
    slot.set_contribution(5.0)
    assert slot.fossilize().passed  # three decisions after the germination
    assert slot.state.metrics.epochs_total == 3 == clock.earliest_fossilize_age()


@pytest.mark.parametrize("tempo, ticks", [(0, 8), (1, 13), (2, 20)])
def test_the_tempo_sets_the_ramp_length(tempo, ticks):
    slot = _slot(SeedClock.for_run(lifecycle_timings("proportional", 12, 25), 12 * 32))
    slot.germinate("norm", blend="sigmoid", tempo=tempo, accuracy=20.0)
    slot.step_epoch()
    epoch(slot, 22.0)
    assert slot.state.blending_steps_total == ticks and slot.report().tempo == tempo
    alphas = _train_steps(slot, ticks)
    assert alphas[-1] == 1.0 and all(a < 1.0 for a in alphas[:-1])


def test_g2_counts_from_the_germination_accuracy_only_under_the_proportional_clock():
    proportional = _slot(SeedClock.for_run(lifecycle_timings("proportional", 12, 25), 384))
    proportional.germinate("norm", accuracy=20.0)
    proportional.step_epoch()
    epoch(proportional, 20.4)  # +0.4 pp since germination: G2 fails
    assert proportional.stage == S.TRAINING
    epoch(proportional, 20.6)
    assert proportional.stage == S.BLENDING
    reference = _slot(SeedClock.for_run(lifecycle_timings("reference", 12, 25), 0))
    reference.germinate("norm", accuracy=20.0)  # the reference's baseline is the first epoch's accuracy
    reference.step_epoch()
    for acc in (30.0, 30.2, 30.4):
        epoch(reference, acc)
    assert reference.stage == S.TRAINING
    epoch(reference, 30.6)
    assert reference.stage == S.BLENDING


@pytest.mark.parametrize("lifecycle, release, released", [
    ("reference", None, False), ("proportional", None, True),  # each clock's own choice
    ("proportional", False, False), ("reference", True, True),  # `fossil_release`, the ablation
])
def test_a_fossil_releases_the_host_upstream_as_its_clock_says(lifecycle, release, released):
    timings = lifecycle_timings(lifecycle, 25, 25)
    if release is not None:
        timings = timings._replace(release_on_fossilize=release)
    slot = _slot(SeedClock.for_run(timings, 25 * 4))
    slot.germinate("conv_light", accuracy=10.0)
    slot.step_epoch()
    acc = 10.0
    while slot.stage != S.PROBATIONARY:
        acc += 1.0
        _train_steps(slot, 4)
        epoch(slot, acc, contribution=3.0)
    assert slot.isolate_gradients
    slot.record_accuracy(acc)
    slot.set_contribution(3.0)
    assert slot.fossilize().passed
    assert slot.isolate_gradients is not released
    h = torch.randn(2, 8, 4, 4, requires_grad=True)
    slot(h).sum().backward()
    assert (h.grad.abs().sum().item() > 0) is released  # at α = 1 the host gets a gradient only through the seed


def test_the_reference_ramp_ignores_training_steps():
    slot = _slot(SeedClock.for_run(lifecycle_timings("reference", 25, 25), 0))
    slot.germinate("norm", blend="linear")
    slot.step_epoch()
    for acc in (30.0, 31.0, 32.0):
        epoch(slot, acc)
    assert slot.stage == S.BLENDING
    assert _train_steps(slot, 10) == [0.0] * 10
    epoch(slot, 33.0)
    assert slot.alpha == pytest.approx(0.2)


@settings(deadline=None)
@given(lifecycle=st.sampled_from(["reference", "proportional"]), t=EPISODES, data=st.data())
def test_the_tempo_mask_and_the_germination_deadline_agree(lifecycle, t, data):
    timings = lifecycle_timings(lifecycle, t, 25)
    epoch = data.draw(st.integers(1, t))
    deadline = data.draw(st.booleans())
    mask = timings.tempo_mask(epoch, deadline)
    assert any(mask) and all(k in timings.tempos for k, ok in enumerate(mask) if ok)
    in_time = [k for k in timings.tempos if epoch + timings.earliest_fossilize_age(k) <= t]
    assert (epoch <= timings.germinate_until()) == bool(in_time)
    if deadline and in_time:
        assert [k for k, ok in enumerate(mask) if ok] == in_time
    if not deadline:
        assert [k for k, ok in enumerate(mask) if ok] == list(timings.tempos)


# ------------------------------------------------------------------ the immediate clock (no isolated phase)


@settings(deadline=None)
@given(t=EPISODES, steps=STEPS)
def test_the_immediate_ramp_is_at_most_a_twentieth_of_the_episode(t, steps):
    timings = lifecycle_timings("immediate", t, 25)
    assert not timings.isolated and timings.dwell == 0 and timings.ramp_per_step
    for tempo in range(NUM_TEMPOS):
        assert 1 <= timings.blend_ticks(tempo, t * steps) <= max(1, 0.05 * t * steps + 0.5)
    assert timings.earliest_fossilize_age() == 1 + max(timings.blend_epochs(), 1)


def test_the_growth_episode_under_the_immediate_clock():
    timings = lifecycle_timings("immediate", 20, 25)
    assert (timings.dwell, timings.min_stage, timings.probation_timeout) == (0, 1, 2)
    assert [timings.blend_ticks(k, 20 * 150) for k in range(3)] == [30, 75, 150]
    assert timings.earliest_fossilize_age() == 2 and timings.germinate_until() == 18


def test_under_the_immediate_clock_a_seed_trains_with_the_host_from_its_first_step():
    clock = SeedClock.for_run(lifecycle_timings("immediate", 20, 25), 20 * 10)  # ramps of 2, 5 and 10 steps
    slot = _slot(clock)
    slot.germinate("conv_light", blend="linear", accuracy=20.0)
    moves = slot.start_training()
    assert moves == [(S.GERMINATED, S.TRAINING), (S.TRAINING, S.BLENDING)]
    assert slot.stage == S.BLENDING and not slot.isolate_gradients
    assert _train_steps(slot, 6) == [0.2, 0.4, 0.6, 0.8, 1.0, 1.0]
    h = torch.randn(2, 8, 4, 4, requires_grad=True)
    slot(h).sum().backward()
    assert h.grad.abs().sum().item() > 0  # the host upstream learns through the seed at once
    epoch(slot, 21.0, contribution=2.0)  # the epoch's end: the ramp is done
    assert slot.stage == S.PROBATIONARY
    slot.record_accuracy(22.0)
    slot.set_contribution(2.0)
    assert slot.fossilize().passed


def test_the_isolating_clocks_still_start_a_seed_unseen():
    slot = _slot(SeedClock.for_run(lifecycle_timings("proportional", 12, 25), 12 * 32))
    slot.germinate("conv_light", accuracy=20.0)
    assert slot.start_training() == [(S.GERMINATED, S.TRAINING)]
    assert slot.stage == S.TRAINING and slot.isolate_gradients
