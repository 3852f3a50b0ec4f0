"""A learning rate's schedule over a budget of steps, one formula for every optimiser of the project: the
hosts' SGD within an episode (`hosts.env.lr_schedule`, over training steps) and the controller's Adam
(`rl.ppo`, over updates). Pure arithmetic with the comparisons and functions passed in, so the same
function serves Python numbers and traced jnp scalars.

    constant: f(s) = 1
    linear:   f(s) = max(S − s, 0) / S                                 (to zero at s = S)
    cosine:   f(s) = ½ · (1 + cos(π · min(s, S) / S))
    wsd:      f(s) = (s + 1) / W            s < W                      (warmup, W = round(w·S))
                     1                      W ≤ s < S − D              (stable)
                     max(S − s, 0) / D      s ≥ S − D                  (decay, D = max(1, round(d·S)))

s = steps already taken (0-based), S = the budget, w and d the warmup and decay fractions.
"""

from __future__ import annotations

import math
from typing import Any, Callable

SCHEDULES: tuple[str, ...] = ("constant", "linear", "cosine", "wsd")


def _where(condition: Any, if_true: Any, if_false: Any) -> Any:
    return if_true if condition else if_false


def schedule_factor(schedule: str, step: Any, total: int, warmup: float = 0.0, decay: float = 0.2, *,
                    where: Callable = _where, minimum: Callable = min, maximum: Callable = max,
                    cos: Callable = math.cos) -> Any:
    """The multiplier of the base rate at step `step` of a `total`-step budget (module docstring). Python
    numbers by default; for a traced step pass jnp.where, jnp.minimum, jnp.maximum and jnp.cos."""
    if schedule not in SCHEDULES:
        raise ValueError(f"a schedule must be one of {list(SCHEDULES)} (got {schedule!r})")
    if schedule == "constant":
        return 1.0
    if total < 1:
        raise ValueError(f"a {schedule} schedule needs a budget of at least 1 step (got {total})")
    if schedule == "linear":
        return maximum(total - step, 0) / total
    if schedule == "cosine":
        return 0.5 * (1.0 + cos(math.pi * minimum(step, total) / total))
    warm = int(round(warmup * total))
    length = max(1, int(round(decay * total)))
    decaying = maximum(total - step, 0) / length
    stable_or_decay = where(step < total - length, 1.0, decaying)
    return where(step < warm, (step + 1) / max(warm, 1), stable_or_decay)
