"""Per-env state of the epoch engine and the bookkeeping around it (BEHAVIOUR §7.2, §2.10).

One `EnvState` per environment and episode: the model, the host optimizer, the lazily created seed
optimizers (one per slot, keyed by the seed they were built for), the governor, the signal
tracker, the fp16 GradScaler, the CUDA stream, the env's own RNG stream and the counters of BEHAVIOUR §7.2 item 4.
The dataclasses that the pool hands to the loop (`EpochMetrics`, `LifecycleEvent`, `ApplyResult`,
`EpisodeResult`) live here too.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import torch

from esper_fx.contracts.actions import NUM_OPS
from esper_fx.contracts.events import EventType
from esper_fx.contracts.stages import SeedStage
from hosts.signals.tracker import SignalTracker, TrackerSignals
from hosts.tasks import SEED_MOMENTUM, SEED_WEIGHT_DECAY


# ------------------------------------------------------------------------------------------
# what the pool reports
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleEvent:
    """One seed or governor event of one env in one epoch."""

    event_type: EventType
    env_id: int
    epoch: int
    slot_id: str = ""
    seed_id: str = ""
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpochMetrics:
    """One env's metrics of the current epoch, read back in its single host sync (BEHAVIOUR §7.3 phases 1–7)."""

    epoch: int
    steps: int  # K
    train_loss: float
    train_acc: float  # pp
    val_loss: float  # sample-weighted (tokens for LM)
    val_acc: float  # pp
    baseline_acc: dict[str, float]  # cf slot -> val_acc with that slot's alpha forced to 0
    cf_slots: tuple[str, ...]  # enabled slots holding a seed with state.alpha > 0 before validation
    contributions: dict[str, tuple[str, float]]  # slot -> (seed_id, c) for cf slots still holding a seed
    panic: bool  # the governor panicked (and rolled back) this epoch
    tracker: TrackerSignals  # what tracker.update returned this epoch


@dataclass(frozen=True)
class ApplyResult:
    """What `EnvPool.apply` did: the actions it executed, per-env success, the epoch's events, the bootstrap
    signals (or None)."""

    actions: np.ndarray  # [E, NUM_HEADS] int32, read-only: columns in contracts.actions.ACTION_HEADS order
    success: tuple[bool, ...]  # [E], counted for logs only
    events: tuple[LifecycleEvent, ...]  # every event of this epoch, envs in index order
    bootstrap_signals: dict[str, torch.Tensor] | None


@dataclass(frozen=True)
class EpisodeResult:
    """Per-env totals of one episode, for the loop's history (BEHAVIOUR §7.6)."""

    env_id: int
    epochs: int
    final_val_acc: float
    final_val_loss: float
    host_max_acc: float
    seeds_created: int
    seeds_fossilized: int
    contributing_fossilized: int
    rollbacks: int
    action_counts: tuple[int, ...]  # per op, LifecycleOp order
    successful_action_counts: tuple[int, ...]
    val_accs: tuple[float, ...] = ()  # validation accuracy of every epoch so far, pp
    fossils: tuple[str, ...] = ()  # "slot=blueprint" of every seed FOSSILIZED now (the grown architecture)
    flops: dict[str, int] = field(default_factory=dict)  # hosts.env.compute.FLOP_FIELDS; {} when not counted
    compute_units: dict[str, float] = field(default_factory=dict)  # hosts.env.compute.ComputeMeter.units
    task: str = ""  # the task the episode ran (a task mix draws one per episode)


@dataclass
class EnvCounters:
    """The per-env counters of BEHAVIOUR §7.2 item 4 (all zero at batch start)."""

    seeds_created: int = 0
    seeds_fossilized: int = 0
    contributing_fossilized: int = 0
    rollbacks: int = 0
    action_counts: list[int] = field(default_factory=lambda: [0] * NUM_OPS)
    successful_action_counts: list[int] = field(default_factory=lambda: [0] * NUM_OPS)
    auto_culls: int = 0  # seeds the last lifecycle step auto-culled (the next signals report them)
    host_max_acc: float = 0.0
    val_accs: list[float] = field(default_factory=list)  # every validated epoch's accuracy, pp
    acc_at_germination: dict[str, float] = field(default_factory=dict)
    ratio_ema: dict[str, float] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------
# the env's own random stream
# ------------------------------------------------------------------------------------------


class EnvRng:
    """The torch (CPU and env-device CUDA) and python RNG states of one env.

    `activate()` swaps them into the global generators for the body and saves them back after, so
    each env's dropout and seed-init draws come from its own stream, seeded with base_seed + 1000·i
    (BEHAVIOUR §7.2), however many envs run and in whatever order their work is interleaved.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._cpu = torch.get_rng_state()
        self._cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        self._py = random.getstate()

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        torch.set_rng_state(self._cpu)
        if self._cuda is not None:
            torch.cuda.set_rng_state(self._cuda, self.device)
        random.setstate(self._py)
        try:
            yield
        finally:
            self._cpu = torch.get_rng_state()
            if self._cuda is not None:
                self._cuda = torch.cuda.get_rng_state(self.device)
            self._py = random.getstate()


# ------------------------------------------------------------------------------------------
# seed optimizers (BEHAVIOUR §7.3 phase 1.2, §2.12 [fix])
# ------------------------------------------------------------------------------------------


@dataclass
class SeedOptimizer:
    """The SGD of one slot's seed, remembered with the seed it was built for; the gate group joins once."""

    seed_id: str
    optimizer: torch.optim.SGD | None  # None while the seed has no trainable parameters
    gate_added: bool = False
    steps: int = 0  # training steps this seed has taken (its re-warmed rate reads it)


