"""`DataFeed`: one run's training and validation batches for every env (BEHAVIOUR §6.3, §6.4), and
`PoolData`, the env pool's view of it.

    feed = DataFeed.from_settings(settings, task)                # once per run; one device per env
    for step_batches in feed.train_epoch(batch_idx, epoch, envs_running):
        for env, (x, y) in enumerate(step_batches): ...          # env's batch, on env's device
    for x, y in feed.val_batches(env): ...                       # the same fixed set for every env

Both data paths draw the same epoch plan (hosts.data.batching), so they give the *same* batches, not
just the same distribution:
- "device": the normalised tensors live on every env device (one copy per distinct device) and a
  batch is an index gather plus the vectorised augmentation, all on the device;
- "loader": a torch DataLoader with `num_workers` worker processes reads CPU tensors; its batch
  sampler walks the plan step by step (all running envs' slices of a step in one batch) and the
  workers' collate function applies the same augmentation on the CPU.

`PoolData` is the env pool's view of the feed (BEHAVIOUR §7.2), one epoch at a time: each env's training
batch per (env, step) and a validation iterator per env. On the device path a batch is built on demand,
so when the pool asks for it inside the env's CUDA stream the gather and the augmentation run on that
stream; the epoch plan is moved to the devices once per epoch. On the loader path the DataLoader's step
batches arrive on the default stream (`on_default_stream`), and the pool makes the env stream wait for
them and records them there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from hosts.data.batching import EpochPlan, augment_batch, pad_for, plan_epoch, resolve_max_batches, steps_per_epoch
from hosts.data.task_data import TaskData, load_task_data, train_batch, val_batches, val_size
from hosts.layout import image_layout
from hosts.settings import PoolSettings
from hosts.tasks import TaskSpec

DEFAULT_NUM_WORKERS = 4
Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class FeedOptions:
    """How a `DataFeed` deals its data, each passed to it by keyword: the batch per env and the cap on an
    epoch's steps (None: the task's), the split ("shared", "full"), the seed of the plans, the data path
    ("device", "loader") with the loader's worker processes, the validation samples and their batch size
    (None: every test sample, the training batch)."""

    batch_per_env: int | None = None
    max_train_batches: int | None = None
    split: str = "shared"
    seed: int = 0
    data_path: str = "device"
    num_workers: int | None = None
    val_samples: int | None = None
    val_batch_size: int | None = None


class DataFeed:
    def __init__(self, task: TaskSpec, data: TaskData, env_devices: Sequence[torch.device | str],
                 **options: Any) -> None:
        """`options`: the fields of `FeedOptions`, by keyword; another keyword is a TypeError."""
        o = FeedOptions(**options)
        batch_per_env, max_train_batches, split, seed = o.batch_per_env, o.max_train_batches, o.split, o.seed
        data_path, num_workers, val_samples, val_batch_size = (o.data_path, o.num_workers, o.val_samples,
                                                               o.val_batch_size)
        if data_path not in ("device", "loader"):
            raise ValueError(f"data_path must be 'device' or 'loader' (got {data_path!r})")
        self.task, self.split, self.seed, self.data_path = task, split, seed, data_path
        self.env_devices = [torch.device(d) for d in env_devices]
        self.n_envs = len(self.env_devices)
        self.batch_per_env = batch_per_env or task.batch_size
        self.max_batches = resolve_max_batches(max_train_batches, task.max_train_batches)
        self.steps_per_epoch = steps_per_epoch(data.n_train, self.n_envs, self.batch_per_env, split, self.max_batches)
        self.val_samples = val_samples
        self.val_batch_size = val_batch_size or self.batch_per_env
        self.n_val = val_size(data, val_samples)
        self.kind, self.n_train = data.kind, data.n_train
        self.pad = pad_for(data.x_train.shape[-1]) if data.kind == "classification" else 0
        if data_path == "device":
            self._by_device = {d: data.to(d) for d in dict.fromkeys(self.env_devices)}
        else:
            self._loader = _PlanLoader(data.to("cpu"), self.env_devices,
                                       DEFAULT_NUM_WORKERS if num_workers is None else num_workers)

    @classmethod
    def from_settings(cls, settings: PoolSettings, task: TaskSpec, data: TaskData | None = None) -> "DataFeed":
        """The run's feed over `data`, or over the task's data built once (on the first env device, or the CPU
        for the loader path)."""
        if data is None:
            build_on = settings.env_devices[0] if settings.data_path == "device" else torch.device("cpu")
            data = load_task_data(task, build_on, data_root=settings.data_root, data_seed=settings.data_seed,
                                  synthetic_train_samples=settings.synthetic_train_samples,
                                  synthetic_test_samples=settings.synthetic_test_samples)
        return cls(task, data, settings.env_devices, batch_per_env=settings.batch_size_per_env,
                   max_train_batches=settings.max_train_batches, split=settings.data_split, seed=settings.seed,
                   data_path=settings.data_path, num_workers=settings.num_workers,
                   val_samples=settings.val_samples, val_batch_size=settings.val_batch_size)

    def data_for_env(self, env: int) -> TaskData:
        """The device-path data of an env (shared by envs on the same device)."""
        return self._by_device[self.env_devices[env]]

    def plan(self, batch_idx: int, epoch: int, envs_running: int | None = None) -> EpochPlan:
        """The CPU plan of one epoch (the same on both paths and every device)."""
        return plan_epoch(self.n_train, n_envs=self.n_envs, batch_per_env=self.batch_per_env, split=self.split,
                          max_batches=self.max_batches, seed=self.seed, batch_idx=batch_idx, epoch=epoch,
                          envs_running=envs_running, pad=self.pad if self.kind == "classification" else None)

    def train_epoch(self, batch_idx: int, epoch: int, envs_running: int | None = None) -> Iterator[list[Batch]]:
        """For each training step, one (x, y) per running env, on that env's device."""
        plan = self.plan(batch_idx, epoch, envs_running)
        if self.data_path == "loader":
            yield from self._loader.epoch(plan)
            return
        running = range(plan.num_envs)
        on_device = {d: plan.to(d) for d in dict.fromkeys(self.env_devices[i] for i in running)}
        for step in range(plan.num_steps):
            yield [train_batch(self.data_for_env(i), on_device[self.env_devices[i]], i, step) for i in running]

    def val_batches(self, env: int) -> Iterator[Batch]:
        """The fixed validation set (first n_val test samples, in order) on env's device."""
        if self.data_path == "loader":
            return self._loader.validation(self.val_samples, self.val_batch_size, self.env_devices[env])
        return val_batches(self.data_for_env(env), self.val_samples, self.val_batch_size)


