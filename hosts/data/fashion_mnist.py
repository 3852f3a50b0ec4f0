"""Fashion-MNIST from its four official IDX files (60,000 training and 10,000 test 28×28 grey images).

The files are looked for in the data root itself, then in `<data_root>/fashion-mnist`, each plain or
gzipped (`train-images-idx3-ubyte` or `train-images-idx3-ubyte.gz`, ...). The task's default data root
is where Debian's and Ubuntu's `dataset-fashion-mnist` package installs them
(`esper_fx.contracts.tasks.FASHION_MNIST_DATA_ROOT`): a data root of None, or the run's default `./data`
when it does not hold the files, means that folder. An explicit other root is the only place looked in. Reading is strict (`hosts.data.idx`): images must be
uint8 [N, 28, 28], labels uint8 [N] in 0..9, and each pair must agree on N. A missing root or file
raises `DatasetUnavailableError` naming the package and `--data-dir`; a malformed file raises it naming
the file and the fault.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from esper_fx.contracts.tasks import DEFAULT_DATA_ROOT, FASHION_MNIST_DATA_ROOT, FASHION_MNIST_PACKAGE
from hosts.data.external import DatasetUnavailableError
from hosts.data.idx import IdxFormatError, read_idx

SPLIT_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
SUBDIR = "fashion-mnist"
IMAGE_SIDE = 28
NUM_CLASSES = 10
MEAN = (0.2860,)  # the training images' pixel mean and standard deviation (x/255)
STD = (0.3530,)


def _unavailable(root: Path, reason: str) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"Fashion-MNIST is not available under data_root {str(root)!r} ({reason}): install it with "
        f"'apt-get install {FASHION_MNIST_PACKAGE}' (files in {FASHION_MNIST_DATA_ROOT}), or pass --data-dir DIR "
        f"holding {', '.join(f for pair in SPLIT_FILES.values() for f in pair)} (each may end in .gz)"
    )


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _is_default(data_root: str | Path | None) -> bool:
    return data_root is None or Path(data_root) == Path(DEFAULT_DATA_ROOT)


def find_files(data_root: str | Path | None) -> dict[str, tuple[Path, Path]]:
    """split -> (images file, labels file) in the first folder holding all four; the error otherwise."""
    if _is_default(data_root):
        given = None if data_root is None else Path(data_root)
        if given is not None and given.is_dir():
            try:
                return _find_in(given)
            except DatasetUnavailableError:
                pass
        return _find_in(Path(FASHION_MNIST_DATA_ROOT))
    return _find_in(Path(data_root))


def _find_in(root: Path) -> dict[str, tuple[Path, Path]]:
    if not root.exists():
        raise _unavailable(root, "no such directory")
    if not root.is_dir():
        raise _unavailable(root, "not a directory")
    for folder in (root, root / SUBDIR):
        found = {split: tuple(_find(folder, stem) for stem in stems) for split, stems in SPLIT_FILES.items()}
        if all(p is not None for pair in found.values() for p in pair):
            return found
    present = [p.name for p in sorted(root.iterdir())][:8] if root.is_dir() else []
    raise _unavailable(root, f"the four IDX files are in neither {str(root)!r} nor {str(root / SUBDIR)!r}; "
                             f"it holds {present or 'nothing'}")


def read_split(images_path: Path, labels_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 [N, 28, 28], int64 [N]) of one split; IdxFormatError naming the faulty file."""
    images = read_idx(images_path, dtype="ubyte", ndim=3)
    if images.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        raise IdxFormatError(f"{images_path}: images of {images.shape[1]}x{images.shape[2]} pixels, "
                             f"expected {IMAGE_SIDE}x{IMAGE_SIDE}")
    labels = read_idx(labels_path, dtype="ubyte", ndim=1)
    if labels.shape[0] != images.shape[0]:
        raise IdxFormatError(f"{labels_path}: {labels.shape[0]} labels for the {images.shape[0]} images of "
                             f"{images_path.name}")
    if images.shape[0] == 0:
        raise IdxFormatError(f"{images_path}: holds no images")
    if labels.max() >= NUM_CLASSES:
        raise IdxFormatError(f"{labels_path}: label {int(labels.max())} outside 0..{NUM_CLASSES - 1}")
    return images, labels.astype(np.int64)


def load_fashion_mnist(data_root: str | Path | None = None):
    """(x_train uint8 [N,1,28,28], y_train int64, x_test, y_test) as CPU tensors; DatasetUnavailableError
    (a FileNotFoundError) when missing or malformed, its message naming the file and what is wrong."""
    files = find_files(data_root)
    out = []
    for split in ("train", "test"):
        try:
            images, labels = read_split(*files[split])
        except IdxFormatError as exc:
            raise DatasetUnavailableError(f"Fashion-MNIST file is malformed: {exc}") from None
        out += [torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels)]
    return tuple(out)
