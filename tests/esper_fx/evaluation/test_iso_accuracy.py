"""The iso-accuracy saving (LEARNING §3): the static curve's interpolation, its bounds, and the interval over
resampled seeds, by hand and as properties."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.evaluation import iso_accuracy as iso

CURVE_FLOPS = [40.0, 60.0, 80.0, 100.0]
CURVE_ACC = [86.0, 88.0, 89.0, 89.5]


def test_by_hand_between_two_budgets_and_beyond_either_end():
    assert iso.compute_at(CURVE_FLOPS, CURVE_ACC, 88.5) == (70.0, "")
    assert iso.saving(CURVE_FLOPS, CURVE_ACC, 56.0, 88.5) == (pytest.approx(0.2), "")
    assert iso.saving(CURVE_FLOPS, CURVE_ACC, 60.0, 90.0) == (pytest.approx(0.4), "at least")
    assert iso.saving(CURVE_FLOPS, CURVE_ACC, 60.0, 85.0) == (pytest.approx(-0.5), "at most")
    assert iso.saving(CURVE_FLOPS, CURVE_ACC, 100.0, 89.5) == (0.0, "")  # the full budget against itself


def test_a_dip_in_the_curve_never_lowers_the_compute_needed():
    """More compute never loses what less reached: the envelope is a running maximum."""
    assert iso.compute_at([40.0, 60.0, 80.0], [88.0, 87.0, 89.0], 88.0) == (40.0, "")
    assert iso.compute_at([40.0, 60.0, 80.0], [88.0, 87.0, 89.0], 88.5) == (70.0, "")  # from 88 at 60


@settings(deadline=None)
@given(acc=st.lists(st.floats(50, 99), min_size=2, max_size=6), a=st.floats(40, 100), b=st.floats(40, 100),
       flops=st.floats(1.0, 200.0))
def test_more_accuracy_never_saves_less_and_more_compute_never_saves_more(acc, a, b, flops):
    curve = [10.0 * (i + 1) for i in range(len(acc))]
    low, high = sorted((a, b))
    assert iso.saving(curve, acc, flops, high)[0] >= iso.saving(curve, acc, flops, low)[0] - 1e-12
    assert iso.saving(curve, acc, flops, a)[0] >= iso.saving(curve, acc, flops * 1.5, a)[0]


@settings(deadline=None)
@given(acc=st.lists(st.floats(50, 99), min_size=2, max_size=6), data=st.data())
def test_a_point_on_the_envelope_saves_nothing(acc, data):
    curve = [10.0 * (i + 1) for i in range(len(acc))]
    envelope = np.maximum.accumulate(acc)
    i = data.draw(st.integers(0, len(acc) - 1))
    if i and envelope[i] == envelope[i - 1]:
        return  # a flat stretch: the first compute that reaches it is the earlier point
    at, bound = iso.compute_at(curve, acc, float(envelope[i]))
    assert bound == "" and at == pytest.approx(curve[i])


def _episodes(seeds, acc, flops):
    return [SimpleNamespace(seed=s, accuracy=a, training_flops=f) for s, a, f in zip(seeds, acc, flops)]


def _noisy(seeds, rng, accuracy, flops):
    """An arm's episodes: `accuracy` with seed noise (sd 0.3), `flops` on every seed."""
    return _episodes(seeds, accuracy + rng.normal(0, 0.3, len(seeds)), [flops] * len(seeds))


def _noisy_curve(seeds, rng):
    """A static curve at 0.4 … 1.0 of a 100-FLOP budget: accuracy 80 + 10 × fraction, with seed noise."""
    return {f: _noisy(seeds, rng, 80 + 10 * f, 100.0 * f) for f in (0.4, 0.6, 0.8, 1.0)}


def test_iso_accuracy_pairs_the_seeds_and_gives_an_interval_around_the_point():
    seeds = list(range(8))
    rng = np.random.default_rng(1)
    curve = _noisy_curve(seeds, rng)
    grown = _noisy(seeds, rng, 89.0, 60.0)
    out = iso.iso_accuracy(curve, grown, resamples=500)
    assert out["low"] <= out["saving"] <= out["high"]
    assert out["flops_fraction"] == pytest.approx(0.6)
    assert out["saving"] == pytest.approx(0.33, abs=0.05)  # reaches ~89, which the curve reaches near 0.9
    assert [p["fraction"] for p in out["points"]] == [0.4, 0.6, 0.8, 1.0]
    with pytest.raises(ValueError, match="full budget"):
        iso.iso_accuracy({0.5: curve[0.6]}, grown)


def test_budget_names_and_checks():
    assert iso.budget_arm(0.4) == "static_final@0.4"
    assert iso.check_budgets([0.8, 0.4, 1.0]) == [0.4, 0.8]
    for bad in ([0.0], [1.5], [float("nan")], [0.4, 0.4]):
        with pytest.raises(ValueError, match="static budget"):
            iso.check_budgets(bad)
    names = ["wait", "static_final", "static_final@0.4", "static_final@0.8", "static_final[seed=7]",
             "static_final@0.4[seed=7]"]
    assert iso.curve_arms(names) == {
        "": {0.4: "static_final@0.4", 0.8: "static_final@0.8", 1.0: "static_final"},
        "[seed=7]": {0.4: "static_final@0.4[seed=7]", 1.0: "static_final[seed=7]"}}


