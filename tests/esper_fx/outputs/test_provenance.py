"""Every run says where it came from: provenance.json and summary.json's "provenance", the report's header,
prove.json, and TensorBoard's HParams dashboard (asked over HTTP of a real server).

One tiny run, finished and then resumed to a third batch, is shared by the tests of this module.
"""

from __future__ import annotations

import html
import json
import shlex
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
from esper_fx.outputs.tensorboard_log import TB_SUBDIR, config_hparams
from tests.esper_fx.outputs.test_run_outputs import REPO, tiny

KEYS = {"versions", "git", "command", "host", "platform", "torch_threads", "devices", "started_utc"}


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
    assert set(found) == KEYS
    assert json.loads(json.dumps(found)) == found  # plain JSON
    assert found["git"]["commit"] == head_commit() and isinstance(found["git"]["dirty"], bool)
    assert set(found["versions"]) == {"python", *provenance.PACKAGES}
    assert all(found["versions"][name] for name in ("python", "esper_fx", "torch", "jax", "numpy"))
    assert found["command"] == sys.argv and found["torch_threads"] >= 1
    assert found["devices"]["policy"] == "cpu" and found["devices"]["envs"] == ["cpu"]


def test_what_cannot_be_read_is_null_never_an_error(tmp_path, monkeypatch):
    assert provenance.git_state(tmp_path) is None  # no git checkout (an installed package)
    assert provenance.version("no-such-package-esper") is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program
    assert provenance.git_state() is None
    monkeypatch.setattr(socket, "gethostname", lambda: 1 / 0)
    found = provenance.collect()
    assert found["git"] is None and found["host"] is None and found["devices"] is None


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
    assert set(kept) == KEYS and summary["provenance"] == kept and summary["batches"] == 3
    assert kept["git"]["commit"] == head_commit() and kept["devices"]["policy"] in ("cpu", "cuda:0")
    assert kept["started_utc"] >= first["started_utc"]  # the resume's own
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
