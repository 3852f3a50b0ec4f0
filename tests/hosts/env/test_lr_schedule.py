"""Learning-rate schedules: the cosine's and wsd's values by hand and as properties, a seed's re-warmed rate,
and a pool run under each schedule."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import LifecycleOp
from esper_fx.training.pools import pool_settings
from hosts.env.lr_schedule import apply_lr, lr_factor, rewarm_factor
from hosts.env.pool import EnvPool


def test_cosine_by_hand_and_constant():
    assert lr_factor("cosine", 0, 10) == 1.0
    assert lr_factor("cosine", 5, 10) == pytest.approx(0.5)
    assert lr_factor("cosine", 10, 10) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor("cosine", 25, 10) == pytest.approx(0.0, abs=1e-12)  # stays at zero past the budget
    assert lr_factor("cosine", 2, 8) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr_factor("constant", 7, 10) == 1.0
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        lr_factor("step", 0, 10)


def test_apply_lr_scales_each_group_from_its_own_base():
    a = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    a.add_param_group({"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.02})
    apply_lr([a], 0.5)
    apply_lr([a], 0.25)
    assert [g["lr"] for g in a.param_groups] == pytest.approx([0.025, 0.005])


def _pool(**kw):
    config = TrainingConfig(task="shapes10", n_envs=1, max_epochs=2, slots=("r0c1",), device="cpu",
                            batch_size_per_env=16, max_train_batches=3, synthetic_train_samples=128,
                            synthetic_test_samples=32, **kw)
    pool = EnvPool(pool_settings(config))
    pool.begin(0)  # the first epoch
    pool.step(np.array([[0, 0, 0, int(LifecycleOp.WAIT), 1]], dtype=np.int32), bootstrap=False)  # the second
    return pool


def test_a_cosine_run_ends_its_episode_near_zero_lr_and_constant_keeps_the_task_lr():
    cosine = _pool(lr_schedule="cosine")
    base = cosine.task.host_lr
    # 6 steps: the last step (s = 5 of S = 6) used lr₀·½(1 + cos(5π/6))
    assert cosine.envs[0].host_optimizer.param_groups[0]["lr"] == pytest.approx(base * lr_factor("cosine", 5, 6))
    constant = _pool()
    assert constant.envs[0].host_optimizer.param_groups[0]["lr"] == base
    assert "initial_lr" not in constant.envs[0].host_optimizer.param_groups[0]


def test_the_config_rejects_an_unknown_schedule():
    with pytest.raises(ValueError, match="lr_schedule must be one of"):
        TrainingConfig(lr_schedule="linear")
    with pytest.raises(ValueError, match="lr_schedule_steps"):
        TrainingConfig(lr_schedule_steps=0)


def test_wsd_by_hand():
    # 10 steps, warmup 0.2 (2 steps), decay 0.3 (3 steps): 0.5, 1, 1, 1, 1, 1, 1, then 1, 2/3, 1/3; 0 after
    values = [lr_factor("wsd", s, 10, 0.2, 0.3) for s in range(11)]
    assert values == pytest.approx([0.5, 1, 1, 1, 1, 1, 1, 1, 2 / 3, 1 / 3, 0])
    assert lr_factor("wsd", 3, 10, 0.0, 0.2) == 1.0 and lr_factor("wsd", 9, 10, 0.0, 0.2) == pytest.approx(0.5)


@settings(deadline=None)
@given(total=st.integers(1, 5000), warmup=st.floats(0.0, 0.5), decay=st.floats(0.0, 0.5), data=st.data())
def test_wsd_rises_holds_then_falls_to_zero_at_the_budget(total, warmup, decay, data):
    factors = [lr_factor("wsd", s, total, warmup, decay) for s in range(total + 1)]
    assert all(0.0 <= f <= 1.0 for f in factors)
    assert factors[-1] == 0.0 and factors[-2] > 0.0  # the last step still learns; the budget's end is zero
    peak = factors.index(max(factors))
    assert max(factors) == 1.0
    assert all(a <= b for a, b in zip(factors[:peak], factors[1:peak + 1]))  # warmup: never falling
    assert all(a >= b for a, b in zip(factors[peak:], factors[peak + 1:]))  # then never rising
    s = data.draw(st.integers(total + 1, 3 * total + 1))
    assert lr_factor("wsd", s, total, warmup, decay) == 0.0  # stays at zero past the budget


@settings(deadline=None)
@given(steps=st.integers(0, 100), rewarm=st.integers(0, 50))
def test_a_seed_rewarms_linearly_to_its_full_rate(steps, rewarm):
    factor = rewarm_factor(steps, rewarm)
    assert 0.0 < factor <= 1.0
    assert factor == (1.0 if rewarm == 0 or steps + 1 >= rewarm else (steps + 1) / rewarm)


def test_a_wsd_run_decays_host_and_seeds_and_a_seed_rewarms_over_its_own_steps():
    config = TrainingConfig(task="shapes10", n_envs=1, max_epochs=3, slots=("r0c1",), device="cpu",
                            batch_size_per_env=16, max_train_batches=4, synthetic_train_samples=128,
                            synthetic_test_samples=32, lr_schedule="wsd", lr_decay_fraction=0.5,
                            seed_lr_rewarm_steps=8, min_cull_age=1)
    pool = EnvPool(pool_settings(config))
    pool.begin(0)
    germinate = np.array([[1, 1, 1, int(LifecycleOp.GERMINATE), 1]], dtype=np.int32)
    pool.step(germinate, bootstrap=False)  # germinated after epoch 1
    env = pool.envs[0]
    base_host, base_seed = pool.task.host_lr, pool.task.seed_lr
    # 12 steps, the last 6 decaying: epoch 2's last step (s = 7) ran at 5/6 of lr₀
    assert env.host_optimizer.param_groups[0]["lr"] == pytest.approx(base_host * 5 / 6)
    entry = env.seed_optimizers["r0c1"]
    assert entry.steps == 4  # the seed trained the 4 steps of epoch 2, re-warming over 8 of its own
    assert entry.optimizer.param_groups[0]["lr"] == pytest.approx(base_seed * 5 / 6 * 4 / 8)


def test_the_config_checks_the_wsd_fractions_and_the_rewarm():
    with pytest.raises(ValueError, match="lr_decay_fraction must be in"):
        TrainingConfig(lr_decay_fraction=1.5)
    with pytest.raises(ValueError, match="lr_warmup_fraction \\+ lr_decay_fraction"):
        TrainingConfig(lr_warmup_fraction=0.6, lr_decay_fraction=0.6)
    with pytest.raises(ValueError, match="seed_lr_rewarm_steps"):
        TrainingConfig(seed_lr_rewarm_steps=-1)
