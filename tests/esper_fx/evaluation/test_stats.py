"""Paired differences, intervals and verdicts on inputs with known answers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.evaluation import stats


def test_t_interval_matches_the_textbook_value():
    a = [12.0, 15.0, 11.0, 14.0, 13.0]
    b = [10.0, 11.0, 10.0, 12.0, 10.0]
    # d = 2, 4, 1, 2, 3: mean 2.4, sd sqrt(1.3), t_{0.975, 4} = 2.7764451
    r = stats.paired_difference(a, b)
    half = 2.7764451 * math.sqrt(1.3) / math.sqrt(5)
    assert r.n == 5 and r.mean == pytest.approx(2.4)
    assert r.low == pytest.approx(2.4 - half, abs=1e-6) and r.high == pytest.approx(2.4 + half, abs=1e-6)
    assert r.verdict == "beats"


def test_verdicts_read_the_interval():
    assert stats.verdict(0.1, 3.0) == "beats"
    assert stats.verdict(-3.0, -0.1) == "loses"
    assert stats.verdict(-1.0, 1.0) == "ties"
    assert stats.verdict(0.0, 1.0) == "ties"  # touching zero is not above it


def test_a_worse_arm_loses_and_a_noisy_one_ties():
    assert stats.paired_difference([1, 2, 3, 4], [3, 4, 5, 7]).verdict == "loses"
    assert stats.paired_difference([1, 5, 2, 6], [3, 2, 4, 3]).verdict == "ties"


def test_one_seed_ties_with_an_unbounded_interval():
    r = stats.paired_difference([5.0], [1.0])
    assert r.mean == 4.0 and math.isinf(r.low) and math.isinf(r.high) and r.verdict == "ties"


def test_bootstrap_is_reproducible_and_brackets_the_mean():
    a, b = [3.0, 5.0, 4.0, 6.0, 5.5, 4.5], [1.0, 2.0, 2.5, 1.5, 2.0, 3.0]
    r1 = stats.paired_difference(a, b, method="bootstrap")
    r2 = stats.paired_difference(a, b, method="bootstrap")
    assert r1 == r2
    assert r1.low < r1.mean < r1.high and r1.verdict == "beats"


@pytest.mark.parametrize("bad, match", [
    (dict(a=[1.0, 2.0], b=[1.0]), "same seeds"),
    (dict(a=[], b=[]), "empty"),
    (dict(a=[1.0, float("nan")], b=[1.0, 2.0]), "non-finite"),
    (dict(a=[1.0, 2.0], b=[1.0, 2.0], confidence=1.0), "confidence"),
    (dict(a=[1.0, 2.0], b=[1.0, 2.0], method="z"), "method"),
])
def test_bad_inputs_name_the_problem(bad, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_difference(**bad)


def test_summary_is_mean_and_sample_sd():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.n, s.mean) == (4, 2.5) and s.sd == pytest.approx(np.std([1, 2, 3, 4], ddof=1))
    assert stats.summarize([7.0]).sd == 0.0


finite = st.floats(min_value=-100, max_value=100, allow_nan=False)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(finite, finite), min_size=2, max_size=12), st.floats(-50, 50))
def test_interval_properties(pairs, shift):
    a = [p[0] for p in pairs]
    b = [p[1] for p in pairs]
    r = stats.paired_difference(a, b)
    assert r.low <= r.mean + 1e-9 and r.mean <= r.high + 1e-9
    # antisymmetric in the arms, and shifting one arm shifts the interval by the same amount
    flipped = stats.paired_difference(b, a)
    assert flipped.mean == pytest.approx(-r.mean, abs=1e-9)
    assert flipped.low == pytest.approx(-r.high, abs=1e-6) and flipped.high == pytest.approx(-r.low, abs=1e-6)
    moved = stats.paired_difference([x + shift for x in a], b)
    assert moved.mean == pytest.approx(r.mean + shift, abs=1e-6)
    assert moved.high - moved.low == pytest.approx(r.high - r.low, abs=1e-6)
