"""Learning-rate schedules: the cosine's values by hand, and a pool run under each schedule."""

import math

import pytest
import torch

from esper_fx.config import TrainingConfig
from esper_fx.contracts import LifecycleOp
from hosts.env.lr_schedule import apply_lr, lr_factor
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
    pool = EnvPool(config)
    pool.begin(0)  # the first epoch
    pool.step([[0, 0, 0, int(LifecycleOp.WAIT)]], bootstrap=False)  # the second
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
