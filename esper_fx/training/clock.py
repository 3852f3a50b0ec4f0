"""Where a run's wall time goes (issue 55): JAX's compilation time, and the run's clock.

JAX compilation is read from `jax.monitoring`'s duration events, recorded by the thread that compiles:
tracing a jitted function to a jaxpr, lowering it to MLIR, and XLA's compilation (or, with the persistent
cache, loading the compiled program from it). The three follow one another and a nested jit is traced
inside its caller's trace, so their sum counts each second once. `compile_seconds()` is the calling
thread's running total (a listener installed once per process); another thread's compilation (none in a
run today) is not counted.

`RunClock` splits one run's wall time into parts that do not overlap: `part(name)` adds the wall time of a
block minus the compilation inside it, so compilation is one part of its own (`jax_compile`) and every
other part is the time outside it. The batches' parts come from their `timing` sums
(`outputs.time_breakdown`), the rest from the run's blocks; `breakdown()` assembles them.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

from esper_fx.outputs.time_breakdown import breakdown

# jax.monitoring's duration events of one compilation (jax._src.dispatch), in the order they happen
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # XLA's compilation, or its cache load
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    BACKEND_COMPILE_EVENT,
)

_seconds: dict[int, float] = defaultdict(float)  # thread id -> compilation seconds so far
_installed = False
_install_lock = threading.Lock()


def _listen(event: str, duration_secs: float, **_: Any) -> None:
    if event in COMPILE_EVENTS:
        _seconds[threading.get_ident()] += float(duration_secs)


def install() -> None:
    """Listen to JAX's compilation events (once per process)."""
    global _installed
    with _install_lock:
        if not _installed:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(_listen)
            _installed = True


def compile_seconds() -> float:
    """The seconds this thread has spent compiling JAX programs since `install()`."""
    return _seconds.get(threading.get_ident(), 0.0)


class Lap:
    """A stopwatch that also reads the compilation inside its span: `lap = Lap(); ...; lap.wall(), lap.compiled()`."""

    __slots__ = ("started", "compile_started")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.compile_started = compile_seconds()

    def wall(self) -> float:
        return time.perf_counter() - self.started

    def compiled(self) -> float:
        return compile_seconds() - self.compile_started


class RunClock:
    """One run's clock, started with the run: exclusive parts (`part`, `lap`), the compilation since the start
    (`compile_s`) and the breakdown of the whole (`breakdown`)."""

    def __init__(self) -> None:
        install()
        self.started = time.perf_counter()
        self._compile_start = compile_seconds()
        self.parts: dict[str, float] = defaultdict(float)
        self._cursor = Lap()  # where `lap` starts counting
        self._parts_at_cursor = 0.0

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the block's wall time, less the compilation inside it, to part `name` (also when it raises)."""
        lap = Lap()
        try:
            yield
        finally:
            self.parts[name] += max(0.0, lap.wall() - lap.compiled())

    def lap(self, name: str) -> None:
        """Add to `name` everything since the last `lap` (or the start) that no `part` took and that was not
        compilation."""
        taken = sum(self.parts.values()) - self._parts_at_cursor
        self.parts[name] += max(0.0, self._cursor.wall() - self._cursor.compiled() - taken)
        self._cursor = Lap()
        self._parts_at_cursor = sum(self.parts.values())

    def wall_s(self) -> float:
        return time.perf_counter() - self.started

    def compile_s(self) -> float:
        return compile_seconds() - self._compile_start

    def breakdown(self, batches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The run's time so far in parts that add up to its wall time (`outputs.time_breakdown.breakdown`);
        `batches` are this process's batches (`BatchSummary.to_dict()` rows or the summaries)."""
        return breakdown(self.wall_s(), self.parts, self.compile_s(), batches)
