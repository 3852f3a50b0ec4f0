"""Wall-clock timing for the benchmarks: warm-up, many repetitions, median and spread.

Candidates that are compared (the JAX implementation and its PyTorch reference) are measured
*interleaved*: every repetition runs each candidate once, in an order that rotates from one repetition
to the next. On a shared machine a burst of load then hits every candidate alike instead of skewing
one of them, and the ratio of medians stays meaningful.

Every timed call ends with the candidate's own `sync` (`jax.block_until_ready`, or
`torch.cuda.synchronize` on a GPU), so asynchronous dispatch is never mistaken for speed. The clock is the
wall clock (`time.perf_counter`) unless a benchmark asks for another (`data`: the process's CPU time). A candidate
may have a `prepare` step (e.g. restoring parameters that an in-place update changed); it runs before
each call, outside the timed region.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable, Mapping


@dataclasses.dataclass(frozen=True)
class Timing:
    """Summary of repeated wall-clock measurements of one candidate, in seconds."""

    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    min_s: float
    reps: int

    @classmethod
    def from_samples(cls, samples: list[float]) -> "Timing":
        if not samples:
            raise ValueError("no timing samples")
        ordered = sorted(samples)
        return cls(
            median_s=statistics.median(ordered),
            p10_s=percentile(ordered, 10.0),
            p90_s=percentile(ordered, 90.0),
            mean_s=statistics.fmean(ordered),
            min_s=ordered[0],
            reps=len(ordered),
        )

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def percentile(ordered: list[float], q: float) -> float:
    """Linear-interpolated percentile `q` in [0, 100] of an already sorted, non-empty list."""
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _nothing() -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A zero-argument callable to time, the function that waits for its result, and an untimed prepare."""

    run: Callable[[], Any]
    sync: Callable[[Any], None]
    prepare: Callable[[], None] = _nothing


def _call(candidate: Candidate) -> None:
    candidate.prepare()
    candidate.sync(candidate.run())


def _timed_call(candidate: Candidate, clock: Callable[[], float]) -> float:
    candidate.prepare()
    start = clock()
    candidate.sync(candidate.run())
    return clock() - start


def measure_interleaved(candidates: Mapping[str, Candidate], warmup: int, reps: int,
                        clock: Callable[[], float] = time.perf_counter) -> dict[str, Timing]:
    """Time every candidate `reps` times after `warmup` untimed calls each, interleaved (rotating order), in
    seconds of `clock`."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1 (got {reps})")
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            _call(candidates[name])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_timed_call(candidates[name], clock))
    return {name: Timing.from_samples(values) for name, values in samples.items()}


def measure(candidate: Candidate, warmup: int, reps: int) -> Timing:
    """Time one candidate `reps` times after `warmup` untimed calls."""
    return measure_interleaved({"only": candidate}, warmup, reps)["only"]


def ratio(numerator: Timing, denominator: Timing) -> float:
    """Ratio of medians (e.g. torch / jax: how many times faster the denominator is)."""
    return numerator.median_s / denominator.median_s
