"""Seed lifecycle state, its clock and the quality gates (BEHAVIOUR §1.2–1.3, §2.1, §2.5, §2.7, §2.14).

Plain python: `SeedClock` (the run's stage durations as a slot reads them), `SeedMetrics`, `SeedTelemetry`,
`SeedState` (with the stage-transition bookkeeping) and `evaluate_gate(state, target, min_stage)`, which
returns a `GateResult`. No torch here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from esper_fx.contracts.actions import DEFAULT_TEMPO
from esper_fx.contracts.lifecycle import (
    MIN_FOSSILIZE_CONTRIBUTION, REFERENCE_MIN_STAGE_EPOCHS, LifecycleTimings, lifecycle_timings,
)
from esper_fx.contracts.stages import SeedStage, gate_for_target, is_valid_transition

# Gates (BEHAVIOUR §1.6)
G2_MIN_IMPROVEMENT = 0.5  # pp, improvement_since_stage_start
MIN_BLENDING_EPOCHS = REFERENCE_MIN_STAGE_EPOCHS  # epochs in stage, used by G2 and G3 (the reference's clock)
G2_MIN_GRADIENT_RATIO = 0.10  # dimensionless, EMA of the parameter-normalised gradient ratio
G3_MIN_ALPHA = 0.95  # blend weight
STAGE_HISTORY_LIMIT = 100  # entries


@dataclass(frozen=True)
class SeedClock:
    """The run's stage durations as a slot reads them (BEHAVIOUR §2.14): `contracts.lifecycle.LifecycleTimings` and, for
    a ramp that ticks per training step, the episode's training steps. The default is the reference's clock
    without a task: dwell 1, G2 and G3 at 3 epochs, blends of 3, 5 or 8 epochs, probation timeout 5."""

    timings: LifecycleTimings = lifecycle_timings("reference", 1, None)
    episode_steps: int = 0

    @classmethod
    def for_run(cls, timings: LifecycleTimings, episode_steps: int) -> "SeedClock":
        """The clock of a run: its stage durations (`contracts.lifecycle.lifecycle_timings`) and its training
        steps."""
        if timings.ramp_per_step and episode_steps < 1:
            raise ValueError(f"a {timings.lifecycle} lifecycle needs the episode's training steps "
                             f"(got {episode_steps})")
        return cls(timings, int(episode_steps))

    @property
    def dwell(self) -> int:
        return self.timings.dwell

    @property
    def min_stage(self) -> int:
        return self.timings.min_stage

    @property
    def probation_timeout(self) -> int:
        return self.timings.probation_timeout

    @property
    def ramp_per_step(self) -> bool:
        return self.timings.ramp_per_step

    def blend_ticks(self, tempo: int = DEFAULT_TEMPO) -> int:
        """The ramp's length for `tempo`, in its ticks (epochs, or training steps)."""
        return self.timings.blend_ticks(tempo, self.episode_steps)

    def earliest_fossilize_age(self, tempo: int = DEFAULT_TEMPO) -> int:
        return self.timings.earliest_fossilize_age(tempo)


@dataclass
class SeedMetrics:
    """Per-seed accuracy and accounting (all accuracies in pp)."""

    epochs_total: int = 0
    epochs_in_current_stage: int = 0
    initial_val_accuracy: float = 0.0
    current_val_accuracy: float = 0.0
    best_val_accuracy: float = 0.0
    accuracy_at_stage_start: float = 0.0
    accuracy_at_blending_start: float = 0.0
    counterfactual_contribution: float | None = None
    seed_gradient_norm_ratio: float = 0.0
    seed_param_count: int = 0
    host_param_count: int = 0
    current_alpha: float = 0.0
    alpha_ramp_step: int = 0
    blending_started: bool = False
    baseline_set: bool = False  # the accuracy at germination is the baseline (a proportional clock)

    @property
    def total_improvement(self) -> float:
        return self.current_val_accuracy - self.initial_val_accuracy

    @property
    def improvement_since_stage_start(self) -> float:
        return self.current_val_accuracy - self.accuracy_at_stage_start

    @property
    def blending_delta(self) -> float:
        if not self.blending_started:
            return 0.0
        return self.current_val_accuracy - self.accuracy_at_blending_start

    def set_baseline(self, acc: float) -> None:
        """The accuracy at germination as the initial accuracy and the stage baseline (BEHAVIOUR §2.14); the
        first `record_accuracy` then keeps it."""
        acc = float(acc)
        self.initial_val_accuracy = self.accuracy_at_stage_start = self.current_val_accuracy = acc
        self.best_val_accuracy = acc
        self.baseline_set = True

    def record_accuracy(self, acc: float) -> None:
        """BEHAVIOUR §2.7: the only place the epoch counters move."""
        acc = float(acc)
        if self.epochs_total == 0 and not self.baseline_set:
            self.initial_val_accuracy = acc
            self.accuracy_at_stage_start = acc
        self.current_val_accuracy = acc
        self.best_val_accuracy = max(self.best_val_accuracy, acc)
        self.epochs_total += 1
        self.epochs_in_current_stage += 1


