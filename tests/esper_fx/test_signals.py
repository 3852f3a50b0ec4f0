"""A CLI run stopped by SIGTERM or SIGKILL and then resumed equals an uninterrupted run, bit for bit (issue 12).

A few trials of `tests/esper_fx/signal_experiment.py` (the whole matrix of SIGINT, SIGTERM and SIGKILL at
five points runs with `python -m tests.esper_fx.signal_experiment`).
"""

import os
import signal
from pathlib import Path

import pytest

from tests.esper_fx import signal_experiment as X


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, its commands warm in the suite's compilation cache (tests/conftest.py)."""
    work = tmp_path_factory.mktemp("signals")
    cache = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    return work, cache, X.observe(X.reference_run(work, cache))


@pytest.mark.slow
@pytest.mark.parametrize("signum, point", [(signal.SIGTERM, "batch 0 committed"), (signal.SIGKILL, "batch 0 committed"),
                                           (signal.SIGINT, "after a checkpoint")])
def test_a_stopped_and_resumed_run_equals_the_uninterrupted_one(reference, signum, point):
    work, cache, expected = reference
    trial = X.trial(work, cache, expected, point, signum)
    assert trial.ok, trial.line()
    assert trial.code == X.EXPECTED_CODE[signum] and trial.resumes >= 1
