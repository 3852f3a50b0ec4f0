"""The command line rejects bad configuration with one line and exit code 2, writing nothing (SPEC §14.4)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from esper_fx.config import PPOConfig
from esper_fx.cli.train import EXIT_CONFIG_ERROR, config_summary, main, resolve_config

REPO = Path(__file__).resolve().parents[3]


def _run_cli(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "esper_fx.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_unknown_json_key_exits_2_names_it_and_writes_nothing(tmp_path):
    cfg = tmp_path / "x.json"
    cfg.write_text(json.dumps({"n_envs": 2, "bogus": 1}))
    before = set(tmp_path.iterdir())
    proc = _run_cli(["--config", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2
    assert "bogus" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert set(tmp_path.iterdir()) == before  # no run directory appeared


def test_help_exits_0(tmp_path):
    proc = _run_cli(["--help"], cwd=tmp_path)
    assert proc.returncode == 0
    for flag in ("--task", "--preset", "--config", "--controller", "--episodes", "--n-envs",
                 "--max-epochs", "--slots", "--device", "--devices", "--amp", "--seed", "--run-dir",
                 "--resume", "--telemetry-level", "--quiet"):
        assert flag in proc.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--n-envs", "0"], "n_envs"),
        (["--n-envs", "two"], "--n-envs"),
        (["--slots", "mid"], "no longer supported"),
        (["--task", "imagenet"], "task"),
        (["--controller", "dqn"], "controller"),
        (["--preset", "nope"], "preset"),
        (["--telemetry-level", "loud"], "telemetry_level"),
        (["--bogus-flag"], "--bogus-flag"),
        (["--config", "does_not_exist.json"], "does_not_exist.json"),
    ],
)
def test_bad_configuration_exits_2_in_process(tmp_path, monkeypatch, capsys, args, needle):
    monkeypatch.chdir(tmp_path)
    assert main(args) == EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_malformed_json_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{\"n_envs\": ")
    assert main(["--config", str(bad)]) == EXIT_CONFIG_ERROR
    assert "bad.json" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_flags_override_preset_and_config(tmp_path):
    config, _ = resolve_config(["--preset", "shapes10", "--n-envs", "2", "--max-epochs", "6",
                                "--slots", "r0c2", "r0c0", "--run-dir", str(tmp_path / "r")])
    assert config.task == "shapes10" and config.n_envs == 2 and config.max_epochs == 6
    assert config.enabled_slots == ("r0c0", "r0c2")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"task": "pytext", "n_envs": 3}))
    config, _ = resolve_config(["--config", str(cfg), "--seed", "7", "--run-dir", str(tmp_path / "q")])
    assert config.task == "pytext" and config.n_envs == 3 and config.seed == 7
    assert config.entropy_coef == PPOConfig().entropy_coef  # --config replaces the preset entirely


def test_default_run_dir_is_under_runs_with_preset_name():
    config, _ = resolve_config([])
    assert config.run_dir.startswith(os.path.join(os.getcwd(), "runs", "quickstart-"))  # absolute, resolved once


def test_summary_has_required_lines():
    config, _ = resolve_config(["--preset", "tinystories", "--run-dir", "x"])
    text = "\n".join(config_summary(config))
    assert len(config_summary(config)) >= 8
    for needle in ("lr=", "gamma=", "clip=", "Episodes: 100, envs: 4, max_epochs: 25", "0.05 -> 0.01",
                   "Update: epochs=8, minibatches=1, amp=off", "LSTM: hidden=128, chunk=25",
                   "contribution/shaped", "Telemetry: enabled"):
        assert needle in text
