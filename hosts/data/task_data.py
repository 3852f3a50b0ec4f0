"""Device-resident task data and the per-epoch batch streams of both data paths (BEHAVIOUR §6.2–§6.4).

- `TaskData`: the train/test tensors of a task on one device. Images are normalised float32
  [N,C,H,W] (3×32×32; 3×16×16 for shapes16; 1×28×28 for fashion_mnist) with int64 labels, stored channels_last: the training images
  as a view of their pixel table (`hosts.data.batching.pixel_table`, one extra padding pixel), which the
  augmentation gathers from; LM data are int32 token blocks [N, T+1] (x = block[:, :T], y = block[:, 1:],
  with no separate label tensor).
- `load_task_data(task, device, ...)` builds it (shapes10 and shapes16 are generated on the CPU, then moved).
- `train_batch(data, plan, env, step)` -> (x, y) of one env's training step under an epoch plan
  (hosts.data.batching), augmented on the device; `val_batches(...)` iterates the fixed validation set.
  Targets are always int64 (labels, or LM next tokens); LM inputs stay int32.
- `DataFeed`: one run's data for every env on both paths ("device" and "loader").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import torch

from hosts.data import external, fashion_mnist, pytext, shapes10
from hosts.data.batching import EpochPlan, gather_augmented, pixel_table, table_images
from hosts.layout import image_layout
from esper_fx.contracts.tasks import task_data_name
from hosts.tasks import TaskSpec

SHAPES10_PAD = 0.0  # shapes10 is normalised to zero mean: its black padding is 0.0 (BEHAVIOUR §6.4)
SHAPES_KNOBS = {"shapes10": shapes10.DEFAULT_KNOBS, "shapes16": shapes10.SHAPES16_KNOBS}  # generated tasks


@dataclass(frozen=True)
class TaskData:
    """Images may be given in any layout: a classification TaskData stores them channels_last, the
    training images inside `train_pixels` (built here unless given, with x_train its view)."""

    kind: str  # "classification" | "lm"
    x_train: torch.Tensor
    y_train: torch.Tensor | None
    x_test: torch.Tensor
    y_test: torch.Tensor | None
    pad_value: torch.Tensor | None = None  # [C] float32 on the device; None for LM
    train_pixels: torch.Tensor | None = None  # [N·H·W + 1, C]: x_train's pixels, then pad_value

    def __post_init__(self) -> None:
        if self.kind != "classification" or self.train_pixels is not None:
            return
        if self.pad_value is None:
            raise ValueError("classification TaskData needs pad_value (the per-channel padding of augmentation)")
        table = pixel_table(self.x_train, self.pad_value.to(self.x_train.dtype))
        object.__setattr__(self, "train_pixels", table)
        object.__setattr__(self, "x_train", table_images(table, tuple(self.x_train.shape)))
        object.__setattr__(self, "x_test", image_layout(self.x_test))

    @property
    def device(self) -> torch.device:
        return self.x_train.device

    @property
    def augment(self) -> bool:
        return self.kind == "classification"

    @property
    def n_train(self) -> int:
        return self.x_train.shape[0]

    @property
    def n_test(self) -> int:
        return self.x_test.shape[0]

    def to(self, device: torch.device | str) -> "TaskData":
        device = torch.device(device)
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        if self.train_pixels is None:
            return replace(self, x_train=move(self.x_train), y_train=move(self.y_train), x_test=move(self.x_test),
                           y_test=move(self.y_test), pad_value=move(self.pad_value))
        pixels = move(self.train_pixels)
        return replace(self, x_train=table_images(pixels, tuple(self.x_train.shape)), train_pixels=pixels,
                       y_train=move(self.y_train), x_test=move(self.x_test), y_test=move(self.y_test),
                       pad_value=move(self.pad_value))


# ------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------


def _classification(device, x_train, y_train, x_test, y_test, pad_value) -> TaskData:
    return TaskData("classification", x_train, y_train.to(device), x_test, y_test.to(device),
                    pad_value.to(device=device, dtype=torch.float32))


def _lm(device, train_blocks: torch.Tensor, val_blocks: torch.Tensor) -> TaskData:
    return TaskData("lm", train_blocks.to(device), None, val_blocks.to(device), None)


def load_task_data(
    task: TaskSpec,
    device: torch.device | str,
    *,
    data_root: str | Path | None = None,
    data_seed: int | None = None,
    synthetic_train_samples: int | None = None,
    synthetic_test_samples: int | None = None,
    download: bool = True,
    max_samples: int | None = None,
) -> TaskData:
    """The task's data on `device`. Raises external.DatasetUnavailableError for a missing dataset.

    A setting left None takes the dataset's own default (shapes10: `shapes10.generate`'s sizes and seed);
    the on-disk datasets (CIFAR-10, TinyStories) need `data_root`; Fashion-MNIST's None is its Debian package's
    folder. A run passes every value explicitly.
    """
    device = torch.device(device)
    name = task_data_name(task.name)  # (a host variant reads another task's data)
    if name in SHAPES_KNOBS:
        sizes = {"n_train": synthetic_train_samples, "n_test": synthetic_test_samples, "data_seed": data_seed}
        x_tr, y_tr, x_te, y_te = shapes10.generate(**{k: v for k, v in sizes.items() if v is not None},
                                                   device=device, knobs=SHAPES_KNOBS[name])
        return _classification(device, x_tr, y_tr, x_te, y_te, torch.full((3,), SHAPES10_PAD))
    images = read_image_files(task, data_root, download=download)
    if images is not None:
        (x_tr, y_tr, x_te, y_te), norm = images
        return _classification(device, external.normalize_images(x_tr, device, **norm), y_tr,
                               external.normalize_images(x_te, device, **norm), y_te,
                               external.normalized_black(**norm))
    if name == "pytext":
        return _lm(device, *pytext.build_pytext())
    if name == "tinystories":
        return _lm(device, *external.load_tinystories(_disk_root(task, data_root), max_samples))
    raise ValueError(f"no data loader for task {task.name!r}")


def read_image_files(task: TaskSpec, data_root: str | Path | None, *, download: bool = True):
    """((x_train, y_train, x_test, y_test) as uint8 / int64 CPU tensors, the normalisation's mean and std) of
    a task whose images are files on disk (CIFAR-10, Fashion-MNIST), read strictly: the errors
    `load_task_data` raises for them (a missing root, a malformed file), without building anything on a
    device. None for any other task. A driver reads them here before Ray env workers start."""
    name = task_data_name(task.name)
    if name in ("cifar10", "cifar10_deep"):
        return external.load_cifar10(_disk_root(task, data_root), download=download), {}
    if name == "fashion_mnist":
        return fashion_mnist.load_fashion_mnist(data_root), dict(mean=fashion_mnist.MEAN, std=fashion_mnist.STD)
    return None


def _disk_root(task: TaskSpec, data_root: str | Path | None) -> str | Path:
    if data_root is None:
        raise ValueError(f"task {task.name!r} reads its dataset from disk: pass data_root")
    return data_root


# ------------------------------------------------------------------------------------------
# batches
# ------------------------------------------------------------------------------------------


def _split_item(data: TaskData, x: torch.Tensor, y: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if data.kind == "lm":
        return x[:, :-1], x[:, 1:].long()
    return x, y


def train_batch(data: TaskData, plan: EpochPlan, env: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Env `env`'s batch at training step `step` (plan on data's device); augmented images or LM x/y."""
    idx = plan.indices[env, step]
    if data.kind == "lm":
        return _split_item(data, data.x_train[idx], None)
    if plan.crops is None:
        return data.x_train[idx], data.y_train[idx]
    x = gather_augmented(data.train_pixels, tuple(data.x_train.shape[1:]), idx, plan.crops[env, step],
                         plan.flips[env, step])
    return x, data.y_train[idx]


def val_size(data: TaskData, val_samples: int | None) -> int:
    """The fixed validation set's size: the whole test split, or its first val_samples samples."""
    return data.n_test if val_samples is None else min(val_samples, data.n_test)


def val_batches(
    data: TaskData, val_samples: int | None, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed validation set in order, in chunks of batch_size (the last partial chunk kept)."""
    if batch_size < 1:
        raise ValueError(f"val_batch_size must be >= 1 (got {batch_size})")
    n = val_size(data, val_samples)
    for start in range(0, n, batch_size):
        stop = min(start + batch_size, n)
        y = None if data.y_test is None else data.y_test[start:stop]
        yield _split_item(data, data.x_test[start:stop], y)
