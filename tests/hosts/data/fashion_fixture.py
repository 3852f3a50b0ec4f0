"""Small Fashion-MNIST-format IDX files for tests: good ones, and each way a file can be broken."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from hosts.data.fashion_mnist import SPLIT_FILES
from hosts.data.idx import idx_bytes


def fashion_arrays(n_train: int = 12, n_test: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """stem -> array of the four files (random pixels, labels cycling through 0..9)."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images, labels = SPLIT_FILES[split]
        out[images] = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        out[labels] = (np.arange(n) % 10).astype(np.uint8)
    return out


def write_fashion_fixture(folder: Path, *, gz: bool = False, arrays: dict[str, np.ndarray] | None = None,
                          raw: dict[str, bytes] | None = None) -> dict[str, np.ndarray]:
    """Write the four files into folder (gzipped when gz); `raw` replaces a stem's bytes as given."""
    folder.mkdir(parents=True, exist_ok=True)
    arrays = fashion_arrays() if arrays is None else arrays
    for stem, array in arrays.items():
        data = (raw or {}).get(stem, idx_bytes(array))
        if gz:
            (folder / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / stem).write_bytes(data)
    return arrays
