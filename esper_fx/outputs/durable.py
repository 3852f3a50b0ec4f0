"""Durable file writes: what a run writes survives a crash or a power cut, whole or not at all.

Every write that must survive is flushed and fsynced, and so is the directory entry that names it: a new
file (`write_durably`), a file replaced whole (`replace_text`: a temporary file, renamed over the old one),
lines appended (`append_text`), a symbolic link swapped (`replace_link`), a finished directory put in
place of an older one (`install_dir`). Checkpoints and the run directory's files both write through here.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (created, renamed or removed names) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """fsync every file under `path`, then every directory."""
    for root, _dirs, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(root))


def write_durably(path: Path, data: bytes) -> None:
    """Write a new file and fsync it."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def replace_text(path: Path, text: str) -> None:
    """Replace `path` by a durable copy of `text`: write a temporary file, fsync, rename, fsync the directory.
    A write that fails (a full disk) leaves `path` as it was and no temporary file; the temporary file's name
    is this write's own, so two processes writing one file never meet in it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write_durably(tmp, text.encode("utf-8"))
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: a new or regular file replaced (`replace_text`); a path that is
    no regular file (a pipe, /dev/stdout) written in place, since replacing it would put a file where it was."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    replace_text(path, text)


def append_text(path: Path, text: str) -> None:
    """Append `text` to `path` and fsync it."""
    with open(path, "a", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def replace_link(link: Path, target_name: str) -> None:
    """Point the symbolic link `link` at `target_name` in one step (a new link renamed over the old one)."""
    tmp = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}")
    os.symlink(target_name, tmp)
    os.replace(tmp, link)
    fsync_dir(link.parent)


def install_dir(tmp: Path, target: Path) -> None:
    """Put the complete directory `tmp` at `target`: the old copy aside, the new one in, fsync, old one deleted."""
    aside = None
    if target.exists():
        aside = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.rename(target, aside)
    os.rename(tmp, target)
    fsync_dir(target.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
