"""Helpers shared by the stop and reproducibility tests: a signal sent from inside a run, and a run's
records with the fields that differ between runs left out."""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Collection


def signal_at_apply(pool: Any, call: int, signum: int = signal.SIGINT) -> None:
    """Make `pool.apply` send `signum` to this process at its `call`-th call (1-based, one call per
    controller step), just before it applies that step's actions. The run then stops as it would on Ctrl-C
    (SIGINT) or a scheduler's SIGTERM."""
    signal_at_call(pool, "apply", call, signum)


def signal_at_call(owner: Any, name: str, call: int, signum: int = signal.SIGINT) -> Callable[[], None]:
    """Make `owner.name` (an object's method, or a class's: every instance) send `signum` to this process
    at its `call`-th call (1-based), just before it runs. Returns the function that puts the original back."""
    original, calls = getattr(owner, name), {"n": 0}
    bound = not isinstance(owner, type)

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    setattr(owner, name, wrapped)
    return lambda: setattr(owner, name, original) if not bound else owner.__dict__.pop(name, None)


# what differs between two runs of one configuration: wall times, timestamps, checkpoint paths and where the
# run came from (summary.json's provenance: its command line and start time)
VOLATILE_KEYS = frozenset({"wall_time_s", "timing", "timestamp", "checkpoint", "provenance"})


def without_keys(value: Any, keys: Collection[str]) -> Any:
    """`value` (nested dicts and lists) with every dict entry named in `keys` left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_keys(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without_keys(v, keys) for v in value]
    return value
