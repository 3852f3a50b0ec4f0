"""Every run says where it came from: provenance.json and summary.json's "provenance", the report's header,
prove.json, and TensorBoard's HParams dashboard (asked over HTTP of a real server); a resumed run keeps the
first start's facts and lists each resume's; torch's version keeps its build tag; no git metadata, no commit
and a note why.

One tiny run, finished and then resumed to a third batch, is shared by the tests of this module.
"""

from __future__ import annotations

import html
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import esper_fx
from esper_fx.bench.bench_default_workers import untimed
from esper_fx.cli import prove
from esper_fx.config import TrainingConfig
from esper_fx.outputs import provenance, report
from esper_fx.outputs.run_directory import RunDirectory
from esper_fx.outputs.tensorboard_log import TB_SUBDIR, config_hparams
from tests.esper_fx.outputs.test_run_outputs import REPO, tiny

KEYS = {"versions", "git", "git_note", "command", "cwd", "host", "platform", "cpu", "torch_threads", "devices",
        "started_utc"}
RUN_KEYS = KEYS | {"resumes"}  # provenance.json: the first start's facts and each resume's


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A two-batch run (the random controller), then resumed by a second call to a third batch: its
    directory, the first end's provenance.json, and the result of the resume."""
    run_dir = tmp_path_factory.mktemp("provenance") / "run"
    config = tiny(controller="random")
    esper_fx.run(config, run_dir=run_dir, quiet=True)
    first = json.loads((run_dir / provenance.PROVENANCE_NAME).read_text())
    result = esper_fx.run(config.replace(n_episodes=6, resume_path=str(run_dir)), run_dir=run_dir, quiet=True)
    return run_dir, first, result


