"""The pool's stream orderings, checked on the CPU with fake CUDA streams (hosts.env.epoch_compute).

torch.cuda.stream / current_stream / Stream and Tensor.record_stream are replaced by fakes that log
every wait, record and synchronisation; the pool runs its real CPU epochs with a fake stream per env, so
the log shows which stream waited for which. tests/hosts/env/test_pool_gpu.py runs the same paths on CUDA.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from esper_fx.config import TrainingConfig
from esper_fx.contracts.actions import LifecycleOp
from esper_fx.training.pools import pool_settings
from hosts.data.task_data import load_task_data
from hosts.env import EnvPool
from hosts.env.epoch_compute import AmpSettings
from hosts.env.epoch_compute import EnvStreams
from hosts.tasks import get_task

WAIT, GERMINATE = int(LifecycleOp.WAIT), int(LifecycleOp.GERMINATE)


class FakeStream:
    def __init__(self, name: str, log: list, device: str = "cpu") -> None:
        self.name, self.log, self.device = name, log, torch.device(device)

    def wait_stream(self, other: "FakeStream") -> None:
        self.log.append(("wait", self.name, other.name))

    def synchronize(self) -> None:
        self.log.append(("sync", self.name))

    def __repr__(self) -> str:
        return f"FakeStream({self.name})"


@pytest.fixture
def fake_cuda(monkeypatch):
    log: list = []
    default = FakeStream("default", log)
    current = [default]

    @contextlib.contextmanager
    def stream(s):
        previous = current[0]
        current[0] = s
        try:
            yield
        finally:
            current[0] = previous

    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: log.append(("record", s.name, t.data_ptr())))
    return SimpleNamespace(log=log, default=default, current=current)


@pytest.fixture(scope="module")
def data():
    return load_task_data(get_task("shapes10"), "cpu", synthetic_train_samples=512, synthetic_test_samples=128)


def make_pool(data, **overrides) -> EnvPool:
    base = dict(task="shapes10", n_envs=2, max_epochs=4, slots=("r0c1",), device="cpu", batch_size_per_env=32,
                max_train_batches=3, synthetic_train_samples=512, synthetic_test_samples=128, val_samples=64,
                min_cull_age=1, one_seed_at_a_time=False, germination_deadline=False)
    base.update(overrides)
    return EnvPool(pool_settings(TrainingConfig(**base)), data=data)


def with_fake_streams(pool: EnvPool, log: list) -> list[FakeStream]:
    streams = [FakeStream(f"env{env.index}", log) for env in pool.envs]
    for env, stream in zip(pool.envs, streams):
        env.stream = stream
    return streams


def test_loader_batches_make_the_env_stream_wait_for_the_callers_stream(data, fake_cuda):
    pool = make_pool(data, data_path="loader", num_workers=0)
    pool.build_envs(0)
    with_fake_streams(pool, fake_cuda.log)
    pool.train_epoch()
    waits = [entry for entry in fake_cuda.log if entry[0] == "wait"]
    assert not [w for w in waits if w[1] == w[2]], "a stream waited on itself: the copies are not ordered"
    for env in pool.envs:
        # once before the epoch, then once per step before the step's batch is used
        assert waits.count(("wait", f"env{env.index}", "default")) == pool.steps_per_epoch + 1
        records = [e for e in fake_cuda.log if e[0] == "record" and e[1] == f"env{env.index}"]
        assert len(records) == 2 * pool.steps_per_epoch  # x and y of every step


def test_the_plan_is_recorded_on_every_env_stream_that_reads_it(data, fake_cuda):
    pool = make_pool(data)
    pool.build_envs(0)
    with_fake_streams(pool, fake_cuda.log)
    pool.train_epoch()
    plan = {t.data_ptr() for t in pool.data.plan_tensors("cpu")}
    assert len(plan) == 3  # indices, crops, flips
    for env in pool.envs:
        recorded = {e[2] for e in fake_cuda.log if e[0] == "record" and e[1] == f"env{env.index}"}
        assert plan <= recorded
        assert fake_cuda.log.index(("wait", f"env{env.index}", "default")) < len(fake_cuda.log)


def test_the_readback_joins_every_env_stream_then_synchronises_once(data, fake_cuda):
    pool = make_pool(data)
    pool.build_envs(0)
    with_fake_streams(pool, fake_cuda.log)
    pool.train_epoch()
    start = len(fake_cuda.log)
    pool.validate()
    log = fake_cuda.log[start:]
    syncs = [i for i, e in enumerate(log) if e[0] == "sync"]
    assert [log[i] for i in syncs] == [("sync", "default")], "the epoch barrier is the one host sync"
    for env in pool.envs:
        joined = log.index(("wait", "default", f"env{env.index}"))
        assert joined < syncs[0]
    # nothing is queued on an env stream between the barrier and the next epoch's wait for the caller
    pool.apply(np.array([(1, 1, 1, GERMINATE, 1)] * pool.n_active, dtype=np.int32))
    assert all(e[0] != "wait" or e[1] == "default" for e in fake_cuda.log[start + syncs[0]:])


def test_env_streams_last_for_the_pools_life(monkeypatch):
    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: made.append(device) or FakeStream("s", [], "cuda:0"))
    streams, cuda = EnvStreams(True), torch.device("cuda:0")
    first = [streams.for_env(i, cuda) for i in range(3)]
    again = [streams.for_env(i, cuda) for i in range(3)]
    assert first == again and len({id(s) for s in first}) == 3 and len(made) == 3
    assert streams.for_env(0, torch.device("cpu")) is None
    assert EnvStreams(False).for_env(0, cuda) is None


def test_every_episode_reuses_the_env_index_streams(data):
    pool = make_pool(data)
    given = {}
    pool.streams = SimpleNamespace(for_env=lambda i, device: given.setdefault(i, object()))
    pool.build_envs(0)
    first = [env.stream for env in pool.envs]
    pool.build_envs(1)
    assert [env.stream for env in pool.envs] == first and len(set(map(id, first))) == pool.n_envs


def test_a_grad_scaler_makes_every_env_optimizer_fused(data):
    """With fp16's GradScaler, GradScaler.step reads found_inf back to the host unless the optimizer
    takes it on the device (`_step_supports_amp_scaling`, a fused SGD)."""
    pool = make_pool(data)
    cpu = torch.device("cpu")
    pool._amp[cpu] = AmpSettings(True, torch.float16)
    with pytest.warns(UserWarning):  # GradScaler("cuda") without CUDA: built disabled
        pool.build_envs(0)
    pool._amp[cpu] = AmpSettings(False, torch.float16)  # run the epochs in fp32 on the CPU
    env = pool.envs[0]
    assert env.scaler is not None and env.host_optimizer.defaults["fused"] is True
    assert getattr(env.host_optimizer, "_step_supports_amp_scaling", False)
    pool.train_and_validate()
    pool.apply(np.array([(1, 1, 1, GERMINATE, 1)] * pool.n_active, dtype=np.int32))
    pool.train_and_validate()
    seeds = env.seed_optimizers_in_order(pool.enabled)
    assert seeds and all(opt.defaults["fused"] is True for opt in seeds)


def test_without_a_scaler_the_optimizers_stay_unfused(data):
    pool = make_pool(data)
    pool.build_envs(0)
    assert all(env.scaler is None and not env.host_optimizer.defaults["fused"] for env in pool.envs)
