"""Envs as Ray actors (issue 15): a run on two workers, a resume after a worker died and a run that joins a
cluster give the in-process run bit for bit, leave no orphaned Ray process and print nothing on stderr.
Failures, stops and the flags: test_ray_failures.py."""

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
from esper_fx.training import loop
from esper_fx.config import TrainingConfig
from esper_fx.distributed import auto
from tests.esper_fx.distributed.ray_runs import SMALL, descendants

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


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The in-process run every Ray run is compared with."""
    return esper_fx.run(run_config(env_workers=0), run_dir=tmp_path_factory.mktemp("ref") / "run")


def test_two_workers_give_the_same_run_bit_for_bit_and_leave_no_ray_process(reference, monkeypatch, tmp_path):
    """`auto`, the default (issue 28), on two usable cores runs the 3 envs on two workers: the in-process run."""
    monkeypatch.setattr(auto, "usable_cores", lambda: 2)
    monkeypatch.setattr(auto, "RAY_MIN_ENV_EPOCHS", 1)  # the tiny run pays Ray's start-up here
    before = descendants(os.getpid())
    result = esper_fx.run(run_config(), run_dir=tmp_path / "ray")
    assert not ray.is_initialized()
    assert descendants(os.getpid()) - before == set()
    assert (reference.summary["timing"]["env_workers"], result.summary["timing"]["env_workers"]) == (0, 2)
    assert _summary(result) == _summary(reference)
    assert _history(result) == _history(reference)
    assert _events(result) == _events(reference)
    assert any(e.get("data", {}).get("tempo") for e in _events(reference))  # germinations carry their tempo
    assert _params_equal(result.controller_state.params, reference.controller_state.params)
    assert _metrics_rows(tmp_path / "ray") == _metrics_rows(reference.run_dir)


@pytest.mark.slow
def test_a_killed_worker_stops_the_run_naming_it_and_resume_continues_exactly(reference, tmp_path):
    config = run_config(env_workers=2)
    run_dir = tmp_path / "killed"
    pool = loop.build_pool(config)
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
    resumed = esper_fx.run(run_config(resume_path=str(run_dir)), run_dir=run_dir)  # across pool kinds: in-process
    assert _history(resumed) == _history(reference)
    assert _params_equal(resumed.controller_state.params, reference.controller_state.params)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "prove"])
def test_a_clean_ray_run_prints_no_line_on_stderr(command, reference, tmp_path):
    """Issue 39, item 8: Ray's "Token authentication is enabled for this Ray cluster ..." was on stderr in
    every Ray run, so a clean run's stderr and a failure's one line were each a line longer. The command
    line's run is the in-process run too."""
    (tmp_path / "c.json").write_text(json.dumps(RUN))
    sets = [arg for k, v in SMALL.items() if k not in ("n_episodes", "seed", "checkpoint_every")
            for arg in ("--set", f"{k}={json.dumps(v)}")]
    argv = (["--config", "c.json", "--run-dir", "r", "--quiet"] if command == "train" else
            ["--arms", "wait", "--n-eval-seeds", "2", "--out", "p", "--quiet", *sets])
    proc = subprocess.run([sys.executable, "-m", f"esper_fx.{command}", *argv, "--env-workers", "2"], cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
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
        (tmp_path / "c.json").write_text(json.dumps(RUN))
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
