"""The network's learning rate within an episode: constant (the task's lr), a cosine decay to zero, or
warmup–stable–decay (BEHAVIOUR §7.10).

    cosine:  lr(s) = lr₀ · ½ · (1 + cos(π · min(s, S) / S))
    wsd:     lr(s) = lr₀ · (s + 1) / W            s < W                 (warmup, W = round(w·S))
                     lr₀                          W ≤ s < S − D         (stable)
                     lr₀ · max(S − s, 0) / D      s ≥ S − D             (decay, D = max(1, round(d·S)))

s = training steps already taken, S = the budget, w and d the warmup and decay fractions. A cosine is lr₀
at s = 0 and 0 at s = S; a wsd schedule reaches 0 at s = S too (its last step runs at lr₀/D). S is
`lr_schedule_steps`, by default the episode's training steps (all epochs' steps, or `train_steps_budget`).
The pool sets every optimizer of an env (host and seeds, each with its own lr₀) before each training step;
under "constant" it leaves them alone, so a constant run is exactly what it was before schedules existed.
A seed can also re-warm its own rate over its first R training steps (`seed_lr_rewarm_steps`): its
multiplier is then the schedule's times min(1, (k + 1) / R), k the steps it has taken.
"""

from __future__ import annotations

from esper_fx.contracts.schedules import schedule_factor
from esper_fx.contracts.tasks import LR_SCHEDULES


def lr_factor(schedule: str, step: int, total: int, warmup: float = 0.0, decay: float = 0.2) -> float:
    """The multiplier of the base lr at training step `step` (0-based) of a `total`-step budget; `warmup` and
    `decay` are wsd's fractions of the budget (the formula: `esper_fx.contracts.schedules`)."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)} (got {schedule!r})")
    return schedule_factor(schedule, step, total, warmup, decay)


def rewarm_factor(steps_taken: int, rewarm_steps: int) -> float:
    """A seed's own warmup: min(1, (k + 1) / R) after k of its steps; 1 when R is 0 (no re-warming)."""
    return 1.0 if rewarm_steps <= 0 else min(1.0, (steps_taken + 1) / rewarm_steps)


def apply_lr(optimizers, factor: float) -> None:
    """Set each param group's lr to factor × its base lr (remembered as `initial_lr` on first use)."""
    for opt in optimizers:
        for group in opt.param_groups:
            base = group.setdefault("initial_lr", group["lr"])
            group["lr"] = base * factor
