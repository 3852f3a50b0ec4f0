"""`python -m esper_fx.doctor`: on the CPU it runs what it can, lists every CUDA check as not run (never as
passed), exits 0 when nothing failed, writes its JSON; a bad command line is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from esper_fx import devices
from esper_fx.doctor import cli as doctor
from esper_fx.doctor.context import Context, NotRun
from esper_fx.doctor.environment import check_versions
from tests.esper_fx.breakdowns import check_breakdown

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("doctor") / "report.json"
    code = doctor.main(["--device", "cpu", "--json", str(path)])
    return code, json.loads(path.read_text())


def test_on_the_cpu_it_passes_what_it_runs_and_runs_no_cuda_check(cpu_report):
    code, report = cpu_report
    assert code == 0 and report["ok"] is True and report["device"] == "cpu"
    status = {c["name"]: c["status"] for c in report["checks"]}
    assert list(status) == [name for name, _, _ in doctor.CHECKS]
    assert doctor.CUDA_CHECKS and all(status[name] == doctor.NOT_RUN for name in doctor.CUDA_CHECKS)
    ran = [name for name in status if name not in doctor.CUDA_CHECKS]
    assert {"versions", "devices", "handoff_cpu", "cli_run", "checkpoint", "jax_memory"} <= set(ran)
    assert all(status[name] == doctor.PASSED for name in ran), status
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert "torch " in details["versions"] and "jax " in details["versions"]
    assert "exit 0" in details["cli_run"] and "cpu" in details["checkpoint"]


def test_the_gpu_check_runs_end_to_end_on_the_cpu_in_its_tiny_form(cpu_report, tmp_path, capsys):
    """Issue 55, item 4: `--full --tiny --device cpu` runs every part it has (the checks, a one-batch run with the
    breakdown of its time, one benchmark; the gpu tests are left out), says how each ended, and writes one JSON
    file. It runs after `cpu_report`, whose cli_run put the tiny run's programs in the suite's compilation cache."""
    path = tmp_path / "full.json"
    assert doctor.main(["--full", "--tiny", "--device", "cpu", "--json", str(path)]) == doctor.EXIT_OK
    report = json.loads(path.read_text())
    assert report["ok"] is True and report["device"] == "cpu" and report["tiny"] is True
    parts = report["parts"]
    assert {name: p["status"] for name, p in parts.items()} == {
        "checks": "passed", "quickstart": "passed", "gpu_tests": "not run", "bench": "passed"}
    assert all(p["timeout_s"] > 0 for p in parts.values()) and report["wall_s"] <= report["budget_s"]
    checks = {c["name"]: c["status"] for c in parts["checks"]["result"]["checks"]}
    assert checks["handoff_cpu"] == doctor.PASSED and checks["cli_run"] == doctor.NOT_RUN
    run = parts["quickstart"]["result"]
    assert run["episodes"] == 2 and run["batches_done"] == 1 and len(run["batch_compile_s"]) == 1
    assert report["breakdown"] == run["breakdown"]
    check_breakdown({"timing": {"breakdown": run["breakdown"]}})
    assert parts["quickstart"]["detail"].startswith("Time: ")
    assert "bridge" in parts["bench"]["result"] and parts["bench"]["wall_s"] > 0
    out = capsys.readouterr().out
    assert "[1/4] checks: passed in" in out and "  quickstart | " in out and "[3/4] gpu_tests: not run" in out
    assert "GPU check: 4 of 4 parts did not fail" in out


@NO_CUDA
def test_auto_is_the_cpu_without_cuda():
    torch_device, jax_device = doctor.resolve_devices("auto")
    assert torch_device == torch.device("cpu") and jax_device.platform == "cpu"


def test_auto_with_a_torch_gpu_and_no_jax_gpu_runs_on_the_cpu_and_fails_devices(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Fake GPU")
    monkeypatch.setattr(devices, "jax_gpus", lambda: [])
    torch_device, _ = doctor.resolve_devices("auto")
    assert torch_device == torch.device("cpu")
    monkeypatch.setattr(doctor, "CHECKS", doctor.CHECKS[:2])  # versions, devices
    checks = doctor.run_checks(Context(torch_device, None, Path(".")))
    assert [c.status for c in checks] == [doctor.PASSED, doctor.FAILED]
    assert "JAX has no GPU" in checks[1].detail


def test_a_failing_check_is_reported_with_its_reason_and_exit_1(monkeypatch, tmp_path, capsys):
    def broken(ctx):
        raise ValueError("the reason\nsecond line")

    def skipped(ctx):
        raise NotRun("why not")

    monkeypatch.setattr(doctor, "CHECKS", (("versions", False, check_versions), ("broken", False, broken),
                                           ("skipped", False, skipped), ("cuda_only", True, broken)))
    path = tmp_path / "r.json"
    assert doctor.main(["--device", "cpu", "--json", str(path)]) == doctor.EXIT_FAILED
    checks = {c["name"]: c for c in json.loads(path.read_text())["checks"]}
    assert checks["broken"]["status"] == doctor.FAILED and checks["broken"]["detail"] == "ValueError: the reason second line"
    assert checks["skipped"]["status"] == doctor.NOT_RUN and checks["skipped"]["detail"] == "why not"
    assert checks["cuda_only"]["status"] == doctor.NOT_RUN
    assert "failed: broken" in capsys.readouterr().out


@pytest.mark.parametrize("argv, names", [
    (["--device", "gpu7"], "--device"),
    (["--device", "cuda:x"], "--device"),
    (["--bogus"], "--bogus"),
    (["--json", "/no/such/dir/r.json"], "--json"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(argv, names, capsys, monkeypatch):
    monkeypatch.setattr(doctor, "run_checks", lambda *a: pytest.fail("checks ran after a bad command line"))
    assert doctor.main(argv) == doctor.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0] and err[0].startswith("esper_fx.doctor: error:")


def _refused_before_the_checks(argv, monkeypatch, capsys) -> str:
    monkeypatch.setattr(doctor, "run_checks", lambda *a: pytest.fail("the checks ran before --json was checked"))
    assert doctor.main(argv) == doctor.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esper_fx.doctor: error: argument --json: cannot write"), err
    return err[0]


def test_a_json_destination_that_takes_no_write_is_refused_before_the_checks(monkeypatch, capsys, tmp_path):
    """Issue 39, item 6: `--json /dev/full` (or a read-only mount, a folder or file without write permission)
    ran every check (9-28 s), then ended in a traceback, exit 1."""
    assert "No space left on device" in _refused_before_the_checks(["--json", "/dev/full"], monkeypatch, capsys)
    if os.geteuid() != 0:  # (root writes whatever the permission bits say: nothing to refuse there)
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        assert "Permission denied" in _refused_before_the_checks(["--json", str(locked / "r.json")], monkeypatch,
                                                                 capsys)
    good = tmp_path / "kept.json"
    good.write_text("old")
    doctor.check_json_path(str(good))  # a writable file passes, untouched
    assert good.read_text() == "old"


def _namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _namespaces(), reason="needs unshare to mount a read-only tmpfs")
def test_a_json_destination_on_a_read_only_mount_is_refused_before_the_checks(tmp_path):
    script = ("import sys\nfrom esper_fx.doctor import cli as doctor\n"
              "doctor.run_checks = lambda *a: sys.exit('the checks ran before --json was checked')\n"
              "sys.exit(doctor.main(['--json', sys.argv[1]]))\n")
    (tmp_path / "ro").mkdir()
    cmd = (f"mount -t tmpfs -o size=1m,ro tmpfs {tmp_path / 'ro'} && "
           f"exec {sys.executable} -c \"$0\" {tmp_path / 'ro' / 'r.json'}")
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", cmd, script],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == doctor.EXIT_USAGE, proc.stderr
    target = tmp_path / "ro" / "r.json"
    assert proc.stderr.strip() == f"esper_fx.doctor: error: argument --json: cannot write {target}: Read-only file system"


@NO_CUDA
def test_a_cuda_device_on_a_machine_without_one_is_exit_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert doctor.main(["--device", "cuda:0", "--json", str(path)]) == doctor.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'cuda:0' is not available" in err[0]
    assert not path.exists()


def test_the_module_runs_as_a_command():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "esper_fx.doctor", "--device", "nonsense"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "--device" in proc.stderr
