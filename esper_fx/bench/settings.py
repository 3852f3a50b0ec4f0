"""What one benchmark run is asked for: the device, quick or full sizes, and repetition counts."""

from __future__ import annotations

import dataclasses

from esper_fx.bench.devices import BenchDevice

QUICK_WARMUP = 2
QUICK_REPS = 5


@dataclasses.dataclass(frozen=True)
class Reps:
    """Untimed warm-up calls and timed repetitions for one kind of measurement."""

    warmup: int
    reps: int


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    device: BenchDevice
    quick: bool = False
    seed: int = 0
    presets: tuple[str, ...] | None = None  # the host benchmark's presets; None: its defaults
    rounds: int | None = None  # the default_workers benchmarks' interleaved rounds; None: their default

    def reps(self, full: Reps) -> Reps:
        """`full` for a full run; capped to a few repetitions with --quick."""
        if self.quick:
            return Reps(warmup=min(full.warmup, QUICK_WARMUP), reps=min(full.reps, QUICK_REPS))
        return full

    def sizes(self, full: tuple, quick: tuple) -> tuple:
        return quick if self.quick else full
