"""`host`: the env pool's overhead on host training, shapes10.

Measured: one training epoch of E envs through `hosts.env.EnvPool.train_epoch()` (lock-step batches
interleaved across envs, per-env RNG streams, device accumulators, the gradient statistics of the last
step, the slot lifecycle checks). Reference: the plain PyTorch loop a single-model script would run over
the *same* data and model: for each env in turn, its own model (the very module and SGD optimiser the pool
just built), the same batches (`hosts.data.task_data.train_batch` under the same epoch plan, so the same gather and
augmentation), forward, cross-entropy, backward, step, and loss / correct-count sums kept on the device.

Both epochs start from freshly built models (`pool.reset`, untimed) and train E·K·Bpe samples.
Figures: samples per second of each, and the overhead ratio pool time / plain time (target ≤ 1.10 at E=1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from esper_fx.bench.settings import BenchSettings, Reps
from esper_fx.bench.timing import Candidate, measure_interleaved, ratio
from esper_fx.config import TrainingConfig
from hosts.data.task_data import train_batch
from hosts.env import EnvPool
from hosts.data.feed import DataFeed
from hosts.tasks import get_task

TASK = "shapes10"
ENVS = (1, 4)
ENVS_QUICK = (1,)
# full: 16 steps of 512 at E=1 (8,192 samples per epoch); quick: 4 steps of 128
TRAIN_SAMPLES, TEST_SAMPLES, BATCH_PER_ENV = 8192, 1024, 512
TRAIN_SAMPLES_QUICK, TEST_SAMPLES_QUICK, BATCH_PER_ENV_QUICK = 512, 256, 128
REPS = Reps(warmup=2, reps=9)
TARGET_OVERHEAD = 1.10  # the architecture's claim: the pool costs at most 10% over a plain loop at E=1


def _config(settings: BenchSettings, n_envs: int) -> TrainingConfig:
    train, test, bpe = ((TRAIN_SAMPLES_QUICK, TEST_SAMPLES_QUICK, BATCH_PER_ENV_QUICK) if settings.quick
                        else (TRAIN_SAMPLES, TEST_SAMPLES, BATCH_PER_ENV))
    device = "cuda:0" if settings.device.name == "cuda" else "cpu"
    return TrainingConfig(task=TASK, n_envs=n_envs, seed=settings.seed, device=device,
                          synthetic_train_samples=train, synthetic_test_samples=test,
                          batch_size_per_env=bpe, max_train_batches=0)


def plain_epoch(pool: EnvPool, feed: DataFeed, batch_idx: int, epoch: int) -> list[torch.Tensor]:
    """A plain training loop per env over the pool's models, optimisers and batches; returns the sums."""
    plan = feed.plan(batch_idx, epoch, pool.n_active)
    plans = {}
    sums = []
    for env in pool.envs:
        device_plan = plans.setdefault(env.device, plan.to(env.device))
        model, optimizer = env.model, env.host_optimizer
        model.train()
        loss_sum = torch.zeros((), device=env.device)
        correct = torch.zeros((), dtype=torch.int64, device=env.device)
        for step in range(feed.steps_per_epoch):
            x, y = train_batch(feed.data_for_env(env.index), device_plan, env.index, step)
            optimizer.zero_grad(set_to_none=True)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()
            correct += (logits.detach().argmax(dim=1) == y).sum()
        sums += [loss_sum, correct]
    return sums


def _case(settings: BenchSettings, n_envs: int) -> dict:
    cfg = _config(settings, n_envs)
    devices = [settings.device.torch_device] * n_envs
    feed = DataFeed.from_config(cfg, get_task(TASK), devices)
    pool = EnvPool(config=cfg, data=feed)
    reset = lambda: pool.reset(0)  # noqa: E731  (fresh models for each timed epoch, untimed)
    sync = settings.device.torch_sync
    candidates = {
        "pool": Candidate(pool.train_epoch, sync, prepare=reset),
        "plain": Candidate(lambda: plain_epoch(pool, feed, 0, 1), sync, prepare=reset),
    }
    reps = settings.reps(REPS)
    timings = measure_interleaved(candidates, reps.warmup, reps.reps)
    samples = n_envs * feed.steps_per_epoch * feed.batch_per_env
    return {
        "n_envs": n_envs,
        "steps_per_env": feed.steps_per_epoch,
        "batch_per_env": feed.batch_per_env,
        "samples": samples,
        "pool": timings["pool"].as_dict(),
        "plain": timings["plain"].as_dict(),
        "pool_samples_per_s": samples / timings["pool"].median_s,
        "plain_samples_per_s": samples / timings["plain"].median_s,
        "ratio": ratio(timings["pool"], timings["plain"]),
        "ratio_of_minima": timings["pool"].min_s / timings["plain"].min_s,
    }


def run(settings: BenchSettings) -> dict:
    cases = [_case(settings, e) for e in settings.sizes(ENVS, ENVS_QUICK)]
    first = cases[0]
    met = first["n_envs"] == 1 and first["ratio"] <= TARGET_OVERHEAD
    overheads = ", ".join(f"E={c['n_envs']}: {100 * (c['ratio'] - 1):+.1f}% "
                          f"({c['pool_samples_per_s']:.0f} vs {c['plain_samples_per_s']:.0f} samples/s)"
                          for c in cases)
    return {
        "what": f"one training epoch of {TASK} per env: EnvPool.train_epoch vs a plain PyTorch loop",
        "measured": "hosts.env.EnvPool.train_epoch",
        "reference": "plain per-model loop over the same models, optimisers and batches (bench_host.plain_epoch)",
        "ratio_definition": "pool median / plain median (the pool's overhead ratio; 1.0 = none)",
        "columns": {"case": "n_envs", "measured": "pool", "reference": "plain"},
        "cases": cases,
        "target": {"case": "n_envs=1", "max_ratio": TARGET_OVERHEAD, "met": met},
        "headline": f"pool overhead {overheads} (target ≤ {100 * (TARGET_OVERHEAD - 1):.0f}% at E=1: "
                    f"{'met' if met else 'not met'})",
    }
