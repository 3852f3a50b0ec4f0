"""The pool's view of the run's data: a thin adapter over `hosts.data.feed.DataFeed` (BEHAVIOUR §6.3, §6.4, §7.2).

The loop builds one `DataFeed` per run; the pool wraps it in `PoolData`, which hands out each env's
training batch per (env, step) and a validation iterator per env. On the device path a batch is
built on demand, so when the pool asks for it inside the env's CUDA stream the gather and the
augmentation run on that stream; the epoch plan is moved to the devices once per epoch. On the
loader path the DataLoader's step batches arrive on the default stream (`on_default_stream`), and
the pool makes the env stream wait for them and records them there.
"""

from __future__ import annotations

from typing import Iterator

import torch

from hosts.data.batching import EpochPlan
from hosts.data.task_data import TaskData, train_batch
from hosts.data.feed import DataFeed

Batch = tuple[torch.Tensor, torch.Tensor]


class PoolData:
    """One epoch at a time over a DataFeed: `begin_epoch`, then `train_batch(env, step)` for step 0..K−1."""

    def __init__(self, feed: DataFeed) -> None:
        self.feed = feed
        self.steps_per_epoch = feed.steps_per_epoch
        self.on_default_stream = feed.data_path == "loader"
        self._plans: dict[torch.device, EpochPlan] = {}
        self._loader_steps: Iterator[list[Batch]] | None = None
        self._loader_step, self._loader_batches = -1, []

    def begin_epoch(self, batch_idx: int, epoch: int, envs_running: int) -> None:
        """Draw the plan of (seed, batch_idx, epoch[, env]); on the device path move it to each device."""
        if self.on_default_stream:
            self._loader_steps = self.feed.train_epoch(batch_idx, epoch, envs_running)
            self._loader_step, self._loader_batches = -1, []
            return
        plan = self.feed.plan(batch_idx, epoch, envs_running)
        devices = dict.fromkeys(self.feed.env_devices[i] for i in range(envs_running))
        self._plans = {device: plan.to(device) for device in devices}

    def plan(self, device: torch.device | str) -> EpochPlan:
        """The running epoch's plan on `device` (device path): indices [E_run, K, Bpe], crops, flips."""
        return self._plans[torch.device(device)]

    def plan_tensors(self, device: torch.device | str) -> tuple[torch.Tensor, ...]:
        """The running epoch's plan tensors on `device` (made on the caller's stream, read on the env
        streams, which record them); none on the loader path."""
        plan = self._plans.get(torch.device(device))
        return () if plan is None else tuple(t for t in plan if t is not None)

    def fetch_step(self, step: int) -> None:
        """Loader path: take step `step`'s batches of every env from the DataLoader. Call it outside any
        env stream, so their host-to-device copies are queued on the default stream. No-op on the
        device path."""
        if self.on_default_stream and step != self._loader_step:
            self._loader_batches = next(self._loader_steps)
            self._loader_step = step

    def train_batch(self, env: int, step: int) -> Batch:
        """Env `env`'s batch of training step `step`, on the env's device (device path: built here, on
        the caller's stream; loader path: the batch `fetch_step` took)."""
        if not self.on_default_stream:
            device = self.feed.env_devices[env]
            return train_batch(self.feed.data_for_env(env), self._plans[device], env, step)
        self.fetch_step(step)
        return self._loader_batches[env]

    def val_batches(self, env: int) -> Iterator[Batch]:
        """The fixed validation set on env's device, in val_batch_size chunks."""
        return iter(self.feed.val_batches(env))

    @property
    def num_val_batches(self) -> int:
        return -(-self.feed.n_val // self.feed.val_batch_size)


def build_pool_data(config, task, env_devices: list[torch.device], data=None) -> PoolData:
    """PoolData over a pre-built DataFeed (checked against the config), a TaskData (wrapped in a feed with
    the config's settings), or a feed built from the config (data=None)."""
    if isinstance(data, PoolData):
        data = data.feed
    if data is None:
        data = DataFeed.from_config(config, task, env_devices)
    elif isinstance(data, TaskData):
        data = DataFeed(task, data, env_devices, batch_per_env=config.batch_size_per_env,
                        max_train_batches=config.max_train_batches, split=str(config.data_split),
                        seed=config.seed, data_path=str(config.data_path), num_workers=config.num_workers,
                        val_samples=config.val_samples, val_batch_size=config.val_batch_size)
    if not isinstance(data, DataFeed):
        raise TypeError(f"data must be a DataFeed, a TaskData or None (got {type(data).__name__})")
    _check_feed(data, config, env_devices)
    return PoolData(data)


def _check_feed(feed: DataFeed, config, env_devices: list[torch.device]) -> None:
    if feed.seed != config.seed:
        raise ValueError(f"the DataFeed was built with seed {feed.seed}, the pool's config has seed {config.seed}")
    if list(feed.env_devices) != list(env_devices):
        raise ValueError(f"the DataFeed serves env devices {[str(d) for d in feed.env_devices]}, the pool "
                         f"needs {[str(d) for d in env_devices]} (one per env, n_envs={config.n_envs})")
