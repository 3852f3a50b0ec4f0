"""The lifecycle numbers both sides read, and the lifecycle's clock: how long each stage lasts (BEHAVIOUR §1.6,
§2.14)."""

from __future__ import annotations

import math
from typing import NamedTuple

from esper_fx.contracts.actions import DEFAULT_TEMPO, NUM_TEMPOS

MIN_FOSSILIZE_CONTRIBUTION = 1.0  # pp: G5, the contributing-fossil count, fossilize shaping
MIN_PROBATION_EPOCHS = 5  # epochs: probation timeout floor, fossilize legitimacy l = min(1, eis / 5)
GOVERNOR_DEATH_PENALTY = 10.0  # reward units: a governor panic (the `panic` signal) pays -10

# The lifecycle's clock (BEHAVIOUR §2.14), in one of two settings.
# `reference`: the reference's absolute timings, set by the task's lifecycle horizon h (25 for the CNN
# tasks): dwell max(1, int(0.1·h)), G2 and G3 at >= 3 epochs in stage, a blend ramp of 3, 5 or 8 epochs
# (fast, standard, slow: the tempo; standard is the reference's 5), probation timeout max(5, int(0.1·h)).
# `proportional`: the same stages at the proportions of the reference's 150-epoch episodes (10 epochs in
# TRAINING, blends of 3, 5 or 8 epochs, a 15-epoch probation), scaled to the run's T = max_epochs; the
# ramp ticks once per training step instead of once per epoch, G2 measures the host's improvement from the
# accuracy at germination, the controller chooses the tempo, and a fossil stops isolating the host from
# its seed (the reference keeps a CNN seed's input detached for ever, so the host upstream of a fossil
# never learns again, while a static copy's planted seed trains with it). At T = 150 its durations are the
# reference's there.
# `immediate` (for seeds that preserve the network's function when germinated, BEHAVIOUR §2.14): no isolated
# phase. A seed enters BLENDING at its first training step, trains with the host from then on (neither its
# input nor its output detached), ramps in over at most IMMEDIATE_RAMP of the episode's training steps (the
# tempo picks the share), and may be fossilized two decisions after its germination; probation as in
# `proportional`.

LIFECYCLES: tuple[str, ...] = ("reference", "proportional", "immediate")
IMMEDIATE_RAMP: tuple[float, ...] = (0.01, 0.025, 0.05)  # the immediate ramp per tempo, a share of the episode
TEMPO_BLEND_EPOCHS: tuple[int, ...] = (3, 5, 8)  # the reference's blend per tempo, in epochs
PROPORTIONAL_EPISODE = 150  # the reference's episode length the proportional lifecycle scales from
PROPORTIONAL_DWELL = 10  # epochs in TRAINING there
PROPORTIONAL_PROBATION = 15  # epochs of probation there (0.1 · 150, the reference's own rule)
PROPORTIONAL_MIN_PROBATION_TIMEOUT = 2  # decisions a probationary seed gets at least, in a short episode
REFERENCE_MIN_STAGE_EPOCHS = 3  # G2 and G3: epochs in stage (reference)


