"""SignalTracker: per-env running statistics of the host's training curve (BEHAVIOUR §8.5).

One tracker per env per episode. `update` is called once per epoch with that epoch's metrics and
returns a frozen `TrackerSignals`; `peek` returns what `update` would return (plateau counter and
stabilization latch excepted) without changing anything, for the truncation bootstrap (BEHAVIOUR §7.5).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

PLATEAU_THRESHOLD = 0.5  # pp (BEHAVIOUR §1.6)
STABILIZATION_THRESHOLD = 0.03  # relative val-loss improvement
STABILIZATION_EPOCHS = 3
TRACKER_HISTORY_WINDOW = 10  # epochs

HISTORY_FEATURES = 5  # the observation shows the last <= 5 entries of each history
_MIN_PREV_LOSS = 1e-8  # the stability test needs 1e-8 < prev_loss < inf
_MAX_LOSS_GROWTH = 1.5  # a stable epoch needs val_loss < 1.5 * prev_loss


@dataclass(frozen=True)
class TrackerSignals:
    """The epoch-level signals of one env, as returned by `SignalTracker.update` / `peek`."""

    epoch: int
    global_step: int
    train_loss: float
    train_acc: float
    val_loss: float
    val_acc: float
    loss_delta: float  # prev_val_loss - val_loss (positive = better); +inf at the first update
    accuracy_delta: float  # val_acc - prev_val_acc, pp (prev starts at 0)
    plateau_epochs: int
    host_stabilized: int  # 0 / 1 latch
    best_val_accuracy: float  # includes the current epoch
    best_val_loss: float  # min of the last <= 10 val losses (a window)
    loss_history_5: tuple[float, ...]  # last <= 5 val losses, oldest first (unpadded)
    accuracy_history_5: tuple[float, ...]  # last <= 5 val accuracies, oldest first (unpadded)
    active_seeds: int
    available_slots: int  # enabled empty slots


class _Curve(NamedTuple):
    """The validation curve as of an epoch: the changes since the previous epoch, the best accuracy so far,
    and the windows of the last <= 10 losses and accuracies (oldest first)."""

    loss_delta: float
    accuracy_delta: float
    best_accuracy: float
    losses: list[float]
    accuracies: list[float]


def _is_stable_epoch(loss_delta: float, prev_loss: float, val_loss: float) -> bool:
    """BEHAVIOUR §8.5 step 3: the loss did not get worse, improved by < 3 % relative, and did not blow up."""
    return (
        loss_delta >= 0.0
        and loss_delta / prev_loss < STABILIZATION_THRESHOLD
        and val_loss < _MAX_LOSS_GROWTH * prev_loss
    )


def _window(stored: deque, value: float, size: int) -> list[float]:
    """The last `size` entries of the stored history with `value` appended (the history is untouched)."""
    return (list(stored) + [value])[-size:]


class SignalTracker:
    """Plateau counter, stabilization latch, best values and short histories of one env (BEHAVIOUR §8.5)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the initial state, the stabilization latch included."""
        self._losses: deque[float] = deque(maxlen=TRACKER_HISTORY_WINDOW)
        self._accuracies: deque[float] = deque(maxlen=TRACKER_HISTORY_WINDOW)
        self._best_accuracy = 0.0
        self._plateau_count = 0
        self._stabilized = False
        self._stable_count = 0
        self._prev_acc = 0.0
        self._prev_loss = math.inf

    @property
    def plateau_epochs(self) -> int:
        return self._plateau_count

    @property
    def host_stabilized(self) -> bool:
        return self._stabilized

    def update(
        self,
        epoch: int,
        global_step: int,
        train_loss: float,
        train_acc: float,
        val_loss: float,
        val_acc: float,
        active_seeds: int,
        available_slots: int,
    ) -> TrackerSignals:
        """Record one epoch (BEHAVIOUR §8.5 steps 1–6) and return its signals."""
        loss_delta = self._prev_loss - val_loss
        accuracy_delta = val_acc - self._prev_acc
        self._update_plateau(accuracy_delta)
        self._update_stabilization(loss_delta, val_loss)
        self._best_accuracy = max(self._best_accuracy, val_acc)
        self._losses.append(val_loss)
        self._accuracies.append(val_acc)
        signals = self._signals(
            epoch, global_step, train_loss, train_acc, val_loss, val_acc, active_seeds, available_slots,
            _Curve(loss_delta, accuracy_delta, self._best_accuracy, list(self._losses), list(self._accuracies)),
        )
        self._prev_loss = val_loss
        self._prev_acc = val_acc
        return signals

    def peek(
        self,
        epoch: int,
        global_step: int,
        train_loss: float,
        train_acc: float,
        val_loss: float,
        val_acc: float,
        active_seeds: int,
        available_slots: int,
    ) -> TrackerSignals:
        """What `update` would return, without mutating; plateau and latch are the stored values."""
        return self._signals(
            epoch, global_step, train_loss, train_acc, val_loss, val_acc, active_seeds, available_slots,
            _Curve(self._prev_loss - val_loss, val_acc - self._prev_acc, max(self._best_accuracy, val_acc),
                   _window(self._losses, val_loss, TRACKER_HISTORY_WINDOW),
                   _window(self._accuracies, val_acc, TRACKER_HISTORY_WINDOW)),
        )

    def _update_plateau(self, accuracy_delta: float) -> None:
        if accuracy_delta < PLATEAU_THRESHOLD:
            self._plateau_count += 1
        else:
            self._plateau_count = 0

    def _update_stabilization(self, loss_delta: float, val_loss: float) -> None:
        if self._stabilized or not (_MIN_PREV_LOSS < self._prev_loss < math.inf):
            return
        if _is_stable_epoch(loss_delta, self._prev_loss, val_loss):
            self._stable_count += 1
            if self._stable_count >= STABILIZATION_EPOCHS:
                self._stabilized = True
        else:
            self._stable_count = 0

    def _signals(
        self,
        epoch: int,
        global_step: int,
        train_loss: float,
        train_acc: float,
        val_loss: float,
        val_acc: float,
        active_seeds: int,
        available_slots: int,
        curve: _Curve,
    ) -> TrackerSignals:
        return TrackerSignals(
            epoch=int(epoch),
            global_step=int(global_step),
            train_loss=float(train_loss),
            train_acc=float(train_acc),
            val_loss=float(val_loss),
            val_acc=float(val_acc),
            loss_delta=float(curve.loss_delta),
            accuracy_delta=float(curve.accuracy_delta),
            plateau_epochs=self._plateau_count,
            host_stabilized=int(self._stabilized),
            best_val_accuracy=float(curve.best_accuracy),
            best_val_loss=float(min(curve.losses)),
            loss_history_5=tuple(float(v) for v in curve.losses[-HISTORY_FEATURES:]),
            accuracy_history_5=tuple(float(v) for v in curve.accuracies[-HISTORY_FEATURES:]),
            active_seeds=int(active_seeds),
            available_slots=int(available_slots),
        )
