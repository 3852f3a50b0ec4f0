"""Field checks shared by the settings dataclasses (`rl.config`) and `esper_fx.config.TrainingConfig`.

Every message names the field. A number must be finite (NaN and ±inf fail every check), an integer
field takes an int or a whole-number float (returned as an int, so `2.0` is stored as `2`), and bools
are never numbers. Plain python: no jax, no torch.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any, Sequence


def number(name: str, value: Any) -> float:
    """A finite int or float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number (got {value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number (got {value!r})")
    return float(value)


def integer(name: str, value: Any) -> int:
    """An int, or a whole-number float returned as an int."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be an integer (got {value!r})")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{name} must be an integer (got {value!r})")
        return int(value)
    return value


def int_between(name: str, value: Any, low: int, high: int) -> int:
    """An integer in [low, high]."""
    v = integer(name, value)
    if v < low:
        raise ValueError(f"{name} must be >= {low} (got {value})")
    if v > high:
        raise ValueError(f"{name} must be <= {high} (got {value})")
    return v


def at_least_one(name: str, value: Any) -> int:
    v = integer(name, value)
    if not v >= 1:
        raise ValueError(f"{name} must be >= 1 (got {value})")
    return v


def optional_at_least(name: str, value: Any, low: int) -> int | None:
    if value is None:
        return None
    v = integer(name, value)
    if not v >= low:
        raise ValueError(f"{name} must be None or >= {low} (got {value})")
    return v


def at_most(name: str, value: int | None, high: int) -> None:
    """An upper bound on a size (a value far beyond any machine's memory is a typo)."""
    if value is not None and value > high:
        raise ValueError(f"{name} must be <= {high} (got {value})")


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


def text(name: str, value: Any, optional: bool = False) -> str | None:
    """A non-empty string (or None when `optional`)."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        wanted = "None or a non-empty string" if optional else "a non-empty string"
        raise ValueError(f"{name} must be {wanted} (got {value!r})")
    return value


def string_list(name: str, value: Any) -> tuple[str, ...]:
    """A list (any sequence but a string) of non-empty strings, as a tuple."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of strings (got {value!r})")
    bad = [v for v in value if not isinstance(v, str) or not v]
    if bad:
        raise ValueError(f"{name} must be a list of non-empty strings (bad entries: {bad!r})")
    return tuple(value)


def enum(name: str, enum_cls: type[StrEnum], value: Any) -> StrEnum:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum_cls)
        raise ValueError(f"{name} must be one of [{allowed}] (got {value!r})") from None