def test_provenance_has_every_key_and_this_checkout_s_commit_quickly():
    import torch  # noqa: F401 - as in a run: torch's thread count is read once torch is imported

    provenance.collect()  # (the first call reads the package metadata)
    started = time.perf_counter()
    found = provenance.collect(provenance.run_devices("cpu", None))
    assert time.perf_counter() - started < 0.5
    assert set(found) == KEYS and tuple(found) == provenance.FACTS
    assert json.loads(json.dumps(found)) == found  # plain JSON
    assert found["git"]["commit"] == head_commit() and isinstance(found["git"]["dirty"], bool)
    assert found["git_note"] is None
    assert set(found["versions"]) == {"python", *provenance.PACKAGES}
    assert found["versions"]["torch"] == str(torch.__version__)  # its build tag (+cpu, +cu...) kept
    assert all(found["versions"][name] for name in ("python", "esper_fx", "torch", "jax", "numpy"))
    assert found["command"] == sys.argv and found["torch_threads"] >= 1
    # the vector ISA torch's CPU kernels use, which changes a run's last digits between CPUs
    assert found["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    assert found["cpu"]["model"] is None or isinstance(found["cpu"]["model"], str)
    assert found["devices"]["policy"] == "cpu" and found["devices"]["envs"] == ["cpu"]


def test_what_cannot_be_read_is_null_never_an_error(tmp_path, monkeypatch):
    assert provenance.git_state(tmp_path) is None  # no git checkout (an installed package)
    assert provenance.version("no-such-package-esper") is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program
    assert provenance.git_state() is None
    assert provenance.git_lookup()[1].startswith("no commit recorded: `git rev-parse HEAD`")
    monkeypatch.setattr(socket, "gethostname", lambda: 1 / 0)
    found = provenance.collect()
    assert found["git"] is None and found["host"] is None and found["devices"] is None
    assert "could not run" in found["git_note"]


def test_a_copy_of_the_source_without_git_metadata_records_no_commit_and_says_why(tmp_path):
    """The esper_fx package copied out of its checkout (no .git above it), imported in a fresh process that
    has not imported torch: no commit, a note naming the copy, and torch's version read with its build tag."""
    import torch

    shutil.copytree(REPO / "esper_fx", tmp_path / "esper_fx", ignore=shutil.ignore_patterns("__pycache__"))
    script = ("import json, sys; from esper_fx.outputs import provenance; "
              "print(json.dumps([provenance.__file__, provenance.collect(), 'torch' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=True)
    where, found, imported_torch = json.loads(done.stdout)
    assert Path(where).resolve() == (tmp_path / "esper_fx/outputs/provenance.py").resolve()
    assert found["git"] is None and not imported_torch
    assert found["git_note"].startswith(f"no git metadata: {tmp_path.resolve()} has no .git")
    assert found["versions"]["torch"] == str(torch.__version__)  # from torch/version.py, tag and all

def test_auto_devices_resolve_as_the_run_resolves_them():
    import torch

    devices = provenance.run_devices("auto", ["cpu", "auto"])
    expected = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert devices["policy"] == expected and devices["envs"] == ["cpu", expected]
    assert devices["cuda"] == ([torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                               if torch.cuda.is_initialized() else None)


def test_the_run_directory_keeps_it_from_the_start_and_summary_json_holds_it(resumed):
    run_dir, first, result = resumed
    kept = json.loads((run_dir / provenance.PROVENANCE_NAME).read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(kept) == RUN_KEYS and summary["provenance"] == kept and summary["batches"] == 3
    assert kept["git"]["commit"] == head_commit() and kept["devices"]["policy"] in ("cpu", "cuda:0")
    assert set(first) == RUN_KEYS and first["resumes"] == []
    assert {key: kept[key] for key in KEYS} == {key: first[key] for key in KEYS}  # the first start's, kept
    (resume,) = kept["resumes"]
    assert set(resume) == KEYS | {"from_batch"} and resume["from_batch"] == 2
    assert resume["started_utc"] >= first["started_utc"] and resume["git"]["commit"] == head_commit()
    # config.json stays a config its readers take (the resume above read it, and so does this)
    config = json.loads((run_dir / "config.json").read_text())
    assert "provenance" not in config and TrainingConfig.from_saved(config).n_episodes == 6
    assert "provenance" not in untimed(summary)  # the benchmark's comparison of two runs leaves it out


def test_the_report_header_shows_the_commit_and_the_command(resumed):
    run_dir, _, result = resumed
    page = (run_dir / report.REPORT_NAME).read_text()
    kept = json.loads((run_dir / provenance.PROVENANCE_NAME).read_text())
    assert result.report_path and head_commit() in page
    assert f"command <code>{html.escape(shlex.join(sys.argv))}</code>" in page
    assert f"host {kept['host']}" in page and f"torch threads {kept['torch_threads']}" in page
    assert f"torch {kept['versions']['torch']}" in page
    resume = kept["resumes"][-1]
    assert html.escape(f"resumed 1× (last {resume['started_utc']}, host {resume['host']};") in page


def test_a_run_resumed_twice_keeps_its_first_start_and_lists_both_resumes_in_order(tmp_path, monkeypatch):
    """Two batches, resumed to a third and then to a fourth (that one from a source copy without git
    metadata, as `SOURCE_ROOT` says): the first start's facts unchanged, one entry per resume in order, each
    with its time, host, versions, command and commit (or why there is none)."""
    import torch

    run_dir, argv = tmp_path / "run", list(sys.argv)
    config = tiny(controller="random", report=False, tensorboard=False)
    esper_fx.run(config, run_dir=run_dir, quiet=True)
    first = json.loads((run_dir / provenance.PROVENANCE_NAME).read_text())
    commands = [["esper_fx.train", "--resume", str(run_dir), "--episodes", str(n)] for n in (6, 8)]
    for n_episodes, command in zip((6, 8), commands):
        monkeypatch.setattr(sys, "argv", command)
        if n_episodes == 8:
            monkeypatch.setattr(provenance, "SOURCE_ROOT", tmp_path)  # no .git here
        esper_fx.run(config.replace(n_episodes=n_episodes, resume_path=str(run_dir)), run_dir=run_dir, quiet=True)
    kept = json.loads((run_dir / provenance.PROVENANCE_NAME).read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["batches"] == 4 and summary["provenance"] == kept
    assert {key: kept[key] for key in RUN_KEYS - {"resumes"}} == {key: first[key] for key in KEYS}
    assert first["git"]["commit"] == head_commit() and first["command"] == argv
    one, two = kept["resumes"]
    assert [one["from_batch"], two["from_batch"]] == [2, 3]
    assert [one["command"], two["command"]] == commands
    assert first["started_utc"] <= one["started_utc"] <= two["started_utc"]
    for resume in (one, two):
        assert resume["host"] == socket.gethostname()
        assert resume["versions"]["torch"] == str(torch.__version__) and resume["versions"]["esper_fx"]
    assert one["git"]["commit"] == head_commit() and one["git_note"] is None
    assert two["git"] is None and two["git_note"].startswith(f"no git metadata: {tmp_path} has no .git")


def test_a_resume_whose_first_record_is_lost_says_so_and_one_elsewhere_copies_it(tmp_path):
    """provenance.json unreadable: the first start's facts null and a note naming the file, not a failure; a
    resume into another run directory carries the history of the run it continues (which stays as it was)."""
    config = {"device": "cpu", "env_devices": None}
    broken = RunDirectory(tmp_path / "broken")
    (broken.path / provenance.PROVENANCE_NAME).write_text("{not json")
    broken.write_config(config, resumed=broken.path, from_batch=1)
    record = json.loads((broken.path / provenance.PROVENANCE_NAME).read_text())
    assert all(record[key] is None for key in KEYS)
    assert record["first_start_note"] == (f"the first start's facts are unknown: "
                                          f"{broken.path / provenance.PROVENANCE_NAME} was missing or unreadable")
    assert [r["from_batch"] for r in record["resumes"]] == [1] and record["resumes"][0]["versions"]["python"]

    origin, elsewhere = RunDirectory(tmp_path / "origin"), RunDirectory(tmp_path / "elsewhere")
    origin.write_config(config)
    before = (origin.path / provenance.PROVENANCE_NAME).read_text()
    elsewhere.write_config(config, resumed=origin.path, from_batch=5)
    copied = json.loads((elsewhere.path / provenance.PROVENANCE_NAME).read_text())
    assert {key: copied[key] for key in KEYS} == {key: origin.provenance[key] for key in KEYS}
    assert [r["from_batch"] for r in copied["resumes"]] == [5] and copied == elsewhere.provenance
    assert (origin.path / provenance.PROVENANCE_NAME).read_text() == before


def test_prove_json_holds_the_provenance_beside_its_command():
    table = SimpleNamespace(to_dict=lambda: {"rows": []}, trained={})
    written = prove.report_of(table, tiny(), wall=2.0)
    assert written["command"] == sys.argv and set(written["provenance"]) == KEYS
    assert written["provenance"]["git"]["commit"] == head_commit()


def test_the_resume_left_one_hparams_session_of_the_whole_run(resumed):
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    run_dir, _, _ = resumed
    events = [event for path in sorted((run_dir / TB_SUBDIR).glob("events.out.tfevents.*"))
              for event in LegacyEventFileLoader(str(path)).Load()]
    tags = [(event.step, value.tag) for event in events for value in event.summary.value]
    for tag in ("_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info",
                "final/final_avg_accuracy"):
        assert [step for step, t in tags if t == tag] == [2], tag  # the first end's were dropped


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(base: str, route: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base}/data/plugin/hparams/{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read().decode("utf-8"))


def _experiment(base: str, deadline: float) -> dict:
    """The HParams experiment, once the server answers with its metrics."""
    while time.monotonic() < deadline:
        try:
            experiment = _post(base, "experiment", {"experimentName": "", "includeMetrics": True})
            if experiment.get("metricInfos"):
                return experiment
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise AssertionError("TensorBoard's HParams plugin did not answer with the run's experiment within 60 s")


def test_a_real_tensorboard_server_shows_the_run_in_its_hparams_dashboard(resumed, tmp_path):
    """As the run's closing line says: `tensorboard --logdir <run_dir>/tb`, default loading mode, over HTTP."""
    run_dir, _, result = resumed
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run_dir / TB_SUBDIR),
                               "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        experiment = _experiment(base, time.monotonic() + 60)
        groups = _post(base, "session_groups", {
            "experimentName": "", "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                                      "STATUS_RUNNING"],
            "colParams": [], "startIndex": 0, "sliceSize": 10, "includeMetrics": True})
    finally:
        server.kill()
        server.wait(timeout=30)
    hparams = config_hparams(result.config.to_dict())
    assert {info["name"] for info in experiment["hparamInfos"]} == set(hparams)
    metrics = {info["name"]["tag"] for info in experiment["metricInfos"]}
    assert {"final/final_avg_accuracy", "final/best_rolling_avg_accuracy", "accuracy/mean", "timing/batch_s"} <= metrics
    (group,) = groups["sessionGroups"]
    assert group["hparams"]["task"] == "shapes10" and group["hparams"]["seed"] == 3
    assert group["hparams"]["n_episodes"] == 6 and group["hparams"]["slots"] == '["r0c0", "r0c1"]'
    assert [s["status"] for s in group["sessions"]] == ["STATUS_SUCCESS"]
    values = {m["name"]["tag"]: m for m in group["metricValues"]}
    summary = result.summary
    for key in ("final_avg_accuracy", "best_rolling_avg_accuracy", "episodes"):
        assert values[f"final/{key}"]["value"] == float(np.float32(summary[key])), key
        assert values[f"final/{key}"]["trainingStep"] == 2
    assert values["accuracy/mean"]["value"] == float(np.float32(result.history[-1].avg_accuracy))
