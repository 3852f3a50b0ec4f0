"""The default_workers benchmark's logic on fakes (the real commands take minutes: the lead runs them)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from esper_fx.bench import bench_default_workers as bench
from esper_fx.bench.cli import ON_REQUEST, selected


def test_the_commands_differ_only_by_env_workers_0():
    default, serial = bench.command("train", Path("d"), False), bench.command("train", Path("d"), True)
    assert default[1:3] == ["-m", "esper_fx.train"] and serial == default + ["--env-workers", "0"]
    assert bench.command("prove", Path("p"), False)[-2:] == ["--out", "p"]


def test_first_action_is_read_from_the_runs_output():
    assert bench.first_action_s("Compilation cache: ...\nFirst action after 12.5 s\nRun directory: x") == 12.5
    assert bench.first_action_s("no such line") is None


def test_untimed_drops_clock_readings_and_the_runs_own_directory():
    tree = {"acc": 1.5, "wall_s": 3.0, "timing": {"x": 1}, "seed": 7,
            "episodes": [{"wall_s": 2.0, "note": "/tmp/a/train"}]}
    assert bench.untimed(tree, "/tmp/a") == {"acc": 1.5, "seed": 7, "episodes": [{"note": "<out>/train"}]}


def test_first_difference_names_the_field_or_says_none():
    a = {"metrics.csv": [["1", "2"]], "summary.json": {"final": 61.2}}
    assert bench.first_difference(a, json.loads(json.dumps(a))) is None
    assert bench.first_difference(a, {**a, "summary.json": {"final": 61.3}}) == "summary.json.final: 61.2 != 61.3"
    assert bench.first_difference(a, {**a, "metrics.csv": [["1", "2"], ["3"]]}) == "metrics.csv: 1 entries != 2"


def test_serial_share_and_amdahl():
    summary = {"wall_time_s": 100.0, "timing": {"env_workers": 2, "worker_s": 80.0}}
    assert bench.serial_share(summary) == pytest.approx(0.2)
    assert bench.serial_share({"wall_time_s": 10.0, "timing": {"env_workers": 0}}) is None
    est = bench.amdahl(0.2, workers=2, n_envs=4)
    # in process: 0.2 + 1.6 = 1.8; two workers 1.0; four 0.6; more cores than envs gain nothing more
    assert est["2"] == pytest.approx(1.8) and est["4"] == pytest.approx(3.0) and est["16"] == est["4"]


def _fake_runner(accuracy_of_default: float):
    """A stand-in for subprocess.run: writes each command's outputs, the default's with `accuracy_of_default`."""
    def run(cmd, **kwargs):
        out = Path(cmd[cmd.index("--run-dir") + 1])
        out.mkdir(parents=True)
        default = "--env-workers" not in cmd
        (out / "metrics.csv").write_text("batch,accuracy,wall_s\n0,50.0,1.0\n")
        acc = accuracy_of_default if default else 61.0
        timing = {"env_workers": 2, "worker_s": 8.0} if default else {"env_workers": 0}
        (out / "summary.json").write_text(json.dumps({"final_avg_accuracy": acc, "wall_time_s": 10.0,
                                                       "timing": timing, "checkpoint": str(out / "c")}))
        return subprocess.CompletedProcess(cmd, 0, "First action after 3.0 s\n", "")
    return run


def test_a_round_runs_both_interleaved_and_refuses_different_numbers(tmp_path):
    rounds = [bench.one_round("train", i, tmp_path, _fake_runner(61.0)) for i in range(2)]
    result = bench.summarize("train", rounds, n_envs=4)
    assert result["identical"] and result["ratio"] > 0 and result["serial_share"] == pytest.approx(0.2)
    assert rounds[0]["default"]["first_action_s"] == 3.0 and rounds[1]["in_process"]["env_workers"] == 0
    with pytest.raises(AssertionError, match="final_avg_accuracy: 61.5 != 61.0"):
        bench.one_round("train", 2, tmp_path, _fake_runner(61.5))


def test_a_failed_command_raises_with_its_last_lines():
    with pytest.raises(RuntimeError, match="exited 3: boom"):
        bench.timed([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])


def test_the_default_workers_benchmarks_run_only_when_named():
    assert not set(ON_REQUEST) & set(selected(None))
    assert selected(["default_workers"]) == list(ON_REQUEST)
    assert selected(["default_workers_prove", "ray"]) == ["ray", "default_workers_prove"]


def test_prove_rounds_compare_the_table_not_the_command_line_that_asked_for_it(tmp_path):
    def run(cmd, **kwargs):
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        table = {"rows": [{"arm": "ppo", "accuracy_mean": 40.0 if "--env-workers" in cmd else 40.5}]}
        (out / "prove.json").write_text(json.dumps({**table, "command": cmd, "config": {"env_workers": cmd[-1]},
                                                    "wall_s": 3.0}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    with pytest.raises(AssertionError, match=r"rows\[0\]\.accuracy_mean: 40\.5 != 40\.0 \(wall [0-9.]+ s by default"):
        bench.one_round("prove", 0, tmp_path / "a", run)

    def equal(cmd, **kwargs):
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "prove.json").write_text(json.dumps({"rows": [{"arm": "ppo", "accuracy_mean": 40.0}], "command": cmd,
                                                    "config": {"env_workers": cmd[-1]}, "wall_s": 3.0}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    round_ = bench.one_round("prove", 0, tmp_path / "b", equal)
    assert set(round_) == {"default", "in_process"} and round_["default"]["wall_s"] >= 0
