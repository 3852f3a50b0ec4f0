"""pytext: byte-level language modelling over the standard library's own sources (BEHAVIOUR §6.7).

Corpus: every regular *.py file under sysconfig's "stdlib" directory, recursively, skipping any
path with a component named site-packages, dist-packages, test, tests, idlelib or __pycache__.
Files are sorted by relative POSIX path (bytewise); a file is validation iff
crc32(relative path, UTF-8) % 20 == 0. Each split's stream is its files' bytes in order, each
followed by one 0x00; train is truncated to 4 MiB and validation to 32 KiB. Items are chunks of
129 bytes starting every 128 bytes (incomplete chunks dropped): x = chunk[:128], y = chunk[1:].
"""

from __future__ import annotations

import os
import sysconfig
import zlib
from pathlib import Path

import numpy as np
import torch

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"})
TRAIN_BYTES = 4_194_304
VAL_BYTES = 32_768
MIN_TRAIN_BYTES = 1_048_576
SEQ_LEN = 128
VOCAB_SIZE = 256
VAL_MODULUS = 20
SEPARATOR = b"\x00"


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path) -> list[str]:
    """Relative POSIX paths of the corpus's *.py files, sorted bytewise."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            path = Path(dirpath) / name
            if name.endswith(".py") and path.is_file() and not path.is_symlink():
                found.append(path.relative_to(root).as_posix())
    found = [p for p in found if not SKIP_DIRS.intersection(p.split("/"))]
    return sorted(found, key=lambda p: p.encode("utf-8"))


def is_validation(relpath: str) -> bool:
    return zlib.crc32(relpath.encode("utf-8")) % VAL_MODULUS == 0


def split_streams(root: Path) -> tuple[bytes, bytes]:
    """(train stream, validation stream), truncated to 4 MiB and 32 KiB."""
    train, val = bytearray(), bytearray()
    for rel in corpus_files(root):
        target, limit = (val, VAL_BYTES) if is_validation(rel) else (train, TRAIN_BYTES)
        if len(target) >= limit:
            continue
        target += (root / rel).read_bytes() + SEPARATOR
    return bytes(train[:TRAIN_BYTES]), bytes(val[:VAL_BYTES])


def chunk_stream(stream: bytes, seq_len: int = SEQ_LEN) -> torch.Tensor:
    """int32 [n, seq_len + 1] chunks starting every seq_len bytes; the incomplete tail is dropped."""
    data = np.frombuffer(stream, dtype=np.uint8)
    n = (len(data) - 1) // seq_len if len(data) > seq_len else 0
    if n == 0:
        return torch.empty((0, seq_len + 1), dtype=torch.int32)
    starts = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return torch.from_numpy(data[starts].astype(np.int32))


def build_pytext(root: Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(train blocks, val blocks): int32 [n, 129] on the CPU. ValueError if the sources are missing."""
    root = stdlib_dir() if root is None else Path(root)
    train, val = split_streams(root) if root.is_dir() else (b"", b"")
    if len(train) < MIN_TRAIN_BYTES:
        raise ValueError("pytext: standard library sources not found")
    return chunk_stream(train), chunk_stream(val)
