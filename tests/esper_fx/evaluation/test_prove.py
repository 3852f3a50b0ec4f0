"""`python -m esper_fx.prove` end to end at a tiny size; its flags; the seed bookkeeping."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from esper_fx.evaluation import comparison as cmp
from esper_fx.cli import prove
from esper_fx.config import TrainingConfig

REPO = Path(__file__).resolve().parents[3]
TINY_SETS = ["--set", "n_envs=2", "--set", "synthetic_train_samples=256", "--set", "synthetic_test_samples=64",
             "--set", "batch_size_per_env=32", "--set", "max_train_batches=2", "--set", "max_epochs=4",
             "--set", "num_minibatches=1"]


def test_a_tiny_prove_trains_evaluates_every_arm_and_writes_json_and_plot(tmp_path, capsys):
    out = tmp_path / "p"
    code = prove.main(["--train-episodes", "2", "--n-eval-seeds", "2", "--out", str(out), "--quiet", *TINY_SETS])
    assert code == 0
    text = capsys.readouterr().out
    for arm in prove.DEFAULT_ARMS:
        assert arm in text
    report = json.loads((out / "prove.json").read_text())
    assert report["seeds"] == [900_000, 900_001]
    assert set(report["episodes"]) == set(prove.DEFAULT_ARMS)
    for arm, episodes in report["episodes"].items():
        assert [e["seed"] for e in episodes] == report["seeds"]
        assert all(len(e["val_accs"]) == 4 for e in episodes)
    pairs = {(p["a"], p["b"]) for p in report["pairs"]}
    assert ("ppo", "wait") in pairs and ("ppo", "oracle") in pairs and ("oracle", "wait") in pairs
    static = {e["seed"]: e for e in report["episodes"]["static_final"]}
    for e in report["episodes"]["ppo"]:  # static_final rebuilds exactly what the trained controller kept
        assert static[e["seed"]]["fossils"] == e["fossils"]
    assert (out / "prove.png").stat().st_size > 0
    assert report["training"]["ppo"]["episodes"] == 2
    assert (out / "train" / "ppo" / "summary.json").exists()


def test_training_and_evaluation_seeds_must_not_overlap(tmp_path, capsys):
    # training seed 0 with 2 envs uses env seeds 0, 1000, 10000, 11000 ...
    code = prove.main(["--train-episodes", "4", "--seed", "0", "--eval-seeds", "5", "11000", "--out", str(tmp_path / "x"),
                       *TINY_SETS])
    assert code == 2
    err = capsys.readouterr().err
    assert "11000" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_training_seeds_are_every_env_seed_of_the_run():
    config = TrainingConfig.preset("quickstart", seed=3, n_episodes=8, n_envs=4)
    assert cmp.training_seeds(config) == {3, 1003, 2003, 3003, 10003, 11003, 12003, 13003}


@pytest.mark.parametrize("args, needle", [
    (["--arms", "dqn"], "dqn"),
    (["--set", "lr"], "KEY=VALUE"),
    (["--set", "lr=-1"], "lr"),
    (["--set", "oracle.slot=r9c9"], "oracle"),
    (["--n-eval-seeds", "0"], "n-eval-seeds"),
    (["--eval-seeds", "7", "7"], "distinct"),
    (["--preset", "nope"], "preset"),
    (["--checkpoint", "/does/not/exist"], "exist"),
    (["--bogus"], "--bogus"),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(args, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert prove.main(args + ["--set", "controller=oracle"] if args[0] == "--set" and "oracle" in args[1]
                      else args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert list(tmp_path.iterdir()) == []


def test_parse_sets_reads_json_values_and_nested_keys():
    from esper_fx.cli.parser import parse_sets  # one implementation for train and prove

    assert parse_sets(["lr=1e-3", "slots=[\"r0c0\"]", "oracle.slot=r0c1", "reward_family=accuracy"]) == {
        "lr": 1e-3, "slots": ["r0c0"], "oracle": {"slot": "r0c1"}, "reward_family": "accuracy"}


def test_the_command_line_runs_as_a_module(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "esper_fx.prove", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--eval-seed-offset" in proc.stdout and "--checkpoint" in proc.stdout


def test_the_comparison_module_does_not_shadow_esper_fx_compare():
    import esper_fx
    from esper_fx.evaluation.comparison import Trained  # noqa: F401 - importing the engine first

    assert callable(esper_fx.compare) and esper_fx.compare.__name__ == "compare"
