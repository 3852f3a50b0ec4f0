"""Envs as Ray actors (issue 15), when things go wrong: a worker's exception or data problem reaches the
driver as the in-process error, a stopped run leaves no Ray process, a bad address or a missing Ray is one
line; and a begin sent ahead changes no number. The same runs as in process: test_ray_pool.py."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from esper_fx.training import loop
from esper_fx.distributed.pool import worker_slices
from esper_fx.distributed import reaper
from esper_fx.distributed.runtime import INSTALL_HINT
from esper_fx.cli.train import main
from tests.esper_fx.distributed.ray_runs import SMALL, descendants, small

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]


def test_worker_slices_are_contiguous_and_balanced():
    assert worker_slices(5, 2) == [range(0, 3), range(3, 5)]
    assert worker_slices(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="env_workers"):
        worker_slices(2, 3)


def test_without_ray_env_workers_exit_2_with_the_install_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = main(["--preset", "shapes10_quick", "--env-workers", "2", "--run-dir", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert INSTALL_HINT in err and "--env-workers 2" in err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ImportError, match="a dependency of the default install"):
        loop.build_pool(small(env_workers=2))
    assert INSTALL_HINT in err
    from esper_fx.cli import prove

    code = prove.main(["--env-workers", "2", "--out", str(tmp_path / "p"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and INSTALL_HINT in err
    assert not (tmp_path / "p").exists()


def test_the_command_line_sets_env_workers_and_ray_address():
    from esper_fx.cli.train import resolve_config

    config, _ = resolve_config(["--n-envs", "4", "--env-workers", "2", "--ray-address", "auto", "--run-dir", "x"])
    assert (config.env_workers, config.ray_address) == (2, "auto")
    with pytest.raises(ValueError, match="env_workers must be <= 4"):
        resolve_config(["--n-envs", "4", "--env-workers", "5", "--run-dir", "x"])


def _alive(processes: set[tuple[int, int]]) -> list[int]:
    """The pids of `processes` still running (the same processes: a reused pid does not count)."""
    return reaper.still_running(processes, reaper.process_table())


@pytest.mark.slow
@pytest.mark.parametrize("signum, group, code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-to-the-process-group", "sigterm-to-the-driver"])
def test_a_stopped_ray_run_checkpoints_and_leaves_no_ray_process(tmp_path, signum, group, code):
    """A terminal's Ctrl-C reaches the whole process group (the driver and Ray's processes); a scheduler's
    SIGTERM only the driver."""
    config = {k: v for k, v in SMALL.items() if k != "device"} | {"device": "cpu", "n_envs": 2, "n_episodes": 2000}
    (tmp_path / "c.json").write_text(json.dumps(config))
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "esper_fx.train", "--config", str(tmp_path / "c.json"),
                             "--env-workers", "2", "--run-dir", str(run_dir), "--quiet"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list((run_dir / "checkpoints").glob("batch-*")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        ray_processes = descendants(proc.pid)
        assert ray_processes, "the run started no Ray process"
        (os.killpg if group else os.kill)(proc.pid, signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, err
    assert "Checkpoint written" in err
    deadline = time.monotonic() + 15
    while _alive(ray_processes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(ray_processes) == []


def test_workers_share_the_gpus_so_that_every_one_is_placed():
    from esper_fx.errors import DeviceUnavailableError
    from esper_fx.distributed.pool import gpu_share

    assert [gpu_share(g, w) for g, w in ((4, 2), (2, 2), (1, 2), (2, 4), (3, 4), (2, 3))] == [1, 1, 0.5, 0.5, 0.5, 0.5]
    with pytest.raises(DeviceUnavailableError, match="no GPU"):
        gpu_share(0, 2)


@pytest.mark.parametrize("address, needle", [
    ("head node", "is not a Ray address"), ("10.0.0.1", "is not a Ray address"), ("10.0.0.1:0", "is not a Ray"),
    ("ray://:6379", "is not a Ray address"), ("127.0.0.1:1", "no Ray cluster reachable"),
    ("ray://127.0.0.1:1", "no Ray cluster reachable"), ("no-such-host.invalid:6379", "no Ray cluster reachable"),
])
def test_a_bad_ray_address_fails_fast_with_one_line_before_ray_is_asked(address, needle):
    """Issue 22: a bad --ray-address took 24 s and 20 lines of Ray logging before its one line."""
    from esper_fx.distributed.runtime import RayAddressError, check_ray_address

    started = time.perf_counter()
    with pytest.raises(RayAddressError, match=needle) as info:
        check_ray_address(address, timeout_s=1.0)
    assert time.perf_counter() - started < 5 and "\n" not in str(info.value)
    check_ray_address(None)
    check_ray_address("auto")


def test_prove_refuses_an_unreachable_ray_address_with_one_line(tmp_path, capsys, monkeypatch):
    from esper_fx import prove

    monkeypatch.chdir(tmp_path)
    assert prove.main(["--env-workers", "1", "--ray-address", "127.0.0.1:1", "--set", "n_envs=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "127.0.0.1:1" in err[0] and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# one local Ray for the rest of the file, started by the test itself (left running by the pool)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init installs its own handler: put ours back after
    with warnings.catch_warnings():  # Ray's fork+exec of its daemons
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
    yield
    ray.shutdown()
    signal.signal(signal.SIGTERM, sigterm)


def test_a_worker_exception_reaches_the_driver_with_its_traceback(local_ray):
    from esper_fx.distributed.pool import EnvWorkerError, RayEnvPool

    with RayEnvPool(small(n_envs=2, env_workers=2, max_epochs=2)) as pool:
        signals = pool.begin(0, 2)
        assert signals["obs"].shape[0] == 2
        with pytest.raises(EnvWorkerError) as info:
            pool.step(np.array([[0, 0, 0, 0, 1], [0, 0, 0, 99, 1]], dtype=np.int32))
    message = str(info.value)
    assert message.startswith("env worker 1 (envs 1–1) raised ValueError: env 1: op index 99 is outside [0, 4)")
    assert "the worker's traceback:" in message and 'hosts/env/actions.py", line' in message
    assert "in decode_actions" in message and "\x1b[" not in message
    assert isinstance(info.value.__cause__, ValueError)
    assert ray.is_initialized()  # a Ray the caller started is left running


def test_a_data_problem_in_a_worker_or_task_is_the_in_process_line(local_ray):
    """Issue 39, item 2: a worker whose data did not fit died in its creation task ("env worker 0 died: The
    actor died because of an error raised in its creation task ...", exit 1, colour codes, cut before the
    problem) and an evaluation task raised a 72-line traceback. Both now raise the in-process DataError."""
    from esper_fx.distributed.pool import RayEnvPool
    from esper_fx.errors import DataError
    from esper_fx.evaluation.episodes import Arm
    from esper_fx.evaluation.ray_tasks import remote_run_arm

    config = small(n_envs=2, batch_size_per_env=1000)  # more than the 256 training samples hold
    with pytest.raises(DataError) as in_process:
        loop.build_pool(config.replace(env_workers=0))
    assert "fewer than one step" in str(in_process.value)
    with pytest.raises(DataError) as worker:
        RayEnvPool(config.replace(env_workers=2)).wait_ready()
    assert str(worker.value) == str(in_process.value)
    arm = Arm.build("wait", config)
    with pytest.raises(DataError) as serial:
        arm.run(900_000)
    with pytest.raises(DataError) as task:
        remote_run_arm(arm, [900_000], workers=1)
    assert str(task.value) == str(serial.value)


def _wait_episode(pool, n: int) -> None:
    """Every epoch of the running batch with WAIT actions."""
    signals = True
    while signals is not None:
        _, signals = pool.step(np.zeros((n, 5), dtype=np.int32))


def test_a_begin_sent_ahead_is_the_begin_asked_for_and_keeps_the_running_results(local_ray):
    """`prefetch` (the next batch built during the update) changes no number: the running batch's results
    are still its own, a matching begin is the fresh one, and one for other envs is built afresh."""
    from esper_fx.distributed.pool import RayEnvPool
    from hosts.env import EnvPool

    config = small(env_workers=2, max_epochs=2)
    plain = EnvPool(config.replace(env_workers=0))  # (bit for bit the Ray pool without a begin sent ahead)
    with RayEnvPool(config) as ahead:
        for pool in (ahead, plain):
            pool.begin(0, 3)
            _wait_episode(pool, 3)
        ahead.prefetch(1, 3)
        assert ahead.episode_results() == plain.episode_results()  # batch 0's, not the prefetched batch's
        got, want = ahead.begin(1, 3), plain.begin(1, 3)
        assert all(torch.equal(got[k], want[k]) for k in want)
        _wait_episode(ahead, 3)
        _wait_episode(plain, 3)
        ahead.prefetch(2, 3)  # a begin for other envs than the one asked for next, its results left unread
        got, want = ahead.begin(2, 2), plain.begin(2, 2)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
        assert got["obs"].shape[0] == 2
        assert ahead.episode_results() == plain.episode_results()  # batch 2's, not batch 1's unread ones
