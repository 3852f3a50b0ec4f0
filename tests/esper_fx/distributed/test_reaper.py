"""A local Ray whose driver is killed outright (SIGKILL) leaves nothing running (issue 39): the reaper's
process-table maths, and a real driver killed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from esper_fx.distributed import reaper

REPO = Path(__file__).resolve().parents[3]


@st.composite
def forests(draw):
    """A process table as a random forest: pid i's parent is a smaller pid (0: no parent in the table)."""
    n = draw(st.integers(1, 30))
    parents = [draw(st.integers(0, i - 1)) if i > 1 else 0 for i in range(1, n + 1)]
    return {pid: (parent, 100 + pid) for pid, parent in zip(range(1, n + 1), parents)}


def _below(root, table):
    """Descendants by the definition: p is below root if walking p's parents reaches root."""
    out = set()
    for pid in table:
        p = table[pid][0]
        while p in table and p != root:
            p = table[p][0]
        if p == root and pid != root:
            out.add(pid)
    return out


def _path_meets(pid, root, table, excluded):
    """Whether pid, or a process between it and root, is excluded."""
    while pid != root:
        if pid in excluded:
            return True
        pid = table[pid][0]
    return False


@settings(deadline=None, max_examples=200)
@given(forests(), st.data())
def test_descendants_are_exactly_the_processes_whose_parent_chain_reaches_the_root(table, data):
    root = data.draw(st.sampled_from(sorted(table)))
    excluded = data.draw(st.sets(st.sampled_from(sorted(table)))) - {root}
    got = reaper.descendants(root, table, exclude=excluded)
    expected = {pid for pid in _below(root, table) if not _path_meets(pid, root, table, excluded)}
    assert {pid for pid, _ in got} == expected
    assert all(started == table[pid][1] for pid, started in got)


def test_a_reused_pid_is_not_the_process_recorded():
    now = {10: (1, 500), 11: (1, 77), 12: (1, 90)}
    assert reaper.still_running({(10, 500), (11, 70), (13, 5)}, now) == [10]


def test_the_table_of_this_machine_holds_this_process_under_its_parent():
    table = reaper.process_table()
    assert table[os.getpid()][0] == os.getppid()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert (child.pid, reaper.process_table()[child.pid][1]) in reaper.descendants(os.getpid(),
                                                                                      reaper.process_table())
    finally:
        child.kill()
        child.wait()


DRIVER = textwrap.dedent("""
    import time, ray
    from esper_fx.distributed.runtime import RaySession
    session = RaySession.open(None, 2)

    @ray.remote
    class Worker:
        def ping(self):
            return 1

    workers = [Worker.remote(), Worker.remote()]
    ray.get([w.ping.remote() for w in workers])
    print("ready", flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_a_driver_killed_with_sigkill_leaves_no_ray_process(tmp_path):
    pytest.importorskip("ray")
    (tmp_path / "driver.py").write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py")], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        ray_processes = reaper.descendants(proc.pid, reaper.process_table())
        assert len(ray_processes) >= 4, "Ray's daemons and two workers"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while reaper.still_running(ray_processes, reaper.process_table()) and time.monotonic() < deadline:
            time.sleep(0.25)
        assert reaper.still_running(ray_processes, reaper.process_table()) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
