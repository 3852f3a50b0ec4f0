"""Issue 71, item 3: off a terminal the first minute of a run shows progress. An epoch line for each epoch of the
process's first batch (at most one a second), later only when a batch has printed nothing for
`EPOCH_LINE_AFTER_S`; the line before a cold compile of the update; none of it on a terminal, in Jupyter or when
quiet. (A piped command line shows them too: training/test_compile_cache.py.)"""

from __future__ import annotations

import io

import pytest

from esper_fx.outputs import console as console_module
from esper_fx.outputs.console import EPOCH_LINE_AFTER_S, EPOCH_LINE_EVERY_S, Console
from esper_fx.training import compile_cache
from tests.esper_fx.outputs.test_run_outputs import _empty_summary
from esper_fx.outputs.history import BatchSummary


class Clock:
    """time.perf_counter as the console reads it, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(console_module.time, "perf_counter", clock)
    return clock


def _epoch_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if " done, elapsed " in line]


def test_every_epoch_of_the_first_batch_gets_a_line_and_later_batches_only_when_long(clock):
    stream = io.StringIO()
    console = Console(3, 4, stream=stream, n_envs=2, n_episodes=6)
    for epoch in range(1, 5):  # the first batch: 2 s an epoch
        clock.now += 2.0
        console.epoch_done(0, epoch, 10)
    assert _epoch_lines(stream.getvalue()) == [f"batch 0, epoch {t}/4 (episodes 1-2/6) done, elapsed 0:00:{2 * t:02d}"
                                              for t in range(1, 5)]
    console.batch_done(BatchSummary(**{**_empty_summary(), "batch": 0}))
    console.line("BATCH 0 ...")  # the batch's own lines
    for epoch in range(1, 5):  # a short batch: nothing between its lines
        clock.now += 2.0
        console.epoch_done(1, epoch, 10)
    assert len(_epoch_lines(stream.getvalue())) == 4
    console.line("BATCH 1 ...")
    for epoch in range(1, 5):  # a long batch: a line once the console was silent for EPOCH_LINE_AFTER_S
        clock.now += EPOCH_LINE_AFTER_S * 0.6
        console.epoch_done(2, epoch, 10)
    assert _epoch_lines(stream.getvalue())[4:] == ["batch 2, epoch 2/4 (episodes 5-6/6) done, elapsed 0:00:28",
                                                   "batch 2, epoch 4/4 (episodes 5-6/6) done, elapsed 0:00:40"]


def test_fast_epochs_of_the_first_batch_print_at_most_one_line_a_second(clock):
    stream = io.StringIO()
    console = Console(1, 10, stream=stream)
    console.action_ready(0, 1)  # "First action after ..." just now: the first epoch's line comes all the same
    for epoch in range(1, 11):
        clock.now += EPOCH_LINE_EVERY_S / 4
        console.epoch_done(0, epoch, 10)
    assert [line.split(" done")[0] for line in _epoch_lines(stream.getvalue())] == ["batch 0, epoch 1/10",
                                                                                    "batch 0, epoch 5/10",
                                                                                    "batch 0, epoch 9/10"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("make", [lambda s: Console(1, 3, stream=Terminal()), lambda s: Console(1, 3, stream=s,
                                                                                                   quiet=True)],
                         ids=["terminal", "quiet"])
def test_a_terminal_or_a_quiet_run_prints_no_epoch_line(make, clock):
    stream = io.StringIO()
    console = make(stream)
    for epoch in range(1, 4):
        clock.now += 2.0
        console.epoch_done(0, epoch, 10)
    console.close()
    assert _epoch_lines(stream.getvalue()) == []
    if isinstance(console.stream, Terminal):  # the bar draws the epoch on a terminal instead
        assert _epoch_lines(console.stream.getvalue()) == []


def test_the_first_batch_says_before_its_update_that_a_cold_compile_comes(clock):
    stream = io.StringIO()
    console = Console(2, 1, stream=stream)
    console.before_update("compiling the controller's update (once; cached in /c)")
    console.batch_done(BatchSummary(**{**_empty_summary(), "batch": 0}))
    console.before_update("compiling the controller's update (once; cached in /c)")  # a later batch: never
    console.before_update(None)
    assert stream.getvalue().count("compiling the controller's update") == 1


def test_the_cold_note_follows_what_the_cache_answered_so_far(tmp_path, monkeypatch):
    assert compile_cache.cold_note("update") is None  # nothing counted: nothing said
    stats = compile_cache.CacheStats()
    monkeypatch.setattr(compile_cache, "_counting", [stats])
    monkeypatch.setattr(compile_cache, "_chosen", [tmp_path])
    said = []
    stats.on_first_miss = lambda: said.append("compiling")
    stats.record(compile_cache.REQUEST_EVENT)
    stats.record(compile_cache.HIT_EVENT)
    assert compile_cache.cold_note("update") is None and said == []  # every program so far came from the cache
    stats.record(compile_cache.REQUEST_EVENT)
    stats.record(compile_cache.MISS_EVENT)
    stats.record(compile_cache.REQUEST_EVENT)
    stats.record(compile_cache.MISS_EVENT)
    assert said == ["compiling"]  # said once, at the first program compiled
    assert compile_cache.cold_note("update") == f"compiling the controller's update (once; cached in {tmp_path})"
    assert compile_cache.start_note(tmp_path) is None  # a cache: said at its first miss
    assert "the compilation cache is off" in compile_cache.start_note(None)
