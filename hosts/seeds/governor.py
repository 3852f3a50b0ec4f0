"""Governor: the fail-safe watchdog of one env's episode (BEHAVIOUR §5).

`check(val_loss)` says whether to roll back; `rollback(optimizer)` culls every non-fossil seed
(leaving those slots empty), restores the host and the snapshot's fossils, and zeros the host
optimizer's floating state. Snapshots hold detached CPU copies of host tensors and fossilized seeds only.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from esper_fx.contracts.stages import SeedStage

# BEHAVIOUR §1.6 governor constants
GOVERNOR_SENSITIVITY = 6.0  # sigma
GOVERNOR_MULTIPLIER = 3.0  # x mean
GOVERNOR_ABSOLUTE_THRESHOLD = 12.0  # nats
GOVERNOR_HISTORY_WINDOW = 20  # epochs
GOVERNOR_WARMUP = 10  # epochs of history before the statistical and lobotomy rules
GOVERNOR_MIN_PANICS = 3  # consecutive anomalous epochs
GOVERNOR_LOBOTOMY_MEAN_FRACTION = 0.6  # mean(history) < 0.6·R
GOVERNOR_LOBOTOMY_TOLERANCE = 0.065  # |loss - R| < 0.065·R
GOVERNOR_SNAPSHOT_EVERY = 5  # epochs, after a passing check

ROLLBACK_REASON = "governor_rollback"


@dataclass(frozen=True)
class RollbackReport:
    reason: str
    loss_at_panic: float
    loss_threshold: float
    rollback_occurred: bool
    consecutive_panics: int
    culled_slots: tuple[str, ...] = ()  # slots emptied by the rollback: the loop cleans up their optimizers
    restored_fossils: tuple[str, ...] = ()


@dataclass
class Snapshot:
    host: dict[str, torch.Tensor]
    fossils: dict[str, tuple[str, dict[str, torch.Tensor]]] = field(default_factory=dict)  # slot -> (seed_id, tensors)


def _cpu_copy(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU copies; entries that alias one tensor (a tied weight) share one copy."""
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for k, v in state_dict.items():
        key = (v.device, v.data_ptr(), v.dtype, tuple(v.shape), v.stride())
        if key not in copies:
            copies[key] = _host_copy(v.detach())
        out[k] = copies[key]
    return out


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy that does not synchronise with the device: from a GPU, into pinned memory in the order of
    the current stream. The snapshot is taken on the pool's caller stream and read only by a rollback, after
    the readback of a later epoch has waited for that stream (`hosts.env.epoch_compute`), so the copy is done
    by then."""
    if tensor.device.type == "cpu":
        return tensor.clone()
    host = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype, device="cpu", pin_memory=True)
    return host.copy_(tensor, non_blocking=True)


def _population_stats(values) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / n)


class Governor:
    def __init__(
        self,
        model,
        sensitivity: float = GOVERNOR_SENSITIVITY,
        multiplier: float = GOVERNOR_MULTIPLIER,
        absolute_threshold: float = GOVERNOR_ABSOLUTE_THRESHOLD,
        history_window: int = GOVERNOR_HISTORY_WINDOW,
        min_panics_before_rollback: int = GOVERNOR_MIN_PANICS,
        random_guess_loss: float = math.log(10),
    ) -> None:
        self.model = model
        self.sensitivity, self.multiplier = float(sensitivity), float(multiplier)
        self.absolute_threshold = float(absolute_threshold)
        self.min_panics = int(min_panics_before_rollback)
        self.random_guess_loss = float(random_guess_loss)
        self.loss_history: deque[float] = deque(maxlen=int(history_window))
        self.consecutive_panics = 0
        self.last_panic_loss: float | None = None
        self._last_result: bool | None = None
        self.snapshot_data: Snapshot | None = None
        self.snapshot()

    @property
    def passed_last_check(self) -> bool:
        """The last check returned False and left consecutive_panics == 0."""
        return self._last_result is False and self.consecutive_panics == 0

    # ---------------------------------------------------------------- the vital-sign check (BEHAVIOUR §5.2)
    def check(self, loss: float) -> bool:
        self._last_result = self._check(float(loss))
        return self._last_result

    def _panic(self, loss: float) -> bool:
        self.consecutive_panics = self.min_panics
        self.last_panic_loss = loss
        return True

    def _is_lobotomy(self, loss: float) -> bool:
        r = self.random_guess_loss
        mean, _ = _population_stats(self.loss_history)
        return mean < GOVERNOR_LOBOTOMY_MEAN_FRACTION * r and abs(loss - r) < GOVERNOR_LOBOTOMY_TOLERANCE * r

    def _check(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return self._panic(loss)
        warm = len(self.loss_history) >= GOVERNOR_WARMUP
        if warm and self._is_lobotomy(loss):
            return self._panic(loss)
        if not warm:
            self.loss_history.append(loss)
            return False
        mean, std = _population_stats(self.loss_history)
        anomaly = (loss > self.absolute_threshold and loss > mean + self.sensitivity * std
                   and loss > self.multiplier * mean)
        if anomaly:
            self.consecutive_panics += 1
            self.last_panic_loss = loss
            return self.consecutive_panics >= self.min_panics
        self.loss_history.append(loss)
        self.consecutive_panics = 0
        return False

    # ---------------------------------------------------------------- snapshot and rollback (BEHAVIOUR §5.3)
    def snapshot(self) -> Snapshot:
        """Detached CPU copies of every host tensor plus the tensors of every FOSSILIZED seed."""
        fossils = {
            slot_id: (slot.state.seed_id, _cpu_copy(slot.seed.state_dict()))
            for slot_id, slot in self.model.slots.items()
            if slot.is_active and slot.stage == SeedStage.FOSSILIZED
        }
        self.snapshot_data = Snapshot(_cpu_copy(self.model.host.state_dict()), fossils)
        return self.snapshot_data

    def maybe_snapshot(self, epoch: int) -> bool:
        """[fix] cadence: retake the snapshot iff epoch % 5 == 0 and this epoch's check passed."""
        if epoch % GOVERNOR_SNAPSHOT_EVERY == 0 and self.passed_last_check:
            self.snapshot()
            return True
        return False

    def loss_threshold(self) -> float:
        mean, std = _population_stats(self.loss_history)
        return mean + self.sensitivity * std

    def rollback(self, optimizer: torch.optim.Optimizer | None = None) -> RollbackReport:
        culled = tuple(
            slot_id for slot_id, slot in self.model.slots.items()
            if slot.state is not None and slot.stage != SeedStage.FOSSILIZED and slot.cull(ROLLBACK_REASON)
        )
        self.model.host.load_state_dict(self.snapshot_data.host)
        restored = self._restore_fossils()
        if optimizer is not None:
            _zero_optimizer_state(optimizer)
        self.consecutive_panics = 0
        return RollbackReport(
            reason="Structural Collapse",
            loss_at_panic=math.nan if self.last_panic_loss is None else self.last_panic_loss,
            loss_threshold=self.loss_threshold(),
            rollback_occurred=True,
            consecutive_panics=self.consecutive_panics,
            culled_slots=culled,
            restored_fossils=restored,
        )

    def _restore_fossils(self) -> tuple[str, ...]:
        restored = []
        for slot_id, (seed_id, tensors) in self.snapshot_data.fossils.items():
            slot = self.model.slots[slot_id] if slot_id in self.model.slots else None
            if slot is not None and slot.is_active and slot.state.seed_id == seed_id:
                slot.seed.load_state_dict(tensors)
                restored.append(slot_id)
        return tuple(restored)


def _zero_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Zero every floating-point state tensor (momentum buffers); non-float entries (e.g. step) stay."""
    with torch.no_grad():
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value) and value.is_floating_point():
                    value.zero_()
