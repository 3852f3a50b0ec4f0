"""Stopping a run by signal: SIGTERM taken like Ctrl-C, and stops held while a batch is written.

No jax, no torch: the command line installs the SIGTERM handler before either loads, so a run stopped
during start-up exits cleanly too.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(KeyboardInterrupt):
    """A stop request by a signal other than SIGINT (SIGTERM), handled exactly like Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def stop_signal(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt: SIGTERM for a `Stop`, else SIGINT."""
    return int(getattr(exc, "signum", signal.SIGINT))


def exit_code(signum: int) -> int:
    """The shell's convention for a process stopped by a signal: 130 for SIGINT, 143 for SIGTERM."""
    return 128 + int(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_RAISED: dict[str, int | None] = {"signum": None}  # the signal `_raise_stop` last raised as a Stop
_PENDING: dict[str, int | None] = {"signum": None}  # a stop held for the next safe point (`raise_pending`)


def _raise_stop(signum, frame):
    """SIGTERM's handler: a `Stop` raised where the signal landed, unless that is code whose exceptions Python
    prints and drops ("Exception ignored in ..."): a garbage collector callback (JAX's `_xla_gc_callback`) or a
    finaliser (`__del__`). Raised there, the stop was lost and the run went on to exit 0; it is held
    instead, and `raise_pending` (at the next safe point: the next epoch, episode or wait) raises it."""
    if _in_swallowing_code(frame):
        _PENDING["signum"] = int(signum)
        return
    _RAISED["signum"] = int(signum)
    raise Stop(signum)


def _in_swallowing_code(frame: Any) -> bool:
    """Whether `frame` (the one a signal interrupted) runs inside a gc callback or a `__del__`, whose exceptions
    Python reports as unraisable and drops."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def raise_pending() -> None:
    """At a safe point: a stop held by `_raise_stop` (it landed where it would have been lost) is raised now."""
    signum, _PENDING["signum"] = _PENDING["signum"], None
    if signum is not None:
        _RAISED["signum"] = signum
        raise Stop(signum)


def ignore_stops(line: str | None = None) -> None:
    """From now on (main thread only) SIGINT and SIGTERM no longer stop the process: a command that has
    finished, or is stopping, is exiting, and a signal landing in an exit handler printed "Exception ignored in
    atexit callback" tracebacks. The first such signal prints `line` on stderr (when given)."""
    if not _in_main_thread():
        return
    said = {"done": line is None}

    def once(signum, frame):
        if not said["done"]:
            said["done"] = True
            print(line.format(signal=signal.Signals(signum).name), file=sys.stderr, flush=True)

    for s in STOP_SIGNALS:
        signal.signal(s, once)


@contextmanager
def stops_kept():
    """Around a call into a library that catches a stop and raises a plain KeyboardInterrupt instead (Ray's
    `ray.get` and `ray.wait`): a SIGTERM that became one comes out as the `Stop` it was, so it is recorded
    and exits as SIGTERM (143), not as Ctrl-C (130)."""
    _RAISED["signum"] = None
    try:
        yield
    except KeyboardInterrupt as stop:
        signum = _RAISED["signum"]
        if signum is None or isinstance(stop, Stop):
            raise
        raise Stop(signum) from None


@contextmanager
def sigterm_stops():
    """While inside (main thread only), SIGTERM raises `Stop`, a KeyboardInterrupt: a preempted or killed
    run checkpoints its last finished batch exactly as after Ctrl-C."""
    if not _in_main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class deferred_stops:
    """Hold SIGINT and SIGTERM while inside (main thread only): a batch's write or a checkpoint write runs
    to its end. On exit the first held signal is raised as a KeyboardInterrupt (`Stop` for SIGTERM), or
    dropped with `reraise=False` (the run is stopping anyway). Nested inside another, it hands the signal
    to the outer one."""

    def __init__(self, reraise: bool = True):
        self.reraise = reraise
        self.held: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "deferred_stops":
        if _in_main_thread():
            self._old = {s: signal.signal(s, self._hold) for s in STOP_SIGNALS}
        return self

    def _hold(self, signum, frame) -> None:
        if self.held is None:
            self.held = int(signum)

    def __exit__(self, *exc) -> bool:
        for s, old in self._old.items():
            signal.signal(s, old)
        if self.held is None or exc[0] is not None:
            return False
        outer = self._old.get(self.held)
        if outer is signal.SIG_IGN:  # the process was started ignoring this signal: keep ignoring it
            return False
        if isinstance(getattr(outer, "__self__", None), deferred_stops):
            outer(self.held, None)
        elif self.reraise:
            raise KeyboardInterrupt if self.held == signal.SIGINT else Stop(self.held)
        return False
