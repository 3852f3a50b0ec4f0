"""The GPU check's runner (`esper_fx.doctor.full`, issue 55 item 4): a part that fails, one that runs past its
timeout (stopped, then killed when it ignores the stop) and one the budget leaves no time are each recorded,
and the next part still runs; each part's timeout leaves the later parts their least time. The whole check in
its tiny form: tests/esper_fx/test_doctor.py."""

from __future__ import annotations

import json
import sys

import pytest

from esper_fx.doctor import cli as doctor
from esper_fx.doctor import full
from esper_fx.doctor.full import FAILED, NOT_RUN, PASSED, TIMED_OUT, Part

PY = sys.executable


def _say(lines):
    return lambda line: lines.append(line)


def test_a_failing_part_and_a_stuck_one_are_recorded_and_the_next_part_still_runs(monkeypatch):
    monkeypatch.setattr(full, "MIN_TIMEOUT_S", 0.5)
    read = []
    parts = [
        Part("fails", [PY, "-c", "import sys; print('about to fail'); sys.exit(3)"], cap_s=30, floor_s=1,
             read=lambda r: read.append(r.name)),
        Part("stuck", [PY, "-c", "import time; print('waiting', flush=True); time.sleep(60)"], cap_s=1.5, floor_s=1),
        Part("deaf", [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                "print('ignoring', flush=True); time.sleep(60)"], cap_s=1.5, floor_s=1),
        Part("skipped", None, cap_s=30, floor_s=1, why_not="not here"),
        Part("works", [PY, "-c", "print('fine')"], cap_s=30, floor_s=1),
    ]
    lines = []
    results = {r.name: r for r in full.run_parts(parts, budget_s=60, say=_say(lines), grace_s=1.0)}
    assert {n: r.status for n, r in results.items()} == {"fails": FAILED, "stuck": TIMED_OUT, "deaf": TIMED_OUT,
                                                         "skipped": NOT_RUN, "works": PASSED}
    assert results["fails"].exit_code == 3 and results["fails"].detail == "exit 3" and read == ["fails"]
    assert results["fails"].output_tail == ["about to fail"]
    assert results["stuck"].detail.startswith("stopped after") and results["stuck"].wall_s < 10
    assert results["deaf"].exit_code == -9 and results["deaf"].wall_s < 10  # SIGKILL after the grace
    assert results["skipped"].detail == "not here" and results["works"].output_tail == ["fine"]
    assert "  fails | about to fail" in lines and "[5/5] works: passed in" in " ".join(lines)


def test_each_part_leaves_the_later_parts_their_least_time_and_none_runs_without_time():
    parts = [Part(name, [PY, "-c", "pass"], cap_s=100, floor_s=20) for name in ("a", "b", "c")]
    results = full.run_parts(parts, budget_s=100, say=lambda line: None, grace_s=5)
    # a: 100 - (20 + 5) * 2 - 5 = 45; the last part may take what is left, up to its cap
    assert results[0].timeout_s == pytest.approx(45, abs=1) and results[2].timeout_s > 80
    starved = full.run_parts(parts[:1], budget_s=8, say=lambda line: None, grace_s=0)
    assert starved[0].status == NOT_RUN and "no time left" in starved[0].detail


def test_the_plan_runs_the_quickstart_second_and_maps_the_device(tmp_path):
    parts = full.plan("cuda:1", tmp_path)
    assert [p.name for p in parts] == ["checks", "quickstart", "gpu_tests", "bench"]
    assert parts[1].argv[parts[1].argv.index("--device") + 1] == "cuda:1"
    assert parts[3].argv[parts[3].argv.index("--device") + 1] == "cuda"
    assert parts[3].env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert "--quick" in parts[3].argv and "-m" in parts[2].argv and "gpu" in parts[2].argv
    assert sum(p.cap_s for p in parts) >= full.BUDGET_S  # (the budget, not the caps, bounds the whole)
    tiny = full.plan("cpu", tmp_path, tiny=True)
    assert tiny[2].argv is None and "--skip" in tiny[0].argv and "--no-report" in tiny[1].argv
    assert json.loads((tmp_path / "tiny.json").read_text())["n_episodes"] == 2


@pytest.mark.parametrize("argv, names", [(["--tiny"], "--tiny"), (["--skip", "nonsense"], "--skip"),
                                         (["--quickstart-dir", "x"], "--quickstart-dir")])
def test_a_bad_full_command_line_is_one_line_and_exit_2(argv, names, capsys, monkeypatch):
    monkeypatch.setattr(full, "full_check", lambda *a, **k: pytest.fail("the check ran after a bad command line"))
    assert doctor.main(["--device", "cpu", *argv]) == doctor.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0]