def _seed_sgd(params: list[torch.nn.Parameter], lr: float, fused: bool = False) -> torch.optim.SGD:
    """fused (with an fp16 GradScaler): the scaler's step then stays on the device (no host sync)."""
    return torch.optim.SGD(params, lr=lr, momentum=SEED_MOMENTUM, weight_decay=SEED_WEIGHT_DECAY,
                           fused=True if fused else None)


# ------------------------------------------------------------------------------------------
# EnvState
# ------------------------------------------------------------------------------------------


@dataclass
class EnvState:
    """Everything one env owns for one episode."""

    index: int
    device: torch.device
    model: Any  # hosts.models.morphogenetic.MorphogeneticModel
    host_optimizer: torch.optim.SGD
    governor: Any  # hosts.seeds.governor.Governor
    tracker: SignalTracker
    rng: EnvRng
    seed_lr: float
    carry_seed_state: bool = False  # a host-initialised seed's optimizer starts with its source's momentum
    scaler: Any = None  # torch.amp.GradScaler for fp16 AMP on CUDA, else None
    stream: Any = None  # torch.cuda.Stream on CUDA, else None
    seed_optimizers: dict[str, SeedOptimizer] = field(default_factory=dict)
    counters: EnvCounters = field(default_factory=EnvCounters)
    events: list[LifecycleEvent] = field(default_factory=list)
    metrics: EpochMetrics | None = None
    epoch_work: Any = None  # hosts.env.epoch_compute.EpochWork of the running epoch
    compute: Any = None  # hosts.env.compute.ComputeMeter of the episode (from the first training step)
    task: str = ""  # the task the episode runs (one of a task mix's, drawn from the env's seed)

    # ---------------------------------------------------------------- slots
    def slot(self, slot_id: str):
        return self.model.slot(slot_id)

    def holds_seed(self, slot_id: str) -> bool:
        """The slot holds a seed (any stage, fossils included)."""
        stage = self.slot(slot_id).stage
        return stage is not None and stage != SeedStage.DORMANT

    def seed_id(self, slot_id: str) -> str | None:
        state = self.slot(slot_id).state
        return None if state is None else state.seed_id

    def stream_context(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def event(self, event_type: EventType, epoch: int, slot_id: str = "", seed_id: str = "", message: str = "",
              **data: Any) -> None:
        self.events.append(LifecycleEvent(event_type, self.index, epoch, slot_id, seed_id, message, dict(data)))

    # ---------------------------------------------------------------- seed optimizers
    def ensure_seed_optimizer(self, slot_id: str) -> None:
        """A seed optimizer for the slot's current seed; the gate group joins at BLENDING (BEHAVIOUR §2.12 [fix])."""
        slot = self.slot(slot_id)
        state = slot.state
        if state is None:
            return
        entry = self.seed_optimizers.get(slot_id)
        if entry is None or entry.seed_id != state.seed_id:
            params = list(self.model.seed_parameters(slot_id))
            entry = SeedOptimizer(state.seed_id, _seed_sgd(params, self.seed_lr, self.scaler is not None)
                                  if params else None)
            if self.carry_seed_state and entry.optimizer is not None:
                self._carry_momentum(slot, entry.optimizer)
            self.seed_optimizers[slot_id] = entry
        if not entry.gate_added and state.stage == SeedStage.BLENDING:
            gate = list(self.model.gate_parameters(slot_id))
            if gate:
                if entry.optimizer is None:
                    entry.optimizer = _seed_sgd(gate, self.seed_lr, self.scaler is not None)
                else:  # an extra group with the seed defaults; the seed momentum buffers are kept
                    entry.optimizer.add_param_group({"params": gate})
                entry.gate_added = True

    def _carry_momentum(self, slot, optimizer: torch.optim.SGD) -> None:
        """`seed_optimizer_state = carry`: each copied seed weight starts with the momentum buffer of the host
        weight it was copied from (`SeedSlot.carried_state`), the others fresh."""
        host_state = self.host_optimizer.state

        def state_of(param):
            return host_state.get(param, {}).get("momentum_buffer")

        for param, buffer in slot.carried_state(state_of).items():
            optimizer.state[param]["momentum_buffer"] = buffer

    def seed_optimizers_in_order(self, slot_order) -> list[torch.optim.SGD]:
        """The existing seed optimizers in canonical slot order."""
        out = []
        for slot_id in slot_order:
            entry = self.seed_optimizers.get(slot_id)
            if entry is not None and entry.optimizer is not None:
                out.append(entry.optimizer)
        return out

    def forget_slot(self, slot_id: str) -> None:
        """The empty-slot cleanup of BEHAVIOUR §2.10: drop the optimizer, acc_at_germination and the ratio EMA."""
        self.seed_optimizers.pop(slot_id, None)
        self.counters.acc_at_germination.pop(slot_id, None)
        self.counters.ratio_ema.pop(slot_id, None)

    def forget_emptied(self, slot_ids) -> list[str]:
        """Clean up every listed slot that no longer holds a seed; returns those slots."""
        emptied = [s for s in slot_ids if not self.holds_seed(s)]
        for slot_id in emptied:
            self.forget_slot(slot_id)
        return emptied
