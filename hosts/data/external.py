"""Datasets that live outside the interpreter: CIFAR-10 (§6.2) and TinyStories (§6.5).

A dataset that cannot be loaded raises `DatasetUnavailableError` (a FileNotFoundError) naming the
dataset, where it was looked for, what to install or download, and the offline task to use
instead. **[fix]** The reference silently fell back to random mock data.

CIFAR-10 is read from the torchvision on-disk format (`<data_root>/cifar-10-batches-py`, Python
pickles). When the directory is absent and download is allowed, torchvision's CIFAR10 downloads and
verifies it first. TinyStories needs the `text` extra (tiktoken, datasets); its windowing is the
pure function `chunk_tokens`, testable without either package.
"""

from __future__ import annotations

import pickle
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
        f"(torchvision.datasets.CIFAR10(root={str(root)!r}, download=True)), or use the offline task "
        f"'shapes10' (--task shapes10), which needs no download."
    )


def _read_cifar_batches(folder: Path, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    images, labels = [], []
    for name in names:
        with open(folder / name, "rb") as fh:
            entry = pickle.load(fh, encoding="latin1")
        images.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(entry.get("labels", entry.get("fine_labels")), dtype=np.int64))
    return np.concatenate(images), np.concatenate(labels)


def _download_cifar(root: Path) -> None:
    from torchvision.datasets import CIFAR10

    for train in (True, False):
        CIFAR10(str(root), train=train, download=True)


def load_cifar10(data_root: str | Path, download: bool = True):
    """(x_train uint8 [50000,3,32,32], y_train int64, x_test uint8, y_test int64) as CPU tensors."""
    root = Path(data_root)
    folder = root / CIFAR_DIR
    files = CIFAR_TRAIN_FILES + CIFAR_TEST_FILES
    if not all((folder / f).is_file() for f in files):
        if not download:
            raise _cifar_missing(root, "files missing and download disabled")
        try:
            _download_cifar(root)
        except Exception as exc:  # network, disk or integrity failure: all mean "not available"
            raise _cifar_missing(root, f"download failed: {type(exc).__name__}: {exc}") from exc
    try:
        x_train, y_train = _read_cifar_batches(folder, CIFAR_TRAIN_FILES)
        x_test, y_test = _read_cifar_batches(folder, CIFAR_TEST_FILES)
    except (OSError, pickle.UnpicklingError, KeyError, ValueError, EOFError) as exc:
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
    encode = gpt2_encoder(root)
    train = token_blocks(_stories("train", root, max_samples), encode)
    val = token_blocks(_stories("validation", root, max_samples), encode)
    return train, val
