"""EnvPool on CUDA: per-env streams, AMP with one GradScaler per env, no host sync while training.

Skipped cleanly without CUDA (tests/conftest.py); the CPU suite (test_env.py) covers the same logic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import LifecycleOp
from esper_fx.training.pools import pool_settings
from hosts.data.task_data import load_task_data
from hosts.env import EnvPool
from hosts.tasks import get_task

pytestmark = pytest.mark.gpu

DEVICE = "cuda:0"
WAIT, GERMINATE = int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE)


@pytest.fixture(scope="module")
def gpu_data():
    return load_task_data(get_task("shapes10"), DEVICE, synthetic_train_samples=4096, synthetic_test_samples=1024)


@pytest.fixture
def deterministic_cudnn():
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def make_pool(data, **overrides) -> EnvPool:
    use_streams = overrides.pop("use_streams", True)
    base = dict(task="shapes10", n_envs=3, max_epochs=6, slots=("r0c0", "r0c1"), device=DEVICE,
                batch_size_per_env=128, max_train_batches=4, synthetic_train_samples=4096,
                synthetic_test_samples=1024, val_samples=512)
    base.update(overrides)
    pool = EnvPool(pool_settings(TrainingConfig(**base)), data=data, use_streams=use_streams)
    pool.build_envs(0)
    return pool


def script(pool: EnvPool, epochs: int = 4) -> list[dict]:
    """Germinate a sigmoid seed in r0c1 and a gated one in r0c0, then wait; the signals of every epoch."""
    plan = [(1, 1, 1, GERMINATE, 1), (0, 3, 2, GERMINATE, 1)] + [(1, 1, 1, WAIT, 1)] * (epochs - 2)
    out = []
    for row in plan:
        out.append(pool.train_and_validate())
        pool.apply(np.array([row] * pool.n_active, dtype=np.int32))
    return out


def test_every_env_gets_its_own_stream_and_signals_live_on_the_policy_device(gpu_data):
    pool = make_pool(gpu_data)
    streams = [env.stream for env in pool.envs]
    assert all(isinstance(s, torch.cuda.Stream) for s in streams)
    assert len({s.cuda_stream for s in streams}) == len(streams)
    signals = pool.train_and_validate()
    assert all(t.device == torch.device(DEVICE) and t.is_contiguous() for t in signals.values())


def test_streams_and_no_streams_give_matching_results(gpu_data, deterministic_cudnn):
    with_streams = script(make_pool(gpu_data, use_streams=True))
    without = script(make_pool(gpu_data, use_streams=False))
    for a, b in zip(with_streams, without):
        for name in a:
            if a[name].is_floating_point():
                assert torch.allclose(a[name], b[name], rtol=1e-4, atol=0.5, equal_nan=True), name
            else:
                assert torch.equal(a[name], b[name]), name
        assert torch.allclose(a["val_loss"], b["val_loss"], rtol=1e-3)


def test_fp16_amp_runs_with_one_grad_scaler_per_env(gpu_data):
    pool = make_pool(gpu_data, amp=True, amp_dtype="float16")
    scalers = [env.scaler for env in pool.envs]
    assert all(isinstance(s, torch.amp.GradScaler) for s in scalers)
    assert len({id(s) for s in scalers}) == len(scalers)
    signals = script(pool)
    for s in signals:
        assert torch.isfinite(s["val_loss"]).all() and torch.isfinite(s["train_loss"]).all()
    assert all(s.get_scale() > 0 for s in scalers)
    env = pool.envs[0]
    assert env.counters.ratio_ema["r0c1"] > 0.0  # gradient statistics were taken on unscaled gradients
    assert env.model.slot("r0c1").report().gradient_norm < 1e3


def test_bf16_amp_uses_no_scaler(gpu_data):
    pool = make_pool(gpu_data, amp=True, amp_dtype="bfloat16")
    assert all(env.scaler is None for env in pool.envs)
    assert torch.isfinite(pool.train_and_validate()["val_loss"]).all()


def test_training_epoch_does_not_synchronise_with_the_host(gpu_data):
    pool = make_pool(gpu_data)
    pool.train_and_validate()
    pool.apply(np.array([(1, 1, 1, GERMINATE, 1)] * pool.n_active, dtype=np.int32))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pool.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    pool.validate()
    assert torch.isfinite(pool.signals()["train_loss"]).all()


@pytest.mark.parametrize("amp_dtype", ["float16", "bfloat16"])
def test_amp_training_epoch_does_not_synchronise_with_the_host(gpu_data, amp_dtype):
    """fp16 needs fused optimizers (GradScaler.step otherwise reads found_inf back); bf16 has no scaler."""
    pool = make_pool(gpu_data, amp=True, amp_dtype=amp_dtype)
    pool.train_and_validate()
    pool.apply(np.array([(1, 1, 1, GERMINATE, 1)] * pool.n_active, dtype=np.int32))
    pool.train_and_validate()  # the seed optimizer exists from here on
    pool.apply(np.array([(1, 1, 1, WAIT, 1)] * pool.n_active, dtype=np.int32))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pool.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    pool.validate()
    assert torch.isfinite(pool.signals()["train_loss"]).all()


def test_the_loader_path_trains_on_the_device_paths_batches(gpu_data, deterministic_cudnn):
    """Both paths draw the same plan; the loader's copies are ordered before the env streams read them."""
    device_path = script(make_pool(gpu_data))
    loader_path = script(make_pool(gpu_data, data_path="loader", num_workers=0))
    for a, b in zip(device_path, loader_path):
        assert torch.allclose(a["train_loss"], b["train_loss"], rtol=1e-3, atol=1e-3)
        assert torch.allclose(a["val_loss"], b["val_loss"], rtol=1e-3, atol=1e-3)


def test_env_streams_are_reused_and_memory_stays_flat_over_episodes(gpu_data):
    pool = make_pool(gpu_data)
    streams = [env.stream for env in pool.envs]
    reserved = []
    for b in range(6):
        pool.build_envs(b)
        assert [env.stream for env in pool.envs] == streams
        script(pool, epochs=3)
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved(DEVICE))
    assert len(pool.streams) == pool.n_envs
    assert max(reserved[2:]) <= reserved[1] * 1.05, reserved


def test_signals_live_on_a_policy_device_other_than_the_envs():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    data = load_task_data(get_task("shapes10"), "cuda:0", synthetic_train_samples=4096, synthetic_test_samples=1024)
    pool = make_pool(data, device="cuda:1", env_devices=("cuda:0",))
    assert all(env.device == torch.device("cuda:0") for env in pool.envs)
    signals = pool.train_and_validate()
    assert all(t.device == torch.device("cuda:1") for t in signals.values())
