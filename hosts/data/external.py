"""Datasets that live outside the interpreter: CIFAR-10 (BEHAVIOUR §6.2) and TinyStories (§6.5).

A dataset that cannot be loaded raises `DatasetUnavailableError` (a FileNotFoundError) naming the
dataset, where it was looked for, what to install or download, and the offline task to use
instead. **[fix]** The reference silently fell back to random mock data.

CIFAR-10 is read from the torchvision on-disk format (`<data_root>/cifar-10-batches-py`, Python
pickles) with a restricted unpickler that admits numpy arrays only: a planted file cannot run code, and a
malformed one is the clear unreadable-dataset error. When the directory is absent and download is
allowed, torchvision's CIFAR10 (the `cifar` extra) downloads and verifies it first (a failed attempt
leaves nothing behind). TinyStories needs the `text` extra (tiktoken, datasets); its windowing is the
pure function `chunk_tokens`, testable without either package.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

CIFAR_DIR = "cifar-10-batches-py"
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_FILES = ("test_batch",)
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)

GPT2_EOS = 50256
TINYSTORIES_DATASET = "roneneldan/TinyStories"
TINYSTORIES_WINDOW = 257
TINYSTORIES_STRIDE = 256


class DatasetUnavailableError(FileNotFoundError):
    """A dataset (or the extra that loads it) is missing; the message says what to do."""


# ------------------------------------------------------------------------------------------
# CIFAR-10
# ------------------------------------------------------------------------------------------


def _cifar_missing(root: Path, reason: str) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"CIFAR-10 is not available under data_root {str(root)!r} ({reason}). Expected the torchvision "
        f"files in {str(root / CIFAR_DIR)!r}: download them with network access "
        f"(pip install -e '.[cifar]', then torchvision.datasets.CIFAR10(root={str(root)!r}, download=True)), "
        f"or use the offline task "
        f"'shapes10' (--task shapes10), which needs no download."
    )


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 batch file and nothing else: only numpy's array reconstruction may be named,
    so a planted pickle cannot run code (it fails with UnpicklingError instead)."""

    ALLOWED = frozenset({
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 spell a bytes object
    })

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a CIFAR-10 batch file")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N,3,32,32], labels int64 [N]) of one batch file; ValueError if it is not one."""
    with open(path, "rb") as fh:
        entry = _CifarUnpickler(fh, encoding="latin1").load()
    if not isinstance(entry, dict):
        raise ValueError(f"{path.name} holds a {type(entry).__name__}, not a CIFAR-10 batch")
    entry = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = entry.get("data")
    labels = entry.get("labels", entry.get("fine_labels"))
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"{path.name} has no uint8 'data' array of shape [N, 3072]")
    labels = np.asarray(labels if isinstance(labels, (list, np.ndarray)) else [], dtype=np.int64).reshape(-1)
    if labels.shape[0] != data.shape[0] or not np.all((labels >= 0) & (labels < 10)):
        raise ValueError(f"{path.name} has no 'labels' list of {data.shape[0]} classes in 0..9")
    return data.reshape(-1, 3, 32, 32), labels


