"""Paired statistics for comparing controllers on the same evaluation seeds (LEARNING.md §3).

Every arm runs on the same evaluation seeds, so two arms are compared by their per-seed differences
d_i = a_i − b_i. For n seeds with mean d̄ and sample standard deviation s_d, the two-sided interval at
confidence 1 − α is

    d̄ ± t_{1−α/2, n−1} · s_d / √n                         (Student t, the default), or
    the α/2 and 1 − α/2 percentiles of the mean of n seeds resampled with replacement (bootstrap).

The verdict reads the interval: "beats" when it lies above zero, "loses" when it lies below, "ties"
otherwise (including a single seed, whose interval is unbounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
METHODS = ("t", "bootstrap")


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation of one arm's per-seed values."""

    n: int
    mean: float
    sd: float

    def __str__(self) -> str:
        return f"{self.mean:.2f} ± {self.sd:.2f}"


@dataclass(frozen=True)
class PairedDifference:
    """a − b over shared seeds: mean, interval and verdict."""

    n: int
    mean: float
    low: float
    high: float
    confidence: float
    method: str

    @property
    def verdict(self) -> str:
        return verdict(self.low, self.high)

    def __str__(self) -> str:
        pct = round(100 * self.confidence)
        return f"{self.mean:+.2f} [{self.low:+.2f}, {self.high:+.2f}] ({pct}% {self.method}) {self.verdict}"


def summarize(values: Sequence[float]) -> Summary:
    """n, mean and sample sd (ddof 1; 0.0 for one value)."""
    x = _as_finite_array(values, "values")
    sd = float(np.std(x, ddof=1)) if x.size > 1 else 0.0
    return Summary(int(x.size), float(np.mean(x)), sd)


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                      method: str = "t", resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> PairedDifference:
    """The mean of a_i − b_i with its two-sided interval (see the module docstring)."""
    x, y = _as_finite_array(a, "a"), _as_finite_array(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired values need the same seeds: {x.size} values against {y.size}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence})")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)} (got {method!r})")
    d = x - y
    mean = float(np.mean(d))
    if d.size < 2:
        low, high = -math.inf, math.inf
    elif method == "t":
        low, high = _t_interval(d, confidence)
    else:
        low, high = _bootstrap_interval(d, confidence, resamples, seed)
    return PairedDifference(int(d.size), mean, low, high, confidence, method)


def verdict(low: float, high: float) -> str:
    """"beats" if the interval lies above 0, "loses" if below, else "ties"."""
    if low > 0.0:
        return "beats"
    if high < 0.0:
        return "loses"
    return "ties"


def _as_finite_array(values: Sequence[float], name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} holds a non-finite value: {x.tolist()}")
    return x


def _t_interval(d: np.ndarray, confidence: float) -> tuple[float, float]:
    from scipy.stats import t as student_t

    n = d.size
    half = float(student_t.ppf(0.5 + confidence / 2.0, n - 1)) * float(np.std(d, ddof=1)) / math.sqrt(n)
    mean = float(np.mean(d))
    return mean - half, mean + half


def _bootstrap_interval(d: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)
