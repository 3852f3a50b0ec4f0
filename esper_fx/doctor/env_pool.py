"""The doctor's checks of the env pool on the GPU: AMP epochs without a host synchronisation (fp16, bf16),
per-env streams against one stream, reserved memory flat over episodes."""

from __future__ import annotations

import time

import numpy as np
import torch

from esper_fx.doctor.context import Context

# the small workload of these checks (shapes10 at a few thousand samples)
SMALL_POOL = dict(task="shapes10", n_envs=3, max_epochs=6, slots=("r0c0", "r0c1"), batch_size_per_env=128,
                  max_train_batches=4, synthetic_train_samples=2048, synthetic_test_samples=512, val_samples=512)
MEMORY_EPISODES = 5
MEMORY_TOLERANCE = 1.05  # reserved memory may grow 5% after the second episode


def _pool(ctx: Context, **overrides):
    from esper_fx.config import TrainingConfig
    from esper_fx.training.pools import pool_settings
    from hosts.env import EnvPool

    use_streams = overrides.pop("use_streams", True)
    config = TrainingConfig(**{**SMALL_POOL, "device": str(ctx.torch_device), **overrides})
    pool = EnvPool(pool_settings(config), use_streams=use_streams)
    pool.build_envs(0)
    return pool


def _actions(pool, op: int) -> np.ndarray:
    """Every env's action: `op` on slot 1 with blueprint 1, blend 1 and the standard tempo."""
    from esper_fx.contracts.actions import DEFAULT_TEMPO

    return np.array([(1, 1, 1, op, DEFAULT_TEMPO)] * pool.n_active, dtype=np.int32)


def _epochs(pool, epochs: int) -> list[dict]:
    """Germinate in r0c1, then wait; the signals of every epoch."""
    from esper_fx.contracts.actions import LifecycleOp

    out = []
    for t in range(epochs):
        out.append(pool.train_and_validate())
        pool.apply(_actions(pool, int(LifecycleOp.GERMINATE if t == 0 else LifecycleOp.WAIT)))
    return out


def _amp_no_sync(ctx: Context, dtype: str) -> str:
    pool = _pool(ctx, amp=True, amp_dtype=dtype)
    _epochs(pool, 2)  # a seed and its optimizer exist from here on
    torch.cuda.synchronize(ctx.torch_device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        pool.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    pool.validate()
    loss = pool.signals()["train_loss"]
    if not torch.isfinite(loss).all():
        raise RuntimeError(f"non-finite training loss in {dtype}")
    return f"{pool.steps_per_epoch} steps x {pool.n_active} envs in {dtype}, no host synchronisation"


def check_amp_fp16(ctx: Context) -> str:
    return _amp_no_sync(ctx, "float16")


def check_amp_bf16(ctx: Context) -> str:
    return _amp_no_sync(ctx, "bfloat16")


def check_streams(ctx: Context) -> str:
    timings, results = {}, {}
    for use_streams in (True, False):
        pool = _pool(ctx, use_streams=use_streams)
        _epochs(pool, 1)  # warm-up: cuDNN autotuning, allocator
        torch.cuda.synchronize(ctx.torch_device)
        started = time.perf_counter()
        results[use_streams] = _epochs(pool, 3)
        torch.cuda.synchronize(ctx.torch_device)
        timings[use_streams] = (time.perf_counter() - started) / 3
    for a, b in zip(results[True], results[False]):
        if not torch.allclose(a["val_loss"], b["val_loss"], rtol=1e-2, atol=1e-2):
            raise RuntimeError(f"per-env streams and one stream disagree: {a['val_loss']} vs {b['val_loss']}")
    return (f"per-env streams {timings[True] * 1e3:.1f} ms/epoch, one stream {timings[False] * 1e3:.1f} ms/epoch "
            f"({timings[False] / timings[True]:.2f}x), same results")


def check_memory_flat(ctx: Context) -> str:
    pool = _pool(ctx)
    reserved = []
    for b in range(MEMORY_EPISODES):
        pool.build_envs(b)
        _epochs(pool, 3)
        torch.cuda.synchronize(ctx.torch_device)
        reserved.append(torch.cuda.memory_reserved(ctx.torch_device))
    mib = [f"{r / 2**20:.0f}" for r in reserved]
    if max(reserved[2:]) > reserved[1] * MEMORY_TOLERANCE:
        raise RuntimeError(f"reserved memory grows over episodes: {mib} MiB")
    return f"reserved {mib} MiB over {MEMORY_EPISODES} episodes; {len(pool.streams)} streams reused"
