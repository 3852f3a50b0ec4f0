"""Envs as Ray actors (issue 15): the same run as the in-process pool, bit for bit; clear failures; no
orphaned Ray process; the install line when Ray is missing."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
import torch

import esper_fx
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.training import pools
from esper_fx.config import TrainingConfig
from esper_fx.distributed.pool import worker_slices
from esper_fx.distributed import reaper
from esper_fx.distributed.runtime import INSTALL_HINT
from esper_fx.cli.train import main

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]

# 3 envs over 2 workers (slices of 2 and 1); 5 episodes: the second batch runs 2 envs, worker 1 idles.
SMALL = dict(
    task="shapes10", n_envs=3, max_epochs=3, n_episodes=5, synthetic_train_samples=256, synthetic_test_samples=64,
    batch_size_per_env=32, max_train_batches=2, seed=5, device="cpu", checkpoint_every=1, num_minibatches=1,
    tensorboard=False, report=False,
)


def small(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**SMALL, **overrides})


def _history(result):
    return [{k: v for k, v in h.to_dict().items() if k not in ("wall_time_s", "timing")} for h in result.history]


def _untimed(row: dict) -> dict:
    """A record without its clock readings (timestamps, wall times, timings)."""
    return {k: _untimed(v) if isinstance(v, dict) else v for k, v in row.items()
            if not (k == "timestamp" or k.endswith("_s") or k == "timing")}


def _events(result):
    """The run's events without clock readings, the checkpoint paths made relative to the run directory."""
    return [{**_untimed(e), "message": e["message"].replace(str(result.run_dir), "<run>")} for e in result.events
            if e["event_type"] not in ("TRAINING_STARTED", "TRAINING_COMPLETED")]


def _metrics_rows(run_dir):
    with open(Path(run_dir) / "metrics.csv") as fh:
        return [_untimed(row) for row in csv.DictReader(fh)]


