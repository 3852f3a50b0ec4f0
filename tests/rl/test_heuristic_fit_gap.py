"""The fit gap (BEHAVIOUR §8.7) in the heuristic: GERMINATE waits until train_acc − val_acc reaches
`heuristic.min_fit_gap`; off by default, as the reference."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import HeuristicConfig, TrainingConfig
from rl import heuristic
from tests.rl.test_heuristic import CNN, CNN_PARAMS, G, READY, W, decide, fresh
from tests.rl.test_rewards import make_signals

GAPPED = heuristic.HeuristicParams.from_training_config(CNN.replace(heuristic={"min_fit_gap": 2.0}))


# float32 values, none subnormal: XLA on the CPU flushes float32 subnormals to zero, numpy keeps them
FINITE = dict(width=32, allow_subnormal=False)


@settings(deadline=None)
@given(train=st.floats(0, 100, **FINITE), val=st.floats(0, 100, **FINITE),
       threshold=st.one_of(st.none(), st.floats(-10, 10, **FINITE)))
def test_fits_is_the_gap_against_the_threshold(train, val, threshold):
    signals = {"train_acc": jnp.asarray([train], jnp.float32), "val_acc": jnp.asarray([val], jnp.float32)}
    gap = np.float32(train) - np.float32(val)  # as the controller computes it, in float32
    assert bool(heuristic.fits(signals, threshold)[0]) == (threshold is None or bool(gap >= np.float32(threshold)))


@pytest.mark.parametrize("train, val, op", [(90.0, 85.0, G), (86.0, 85.0, W), (80.0, 85.0, W)])
def test_germination_waits_for_the_fit_gap(train, val, op):
    signals = make_signals(**READY, train_acc=train, val_acc=val)
    actions, _ = decide(fresh(GAPPED), signals, GAPPED)
    assert actions[0, 3] == op
    actions, _ = decide(fresh(), signals, CNN_PARAMS)  # the rule off: the reference's decision
    assert actions[0, 3] == G


def test_the_setting_is_checked_and_kept():
    assert HeuristicConfig().min_fit_gap is None
    assert HeuristicConfig(min_fit_gap=1).to_dict()["min_fit_gap"] == 1.0
    for bad in ("wide", float("nan"), True):
        with pytest.raises(ValueError, match="heuristic.min_fit_gap"):
            HeuristicConfig(min_fit_gap=bad)
    assert dataclasses.replace(GAPPED.rules, min_fit_gap=None) == TrainingConfig(task="cifar10").heuristic


UNLATCHED = heuristic.HeuristicParams.from_training_config(CNN.replace(heuristic={"wait_for_stable_host": False}))


@pytest.mark.parametrize("stabilized", [0, 1])
def test_germination_without_the_stabilisation_wait(stabilized):
    """`wait_for_stable_host=false` drops the latch from the gate and nothing else: a host that never
    stabilises germinates once the other conditions hold; the reference's rule keeps waiting for it."""
    signals = make_signals(**{**READY, "host_stabilized": stabilized})
    assert decide(fresh(UNLATCHED), signals, UNLATCHED)[0][0, 3] == G
    assert decide(fresh(), signals, CNN_PARAMS)[0][0, 3] == (G if stabilized else W)
    early = make_signals(**{**READY, "host_stabilized": stabilized, "epoch": 0})  # before epoch 5: still waits
    assert decide(fresh(UNLATCHED), early, UNLATCHED)[0][0, 3] == W


def test_the_stabilisation_wait_is_on_by_default_and_checked():
    assert HeuristicConfig().wait_for_stable_host is True
    with pytest.raises(ValueError, match="heuristic.wait_for_stable_host"):
        HeuristicConfig(wait_for_stable_host="no")