@dataclass
class SeedTelemetry:
    """The input g of BEHAVIOUR §8.4: the seed gradient L2 norm of the latest TRAINING/BLENDING epoch, and whether
    it exists."""

    gradient_norm: float = 0.0
    gradient_measured: bool = False


@dataclass
class SeedState:
    seed_id: str
    blueprint_id: str
    slot_id: str
    stage: SeedStage = SeedStage.DORMANT
    previous_stage: SeedStage = SeedStage.UNKNOWN
    previous_epochs_in_stage: int = 0
    stage_entered_at: int = 0  # epochs_total at stage entry
    alpha: float = 0.0
    blending_steps_done: int = 0
    blending_steps_total: int = 0
    tempo: int = DEFAULT_TEMPO  # the blend's tempo (contracts.actions.TEMPO_NAMES index)
    is_healthy: bool = True
    auto_culled: bool = False
    auto_cull_reason: str = ""
    metrics: SeedMetrics = field(default_factory=SeedMetrics)
    telemetry: SeedTelemetry = field(default_factory=SeedTelemetry)
    stage_history: deque = field(default_factory=lambda: deque(maxlen=STAGE_HISTORY_LIMIT))

    @property
    def epochs_in_stage(self) -> int:
        return self.metrics.epochs_in_current_stage

    def transition(self, target: SeedStage) -> bool:
        """Move to `target` iff BEHAVIOUR §1.2 lists the pair; reset the stage baseline. False changes nothing."""
        target = SeedStage(target)
        if not is_valid_transition(self.stage, target):
            return False
        m = self.metrics
        self.previous_stage, self.previous_epochs_in_stage = self.stage, m.epochs_in_current_stage
        self.stage, self.stage_entered_at = target, m.epochs_total
        self.stage_history.append((target, m.epochs_total))
        m.accuracy_at_stage_start = m.current_val_accuracy
        m.epochs_in_current_stage = 0
        return True


@dataclass(frozen=True)
class GateResult:
    gate: int
    passed: bool
    score: float
    checks_passed: list[str]
    checks_failed: list[str]
    message: str = ""


def _result(gate: int, checks: list[tuple[bool, str, str]], score: float) -> GateResult:
    passed = [ok_name for ok, ok_name, _ in checks if ok]
    failed = [bad_name for ok, _, bad_name in checks if not ok]
    message = "all checks passed" if not failed else "failed: " + ", ".join(failed)
    return GateResult(gate, not failed, float(score), passed, failed, message)


def _g0(state: SeedState) -> GateResult:
    checks = [
        (bool(state.seed_id), "seed_id_present", "seed_id_missing"),
        (bool(state.blueprint_id), "blueprint_id_present", "blueprint_id_missing"),
    ]
    return _result(0, checks, 1.0 if all(ok for ok, _, _ in checks) else 0.0)


def _g1(state: SeedState) -> GateResult:
    ok = state.stage == SeedStage.GERMINATED
    return _result(1, [(ok, "stage_is_germinated", "not_germinated")], 1.0 if ok else 0.0)


def _g2(state: SeedState, min_stage: int) -> GateResult:
    m = state.metrics
    improvement = m.improvement_since_stage_start
    checks = [
        (improvement >= G2_MIN_IMPROVEMENT, "sufficient_improvement", "insufficient_improvement"),
        (m.epochs_in_current_stage >= min_stage, "min_training_epochs", "insufficient_training_epochs"),
        (m.seed_gradient_norm_ratio >= G2_MIN_GRADIENT_RATIO, "gradient_active", "insufficient_gradient_activity"),
    ]
    return _result(2, checks, min(1.0, improvement / 5.0) if improvement > 0 else 0.0)


def _g3(state: SeedState, min_stage: int) -> GateResult:
    checks = [
        (state.metrics.epochs_in_current_stage >= min_stage, "min_blending_epochs",
         "insufficient_blending_epochs"),
        (state.alpha >= G3_MIN_ALPHA, "alpha_high", "alpha_too_low"),
    ]
    return _result(3, checks, state.alpha)


def _g5(state: SeedState) -> GateResult:
    c = state.metrics.counterfactual_contribution
    checks = [(state.is_healthy, "healthy", "unhealthy")]
    if c is None:
        checks.insert(0, (False, "", "counterfactual_not_available"))
        return _result(5, checks, 0.0)
    checks.insert(0, (c >= MIN_FOSSILIZE_CONTRIBUTION, "sufficient_contribution", "insufficient_contribution"))
    return _result(5, checks, min(1.0, c / 10.0) if c > 0 else 0.0)


_GATES = {0: _g0, 1: _g1, 2: _g2, 3: _g3, 5: _g5}


def evaluate_gate(state: SeedState, target: SeedStage, min_stage: int = MIN_BLENDING_EPOCHS) -> GateResult:
    """The quality gate guarding a transition to `target` (BEHAVIOUR §1.3, §2.5); G2 and G3 ask for `min_stage`
    epochs in stage (the clock's). Targets without a gate pass."""
    target = SeedStage(target)
    level = gate_for_target(target)
    if level == 0 and target != SeedStage.GERMINATED:
        return GateResult(0, True, 1.0, [], [], "no gate for this target")
    if level in (2, 3):
        return _GATES[level](state, min_stage)
    return _GATES[level](state)