# ------------------------------------------------------------------------------------------
# the loader path
# ------------------------------------------------------------------------------------------


class _KeyedDataset(Dataset):
    """Item `(index, dy, dx, flip)` -> (sample, target, crop, flip); LM items are whole blocks."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor | None) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, key):
        index, dy, dx, flip = key
        target = self.x[index] if self.y is None else self.y[index]
        return self.x[index], target, (dy, dx), flip


class _AugmentCollate:
    """Runs in the workers: stack a step's samples and apply the plan's crop and flip."""

    def __init__(self, pad_value: torch.Tensor | None) -> None:
        self.pad_value = pad_value

    def __call__(self, items):
        x = torch.stack([item[0] for item in items])
        target = torch.stack([torch.as_tensor(item[1]) for item in items])
        if self.pad_value is None or items[0][2][0] < 0:
            return (image_layout(x) if x.dim() == 4 else x), target
        crops = torch.tensor([item[2] for item in items], dtype=torch.int64)
        flips = torch.tensor([item[3] for item in items], dtype=torch.bool)
        return augment_batch(x, crops, flips, self.pad_value), target


class _PlanSampler:
    """Batch sampler over one epoch plan: batch k holds every running env's slice of step k."""

    def __init__(self) -> None:
        self.plan: EpochPlan | None = None

    def __iter__(self):
        plan = self.plan
        for step in range(plan.num_steps):
            idx = plan.indices[:, step].reshape(-1).tolist()
            if plan.crops is None:
                yield [(i, -1, -1, False) for i in idx]
                continue
            crops = plan.crops[:, step].reshape(-1, 2).tolist()
            flips = plan.flips[:, step].reshape(-1).tolist()
            yield [(i, c[0], c[1], f) for i, c, f in zip(idx, crops, flips)]

    def __len__(self) -> int:
        return 0 if self.plan is None else self.plan.num_steps


