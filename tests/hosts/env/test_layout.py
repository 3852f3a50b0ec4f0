"""No layout conversion inside an epoch: every 4-d float tensor an epoch allocates is channels_last.

A TorchDispatchMode sees every aten call of the epoch (batch gathering and augmentation, the forward and
backward passes, the optimiser steps, the fused validation and counterfactual pass) and records any new
4-d floating-point result (views excluded: they allocate nothing) that is not channels_last. A conversion
to or from NCHW would have to allocate such a tensor, so an empty record means none happened. The seeds
cover every CNN blueprint in every stage and blend.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import LifecycleOp
from esper_fx.contracts.blueprints import BLUEPRINT_NAMES
from esper_fx.contracts.stages import SeedStage
from esper_fx.training.pools import pool_settings
from hosts.data.task_data import load_task_data
from hosts.env import EnvPool
from hosts.layout import CNN_LAYOUT
from hosts.tasks import get_task


def is_image_layout(tensor: torch.Tensor) -> bool:
    """True for a tensor that is not 4-d, or a 4-d one laid out channels_last."""
    return tensor.dim() != 4 or tensor.is_contiguous(memory_format=CNN_LAYOUT)

WAIT, GERMINATE, FOSSILIZE = int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE), int(LifecycleOp.FOSSILIZE)
MENU = BLUEPRINT_NAMES["cnn"]  # every CNN blueprint, noop first
SLOTS = ("r0c0", "r0c1", "r0c2")
LINEAR, SIGMOID, GATED = 0, 1, 2


class LayoutWatch(TorchDispatchMode):
    """Records the aten op of every new 4-d float result that is not channels_last (meta tensors, which hold
    no data, aside: the FLOP count traces shapes with them)."""

    def __init__(self) -> None:
        super().__init__()
        self.offenders: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for value in tree_leaves(out):
            if (isinstance(value, torch.Tensor) and value.is_floating_point() and not value.is_meta
                    and not is_image_layout(value)
                    and value.untyped_storage().data_ptr() not in inputs):  # a view allocates nothing
                self.offenders.append(f"{func} -> {tuple(value.shape)} strides {value.stride()}")
        return out


@pytest.fixture(scope="module")
def pool() -> EnvPool:
    torch.set_num_threads(1)
    config = TrainingConfig(task="shapes10", n_envs=3, max_epochs=14, slots=SLOTS, device="cpu",
                            blueprint_menu=MENU, batch_size_per_env=16, max_train_batches=2,
                            synthetic_train_samples=256, synthetic_test_samples=64, val_samples=48,
                            val_batch_size=32)
    data = load_task_data(get_task("shapes10"), "cpu", synthetic_train_samples=256, synthetic_test_samples=64)
    return EnvPool(pool_settings(config), data=data)


def _germinations(epoch: int) -> list[list[int]]:
    """Env e germinates blueprint 1 + (3·e + slot) % 7 in slot `epoch − 1` at epochs 1..3, blends rotating."""
    slot = epoch - 1
    return [[slot, 1 + (3 * env + slot) % (len(MENU) - 1), (env + slot) % 3, GERMINATE, env % 3] for env in range(3)]


def _actions(pool: EnvPool) -> np.ndarray:
    """Germinate in the first three epochs, then fossilize whatever reached probation, else wait."""
    if pool.epoch <= len(SLOTS):
        return np.array(_germinations(pool.epoch), dtype=np.int32)
    rows = []
    for env in pool.envs:
        ready = [i for i, s in enumerate(SLOTS) if env.slot(s).stage == SeedStage.PROBATIONARY]
        rows.append([ready[0], 0, 0, FOSSILIZE, 1] if ready else [0, 0, 0, WAIT, 1])
    return np.array(rows, dtype=np.int32)


def test_no_epoch_creates_a_tensor_outside_channels_last(pool):
    pool.build_envs(0)
    stages, germinated, watched = set(), set(), 0
    for _ in range(pool.max_epochs):
        watch = LayoutWatch()
        with watch:
            pool.train_epoch()
            pool.validate()
        assert watch.offenders == [], f"epoch {pool.epoch}: {watch.offenders[:5]}"
        watched += watch.ops
        stages |= {env.slot(s).stage for env in pool.envs for s in SLOTS}
        pool.apply(_actions(pool))
        germinated |= {env.slot(s).state.blueprint_id for env in pool.envs for s in SLOTS if env.slot(s).state}
    assert germinated == set(MENU[1:])  # every blueprint but noop grew somewhere (a seed may be culled later)
    assert {SeedStage.TRAINING, SeedStage.BLENDING, SeedStage.PROBATIONARY, SeedStage.FOSSILIZED} <= stages
    assert watched > 0


def test_the_data_and_every_parameter_are_channels_last(pool):
    pool.build_envs(0)
    data = pool.data.feed.data_for_env(0)
    assert data.x_train.is_contiguous(memory_format=torch.channels_last)
    assert data.x_test.is_contiguous(memory_format=torch.channels_last)
    for env in pool.envs:
        for name, tensor in list(env.model.named_parameters()) + list(env.model.named_buffers()):
            assert is_image_layout(tensor), name
