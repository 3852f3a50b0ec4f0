"""Issue 71, item 4: a stop is never lost and an exiting command never prints a traceback for one.

A SIGTERM that lands while a garbage-collector callback runs (JAX registers `_xla_gc_callback`) was raised
inside it, where Python prints "Exception ignored in ..." and drops the exception: the prove ran on to exit 0.
It is now held and raised at the next safe point (`stopping.raise_pending`, called after every epoch and
in the wait for Ray tasks). After a command has finished, `ignore_stops` keeps a late Ctrl-C out of the exit
handlers."""

from __future__ import annotations

import gc
import os
import signal
import sys

import pytest

from esper_fx import stopping
from esper_fx.stopping import Stop, ignore_stops, raise_pending, sigterm_stops


@pytest.fixture
def restored_handlers():
    old = {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS}
    yield
    for s, handler in old.items():
        signal.signal(s, handler)
    stopping._PENDING["signum"] = None


def test_a_sigterm_inside_a_gc_callback_is_held_and_raised_at_the_next_safe_point(restored_handlers, capsys):
    fired = {"n": 0}

    def callback(phase, info):  # as JAX's: Python code run by the collector, whose exceptions are dropped
        if phase == "start" and fired["n"] == 0:
            fired["n"] += 1
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(10_000))  # the handler runs here, inside the callback

    gc.callbacks.append(callback)
    try:
        with sigterm_stops():
            gc.collect()  # the stop lands inside `callback`
            assert fired["n"] == 1
            with pytest.raises(Stop) as info:
                raise_pending()
    finally:
        gc.callbacks.remove(callback)
    assert info.value.signum == signal.SIGTERM
    assert "Exception ignored" not in capsys.readouterr().err
    raise_pending()  # raised once: nothing is held any more


def test_a_sigterm_anywhere_else_still_stops_at_once(restored_handlers):
    with sigterm_stops(), pytest.raises(Stop):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(10_000))
    raise_pending()  # nothing held


def test_a_finalizer_is_code_whose_exceptions_python_drops_too():
    seen = []

    class Probe:
        def __del__(self):
            seen.append(stopping._in_swallowing_code(sys._getframe()))

    probe = Probe()
    del probe
    assert seen == [True]
    assert stopping._in_swallowing_code(sys._getframe()) is False


def test_after_ignore_stops_a_signal_says_one_line_and_stops_nothing(restored_handlers, capsys):
    ignore_stops("prove: {signal} as prove exits: nothing is lost")
    for _ in range(3):  # repeated Ctrl-C, then a SIGTERM
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(10_000))
    os.kill(os.getpid(), signal.SIGTERM)
    sum(range(10_000))
    assert capsys.readouterr().err.splitlines() == ["prove: SIGINT as prove exits: nothing is lost"]
