"""SignalTracker (BEHAVIOUR §8.5)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hosts.signals.tracker import SignalTracker, TrackerSignals


def record(tracker: SignalTracker, epoch: int, val_loss: float, val_acc: float) -> TrackerSignals:
    return tracker.update(
        epoch=epoch, global_step=10 * epoch, train_loss=val_loss + 0.1, train_acc=val_acc - 1.0,
        val_loss=val_loss, val_acc=val_acc, active_seeds=0, available_slots=1,
    )


def feed(val_losses, val_accs) -> tuple[SignalTracker, list[TrackerSignals]]:
    tracker = SignalTracker()
    out = [record(tracker, t, loss, acc) for t, (loss, acc) in enumerate(zip(val_losses, val_accs), start=1)]
    return tracker, out


def test_plateau_epochs_follow_the_spec_sequence_50_50_3_50_6_51_5():
    _, out = feed([2.0] * 4, [50.0, 50.3, 50.6, 51.5])
    assert [s.plateau_epochs for s in out] == [0, 1, 2, 0]


def test_host_stabilized_latches_at_the_fourth_update_of_slowly_falling_losses():
    _, out = feed([2.0, 1.99, 1.98, 1.97], [50.0] * 4)
    assert [s.host_stabilized for s in out] == [0, 0, 0, 1]


def test_reset_clears_the_stabilization_latch_and_all_state():
    tracker, _ = feed([2.0, 1.99, 1.98, 1.97], [50.0, 50.1, 50.2, 50.3])
    assert tracker.host_stabilized and tracker.plateau_epochs == 3
    tracker.reset()
    assert not tracker.host_stabilized and tracker.plateau_epochs == 0
    first = record(tracker, 1, 1.97, 50.3)
    assert first.host_stabilized == 0
    assert math.isinf(first.loss_delta) and first.accuracy_delta == pytest.approx(50.3)
    assert first.loss_history_5 == (1.97,) and first.best_val_accuracy == pytest.approx(50.3)


def test_stabilization_latch_survives_later_bad_epochs():
    _, out = feed([2.0, 1.99, 1.98, 1.97, 5.0, 0.1], [50.0] * 6)
    assert [s.host_stabilized for s in out] == [0, 0, 0, 1, 1, 1]


def test_a_non_stable_epoch_resets_the_stable_count():
    # 2.0 -> 1.99 -> 1.98 stable twice, 2.5 is worse (reset), then three stable epochs are needed again.
    _, out = feed([2.0, 1.99, 1.98, 2.5, 2.49, 2.48, 2.47], [50.0] * 7)
    assert [s.host_stabilized for s in out] == [0, 0, 0, 0, 0, 0, 1]


def test_a_relative_improvement_of_three_percent_or_more_is_not_stable():
    # Each step improves by 5 %: never stable.
    losses = [2.0 * 0.95**k for k in range(8)]
    _, out = feed(losses, [50.0] * 8)
    assert all(s.host_stabilized == 0 for s in out)


def test_first_update_has_infinite_loss_delta_and_accuracy_delta_equal_to_val_acc():
    _, (first,) = feed([2.3], [12.5])
    assert first.loss_delta == math.inf
    assert first.accuracy_delta == 12.5
    assert first.plateau_epochs == 0  # 12.5 >= 0.5


def test_best_val_loss_is_the_minimum_of_the_last_ten_losses():
    # 1.0 followed by 11 x 2.0 -> 2.0 (the 1.0 has left the window).
    _, out = feed([1.0] + [2.0] * 11, [50.0] * 12)
    assert out[-1].best_val_loss == 2.0
    # While the 1.0 is still among the last 10 it is the best.
    assert out[9].best_val_loss == 1.0


def test_best_val_accuracy_is_global_and_includes_the_current_epoch():
    _, out = feed([2.0] * 13, [90.0] + [10.0] * 11 + [95.0])
    assert out[0].best_val_accuracy == 90.0
    assert out[11].best_val_accuracy == 90.0  # global, not windowed
    assert out[12].best_val_accuracy == 95.0


def test_histories_hold_the_last_five_values_oldest_first():
    _, out = feed([float(k) for k in range(1, 8)], [float(10 * k) for k in range(1, 8)])
    assert out[1].loss_history_5 == (1.0, 2.0)
    assert out[-1].loss_history_5 == (3.0, 4.0, 5.0, 6.0, 7.0)
    assert out[-1].accuracy_history_5 == (30.0, 40.0, 50.0, 60.0, 70.0)


def test_signals_carry_the_epoch_metrics_and_slot_counts_through():
    tracker = SignalTracker()
    s = tracker.update(3, 300, 1.5, 40.0, 1.6, 38.0, active_seeds=2, available_slots=1)
    assert (s.epoch, s.global_step, s.train_loss, s.train_acc, s.val_loss, s.val_acc) == (
        3, 300, 1.5, 40.0, 1.6, 38.0,
    )
    assert (s.active_seeds, s.available_slots) == (2, 1)


def test_tracker_signals_are_frozen():
    _, (first,) = feed([2.0], [50.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.plateau_epochs = 3  # type: ignore[misc]


def test_peek_with_the_just_recorded_values_gives_zero_deltas_and_doubled_history():
    tracker, out = feed([2.0, 1.5, 1.2], [30.0, 35.0, 37.0])
    peeked = tracker.peek(3, 30, 1.3, 36.0, 1.2, 37.0, active_seeds=0, available_slots=1)
    assert peeked.loss_delta == 0.0 and peeked.accuracy_delta == 0.0
    assert peeked.loss_history_5 == (2.0, 1.5, 1.2, 1.2)
    assert peeked.accuracy_history_5 == (30.0, 35.0, 37.0, 37.0)
    assert peeked.plateau_epochs == out[-1].plateau_epochs
    assert peeked.host_stabilized == out[-1].host_stabilized


epoch_metrics = st.tuples(
    st.floats(0.01, 5.0, allow_nan=False), st.floats(0.0, 100.0, allow_nan=False)
)


@given(history=st.lists(epoch_metrics, max_size=14), probe=epoch_metrics)
def test_peek_equals_update_except_plateau_and_latch_and_does_not_mutate(history, probe):
    tracker, _ = feed([h[0] for h in history], [h[1] for h in history])
    twin, _ = feed([h[0] for h in history], [h[1] for h in history])
    epoch = len(history) + 1
    stored_plateau, stored_latch = tracker.plateau_epochs, int(tracker.host_stabilized)

    peeked = tracker.peek(epoch, 10 * epoch, probe[0] + 0.1, probe[1] - 1.0, probe[0], probe[1], 0, 1)
    updated = record(twin, epoch, probe[0], probe[1])
    expected = dataclasses.replace(updated, plateau_epochs=stored_plateau, host_stabilized=stored_latch)
    assert peeked == expected

    # Nothing moved: the peeked tracker now updates exactly like its twin did.
    assert record(tracker, epoch, probe[0], probe[1]) == updated