def test_savings_pair_each_arm_with_its_own_training_seed_curve():
    seeds = [1, 2, 3]
    ep = lambda a, f: _episodes(seeds, [a] * 3, [f] * 3)  # noqa: E731
    episodes = {"ppo[seed=7]": ep(88.0, 50.0), "ppo[seed=9]": ep(88.0, 50.0),
                "static_final[seed=7]": ep(89.0, 100.0), "static_final@0.5[seed=7]": ep(87.0, 50.0),
                "static_final[seed=9]": ep(89.0, 100.0), "static_final@0.5[seed=9]": ep(88.0, 50.0)}
    out = {(e["arm"], e["curve"]): e for e in iso.savings(episodes, ["ppo[seed=7]", "ppo[seed=9]"])}
    assert set(out) == {("ppo[seed=7]", "static_final[seed=7]"), ("ppo[seed=9]", "static_final[seed=9]")}
    assert out[("ppo[seed=7]", "static_final[seed=7]")]["saving"] == pytest.approx(1 - 50 / 75)
    assert out[("ppo[seed=9]", "static_final[seed=9]")]["saving"] == pytest.approx(0.0)
    assert "saves 33.3%" in iso.line(out[("ppo[seed=7]", "static_final[seed=7]")])


def test_the_ceiling_by_hand():
    """Target 89.5 − 0.5 = 89.0, reached at 80. A small point at (30, 88): the curve needs 60 for 88, so a
    perfect transfer saves (60 − 30) / 80."""
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [30.0], [88.0]) == pytest.approx(0.375)
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [30.0, 50.0], [88.0, 88.0]) == pytest.approx(0.375)  # the best point
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [50.0], [89.2]) == pytest.approx(0.375)  # past the target: at it
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [70.0], [88.0]) == pytest.approx(-0.125)  # dearer than the curve
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [30.0], [85.0]) is None  # below the curve: unknown
    assert iso.ceiling(CURVE_FLOPS, CURVE_ACC, [30.0], [88.0], within=0.0) == pytest.approx(0.3)  # target 89.5 at 100


@settings(deadline=None)
@given(acc=st.lists(st.floats(50, 99), min_size=2, max_size=6), small_acc=st.floats(40, 100),
       small_flops=st.floats(1.0, 100.0), gain=st.floats(0.0, 5.0), within=st.floats(0.0, 2.0))
def test_the_ceiling_is_the_saving_of_a_perfect_transfer_and_moves_the_right_way(acc, small_acc, small_flops, gain,
                                                                                  within):
    curve = [20.0 * (i + 1) for i in range(len(acc))]
    top = iso.ceiling(curve, acc, [small_flops], [small_acc], within)
    target = acc[-1] - within
    reached = min(small_acc, target)
    if top is None:  # the small network (or the target itself) lies below the curve's cheapest point
        assert reached < np.maximum.accumulate(acc)[0]
        return
    # a run small for small_flops, then the curve's own run from the small accuracy on to the target
    grown = small_flops + iso.compute_at(curve, acc, target)[0] - iso.compute_at(curve, acc, reached)[0]
    assert top == pytest.approx(iso.saving(curve, acc, grown, target)[0], abs=1e-9)
    assert iso.ceiling(curve, acc, [small_flops], [small_acc + gain], within) >= top - 1e-9  # more accuracy
    assert iso.ceiling(curve, acc, [small_flops * 1.5], [small_acc], within) <= top  # more compute


@settings(deadline=None)
@given(acc=st.lists(st.floats(50, 99), min_size=2, max_size=6), data=st.data())
def test_growing_a_network_from_its_own_curve_has_no_ceiling_above_zero(acc, data):
    curve = [10.0 * (i + 1) for i in range(len(acc))]
    i = data.draw(st.integers(0, len(acc) - 1))
    top = iso.ceiling(curve, acc, [curve[i]], [acc[i]])
    if top is None:  # the point (a dip) or the target (the full budget − 0.5 pp) lies below the cheapest point
        assert min(acc[i], acc[-1] - iso.CEILING_WITHIN) < np.maximum.accumulate(acc)[0]
        return
    assert top <= 1e-9


def test_growth_ceiling_reads_wait_beside_each_curve_with_an_interval():
    seeds = list(range(6))
    rng = np.random.default_rng(2)
    curve = _noisy_curve(seeds, rng)
    small = _noisy(seeds, rng, 87.0, 30.0)
    out = iso.growth_ceiling(curve, small, resamples=300)
    assert out["low"] <= out["ceiling"] <= out["high"]
    assert out["ceiling"] == pytest.approx((70.0 - 30.0) / 95.0, abs=0.05)  # 87 at ~70; the target ~89.5 at ~95
    assert out["small_flops_fraction"] == pytest.approx(0.3)
    names = {"static_final": curve[1.0], "static_final@0.6": curve[0.6], "wait": small, "oracle": small}
    (entry,) = iso.ceilings(names)
    assert (entry["small"], entry["curve"]) == ("wait", "static_final")
    assert "saves at most" in iso.ceiling_line(entry)
    assert iso.ceilings({k: v for k, v in names.items() if k != "wait"}) == []
    tagged = {"static_final[seed=7]": curve[1.0], "static_final@0.6[seed=7]": curve[0.6], "wait": small}
    assert [e["curve"] for e in iso.ceilings(tagged)] == ["static_final[seed=7]"]  # wait is shared by the seeds
    low = _episodes(seeds, [60.0] * 6, [30.0] * 6)
    assert iso.growth_ceiling(curve, low) is None  # below the curve: nothing to read
