"""The pool's view of the run's data: training batches per (env, step) and the fixed validation set.

A thin adapter over `hosts.data` (device-resident `TaskData`) and `hosts.batching` (seeded epoch
plans): `PoolData.begin_epoch(seed, batch_idx, epoch, envs_running)` draws the epoch's plan once on
the CPU and moves it to every env device; `train_batch(env, step)` and `val_batches(device)` then
index the device tensors (SPEC §6.3, §6.4, §7.2.6). Data is built once per run and shared by every
pool reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from hosts.batching import EpochPlan, plan_epoch, resolve_max_batches, steps_per_epoch
from hosts.data import TaskData, load_task_data, train_batch, val_batches, val_size


@dataclass(frozen=True)
class DataSettings:
    """How the run slices its data (resolved from TrainingConfig and the task)."""

    n_envs: int  # slices per shared step: always the config's n_envs
    batch_size: int  # per-env training batch (Bpe)
    split: str  # "shared" | "full"
    max_batches: int | None  # resolved cap on K (None = no cap)
    val_samples: int | None
    val_batch_size: int


class PoolData:
    """Per-device `TaskData` plus the epoch plan of the running epoch."""

    def __init__(self, by_device: Mapping[torch.device, TaskData], settings: DataSettings) -> None:
        if not by_device:
            raise ValueError("PoolData needs the data of at least one device")
        self.by_device = dict(by_device)
        self.settings = settings
        first = next(iter(self.by_device.values()))
        self.kind = first.kind
        self.n_train = first.n_train
        self.steps_per_epoch = steps_per_epoch(self.n_train, settings.n_envs, settings.batch_size,
                                               settings.split, settings.max_batches)
        self._val_items = val_size(first, settings.val_samples)
        tokens = 1 if first.kind != "lm" else first.x_test.shape[1] - 1
        self.val_count = self._val_items * tokens  # samples, or target tokens for LM
        self._plans: dict[torch.device, EpochPlan] = {}
        self._val_cache: dict[torch.device, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def data(self, device: torch.device) -> TaskData:
        try:
            return self.by_device[device]
        except KeyError:
            raise ValueError(f"no data was built for device {device}; have {list(self.by_device)}") from None

    def begin_epoch(self, seed: int, batch_idx: int, epoch: int, envs_running: int) -> None:
        """Draw the epoch's plan from (seed, batch_idx, epoch[, env]) and move it to every device."""
        s = self.settings
        plan = plan_epoch(self.n_train, n_envs=s.n_envs, batch_per_env=s.batch_size, split=s.split,
                          max_batches=s.max_batches, seed=seed, batch_idx=batch_idx, epoch=epoch,
                          envs_running=envs_running, augment=self.kind == "classification")
        self._plans = {device: plan.to(device) for device in self.by_device}

    def plan(self, device: torch.device) -> EpochPlan:
        """The running epoch's plan on `device` (indices [E_run, K, Bpe], crops, flips)."""
        return self._plans[torch.device(device)]

    def train_batch(self, env: int, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        return train_batch(self.data(device), self._plans[device], env, step)

    def val_batches(self, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The fixed validation set in val_batch_size chunks (views of the device tensors; cached)."""
        if device not in self._val_cache:
            s = self.settings
            self._val_cache[device] = list(val_batches(self.data(device), s.val_samples, s.val_batch_size))
        return self._val_cache[device]


def data_settings(config, task) -> DataSettings:
    """Resolve batch size, split, the K cap and the validation chunks from the config and the task."""
    batch = config.batch_size_per_env or task.batch_size
    return DataSettings(
        n_envs=config.n_envs,
        batch_size=batch,
        split=str(getattr(config.data_split, "value", config.data_split)),
        max_batches=resolve_max_batches(config.max_train_batches, task.max_train_batches),
        val_samples=config.val_samples,
        val_batch_size=config.val_batch_size or batch,
    )


def build_pool_data(config, task, devices, data: TaskData | Mapping | None = None) -> PoolData:
    """PoolData for `devices`: from pre-built data (a TaskData, moved per device, or a device mapping)
    or built with hosts.data.load_task_data from the config."""
    devices = list(dict.fromkeys(torch.device(d) for d in devices))
    if isinstance(data, PoolData):
        return data
    if data is None:
        first = load_task_data(task, devices[0], data_root=config.data_root, data_seed=config.data_seed,
                               synthetic_train_samples=config.synthetic_train_samples,
                               synthetic_test_samples=config.synthetic_test_samples)
        by_device = {d: (first if d == devices[0] else first.to(d)) for d in devices}
    elif isinstance(data, TaskData):
        by_device = {d: (data if data.device == d else data.to(d)) for d in devices}
    else:
        by_device = {torch.device(d): v for d, v in data.items()}
    return PoolData(by_device, data_settings(config, task))