def _read_cifar_batches(folder: Path, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    parts = [_read_cifar_batch(folder / name) for name in names]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _download_cifar(root: Path) -> None:
    from torchvision.datasets import CIFAR10

    for train in (True, False):
        CIFAR10(str(root), train=train, download=True)


def _download_or_explain(root: Path) -> None:
    """Download CIFAR-10 into root; on failure remove what the attempt created and raise the clear error."""
    created = None if root.exists() else root
    try:
        _download_cifar(root)
    except Exception as exc:  # network, disk or integrity failure: all mean "not available"
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise _cifar_missing(root, f"download failed: {type(exc).__name__}: {exc}") from exc


def load_cifar10(data_root: str | Path, download: bool = True):
    """(x_train uint8 [50000,3,32,32], y_train int64, x_test uint8, y_test int64) as CPU tensors."""
    root = Path(data_root)
    folder = root / CIFAR_DIR
    if root.exists() and not root.is_dir():
        raise _cifar_missing(root, "data_root is not a directory")
    files = CIFAR_TRAIN_FILES + CIFAR_TEST_FILES
    if not all((folder / f).is_file() for f in files):
        if not download:
            raise _cifar_missing(root, "files missing and download disabled")
        _download_or_explain(root)
    try:
        x_train, y_train = _read_cifar_batches(folder, CIFAR_TRAIN_FILES)
        x_test, y_test = _read_cifar_batches(folder, CIFAR_TEST_FILES)
    except (OSError, pickle.UnpicklingError, KeyError, ValueError, EOFError, TypeError, AttributeError,
            IndexError, MemoryError) as exc:
        raise _cifar_missing(root, f"unreadable files: {type(exc).__name__}: {exc}") from exc
    return tuple(torch.from_numpy(a) for a in (x_train, y_train, x_test, y_test))


def normalize_images(images_u8: torch.Tensor, device: torch.device, mean=CIFAR_MEAN, std=CIFAR_STD) -> torch.Tensor:
    """uint8 [N,3,H,W] -> float32 (x/255 − mean_c)/std_c on `device` (converted there)."""
    x = images_u8.to(device).float().div_(255.0)
    m = torch.tensor(mean, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=device).view(1, -1, 1, 1)
    return x.sub_(m).div_(s)


def normalized_black(mean=CIFAR_MEAN, std=CIFAR_STD) -> torch.Tensor:
    """The per-channel padding value −mean_c/std_c (float32 [3])."""
    return -torch.tensor(mean) / torch.tensor(std)


# ------------------------------------------------------------------------------------------
# TinyStories
# ------------------------------------------------------------------------------------------


def chunk_tokens(
    tokens: Sequence[int], window: int = TINYSTORIES_WINDOW, stride: int = TINYSTORIES_STRIDE, pad: int = GPT2_EOS
) -> list[list[int]]:
    """Windows of `window` tokens every `stride`; chunks < 2 tokens skipped, short ones right-padded."""
    chunks = []
    for start in range(0, len(tokens), stride):
        chunk = list(tokens[start : start + window])
        if len(chunk) < 2:
            continue
        chunks.append(chunk + [pad] * (window - len(chunk)))
    return chunks


def token_blocks(texts: Iterable[str], encode: Callable[[str], Sequence[int]], window=TINYSTORIES_WINDOW,
                 stride=TINYSTORIES_STRIDE, pad=GPT2_EOS) -> torch.Tensor:
    """int32 [n, window] blocks of every text in order (no BOS/EOS added)."""
    blocks = [c for text in texts for c in chunk_tokens(encode(text), window, stride, pad)]
    if not blocks:
        return torch.empty((0, window), dtype=torch.int32)
    return torch.tensor(blocks, dtype=torch.int32)


def _tinystories_missing(what: str, data_root: Path) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"TinyStories is not available: {what}. It needs the 'text' extra (pip install 'esper_fx[text]', "
        f"i.e. tiktoken and datasets) and the Hugging Face dataset {TINYSTORIES_DATASET!r}, cached under "
        f"{str(data_root / 'tinystories')!r} (downloaded on first use with network access). "
        f"The offline language-modelling task is 'pytext' (--task pytext)."
    )


def gpt2_encoder(data_root: Path) -> Callable[[str], list[int]]:
    try:
        import tiktoken
    except ImportError as exc:
        raise _tinystories_missing("the package 'tiktoken' is not installed", data_root) from exc
    try:
        enc = tiktoken.get_encoding("gpt2")
    except Exception as exc:  # the BPE files are fetched on first use
        raise _tinystories_missing(f"the GPT-2 tokenizer could not be loaded ({exc})", data_root) from exc
    return enc.encode_ordinary


def _stories(split: str, data_root: Path, max_samples: int | None) -> list[str]:
    try:
        import datasets
    except ImportError as exc:
        raise _tinystories_missing("the package 'datasets' is not installed", data_root) from exc
    try:
        ds = datasets.load_dataset(TINYSTORIES_DATASET, split=split, cache_dir=str(data_root / "tinystories"))
    except Exception as exc:
        raise _tinystories_missing(f"loading the {split!r} split failed ({type(exc).__name__}: {exc})",
                                   data_root) from exc
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    return list(ds["text"])


def load_tinystories(data_root: str | Path, max_samples: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(train blocks, validation blocks): int32 [n, 257] CPU tensors of GPT-2 tokens."""
    root = Path(data_root)
    if root.exists() and not root.is_dir():
        raise _tinystories_missing("data_root is not a directory", root)
    stories = {split: _stories(split, root, max_samples) for split in ("train", "validation")}
    encode = gpt2_encoder(root)  # after the data: a missing dataset is reported before any tokenizer download
    return token_blocks(stories["train"], encode), token_blocks(stories["validation"], encode)
