"""One Ray env worker: an in-process `EnvPool` over a contiguous slice of the envs (issue 15).

The worker runs exactly the per-env code of the in-process pool (`hosts.env.EnvPool` with `env_ids`):
every env keeps its global index, so its model, optimisers, data batches, governor and RNG streams are
those of the same env in a single-process run. The driver sends the worker its `hosts.settings.PoolSettings`
(`worker_settings`: the devices as the worker sees them). What crosses the object store is plain: signals as
numpy arrays (one per SIGNAL_FIELDS entry, [E_w, ...]), actions as a numpy integer array [E_w, 5] (and back as
the int32 array the worker's pool executed), events and episode results as the pool's own frozen dataclasses.
No jax here: `esper_fx.distributed.pool` drives it.

A worker uses the driver's torch intra-op thread count: CPU kernels reduce in an order that depends on it,
so with the same count a worker's envs compute bit for bit what the in-process pool computes (the
command line runs CPU pools with one thread, `esper_fx.cli.run.limit_cpu_threads`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import torch

from bridge.jax_env import ensure_jax_env
from esper_fx.errors import DataError, SetupError
from hosts.data.external import DatasetUnavailableError
from hosts.env import EnvPool
from hosts.settings import PoolSettings


class WorkerStep(NamedTuple):
    """What a worker's `step` returns (plain values and numpy arrays)."""

    actions: np.ndarray  # [E_w, 5] int32, as the worker's pool executed them (`ApplyResult.actions`)
    success: tuple[bool, ...]
    events: tuple[Any, ...]
    bootstrap: dict[str, np.ndarray] | None
    signals: dict[str, np.ndarray] | None
    compute_s: float  # the worker's own time in the step (the rest of a round trip is Ray's overhead)
    cpu_s: float  # the worker process's CPU time in the step
    phases: dict[str, float] | None = None  # its pool's phases in the step, and the step (`phase_delta`)


def one_gpu_device(name: str | torch.device, gpu: bool) -> str:
    """A device name as a Ray worker or task spells it: with a GPU from Ray (or a share of one), which it
    sees as cuda:0, every CUDA device (and "auto") is cuda:0; a cpu entry stays on the CPU."""
    name = str(name)
    if not gpu:
        return "cpu"
    return "cuda:0" if name.startswith("cuda") or name == "auto" else name


def worker_settings(settings: PoolSettings) -> PoolSettings:
    """A worker's pool settings: signals are built on the CPU (they leave as numpy); each env keeps its kind
    of device, a CUDA env on the GPU Ray gives the worker (its cuda:0), a cpu env on the CPU."""
    envs = tuple(torch.device(one_gpu_device(device, gpu=True)) for device in settings.env_devices)
    return dataclasses.replace(settings, policy_device=torch.device("cpu"), env_devices=envs)


def one_gpu_config(config: Any, gpu: bool) -> Any:
    """A TrainingConfig as a Ray task with one GPU (or none) must spell its devices."""
    envs = config.env_devices
    return config.replace(device=one_gpu_device(config.device, gpu),
                          env_devices=None if envs is None else tuple(one_gpu_device(d, gpu) for d in envs))


@contextmanager
def data_errors():
    """A dataset that cannot be loaded, or that does not fit the configuration (a batch larger than the
    training split), raised as `DataError`: the same one line and exit 2 whether the env pool is built in
    this process, in a Ray env worker or task, or the driver reads the data first."""
    try:
        yield
    except SetupError:
        raise
    except (DatasetUnavailableError, ValueError) as exc:
        raise DataError(str(exc)) from exc


def to_numpy(signals: dict[str, torch.Tensor] | None) -> dict[str, np.ndarray] | None:
    return None if signals is None else {name: t.detach().cpu().numpy() for name, t in signals.items()}


def phase_delta(after: dict[str, float], before: dict[str, float], work_s: float) -> dict[str, float]:
    """A call's time in the worker: its pool's env builds, training and validation phases (`EnvPool.phase_s`)
    and the whole call (`work_s`)."""
    return {**{key: after[key] - before[key] for key in after}, "work_s": work_s}


class EnvWorker:
    """Built by Ray as an actor (`ray.remote(EnvWorker)`); every method is one round trip."""

    def __init__(self, settings: PoolSettings, env_ids: tuple[int, ...], torch_threads: int, nan_faults=()) -> None:
        ensure_jax_env(warn=False)
        torch.set_num_threads(torch_threads)  # the driver's count: CPU kernels then sum in the same order
        self.setup_error: SetupError | None = None
        try:
            with data_errors():
                self.pool = EnvPool(settings, env_ids=env_ids, nan_faults=nan_faults)
        except SetupError as exc:  # kept for `info`: an actor that fails in __init__ loses its exception
            self.setup_error = exc

    def info(self) -> dict[str, Any]:
        """Where the worker runs (pid, host) and the pool's K: the driver's readiness check. A setup problem
        met building the pool (its data) is raised here, so the driver reports it as an in-process run does."""
        if self.setup_error is not None:
            raise self.setup_error
        return {"pid": os.getpid(), "host": os.uname().nodename, "steps_per_epoch": self.pool.steps_per_epoch,
                "env_ids": self.pool.env_ids}

    def begin(self, batch_idx: int, n_active: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """The batch's first signals, and the worker's own time in the call (`phase_delta`)."""
        started, before = time.perf_counter(), dict(self.pool.phase_s)
        signals = to_numpy(self.pool.begin(batch_idx, n_active))
        return signals, phase_delta(self.pool.phase_s, before, time.perf_counter() - started)

    def step(self, actions: np.ndarray, bootstrap: bool) -> WorkerStep:
        started, cpu, before = time.perf_counter(), time.process_time(), dict(self.pool.phase_s)
        result, signals = self.pool.step(actions, bootstrap=bootstrap)
        boot, signals = to_numpy(result.bootstrap_signals), to_numpy(signals)
        compute = time.perf_counter() - started
        return WorkerStep(result.actions, result.success, result.events, boot, signals, compute,
                          time.process_time() - cpu, phase_delta(self.pool.phase_s, before, compute))

    def episode_results(self) -> list:
        return self.pool.episode_results()
