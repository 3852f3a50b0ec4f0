"""The network's learning rate within an episode: constant (the task's lr) or a cosine decay to zero.

    cosine:  lr(s) = lr₀ · ½ · (1 + cos(π · min(s, S) / S))      s = training steps already taken, S = budget

At s = 0 it is lr₀; at s = S it is 0 and stays 0. S is `lr_schedule_steps`, by default the episode's
training steps (all epochs' steps, or `train_steps_budget`). The pool sets every optimizer of an env (host and seeds,
each with its own lr₀) before each training step; under "constant" it leaves them alone, so a constant run
is exactly what it was before schedules existed.
"""

from __future__ import annotations

import math

from esper_fx.contracts import LR_SCHEDULES


def lr_factor(schedule: str, step: int, total: int) -> float:
    """The multiplier of the base lr at training step `step` (0-based) of a `total`-step budget."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {list(LR_SCHEDULES)} (got {schedule!r})")
    if schedule == "constant":
        return 1.0
    if total < 1:
        raise ValueError(f"a cosine schedule needs a budget of at least 1 step (got {total})")
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


def apply_lr(optimizers, factor: float) -> None:
    """Set each param group's lr to factor × its base lr (remembered as `initial_lr` on first use)."""
    for opt in optimizers:
        for group in opt.param_groups:
            base = group.setdefault("initial_lr", group["lr"])
            group["lr"] = base * factor
