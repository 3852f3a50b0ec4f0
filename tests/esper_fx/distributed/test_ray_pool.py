"""Whole runs on Ray actors (issue 15): a run on two workers, a resume after a worker died and a run that joins a
cluster give the in-process run bit for bit and print nothing on stderr; a run, stopped or not, leaves no
Ray process; a bad address or a missing Ray is one line. The pool's parts: test_ray_workers.py."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import esper_fx
from esper_fx.outputs import checkpoint as ckpt
from esper_fx.training import pools
from esper_fx.config import TrainingConfig
from esper_fx.distributed import auto, reaper
from esper_fx.distributed.runtime import INSTALL_HINT
from esper_fx.cli.train import main
from tests.esper_fx.breakdowns import check_breakdown
from tests.esper_fx.distributed.ray_runs import SMALL, as_file, as_sets, small

ray = pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]

# The run every Ray run here is compared with: the proportional lifecycle clock, its tempo and the wsd
# schedule travel to the actors in the config (4 epochs: the fewest in which this run germinates).
RUN = dict(SMALL, lifecycle="proportional", lr_schedule="wsd", seed_lr_rewarm_steps=2, max_epochs=4)


def run_config(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**RUN, **overrides})


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


def _summary(result):
    """The run's summary without its timings and checkpoint path."""
    return {k: v for k, v in result.summary.items() if k not in ("timing", "wall_time_s", "checkpoint")}


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
    return esper_fx.run(run_config(env_workers=0), run_dir=tmp_path_factory.mktemp("ref") / "run")


def test_two_workers_give_the_same_run_bit_for_bit_and_leave_no_ray_process(reference, monkeypatch, tmp_path):
    """`auto`, the default (issue 28), on two usable cores runs the 3 envs on two workers: the in-process run."""
    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)  # the tiny run pays Ray's start-up here
    before = _descendants(os.getpid())
    result = esper_fx.run(run_config(), run_dir=tmp_path / "ray")
    assert not ray.is_initialized()
    assert _descendants(os.getpid()) - before == set()
    assert (reference.summary["timing"]["env_workers"], result.summary["timing"]["env_workers"]) == (0, 2)
    assert _summary(result) == _summary(reference)
    assert _history(result) == _history(reference)
    assert _events(result) == _events(reference)
    assert any(e.get("data", {}).get("tempo") for e in _events(reference))  # germinations carry their tempo
    assert _params_equal(result.controller_state.params, reference.controller_state.params)
    assert _metrics_rows(tmp_path / "ray") == _metrics_rows(reference.run_dir)
    # issue 55: both runs explain their time, the Ray run's pool parts from its workers' own clocks
    check_breakdown(reference.summary, ray=False)
    check_breakdown(result.summary, ray=True)


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_naming_it_and_resume_continues_exactly(reference, tmp_path):
    config = run_config(env_workers=2)
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
    # issue 71: the workers' output is not on the console; the line names where Ray keeps it
    folder = message.partition("the workers' own output is in ")[2].partition(" (worker-")[0]
    assert folder and Path(folder, "..").resolve().name.startswith("session_")
    assert ckpt.read_manifest(run_dir)["next_batch_idx"] == 1  # the last finished batch, intact
    resumed = esper_fx.run(run_config(resume_path=str(run_dir)), run_dir=run_dir)  # across pool kinds: in-process
    assert _history(resumed) == _history(reference)
    assert _params_equal(resumed.controller_state.params, reference.controller_state.params)


# Imported by every Python process started with its folder on PYTHONPATH (site's `sitecustomize`): in a Ray
# worker process (Ray's default_worker.py) it prints a line on stdout and on stderr, as a worker's own code or
# its runtime does on a contended CPU (abseil's "[mutex.cc : 452] RAW: Lock blocking ..." reached a user's
# console so, forwarded by the driver).
NOISY_WORKER = """import sys
if sys.argv and sys.argv[0].endswith("default_worker.py"):
    print("a line from a Ray worker on stdout", flush=True)
    print("a line from a Ray worker on stderr", file=sys.stderr, flush=True)
"""
# A CPU burner bounded in time (killed at the test's end anyway): the contention under which the line appeared,
# over Ray's start-up and the run's first batches (longer only slows the rest of the suite on a small machine).
BURNER = "import time\nend = time.monotonic() + 45\nwhile time.monotonic() < end:\n    pass\n"


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "prove"])
def test_a_clean_ray_run_prints_no_line_on_stderr(command, reference, tmp_path):
    """Issue 39, item 8: Ray's "Token authentication is enabled for this Ray cluster ..." was on stderr in
    every Ray run, so a clean run's stderr and a failure's one line were each a line longer. Issue 71: what the
    workers print themselves stays in Ray's logs, also beside two CPU burners. The command line's run is the
    in-process run too."""
    (tmp_path / "c.json").write_text(json.dumps(as_file(RUN)))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NOISY_WORKER)
    sets = as_sets({k: v for k, v in SMALL.items() if k not in ("n_episodes", "seed", "checkpoint_every")})
    argv = (["--config", "c.json", "--run-dir", "r", "--quiet"] if command == "train" else
            ["--arms", "wait", "--n-eval-seeds", "2", "--out", "p", "--quiet", *sets])
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(2)]
    try:
        proc = subprocess.run([sys.executable, "-m", f"esper_fx.{command}", *argv, "--env-workers", "2"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(tmp_path / "site")])))
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "a line from a Ray worker" not in proc.stdout
    if command == "train":
        assert _metrics_rows(tmp_path / "r") == _metrics_rows(reference.run_dir)


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
        (tmp_path / "c.json").write_text(json.dumps(as_file(RUN)))
        run = subprocess.run([sys.executable, "-m", "esper_fx.train", "--config", str(tmp_path / "c.json"),
                              "--env-workers", "2", "--ray-address", f"127.0.0.1:{port}", "--run-dir",
                              str(tmp_path / "joined"), "--quiet"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=400)
        assert run.returncode == 0, run.stderr
        assert head.poll() is None  # the cluster is still up
        assert _metrics_rows(tmp_path / "joined") == _metrics_rows(reference.run_dir)
    finally:
        os.kill(head.pid, signal.SIGTERM)  # `ray start --block` stops its cluster in ~2 s (its whole group: 33 s)
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
    (tmp_path / "c.json").write_text(json.dumps(as_file(config)))
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