class LifecycleTimings(NamedTuple):
    """A run's stage durations. Epoch counts are whole; `blend` is in epochs and may be fractional (its ramp
    then ticks per training step)."""

    lifecycle: str
    max_epochs: int  # T
    dwell: int  # epochs in TRAINING before G2 is tried
    min_stage: int  # G2's and G3's minimum epochs in stage
    blend: tuple[float, ...]  # blend ramp per tempo (fast, standard, slow), epochs
    ramp_per_step: bool  # the ramp ticks once per training step (else once per epoch)
    probation_timeout: int  # epochs in PROBATIONARY before the automatic cull
    legitimacy: int  # epochs in PROBATIONARY for the whole fossilize shaping (reward)
    baseline_at_germination: bool  # G2's improvement counts from the accuracy at germination
    tempos: tuple[int, ...]  # the tempos a controller may choose (the reference: standard only)
    release_on_fossilize: bool  # a fossil's input stops being detached: the host upstream co-adapts through it
    isolated: bool = True  # a seed first trains unseen (TRAINING, input detached); False: `immediate`

    def blend_epochs(self, tempo: int = DEFAULT_TEMPO) -> int:
        """Whole epochs a blend of `tempo` spans."""
        return max(1, math.ceil(self.blend[tempo] - 1e-9))

    def earliest_fossilize_age(self, tempo: int = DEFAULT_TEMPO) -> int:
        """Epochs from a germination to the first decision that can fossilize its seed if every gate passes
        at once: TRAINING, BLENDING, then the next decision (9 for the reference at the standard tempo)."""
        training = max(self.dwell, self.min_stage) if self.isolated else 0
        return training + max(self.blend_epochs(tempo), self.min_stage) + 1

    def blend_ticks(self, tempo: int, episode_steps: int) -> int:
        """Ticks of a `tempo` ramp: its epochs (reference), or its share of the episode's training steps."""
        if not self.ramp_per_step:
            return self.blend_epochs(tempo)
        return max(1, _round_half_up(self.blend[tempo] / self.max_epochs * episode_steps))

    def germinate_until(self) -> int:
        """The last epoch whose decision can germinate a seed that could still be fossilized before T, at the
        fastest tempo allowed."""
        return self.max_epochs - min(self.earliest_fossilize_age(k) for k in self.tempos)

    def tempo_mask(self, epoch: int, deadline: bool) -> tuple[bool, ...]:
        """The tempos a seed germinated at `epoch` may take: those allowed, and with a germination deadline
        only those that could still be fossilized before T (all allowed ones if none could)."""
        allowed = [k in self.tempos for k in range(NUM_TEMPOS)]
        if deadline:
            in_time = [ok and epoch + self.earliest_fossilize_age(k) <= self.max_epochs
                       for k, ok in enumerate(allowed)]
            if any(in_time):
                allowed = in_time
        return tuple(allowed)

    def scale_epochs(self, epochs: int, horizon: int) -> int:
        """An epoch count written for an h-epoch episode, in this lifecycle: unchanged for the reference, else
        scaled to T (at least 1). The heuristic's waits use it."""
        if self.lifecycle == "reference":
            return int(epochs)
        return max(1, _round_half_up(epochs * self.max_epochs / horizon)) if epochs > 0 else 0


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def lifecycle_timings(lifecycle: str, max_epochs: int, horizon: int | None) -> LifecycleTimings:
    """The stage durations of `lifecycle` for T = `max_epochs` and the task's lifecycle horizon (None: no
    task, the slot's defaults: dwell 1, probation timeout 5)."""
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle must be one of {list(LIFECYCLES)} (got {lifecycle!r})")
    if lifecycle == "reference":
        dwell = 1 if horizon is None else max(1, int(horizon * 0.1))
        timeout = MIN_PROBATION_EPOCHS if horizon is None else max(MIN_PROBATION_EPOCHS, int(horizon * 0.1))
        return LifecycleTimings(
            lifecycle="reference", max_epochs=int(max_epochs), dwell=dwell, min_stage=REFERENCE_MIN_STAGE_EPOCHS,
            blend=tuple(float(b) for b in TEMPO_BLEND_EPOCHS), ramp_per_step=False, probation_timeout=timeout,
            legitimacy=MIN_PROBATION_EPOCHS, baseline_at_germination=False, tempos=(DEFAULT_TEMPO,),
            release_on_fossilize=False)
    scale = int(max_epochs) / PROPORTIONAL_EPISODE

    def epochs(n: int, floor: int = 1) -> int:
        return max(floor, _round_half_up(n * scale))

    if lifecycle == "immediate":
        return LifecycleTimings(
            lifecycle="immediate", max_epochs=int(max_epochs), dwell=0, min_stage=1,
            blend=tuple(share * int(max_epochs) for share in IMMEDIATE_RAMP), ramp_per_step=True,
            probation_timeout=epochs(PROPORTIONAL_PROBATION, PROPORTIONAL_MIN_PROBATION_TIMEOUT),
            legitimacy=epochs(MIN_PROBATION_EPOCHS), baseline_at_germination=True, tempos=tuple(range(NUM_TEMPOS)),
            release_on_fossilize=True, isolated=False)

    return LifecycleTimings(
        lifecycle="proportional", max_epochs=int(max_epochs), dwell=epochs(PROPORTIONAL_DWELL),
        min_stage=epochs(REFERENCE_MIN_STAGE_EPOCHS), blend=tuple(b * scale for b in TEMPO_BLEND_EPOCHS),
        ramp_per_step=True, probation_timeout=epochs(PROPORTIONAL_PROBATION, PROPORTIONAL_MIN_PROBATION_TIMEOUT),
        legitimacy=epochs(MIN_PROBATION_EPOCHS), baseline_at_germination=True, tempos=tuple(range(NUM_TEMPOS)),
        release_on_fossilize=True)
