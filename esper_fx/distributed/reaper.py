"""The reaper of a local Ray that a run started: if the driver dies without shutting Ray down (SIGKILL,
the out-of-memory killer), it kills the processes the driver left.

Ray's daemons and workers are the driver's descendants; its `ray.shutdown()` stops them, and Ctrl-C or
SIGTERM reach that shutdown. SIGKILL does not: the daemons notice and exit, but two agents under the raylet
(`ray::DashboardAgent`, `ray::RuntimeEnvAgent`) were still alive a minute later. So `RaySession.open`
starts this script just before it starts a local Ray it owns (`start`): every `POLL_S` it records the
driver's descendants that started after the reaper did (pid and start time, from /proc: Ray's, not
what the driver ran before), and once the driver is gone it sends SIGKILL to every recorded process that
is still the same process (its start time unchanged: a reused pid is left alone), then exits. `RaySession.close` stops it after its own shutdown (`stop`). Linux only (/proc): elsewhere
`start` returns None and nothing changes. Standard library only, run as a script: it starts in a few
milliseconds without importing the package.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Iterable, Mapping

POLL_S = 0.5

Process = tuple[int, int]  # (pid, start time in clock ticks since boot): one process, never a reused pid


def process_table(proc: str = "/proc") -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every live, non-zombie process."""
    out = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":  # state, then ppid; the start time is field 22 of stat, 20 after the name
            out[int(name)] = (int(fields[1]), int(fields[19]))
    return out


def descendants(root: int, table: Mapping[int, tuple[int, int]], exclude: Iterable[int] = ()) -> set[Process]:
    """Every process below `root` in `table` (pid -> (parent, start time)), leaving out the subtrees of
    `exclude`."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    skip = set(exclude)
    out, stack = set(), list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid in skip:
            continue
        out.add((pid, table[pid][1]))
        stack.extend(children.get(pid, ()))
    return out


def still_running(processes: Iterable[Process], table: Mapping[int, tuple[int, int]]) -> list[int]:
    """The pids of `processes` that are the same processes now (alive, the same start time)."""
    return sorted(pid for pid, started in processes if pid in table and table[pid][1] == started)


def watch(driver: int, poll_s: float = POLL_S) -> list[int]:
    """Record the driver's descendants that started no earlier than this process until the driver is gone,
    then SIGKILL those still running; the pids killed."""
    me = os.getpid()
    table = process_table()
    born, driver_born = table[me][1], table.get(driver, (0, None))[1]
    seen: set[Process] = set()
    while driver in table and table[driver][1] == driver_born:
        seen |= {p for p in descendants(driver, table, exclude=[me]) if p[1] >= born}
        time.sleep(poll_s)
        table = process_table()
    # the orphans that appeared after the last look hang under the recorded ones (or under init)
    table = process_table()
    seen |= {p for pid, _ in seen for p in descendants(pid, table, exclude=[me])}
    killed = still_running(seen, table)
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return killed


def start(driver: int | None = None) -> subprocess.Popen | None:
    """This script watching `driver` (default: this process), or None where /proc is missing."""
    if not os.path.isdir("/proc/self"):
        return None
    return subprocess.Popen([sys.executable, "-S", os.path.abspath(__file__), str(driver or os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(reaper: subprocess.Popen | None) -> None:
    """Stop a reaper whose driver shut Ray down itself."""
    if reaper is not None and reaper.poll() is None:
        reaper.kill()
        reaper.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the driver's to handle
    watch(int(sys.argv[1]))
