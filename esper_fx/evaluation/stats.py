"""Paired statistics for comparing controllers on the same evaluation seeds (LEARNING.md §3).

Every arm runs on the same evaluation seeds, so two arms are compared by their per-seed differences
d_i = a_i − b_i. For n seeds with mean d̄ and sample standard deviation s_d, the two-sided interval at
confidence 1 − α is

    d̄ ± t_{1−α/2, n−1} · s_d / √n                         (Student t, the default), or
    the α/2 and 1 − α/2 percentiles of the mean of n seeds resampled with replacement (bootstrap).

The verdict reads the interval: "beats" when it lies above zero, "loses" when it lies below, "ties"
otherwise (including a single seed, whose interval is unbounded).

Across training seeds (several trained controllers, each run on the same evaluation seeds; Agarwal et al.,
NeurIPS 2021) a score is x_{t,e}, training seed t = 1..m, evaluation seed e = 1..n_t, and the training
run is the unit: `across_training_seeds` gives the mean over training seeds of each seed's mean paired
difference, its stratified bootstrap interval (`stratified_bootstrap`), the interquartile mean of the
scores (`iqm`) and the probability of improvement (`probability_of_improvement`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
BOOTSTRAP_CHUNK = 4_000_000  # values drawn at once by the stratified bootstrap (memory bound)
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


@dataclass(frozen=True)
class SeedAggregate:
    """a − b across training seeds: the mean over training seeds of each one's mean paired difference, its
    stratified bootstrap interval, P(a > b) over the (training seed, evaluation seed) pairs, and each
    side's interquartile mean."""

    n_train: int  # training seeds
    n: int  # (training seed, evaluation seed) pairs
    mean: float
    low: float
    high: float
    confidence: float
    p_improvement: float
    iqm_a: float
    iqm_b: float
    per_seed: tuple[float, ...]  # each training seed's mean paired difference

    @property
    def verdict(self) -> str:
        return verdict(self.low, self.high)


def across_training_seeds(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                          confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                          seed: int = BOOTSTRAP_SEED) -> SeedAggregate:
    """a − b with a[t][e], b[t][e] the scores of training seed t on its evaluation seeds e (paired within
    each t; the seeds may differ in number). With d_{t,e} = a_{t,e} − b_{t,e} over m training seeds:

        mean = (1/m) Σ_t d̄_t,   d̄_t = (1/n_t) Σ_e d_{t,e}

    with `stratified_bootstrap`'s interval (unbounded when there is a single pair), `iqm` of each side's
    scores over every (t, e), and `probability_of_improvement(a, b)` over every (t, e)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired training seeds: {len(a)} against {len(b)} (and at least one)")
    xs = [_as_finite_array(row, "a") for row in a]
    ys = [_as_finite_array(row, "b") for row in b]
    if any(x.shape != y.shape for x, y in zip(xs, ys)):
        raise ValueError("paired values need the same evaluation seeds within each training seed")
    d = [x - y for x, y in zip(xs, ys)]
    per_seed = tuple(float(np.mean(row)) for row in d)
    n = sum(row.size for row in d)
    low, high = (-math.inf, math.inf) if n < 2 else stratified_bootstrap(d, confidence, resamples, seed)
    flat_a, flat_b = np.concatenate(xs), np.concatenate(ys)
    return SeedAggregate(len(d), n, float(np.mean(per_seed)), low, high, confidence,
                         probability_of_improvement(flat_a, flat_b), iqm(flat_a), iqm(flat_b), per_seed)


def stratified_bootstrap(groups: Sequence[Sequence[float]], confidence: float = CONFIDENCE,
                         resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The two-sided percentile interval of (1/m) Σ_t x̄_t, the mean over m groups (training seeds) of each
    group's mean, resampled at both levels: each of `resamples` draws picks m groups with replacement and,
    within each picked group t, its n_t values with replacement; the interval is the α/2 and 1 − α/2
    quantiles of the resampled statistic (α = 1 − confidence). Deterministic given `seed`. Few groups
    that differ a lot make it narrow: with 3 groups of 8 whose means spread as much as single values do,
    it held the true mean in 79% of 400 synthetic tables (10 groups: 90%); with groups that barely differ,
    in 93–99%."""
    rows = [_as_finite_array(g, "group") for g in groups]
    if not rows:
        raise ValueError("stratified_bootstrap needs at least one group")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence})")
    sizes = np.array([r.size for r in rows])
    padded = np.zeros((len(rows), sizes.max()))
    for i, r in enumerate(rows):
        padded[i, :r.size] = r
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CHUNK // (len(rows) * sizes.max()))  # bounded memory whatever the seed counts
    stat = np.concatenate([_two_level_means(rng, padded, sizes, min(chunk, resamples - start))
                           for start in range(0, resamples, chunk)])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stat, [tail, 1.0 - tail])
    return float(low), float(high)


def _two_level_means(rng: np.random.Generator, padded: np.ndarray, sizes: np.ndarray, count: int) -> np.ndarray:
    """`count` resamples of the mean of group means: groups drawn with replacement, then each drawn group's
    values (row t of `padded`, its first sizes[t] entries) with replacement."""
    m, width = padded.shape
    picked = rng.integers(0, m, size=(count, m))
    n_picked = sizes[picked][..., None]
    within = rng.integers(0, n_picked, size=(count, m, width))  # uniform on 0..n_t − 1
    kept = np.arange(width) < n_picked  # a group of n_t values takes its first n_t draws
    values = np.where(kept, padded[picked[..., None], within], 0.0)
    return (values.sum(axis=2) / n_picked[..., 0]).mean(axis=1)


def iqm(values: Sequence[float]) -> float:
    """The interquartile mean: the mean of the sorted values x_(1) ≤ … ≤ x_(N) with the k = ⌊N/4⌋ lowest
    and k highest dropped, (1/(N − 2k)) Σ_{i=k+1}^{N−k} x_(i) (scipy's `trim_mean(x, 0.25)`)."""
    x = np.sort(_as_finite_array(values, "values"))
    k = x.size // 4
    return float(np.mean(x[k:x.size - k]))


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """P(a > b) over paired scores: (1/N) Σ_i [1 if a_i > b_i, ½ if a_i = b_i, 0 otherwise], so
    P(a > b) + P(b > a) = 1."""
    x, y = _as_finite_array(a, "a"), _as_finite_array(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired values need the same seeds: {x.size} values against {y.size}")
    return float(np.mean((x > y) + 0.5 * (x == y)))


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