class _PlanLoader:
    def __init__(self, data: TaskData, env_devices: list[torch.device], num_workers: int) -> None:
        self.data, self.env_devices, self.num_workers = data, env_devices, num_workers
        self.sampler = _PlanSampler()
        self.pin = any(d.type == "cuda" for d in env_devices)
        self.train_loader = DataLoader(
            _KeyedDataset(data.x_train, data.y_train), batch_sampler=self.sampler,
            collate_fn=_AugmentCollate(data.pad_value), num_workers=num_workers, pin_memory=self.pin,
            persistent_workers=num_workers > 0, multiprocessing_context=_worker_context(num_workers),
        )

    def _split(self, x: torch.Tensor, target: torch.Tensor, env: int, bpe: int) -> Batch:
        device = self.env_devices[env]
        xs = x[env * bpe : (env + 1) * bpe].to(device, non_blocking=True)
        ts = target[env * bpe : (env + 1) * bpe].to(device, non_blocking=True)
        if self.data.kind == "lm":
            return xs[:, :-1], xs[:, 1:].long()
        return xs, ts

    def epoch(self, plan: EpochPlan) -> Iterator[list[Batch]]:
        self.sampler.plan = plan
        bpe = plan.indices.shape[2]
        for x, target in self.train_loader:
            yield [self._split(x, target, env, bpe) for env in range(plan.num_envs)]

    def validation(self, val_samples: int | None, batch_size: int, device: torch.device) -> Iterator[Batch]:
        n = val_size(self.data, val_samples)
        x = self.data.x_test[:n]
        target = x if self.data.y_test is None else self.data.y_test[:n]
        loader = DataLoader(torch.utils.data.TensorDataset(x, target), batch_size=batch_size, shuffle=False,
                            num_workers=0, pin_memory=self.pin)
        for xb, tb in loader:
            xb = (image_layout(xb) if xb.dim() == 4 else xb).to(device, non_blocking=True)
            if self.data.kind == "lm":
                yield xb[:, :-1], xb[:, 1:].long()
            else:
                yield xb, tb.to(device, non_blocking=True)


def _worker_context(num_workers: int) -> str | None:
    """Forked workers can deadlock once a multithreaded runtime such as JAX is loaded in the process
    (the loop imports it); start them from a clean forkserver then. Pure-torch programs keep fork."""
    if num_workers > 0 and "jax" in sys.modules:
        return "forkserver"
    return None


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


def build_pool_data(settings: PoolSettings, task: TaskSpec, data=None) -> PoolData:
    """PoolData over a pre-built DataFeed (checked against the settings), a TaskData (wrapped in a feed with
    the settings), or a feed built from the settings (data=None)."""
    if isinstance(data, PoolData):
        data = data.feed
    if data is None or isinstance(data, TaskData):
        data = DataFeed.from_settings(settings, task, data)
    if not isinstance(data, DataFeed):
        raise TypeError(f"data must be a DataFeed, a TaskData or None (got {type(data).__name__})")
    _check_feed(data, settings)
    return PoolData(data)


def _check_feed(feed: DataFeed, settings: PoolSettings) -> None:
    if feed.seed != settings.seed:
        raise ValueError(f"the DataFeed was built with seed {feed.seed}, the pool's settings have seed "
                         f"{settings.seed}")
    if list(feed.env_devices) != list(settings.env_devices):
        raise ValueError(f"the DataFeed serves env devices {[str(d) for d in feed.env_devices]}, the pool "
                         f"needs {[str(d) for d in settings.env_devices]} (one per env, n_envs={settings.n_envs})")
