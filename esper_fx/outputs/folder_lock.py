"""A folder held by one process at a time: an flock()ed `.lock` file that names its holder.

    lock = FolderLock.take(folder)     # FolderInUse (one line naming the holder) when another process holds it
    holder_of(folder)                  # who holds it now, or None (probed without writing)
    ...
    lock.release()                     # also when the process ends, however it ends (the kernel drops the flock)

The lock file records who holds it (pid, host, start time, command) so that a refusal names the holder; the
record is only read for that message, never trusted for the lock itself: a stale record of a process that
died leaves the file unlocked, and the next process takes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from esper_fx.errors import RunDirectoryError

LOCK_NAME = ".lock"


class FolderInUse(RunDirectoryError):
    """Another process holds the folder's lock; the message names it."""


@dataclass
class FolderLock:
    path: Path
    _file: IO[bytes] | None

    @classmethod
    def take(cls, folder: str | os.PathLike, what: str = "folder") -> "FolderLock":
        """Lock `folder`/.lock (created if missing) for this process and record this process in it; a folder
        held by another process raises FolderInUse naming its holder (`what`: how the message names the
        folder, e.g. "prove output folder")."""
        path = Path(folder) / LOCK_NAME
        fh = open(path, "a+b")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise FolderInUse(f"{what} {Path(folder)} is in use by {holder(path)} (its {LOCK_NAME} is locked): "
                              f"wait for it to finish, or stop it") from None
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                 "command": sys.argv}).encode("utf-8"))
            fh.flush()
        except OSError:  # a full disk: the lock holds all the same, its record is only for messages
            pass
        return cls(path, fh)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the flock
            self._file = None


def holder_of(folder: str | os.PathLike) -> str | None:
    """Who holds `folder`'s lock (`holder`), or None when nobody does (probed without writing anything)."""
    path = Path(folder) / LOCK_NAME
    try:
        fh = open(path, "rb")
    except OSError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return holder(path)
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def holder(path: Path) -> str:
    """'process 123 on host h since 2026-12-02T05:00:00Z', read from a lock file's record ('another process'
    when it holds none)."""
    try:
        record: Any = json.loads(path.read_text(encoding="utf-8"))
        return f"process {int(record['pid'])} on {record['host']} since {record['since_utc']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"
