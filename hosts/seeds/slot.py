"""SeedSlot: one injection point holding at most one seed and its lifecycle (BEHAVIOUR §2).

The slot is an nn.Module inserted between host segments. Forward per stage (BEHAVIOUR §2.2):
empty / GERMINATED -> h; TRAINING -> straight-through h + (s - stopgrad(s)); BLENDING, PROBATIONARY,
FOSSILIZED -> lerp(h, s, clamp(α, 0, 1)). Lifecycle moves only through `germinate`, `advance_stage`,
`step_epoch`, `fossilize` and `cull`; epoch counters only through `record_accuracy`; the blend ramp ticks in
`step_epoch` or, with a clock that ticks it per training step, in `tick_step` (BEHAVIOUR §2.14).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from esper_fx.contracts.actions import DEFAULT_TEMPO, NUM_TEMPOS
from esper_fx.contracts.blueprints import TOPOLOGIES
from esper_fx.contracts.stages import ACTIVE_STAGES, FAILURE_STAGES, SeedStage, is_valid_transition, next_stage
from hosts.layout import memory_format
from hosts.seeds import blueprints
from hosts.seeds.blending import (
    DEFAULT_BLEND,
    BlendSchedule,
    GatedBlend,
    blend_name,
    make_schedule,
)
from hosts.seeds.lifecycle import GateResult, SeedClock, SeedState, evaluate_gate
from hosts.seeds.slot_report import SlotReport

AUTO_CULL_REASONS = ("negative_counterfactual", "probation_timeout")


def _empty_result(message: str) -> GateResult:
    return GateResult(0, False, 0.0, [], ["no_seed"], message)


class SeedSlot(nn.Module):
    """A slot of width `channels` in a `topology` host whose stages last as `clock` says (the run's
    `SeedClock`; None: the reference's clock without a task: dwell 1, blends of 3/5/8 epochs, probation
    timeout 5)."""

    def __init__(self, slot_id: str, channels: int, topology: str, clock: SeedClock | None = None) -> None:
        super().__init__()
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; expected one of {list(TOPOLOGIES)}")
        self.slot_id, self.channels, self.topology = slot_id, int(channels), topology
        self.clock = SeedClock() if clock is None else clock
        self.seed: nn.Module | None = None
        self.alpha_schedule: BlendSchedule | None = None
        self.state: SeedState | None = None
        self.isolate_gradients = False
        self.blend = DEFAULT_BLEND
        self.last_culled: SeedState | None = None  # final state of the latest cull, for logging
        self._alpha_forced = False
        self._source: tuple[nn.Module | None] = (None,)  # the host block a host-initialised seed was copied from
        self.register_buffer("_device_anchor", torch.empty(0), persistent=False)

    # ---------------------------------------------------------------- the clock's durations
    @property
    def dwell_epochs(self) -> int:
        return self.clock.dwell

    @property
    def probation_timeout(self) -> int:
        return self.clock.probation_timeout

    # ---------------------------------------------------------------- read-only views
    @property
    def device(self) -> torch.device:
        return self._device_anchor.device

    def _place(self, module: nn.Module) -> nn.Module:
        """Move a new seed or gate to the slot's device, floating dtype and layout (they follow `.to()`;
        a CNN seed is channels_last like its host, so no activation changes layout at the slot). The upload
        does not wait for the device (`non_blocking`: CUDA stages pageable memory before the call returns)."""
        return module.to(device=self._device_anchor.device, dtype=self._device_anchor.dtype,
                         memory_format=memory_format(self.topology), non_blocking=True)

    @property
    def is_active(self) -> bool:
        return self.seed is not None and self.state is not None

    @property
    def stage(self) -> SeedStage | None:
        return None if self.state is None else self.state.stage

    @property
    def alpha(self) -> float:
        return 0.0 if self.state is None else self.state.alpha

    def seed_parameters(self) -> list[nn.Parameter]:
        """Trainable seed-module parameters; the gate is excluded."""
        return [] if self.seed is None else [p for p in self.seed.parameters() if p.requires_grad]

    def gate_parameters(self) -> list[nn.Parameter]:
        """Trainable gate parameters of a gated blend while its schedule exists, else []."""
        if isinstance(self.alpha_schedule, GatedBlend):
            return [p for p in self.alpha_schedule.parameters() if p.requires_grad]
        return []

    def seed_param_count(self) -> int:
        return sum(p.numel() for p in self.seed_parameters())

    # ---------------------------------------------------------------- forward (BEHAVIOUR §2.2)
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        state = self.state
        if not self.is_active or state.stage not in ACTIVE_STAGES:
            return h
        if self._alpha_forced and state.alpha == 0.0 and state.stage != SeedStage.TRAINING:
            return h  # counterfactual path (BEHAVIOUR §2.11): exactly h, the seed is skipped
        x = h.detach() if self.isolate_gradients else h
        s = self.seed(x).to(h.dtype)
        if state.stage == SeedStage.TRAINING and state.alpha == 0.0:
            return h + (s - s.detach())  # straight-through: equals h, seed gets the full gradient
        if self.alpha_schedule is not None:
            alpha = self.alpha_schedule.forward_alpha(h)
        else:
            alpha = h.new_full((), state.alpha)
        return torch.lerp(h, s, alpha.to(h.dtype).clamp(0.0, 1.0))

    # ---------------------------------------------------------------- alpha
    def set_alpha(self, value: float) -> None:
        """Store clip(value, 0, 1) in state.alpha and metrics.current_alpha (±inf clip; NaN raises ValueError)."""
        if self.state is None:
            raise RuntimeError(f"slot {self.slot_id}: set_alpha on an empty slot")
        value = float(value)
        if math.isnan(value):
            raise ValueError(f"slot {self.slot_id}: alpha must not be NaN")
        value = min(1.0, max(0.0, value))
        self.state.alpha = value
        self.state.metrics.current_alpha = value

    @contextmanager
    def force_alpha(self, value: float) -> Iterator[None]:
        """Run the body with state.alpha = value and no schedule; restore both exactly, even on error."""
        state = self.state
        if state is None:
            yield
            return
        saved = (state.alpha, state.metrics.current_alpha, self.alpha_schedule, self._alpha_forced)
        try:
            self.set_alpha(value)
            self.alpha_schedule = None
            self._alpha_forced = True
            yield
        finally:
            state.alpha, state.metrics.current_alpha, schedule, self._alpha_forced = saved
            self.alpha_schedule = schedule

    # ---------------------------------------------------------------- germinate (BEHAVIOUR §2.9)
    def germinate(
        self, blueprint_id: str, seed_id: str | None = None, blend: str | int = DEFAULT_BLEND, *,
        host_param_count: int = 0, tempo: int = DEFAULT_TEMPO, accuracy: float | None = None,
        source: nn.Module | None = None,
    ) -> GateResult:
        """Build, shape-check and plant a seed at GERMINATED, its blend to ramp at `tempo`. Occupied slot ->
        RuntimeError. `accuracy` (the env's validation accuracy now) is G2's baseline under a clock that
        counts from germination (BEHAVIOUR §2.14); otherwise the seed's first epoch sets it. `source`: the host
        block a host-initialised blueprint copies (BEHAVIOUR §4.5; the others ignore it)."""
        tempo = int(tempo)
        if not 0 <= tempo < NUM_TEMPOS:
            raise ValueError(f"slot {self.slot_id}: tempo index {tempo} is outside [0, {NUM_TEMPOS})")
        self.blend = blend_name(blend)
        if self.is_active and self.state.stage not in FAILURE_STAGES:
            raise RuntimeError(f"slot {self.slot_id} already holds seed {self.state.seed_id!r}")
        module = self._place(blueprints.create(self.topology, blueprint_id, self.channels, source=source))
        self._probe_shape(module, blueprint_id)
        state = SeedState(seed_id=f"{self.slot_id}-{blueprint_id}" if seed_id is None else seed_id,
                          blueprint_id=blueprint_id, slot_id=self.slot_id)
        state.metrics.seed_param_count = sum(p.numel() for p in module.parameters() if p.requires_grad)
        state.metrics.host_param_count = int(host_param_count)
        state.tempo = tempo
        if accuracy is not None and self.clock.timings.baseline_at_germination:
            state.metrics.set_baseline(accuracy)
        result = evaluate_gate(state, SeedStage.GERMINATED)
        if not result.passed:
            raise RuntimeError(f"slot {self.slot_id}: G0 failed ({result.message})")
        state.transition(SeedStage.GERMINATED)
        module.train(self.training)
        self.seed, self.state, self.alpha_schedule = module, state, None
        self._source = (source if blueprints.get(self.topology, blueprint_id).from_host else None,)
        return result

    def carried_state(self, state_of) -> dict[nn.Parameter, torch.Tensor]:
        """Seed parameter -> the optimiser state (momentum buffer) of the host parameter it was copied from,
        where `state_of(host parameter)` has one (`blueprints.carried_state`); {} for a seed not copied."""
        if self.seed is None:
            return {}
        return blueprints.carried_state(self.seed, self._source[0], state_of)

    def plant_fossil(self, blueprint_id: str, seed_id: str | None = None, *, host_param_count: int = 0,
                     source: nn.Module | None = None) -> None:
        """A seed built already FOSSILIZED at α = 1, for a static architecture (the `static_final` control).

        It goes through germinate (build, shape check, G0) and then the legal chain of stages without their
        gates, timing or blending, so from the first training step it is a permanent, trained-with-the-host
        part of the network, exactly like a fossil grown in an episode.
        """
        self.germinate(blueprint_id, seed_id, host_param_count=host_param_count, source=source)
        for stage in (SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED):
            self.state.transition(stage)
        self.isolate_gradients = False
        self.alpha_schedule = None
        self.set_alpha(1.0)

    def _probe_shape(self, module: nn.Module, blueprint_id: str) -> None:
        """Zero input (no RNG draw) in eval mode without gradients; the output shape must match."""
        shape = (1, self.channels, 32, 32) if self.topology == "cnn" else (2, 8, self.channels)
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                probe = self._device_anchor.new_zeros(shape).contiguous(memory_format=memory_format(self.topology))
                out = module(probe)
        finally:
            module.train(was_training)
        if tuple(out.shape) != shape:
            raise ValueError(f"blueprint {blueprint_id!r} changed shape {shape} -> {tuple(out.shape)}")

    # ---------------------------------------------------------------- transitions (BEHAVIOUR §2.4)
    def advance_stage(self, target: SeedStage | None = None) -> GateResult:
        """Try one transition (default: the first non-failure target) through its gate."""
        if self.state is None:
            return _empty_result(f"slot {self.slot_id} is empty")
        target = next_stage(self.state.stage) if target is None else SeedStage(target)
        if target is None or not self._is_legal(target):
            name = "none" if target is None else target.name
            return GateResult(0, False, 0.0, [], ["invalid_transition"],
                              f"{self.state.stage.name} -> {name} is not a legal transition")
        result = evaluate_gate(self.state, target, self.clock.min_stage)
        if result.passed:
            self.state.transition(target)
            self._on_enter(target)
        return result

    def _is_legal(self, target: SeedStage) -> bool:
        return is_valid_transition(self.state.stage, target)

    def start_training(self) -> list[tuple[SeedStage, SeedStage]]:
        """A GERMINATED seed's first training step: GERMINATED -> TRAINING through G1, and under a clock
        without an isolated phase (`immediate`, BEHAVIOUR §2.14) straight on to BLENDING, without G2 (there is
        nothing for it to measure yet). Returns the transitions made; G1 failing raises RuntimeError."""
        result = self.advance_stage(SeedStage.TRAINING)
        if not result.passed:
            raise RuntimeError(f"slot {self.slot_id}: G1 failed ({result.message})")
        moves = [(SeedStage.GERMINATED, SeedStage.TRAINING)]
        if not self.clock.timings.isolated:
            self._blend_at_once()
            moves.append((SeedStage.TRAINING, SeedStage.BLENDING))
        return moves

    def _blend_at_once(self) -> None:
        """TRAINING -> BLENDING without G2, under a clock without an isolated phase."""
        self.state.transition(SeedStage.BLENDING)
        self._on_enter(SeedStage.BLENDING)

    def _on_enter(self, stage: SeedStage) -> None:
        isolated = self.clock.timings.isolated
        if stage == SeedStage.TRAINING:
            self.isolate_gradients = isolated
        elif stage == SeedStage.BLENDING:
            self.isolate_gradients = isolated and self.topology == "cnn"
            self.state.metrics.accuracy_at_blending_start = self.state.metrics.current_val_accuracy
            self.state.metrics.blending_started = True
            self.start_blending(self.clock.blend_ticks(self.state.tempo))
        elif stage == SeedStage.PROBATIONARY:
            self.alpha_schedule = None
            self.set_alpha(1.0)
        elif stage == SeedStage.FOSSILIZED and self.clock.timings.release_on_fossilize:
            self.isolate_gradients = False  # a fossil trains with the host as a planted one does (BEHAVIOUR §2.14)

    def start_blending(self, total_steps: int) -> None:
        """Create the schedule at tick 0 of `total_steps`; state.alpha is not reset (it stays 0 from TRAINING)."""
        self.state.blending_steps_total = int(total_steps)
        self.state.blending_steps_done = 0
        self.alpha_schedule = self._place(make_schedule(self.blend, total_steps, self.channels, self.topology))

    def fossilize(self) -> GateResult:
        """PROBATIONARY -> FOSSILIZED through G5, then α := 1."""
        result = self.advance_stage(SeedStage.FOSSILIZED)
        if result.passed:
            self.set_alpha(1.0)
        return result

    # ---------------------------------------------------------------- per-epoch hooks
    def record_accuracy(self, acc: float) -> None:
        """BEHAVIOUR §2.7: the epoch's val_acc (pp); moves epochs_total and eis."""
        if self.state is not None:
            self.state.metrics.record_accuracy(acc)

    def set_contribution(self, contribution: float | None) -> None:
        if self.state is not None:
            self.state.metrics.counterfactual_contribution = None if contribution is None else float(contribution)

    def set_gradient_ratio(self, ratio_ema: float) -> None:
        """Write the BEHAVIOUR §2.13 EMA into metrics.seed_gradient_norm_ratio (the G2 input)."""
        if self.state is not None:
            self.state.metrics.seed_gradient_norm_ratio = float(ratio_ema)

    def record_gradient_norm(self, norm: float) -> None:
        """Write g (√seed_sq of the last training step) for the BEHAVIOUR §8.4 telemetry."""
        if self.state is not None:
            self.state.telemetry.gradient_norm = float(norm)
            self.state.telemetry.gradient_measured = True

    def step_epoch(self) -> bool:
        """BEHAVIOUR §2.6: at most one transition; True only for an auto-cull (the slot is then empty)."""
        state = self.state
        if state is None:
            return False
        if state.stage == SeedStage.GERMINATED:
            if self.advance_stage(SeedStage.TRAINING).passed and not self.clock.timings.isolated:
                self._blend_at_once()
        elif state.stage == SeedStage.TRAINING:
            if state.metrics.epochs_in_current_stage >= self.dwell_epochs:
                self.advance_stage(SeedStage.BLENDING)
        elif state.stage == SeedStage.BLENDING:
            if not self.clock.ramp_per_step:
                self._tick_ramp(state)
            if state.blending_steps_done >= state.blending_steps_total:
                self.set_alpha(1.0)
                self.advance_stage(SeedStage.PROBATIONARY)
        elif state.stage == SeedStage.PROBATIONARY:
            return self._probation_check(state)
        return False

    def tick_step(self) -> None:
        """Before a training step: a BLENDING seed whose clock ticks per training step moves its ramp one tick
        (α reaches 1 on the last tick and stays there; the stage changes at the epoch's `step_epoch`)."""
        state = self.state
        if (state is not None and state.stage == SeedStage.BLENDING and self.clock.ramp_per_step
                and state.blending_steps_done < state.blending_steps_total):
            self._tick_ramp(state)

    def _tick_ramp(self, state: SeedState) -> None:
        k = state.blending_steps_done = state.blending_steps_done + 1
        if self.alpha_schedule is not None:
            self.alpha_schedule.step(k)
            self.set_alpha(self.alpha_schedule.progress_alpha(k))
            state.metrics.alpha_ramp_step = k
        if k >= state.blending_steps_total:
            self.set_alpha(1.0)

    def _probation_check(self, state: SeedState) -> bool:
        c = state.metrics.counterfactual_contribution
        if c is not None and c <= 0:
            return self.cull("negative_counterfactual")
        if state.metrics.epochs_in_current_stage >= self.probation_timeout:
            return self.cull("probation_timeout")
        return False

    # ---------------------------------------------------------------- cull (BEHAVIOUR §2.10)
    def cull(self, reason: str = "") -> bool:
        """Empty the slot at once; a FOSSILIZED seed refuses (False, nothing changes)."""
        state = self.state
        if state is None or state.stage == SeedStage.FOSSILIZED:
            return False
        if reason in AUTO_CULL_REASONS:
            state.auto_culled, state.auto_cull_reason = True, reason
        if not state.transition(SeedStage.CULLED):
            return False
        self.last_culled = state
        self.seed, self.state, self.alpha_schedule = None, None, None
        self.isolate_gradients = False
        self._alpha_forced = False
        self._source = (None,)
        return True

    # ---------------------------------------------------------------- report
    def report(self) -> SlotReport | None:
        state = self.state
        if state is None:
            return None
        m = state.metrics
        return SlotReport(
            slot_id=self.slot_id, seed_id=state.seed_id, blueprint_id=state.blueprint_id, stage=state.stage,
            previous_stage=state.previous_stage, epochs_in_stage=m.epochs_in_current_stage,
            epochs_total=m.epochs_total, alpha=state.alpha, current_val_accuracy=m.current_val_accuracy,
            total_improvement=m.total_improvement, improvement_since_stage_start=m.improvement_since_stage_start,
            contribution=m.counterfactual_contribution, seed_params=m.seed_param_count,
            gradient_norm=state.telemetry.gradient_norm, gradient_measured=state.telemetry.gradient_measured,
            gradient_ratio=m.seed_gradient_norm_ratio, auto_culled=state.auto_culled,
            auto_cull_reason=state.auto_cull_reason, tempo=state.tempo,
        )
