"""A tiny CIFAR-10 written in torchvision's on-disk format (cifar-10-batches-py pickles), for tests."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))


def _write_batch(path: Path, data: np.ndarray, labels: np.ndarray) -> None:
    entry = {"batch_label": path.name, "labels": labels.tolist(), "data": data, "filenames": []}
    with open(path, "wb") as fh:
        pickle.dump(entry, fh, protocol=2)


def write_cifar10_fixture(root: Path, per_batch: int = 4, n_test: int = 6, seed: int = 0):
    """Write root/cifar-10-batches-py; returns (train uint8 [5·per_batch,3,32,32], labels, test, labels)."""
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    train = rng.integers(0, 256, size=(5 * per_batch, 3072), dtype=np.uint8)
    train_y = rng.integers(0, 10, size=5 * per_batch)
    test = rng.integers(0, 256, size=(n_test, 3072), dtype=np.uint8)
    test_y = rng.integers(0, 10, size=n_test)
    for i, name in enumerate(TRAIN_FILES):
        part = slice(i * per_batch, (i + 1) * per_batch)
        _write_batch(folder / name, train[part], train_y[part])
    _write_batch(folder / "test_batch", test, test_y)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_cases_per_batch": per_batch}, fh)
    shape = (-1, 3, 32, 32)
    return train.reshape(shape), train_y, test.reshape(shape), test_y
