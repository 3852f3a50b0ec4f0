"""Field checks shared by the settings dataclasses (`rl.config`) and `esper_fx.config.TrainingConfig`.

Every message names the field; NaN fails every range check. Plain python: no jax, no torch.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


def number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (got {value!r})")
    return float(value)


def integer(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"{name} must be an integer (got {value!r})")
    return value


def at_least_one(name: str, value: Any) -> None:
    if not integer(name, value) >= 1:
        raise ValueError(f"{name} must be >= 1 (got {value})")


def optional_at_least(name: str, value: Any, low: int) -> None:
    if value is not None and not integer(name, value) >= low:
        raise ValueError(f"{name} must be None or >= {low} (got {value})")


def positive(name: str, value: Any) -> None:
    if not number(name, value) > 0:
        raise ValueError(f"{name} must be > 0 (got {value})")


def non_negative(name: str, value: Any) -> None:
    if not number(name, value) >= 0:
        raise ValueError(f"{name} must be >= 0 (got {value})")


def in_range(name: str, value: Any, low: float, high: float, low_open: bool) -> None:
    v = number(name, value)
    ok = (low < v if low_open else low <= v) and v <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise ValueError(f"{name} must be in {bracket}{low}, {high}] (got {value})")


def boolean(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false (got {value!r})")


def enum(name: str, enum_cls: type[StrEnum], value: Any) -> StrEnum:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum_cls)
        raise ValueError(f"{name} must be one of [{allowed}] (got {value!r})") from None
