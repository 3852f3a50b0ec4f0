"""Stopping a run by signal: SIGTERM taken like Ctrl-C, and stops held while a batch is written.

No jax, no torch: the command line installs the SIGTERM handler before either loads, so a run stopped
during start-up exits cleanly too.
"""

from __future__ import annotations

import signal
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


def _raise_stop(signum, frame):
    _RAISED["signum"] = int(signum)
    raise Stop(signum)


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