def _params_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def _descendants(pid: int) -> set[tuple[int, int]]:
    """Live (non-zombie) processes below `pid`, as (pid, start time), from the process table (the reaper's)."""
    return reaper.descendants(pid, reaper.process_table())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process run every Ray run is compared with."""
    return esper_fx.run(small(), run_dir=tmp_path_factory.mktemp("ref") / "run")


def test_worker_slices_are_contiguous_and_balanced():
    assert worker_slices(5, 2) == [range(0, 3), range(3, 5)]
    assert worker_slices(4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(ValueError, match="env_workers"):
        worker_slices(2, 3)


def test_two_workers_give_the_same_run_bit_for_bit_and_leave_no_ray_process(reference, tmp_path):
    before = _descendants(os.getpid())
    result = esper_fx.run(small(env_workers=2), run_dir=tmp_path / "ray")
    assert not ray.is_initialized()
    assert _descendants(os.getpid()) - before == set()
    assert _history(result) == _history(reference)
    assert _events(result) == _events(reference)
    assert _params_equal(result.controller_state.params, reference.controller_state.params)
    assert _metrics_rows(tmp_path / "ray") == _metrics_rows(reference.run_dir)


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_naming_it_and_resume_continues_exactly(reference, tmp_path):
    config = small(env_workers=2)
    run_dir = tmp_path / "killed"
    pool = pools.build_pool(config)
    original_begin, original_step, batches = pool.begin, pool.step, []

    def counting_begin(b, n_active=None):
        batches.append(b)
        return original_begin(b, n_active)

    def killing_step(actions, bootstrap=True):
        if batches[-1] == 1 and pool.epoch == 2:
            os.kill(pool.workers[0]["pid"], signal.SIGKILL)
        return original_step(actions, bootstrap)

    pool.begin, pool.step = counting_begin, killing_step
    try:
        with pytest.raises(esper_fx.distributed.pool.EnvWorkerLost) as info:
            esper_fx.run(config, run_dir=run_dir, pool=pool)
    finally:
        pool.close()
    message = str(info.value)
    assert message.startswith("env worker 0 (envs 0–1) died") and "\n" not in message
    assert ckpt.read_manifest(run_dir)["next_batch_idx"] == 1  # the last finished batch, intact
    resumed = esper_fx.run(small(resume_path=str(run_dir)), run_dir=run_dir)  # across pool kinds: in-process
    assert _history(resumed) == _history(reference)
    assert _params_equal(resumed.controller_state.params, reference.controller_state.params)


@pytest.fixture
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

    with RayEnvPool(pools.pool_settings(small(n_envs=2, max_epochs=2)), 2) as pool:
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
        pools.build_pool(config.replace(env_workers=0))
    assert "fewer than one step" in str(in_process.value)
    with pytest.raises(DataError) as worker:
        RayEnvPool(pools.pool_settings(config), 2).wait_ready()
    assert str(worker.value) == str(in_process.value)
    arm = Arm.build("wait", config)
    with pytest.raises(DataError) as serial:
        arm.run(900_000)
    with pytest.raises(DataError) as task:
        remote_run_arm(arm, [900_000], workers=1)
    assert str(task.value) == str(serial.value)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "prove"])
def test_a_clean_ray_run_prints_no_line_on_stderr(command, tmp_path):
    """Issue 39, item 8: Ray's "Token authentication is enabled for this Ray cluster ..." was on stderr in
    every Ray run, so a clean run's stderr and a failure's one line were each a line longer."""
    (tmp_path / "c.json").write_text(json.dumps(SMALL))
    sets = [arg for k, v in SMALL.items() if k not in ("n_episodes", "seed", "checkpoint_every")
            for arg in ("--set", f"{k}={json.dumps(v)}")]
    argv = (["--config", "c.json", "--run-dir", "r", "--quiet"] if command == "train" else
            ["--arms", "wait", "--n-eval-seeds", "2", "--out", "p", "--quiet", *sets])
    proc = subprocess.run([sys.executable, "-m", f"esper_fx.{command}", *argv, "--env-workers", "2"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


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
    plain = EnvPool(pools.pool_settings(config))  # (bit for bit the Ray pool without a begin sent ahead)
    with RayEnvPool(pools.pool_settings(config), config.env_workers) as ahead:
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


def test_without_ray_env_workers_exit_2_with_the_install_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = main(["--preset", "shapes10_quick", "--env-workers", "2", "--run-dir", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert INSTALL_HINT in err and "--env-workers 2" in err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ImportError, match="a dependency of the default install"):
        pools.build_pool(small(env_workers=2))
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


@pytest.mark.slow
def test_compare_fans_the_evaluation_episodes_out_with_the_same_numbers(tmp_path):
    arms = {"ppo": "ppo_lstm", "wait": "wait", "static_final": "static_final"}
    config = small(n_envs=2, n_episodes=2, max_epochs=3)
    seeds = [900_000, 900_001, 900_002]
    serial = esper_fx.compare(arms, config, seeds, progress=None)
    lines = []
    fanned = esper_fx.compare(arms, config.replace(env_workers=2), seeds, progress=lines.append)
    assert not ray.is_initialized()

    def numbers(table):
        return {arm: [{k: v for k, v in e.to_dict().items() if k != "wall_s"} for e in eps]
                for arm, eps in table.episodes.items()}

    assert numbers(fanned) == numbers(serial)
    assert [line.split(":")[1] for line in lines if "seed" in line] == [
        f" {arm} seed {s}" for arm in arms for s in seeds]  # progress in seed order


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
        ray_processes = _descendants(proc.pid)
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_run_joins_a_running_cluster_and_leaves_it_running(reference, tmp_path):
    """`ray start --head`, then the command line with `--ray-address`: the same run; the cluster outlives it.
    Ray's token authentication (on by default) needs RAY_AUTH_MODE=token in both, set before Ray loads."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "token"}
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false", "--block"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        _wait_listening(port, head)  # (the command checks the address at once, before its summary)
        (tmp_path / "c.json").write_text(json.dumps(SMALL))
        run = subprocess.run([sys.executable, "-m", "esper_fx.train", "--config", str(tmp_path / "c.json"),
                              "--env-workers", "2", "--ray-address", f"127.0.0.1:{port}", "--run-dir",
                              str(tmp_path / "joined"), "--quiet"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=400)
        assert run.returncode == 0, run.stderr
        assert head.poll() is None  # the cluster is still up
        assert _metrics_rows(tmp_path / "joined") == _metrics_rows(reference.run_dir)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
        _forget_cluster(port)


def _wait_listening(port: int, head: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until the head started by `ray start` accepts connections on `port`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert head.poll() is None, "ray start --head exited"
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"no Ray head listening on port {port} after {timeout_s:.0f} s")


def _forget_cluster(port: int) -> None:
    """`ray start` records its cluster in /tmp/ray/ray_current_cluster, where a later `ray.init()` without an
    address would look for it: forget the stopped one."""
    record = Path("/tmp/ray/ray_current_cluster")
    try:
        if record.read_text().strip().endswith(f":{port}"):
            record.unlink()
    except OSError:
        pass


@pytest.mark.parametrize("address, needle", [
    ("head node", "is not a Ray address"), ("10.0.0.1", "is not a Ray address"), ("10.0.0.1:0", "is not a Ray"),
    ("ray://:6379", "is not a Ray address"), ("127.0.0.1:1", "no Ray cluster reachable"),
    ("ray://127.0.0.1:1", "no Ray cluster reachable"), ("no-such-host.invalid:6379", "no Ray cluster reachable"),
])
def test_a_bad_ray_address_fails_fast_with_one_line_before_ray_is_asked(address, needle):
    """Issue 22: a bad --ray-address took 24 s and 20 lines of Ray logging before its one line."""
    import time

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


def test_the_proportional_clock_and_wsd_in_two_workers_give_the_in_process_run(tmp_path):
    """The lifecycle's clock, the tempo and the schedule travel to the actors in the config: the same run."""
    config = small(lifecycle="proportional", lr_schedule="wsd", seed_lr_rewarm_steps=2, max_epochs=6)
    alone = esper_fx.run(config, run_dir=tmp_path / "alone")
    split = esper_fx.run(config.replace(env_workers=2), run_dir=tmp_path / "ray")
    assert _history(split) == _history(alone)
    assert _events(split) == _events(alone)
    assert any(e.get("data", {}).get("tempo") for e in _events(alone))  # germinations carry their tempo
    assert _params_equal(split.controller_state.params, alone.controller_state.params)
