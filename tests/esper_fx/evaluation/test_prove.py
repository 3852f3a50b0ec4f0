"""`python -m esper_fx.prove` end to end at a tiny size; its flags; the seed bookkeeping."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from esper_fx.evaluation.comparison import compare
from esper_fx.evaluation.seed_sets import check_disjoint, seed_ranges, training_seeds, training_seeds_between
from esper_fx.cli import prove
from esper_fx.config import TrainingConfig

REPO = Path(__file__).resolve().parents[3]
# (the training runs write no TensorBoard and no report: prove reads neither)
TINY_SETS = ["--set", "n_envs=2", "--set", "synthetic_train_samples=256", "--set", "synthetic_test_samples=64",
             "--set", "batch_size_per_env=32", "--set", "max_train_batches=2", "--set", "max_epochs=4",
             "--set", "ppo.num_minibatches=1", "--set", "tensorboard=false", "--set", "report=false"]
TINY_PROVE = ["--episodes", "2", "--n-eval-seeds", "2", "--quiet", *TINY_SETS]


@pytest.fixture(scope="module")
def tiny_prove(tmp_path_factory):
    """One tiny prove of every default arm, trained on seed 5: (exit code, what it printed, its directory).
    Its trained run is the checkpoint the --checkpoint tests evaluate."""
    out = tmp_path_factory.mktemp("prove") / "p"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = prove.main(["--seed", "5", "--out", str(out), *TINY_PROVE])
    return code, printed.getvalue(), out


def test_a_tiny_prove_trains_evaluates_every_arm_and_writes_json_and_plot(tiny_prove):
    code, text, out = tiny_prove
    assert code == 0
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
    assert (out / "prove.png").stat().st_size > 0 and (out / "prove_compute.png").stat().st_size > 0
    assert all(e["training_flops"] > 0 for episodes in report["episodes"].values() for e in episodes)
    assert all(r["training_gflops_mean"] > 0 and r["params_mean"] > 0 for r in report["rows"])
    assert report["training"]["ppo"]["episodes"] == 2
    assert (out / "train" / "ppo" / "summary.json").exists()


def test_training_and_evaluation_seeds_must_not_overlap(tmp_path, capsys):
    # training seed 0 with 2 envs uses env seeds 0, 1000, 10000, 11000 ...
    code = prove.main(["--episodes", "4", "--seed", "0", "--eval-seeds", "5", "11000", "--out", str(tmp_path / "x"),
                       *TINY_SETS])
    assert code == 2
    err = capsys.readouterr().err
    assert "11000" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_training_seeds_are_every_env_seed_of_the_run():
    config = TrainingConfig.preset("quickstart", seed=3, n_episodes=8, n_envs=4)
    assert training_seeds(config) == {3, 1003, 2003, 3003, 10003, 11003, 12003, 13003}


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
    (["--arms", "wait", "best_fixed", "--tuning-seeds", "900001"], "also evaluation seeds"),
    (["--arms", "wait", "best_fixed", "--tuning-seeds", "42"], "also training seeds"),
    (["--arms", "wait", "best_fixed", "--tuning-seeds", "3", "3"], "distinct"),
    (["--arms", "ppo", "wait", "--set", "controller=reinforce"],
     "--arms ppo plays a PPO controller, and this run's controller is 'reinforce': its arm is named by its "
     "controller (--arms reinforce wait)"),
])
def test_bad_flags_exit_2_with_one_line_and_write_nothing(args, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert prove.main(args + ["--set", "controller=oracle"] if args[0] == "--set" and "oracle" in args[1]
                      else args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert list(tmp_path.iterdir()) == []


def test_the_default_arms_name_the_learning_arm_by_its_controller():
    reinforce = TrainingConfig.preset("quickstart", controller="reinforce")
    default = list(prove.DEFAULT_ARMS)
    assert prove.arms_named_by_controller(default, reinforce, typed=False, checkpoint=False) == [
        "reinforce", "wait", "random", "heuristic", "oracle", "static_final"]
    assert prove.arms_named_by_controller(default, TrainingConfig.preset("quickstart"), False, False) == default
    heuristic = TrainingConfig.preset("quickstart", controller="heuristic")  # its arm once, not twice
    assert prove.arms_named_by_controller(default, heuristic, False, False).count("heuristic") == 1


def test_parse_sets_reads_json_values_and_nested_keys():
    from esper_fx.cli.parser import old_set_keys, parse_sets  # one implementation for train and prove

    assert parse_sets(["ppo.lr=1e-3", "slots=[\"r0c0\"]", "oracle.slot=r0c1", "reward.reward_family=accuracy",
                       "reward.probation_base=4"]) == {
        "ppo": {"lr": 1e-3}, "slots": ["r0c0"], "oracle": {"slot": "r0c1"},
        "reward": {"reward_family": "accuracy", "probation_base": 4}}
    # the keys of earlier versions land where today's do; `old_set_keys` names them for the command's note
    assert parse_sets(["lr=1e-3", "reward_family=accuracy", "ppo.gamma=0.9", "gae_lambda=0.9"]) == {
        "ppo": {"lr": 1e-3}, "learner": {"gamma": 0.9, "gae_lambda": 0.9}, "reward": {"reward_family": "accuracy"}}
    assert old_set_keys(["lr=1e-3", "reward_family=accuracy", "ppo.gamma=0.9", "seed=3",
                         "reward.probation_base=4"]) == ["lr", "reward_family", "ppo.gamma"]


def test_the_command_line_runs_as_a_module(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "esper_fx.prove", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--eval-seed-offset" in proc.stdout and "--checkpoint" in proc.stdout


def test_the_comparison_module_does_not_shadow_esper_fx_compare():
    import esper_fx
    import esper_fx.evaluation.comparison  # noqa: F401 - importing the engine first

    assert callable(esper_fx.compare) and esper_fx.compare.__name__ == "compare"


# ----------------------------------------------------------------------------------------------
# bad inputs: one line, exit 2, nothing written, before anything runs (issue 22)
# ----------------------------------------------------------------------------------------------

BIG = str(2**64)


@pytest.mark.parametrize("args, needle", [
    (["--seed", BIG], "seed"),
    (["--eval-seeds", BIG], "--eval-seeds"),
    (["--eval-seeds", str(-(2**63) - 1)], "--eval-seeds"),
    (["--eval-seed-offset", str(2**63 - 4)], "--eval-seed-offset"),
    (["--n-eval-seeds", str(10**12)], "--n-eval-seeds"),
    (["--set", "oracle.slot=r9c9"], "oracle.slot"),  # the oracle arm, whatever the trained controller
    (["--set", "slots=[\"r0c0\"]", "--set", "oracle.slot=r0c1"], "oracle.slot"),
    (["--set", "oracle.germinate_epoch=99"], "germinate_epoch"),
    (["--set", "oracle=5"], "oracle.FIELD"),
    (["--set", "heuristic=\"x\""], "heuristic.FIELD"),
    (["--set", "bogus_field=1"], "bogus_field"),
    (["--arms", "wait", "static_final", "oracle"], "static_final"),
    (["--arms", "wait", "wait"], "twice"),
    # huge numbers: the seed-overlap check is arithmetic, so these are refused at once
    (["--seed", "900000", "--episodes", str(2**40)], "also training seeds"),
    (["--seed", "0", "--eval-seed-offset", "0", "--n-eval-seeds", "100000", "--episodes", str(2**40)],
     "also training seeds"),
    (["--episodes", str(2**41)], "n_episodes"),
    # issue 39, items 4 and 5: a tuning seed out of range raised a 56-line traceback after evaluation began;
    # JSON that Python cannot hold, a traceback (or a line without the key)
    (["--arms", "wait", "best_fixed", "--tuning-seeds", BIG], "tuning seed 18446744073709551616 is not a signed"),
    (["--arms", "wait", "best_fixed", "--tuning-seeds", str(-(2**63) - 1)], "is not a signed 64-bit seed"),
    (["--set", "seed=" + "9" * 5000], "--set seed: the value"),
    (["--set", "lr=" + "[" * 100_000 + "]" * 100_000], "--set lr: the value"),
    # issue 39, item 8: what prove silently ignored
    (["--checkpoint", "nowhere", "--episodes", "4"], "--episodes: --checkpoint nowhere"),
    (["--eval-seeds", "5", "--n-eval-seeds", "3"], "--n-eval-seeds and --eval-seed-offset would be ignored"),
    (["--eval-seeds", "5", "--eval-seed-offset", "3"], "--n-eval-seeds and --eval-seed-offset would be ignored"),
    (["--arms", "wait", "random", "--set", "oracle.slot=r0c1"], "no arm of wait random plays the oracle"),
])
def test_bad_values_exit_2_naming_the_field_before_anything_runs(args, needle, tmp_path, capsys, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    assert prove.main(args) == 2
    assert time.perf_counter() - started < 10  # bounded whatever the numbers
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.lstat().st_size if p.is_file() else 0, p.lstat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("args, setup, needle", [
    (["--out", "afile"], lambda d: (d / "afile").write_text("x"), "not a directory"),
    (["--out", "afile/sub"], lambda d: (d / "afile").write_text("x"), "cannot be created"),
    (["--out", "full"], lambda d: ((d / "full").mkdir(), (d / "full" / "x").write_text("x")), "not empty"),
    (["--json", "missing/p.json"], None, "does not exist"),
    (["--json", "adir"], lambda d: (d / "adir").mkdir(), "is a directory"),
    (["--json", "afile/p.json"], lambda d: (d / "afile").write_text("x"), "does not exist"),
])
def test_bad_output_paths_exit_2_and_create_nothing(args, setup, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if setup is not None:
        setup(tmp_path)
    before = _tree(tmp_path)
    out = [] if "--out" in args else ["--out", "o"]
    assert prove.main(args + out + ["--arms", "wait", "--n-eval-seeds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert _tree(tmp_path) == before


def test_the_seed_overlap_check_agrees_with_enumerating_every_training_seed():
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.integers(-30_000, 30_000), st.integers(1, 40), st.integers(1, 12), st.integers(-40_000, 60_000),
           st.integers(0, 30_000))
    def check(seed, n_episodes, n_envs, low, width):
        config = TrainingConfig.preset("quickstart", seed=seed, n_episodes=n_episodes, n_envs=n_envs,
                                       num_minibatches=1)
        expected = sorted(s for s in training_seeds(config) if low <= s <= low + width)
        assert training_seeds_between(config, low, low + width, limit=10**6) == expected
        assert training_seeds_between(config, low, low + width, limit=3) == expected[:3]

    check()


@pytest.mark.parametrize("sets, field", [  # (the tiny prove trained ppo_lstm on shapes16, 4 epochs, 3 slots)
    (["task=shapes10"], "task"), (["slots=[\"r0c0\"]"], "slots"), (["ppo.lstm_hidden_dim=64"], "ppo.lstm_hidden_dim"),
    (["controller=ppo_mlp"], "controller"), (["max_epochs=5"], "max_epochs"),
    (["use_telemetry=false"], "use_telemetry"), (["observe_log_params=true"], "observe_log_params"),
    (['observe_withheld=["curves"]'], "observe_withheld"),
])
def test_a_checkpoint_is_not_evaluated_with_other_shape_fields(tiny_prove, sets, field, tmp_path, capsys,
                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--checkpoint", str(tiny_prove[2] / "train" / "ppo"), "--arms", "ppo", "wait", "--n-eval-seeds", "1"]
    for item in sets:
        args += ["--set", item]
    assert prove.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--set {field}" in err[0], err
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# stops: prove.json of the finished episodes, marked partial; 130 / 143; one message
# ----------------------------------------------------------------------------------------------


def test_sigterm_during_evaluation_writes_the_finished_episodes_as_partial(tmp_path, capsys):
    from esper_fx.evaluation import episodes as evaluate
    from tests.esper_fx.stops import signal_at_call

    restore = signal_at_call(evaluate.Arm, "run", 4, signal.SIGTERM)  # the second arm's first seed
    try:
        out = tmp_path / "p"
        code = prove.main(["--arms", "wait", "random", "--n-eval-seeds", "3", "--out", str(out), "--quiet",
                           *TINY_SETS])
    finally:
        restore()
    assert code == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted (SIGTERM)" in err[0] and "3 evaluation episode(s) of 6" in err[0], err
    report = json.loads((out / "prove.json").read_text())
    assert report["partial"] is True and report["stopped"]["signal"] == "SIGTERM"
    assert [e["seed"] for e in report["episodes"]["wait"]] == [900_000, 900_001, 900_002]
    assert "random" not in report["episodes"] and [r["arm"] for r in report["rows"]] == ["wait"]
    assert not (out / "prove.png").exists()


def test_ctrl_c_during_training_keeps_its_checkpoint_and_writes_a_partial_prove_json(tmp_path, capsys,
                                                                                      monkeypatch):
    from esper_fx.training import pools
    from tests.esper_fx.stops import signal_at_apply

    original = pools.build_pool

    def build_pool(config, *args):
        pool = original(config, *args)
        signal_at_apply(pool, 5)  # the first epoch of the second batch
        return pool

    monkeypatch.setattr(pools, "build_pool", build_pool)
    out = tmp_path / "p"
    code = prove.main(["--arms", "ppo", "wait", "--episodes", "6", "--n-eval-seeds", "2", "--out", str(out),
                       "--quiet", *TINY_SETS, "--set", "checkpoint_every=1"])
    assert code == 130
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("esper_fx.prove")]
    assert len(err) == 1 and "interrupted (SIGINT)" in err[0], err
    assert err[0].endswith(f"continue with: python -m esper_fx.prove --resume {out}"), err
    report = json.loads((out / "prove.json").read_text())
    assert report["partial"] is True and report["episodes"] == {}
    assert report["stopped"]["training_run_dir"] == str(out / "train" / "ppo")
    assert Path(report["stopped"]["training_checkpoint"]).is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("signum, workers", [(signal.SIGINT, "0"), (signal.SIGTERM, "0"), (signal.SIGTERM, "2")])
def test_a_real_signal_during_evaluation_ends_prove_without_a_traceback(signum, workers, tmp_path):
    """In this process and with the episodes as Ray tasks (issue 39, item 3: there a SIGTERM came out of
    Ray's wait as a plain KeyboardInterrupt, recorded as SIGINT with exit 130)."""
    import time

    env = dict(os.environ, PYTHONPATH=str(REPO))
    # as Ray tasks, episodes of several seconds: Ray looks for signals once a second while it waits, and only
    # a signal that meets a wait there is turned into a plain KeyboardInterrupt
    longer = [] if workers == "0" else ["--set", "synthetic_train_samples=1024", "--set", "max_train_batches=16",
                                        "--set", "max_epochs=12"]
    proc = subprocess.Popen([sys.executable, "-m", "esper_fx.prove", "--arms", "wait", "--n-eval-seeds", "50",
                             "--out", str(tmp_path / "p"), "--env-workers", workers, *TINY_SETS, *longer],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:  # the first finished evaluation episode
            if line.startswith("compare: wait seed") or time.monotonic() > deadline:
                break
        if workers != "0":
            time.sleep(0.5)  # (the driver then waits on Ray, not printing the episodes that finished)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err and err.strip().count("esper_fx.prove: interrupted") == 1, err
    report = json.loads((tmp_path / "p" / "prove.json").read_text())
    assert report["partial"] is True and 1 <= len(report["episodes"]["wait"]) < 50
    assert report["stopped"]["signal"] == signal.Signals(signum).name


@pytest.mark.parametrize("seeds, needle", [
    (range(0, 10**12), "at most"), ([2**63], "signed 64-bit"), ([5, 5], "distinct"), ([], "distinct"),
])
def test_compare_refuses_bad_seed_sets_at_once(seeds, needle):
    import time

    started = time.perf_counter()
    with pytest.raises(ValueError, match=needle):
        compare({"wait": "wait"}, TrainingConfig.preset("quickstart"), seeds)
    assert time.perf_counter() - started < 5


def test_the_overlap_check_of_many_listed_seeds_is_bounded():
    import time

    config = TrainingConfig.preset("quickstart", seed=0, n_episodes=2**40, n_envs=1024, num_minibatches=1)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="also training seeds"):
        check_disjoint(config, list(range(0, 100_000)))
    check_disjoint(config.replace(n_episodes=1024), [-5, *range(-100_000, -10)])  # below every training seed
    assert time.perf_counter() - started < 5
    assert seed_ranges([5, 3, 4, 9, 10, 1]) == [(1, 1), (3, 5), (9, 10)]


# ----------------------------------------------------------------------------------------------
# several training seeds (issue 36)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["--train-seeds"], "--train-seeds: expected at least one argument"),
    (["--train-seeds", "3", "7", "3"], "--train-seeds: training seeds must be one or more distinct seeds"),
    (["--train-seeds", "3", BIG], "--train-seeds: training seed 18446744073709551616 is not a signed 64-bit seed"),
    (["--train-seeds", str(-(2**63) - 1)], "is not a signed 64-bit seed"),
    (["--train-seeds", "3", "--seed", "4"], "--seed would be ignored (drop --seed)"),
    (["--train-seeds", "3", "--set", "seed=4"], "--set seed would be ignored (drop --set seed)"),
    (["--train-seeds", "3", "--checkpoint", "nowhere"], "(drop --train-seeds, or --checkpoint"),
    (["--checkpoint", "a", "b", "--seed", "4"], "each of several runs is played with its own training seed: --seed"),
    (["--checkpoint", "a", "b", "--set", "seed=4"], "--set seed would be ignored (drop --set seed)"),
    (["--train-seeds", "3", "--arms", "wait", "oracle", "static_final"], "no arm learns"),
    # every training seed's env seeds stay off the evaluation and tuning seeds (seed 0, env 1: 1000)
    (["--train-seeds", "5", "0", "--eval-seeds", "7", "1000", "--set", "n_envs=2"], "from seed 0"),
    (["--train-seeds", "5", "0", "--arms", "ppo", "best_fixed", "--tuning-seeds", "1005", "--set", "n_envs=2"],
     "tuning seeds [1005] are also training seeds of this run (from seed 5)"),
])
def test_bad_training_seed_lists_exit_2_with_one_line_before_anything_runs(args, needle, tmp_path, capsys,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert prove.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


def _same_episode(a: dict, b: dict) -> bool:
    """Every number of two episodes but the arm's name and the wall time."""
    skip = {"arm", "wall_s"}
    return {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}


@pytest.mark.slow
def test_each_training_seeds_rows_equal_a_single_seed_prove(tiny_prove, tmp_path, capsys):
    out = tmp_path / "many"
    assert prove.main(["--train-seeds", "5", "9", "--arms", "ppo", "wait", "static_final", "--out", str(out),
                       *TINY_PROVE]) == 0
    text = capsys.readouterr().out
    assert "ppo[seed=5]" in text and "across training seeds 5 9" in text and "ppo vs static_final:" in text
    report = json.loads((out / "prove.json").read_text())
    assert report["train_seeds"] == [5, 9]
    assert set(report["episodes"]) == {"ppo[seed=5]", "ppo[seed=9]", "wait", "static_final[seed=5]",
                                       "static_final[seed=9]"}  # wait ran once
    assert [g["b"] for g in report["aggregate"]] == ["wait", "static_final"]
    assert report["training"]["ppo[seed=9]"]["run_dir"] == str(out / "train" / "ppo-seed9")
    assert (out / "prove.png").stat().st_size > 0
    assert prove.main(["--seed", "9", "--arms", "ppo", "--out", str(tmp_path / "one-9"), *TINY_PROVE]) == 0
    single_seed = {5: tiny_prove[2], 9: tmp_path / "one-9"}  # seed 5's single-seed prove: the tiny prove
    for seed in (5, 9):
        mine = report["episodes"][f"ppo[seed={seed}]"]
        static = report["episodes"][f"static_final[seed={seed}]"]
        assert [e["fossils"] for e in static] == [e["fossils"] for e in mine]  # its own seed's network
        single = json.loads((single_seed[seed] / "prove.json").read_text())["episodes"]["ppo"]
        assert len(single) == len(mine) == 2 and all(_same_episode(a, b) for a, b in zip(mine, single)), (mine, single)
        trained = json.loads((out / "train" / f"ppo-seed{seed}" / "config.json").read_text())
        assert trained["seed"] == seed
    # the same runs read back: several --checkpoint runs play as the training seeds' rows, aggregated alike
    again = tmp_path / "again"
    capsys.readouterr()
    assert prove.main(["--checkpoint", str(out / "train" / "ppo-seed5"), str(out / "train" / "ppo-seed9"), "--arms",
                       "ppo", "wait", "static_final", "--n-eval-seeds", "2", "--quiet", "--out", str(again)]) == 0
    text = capsys.readouterr().out
    assert "across training seeds 5 9" in text and "trained ppo" not in text  # nothing trained
    replayed = json.loads((again / "prove.json").read_text())
    assert replayed["train_seeds"] == [5, 9] and set(replayed["episodes"]) == set(report["episodes"])
    for arm, episodes in report["episodes"].items():
        assert all(_same_episode(a, b) for a, b in zip(episodes, replayed["episodes"][arm])), arm
    assert replayed["aggregate"] == report["aggregate"]
    assert not (again / "train").exists()


def test_several_checkpoints_must_be_runs_of_one_configuration_with_distinct_seeds(monkeypatch):
    from esper_fx.evaluation import episodes

    base = TrainingConfig.preset("quickstart", n_episodes=8)
    runs = {"a": base.replace(seed=5), "b": base.replace(seed=9, env_workers=0, run_dir="elsewhere"),
            "c": base.replace(seed=5), "d": base.replace(seed=11, n_episodes=16), "e": base.replace(seed=12, lr=1e-3)}
    monkeypatch.setattr(episodes, "load_policy", lambda path: (runs[path], f"policy of {path}"))
    loaded = prove.load_checkpoints(["a", "b"])  # where and how a run ran may differ
    assert [(path, config.seed, policy) for path, config, policy in loaded] == [("a", 5, "policy of a"),
                                                                               ("b", 9, "policy of b")]
    with pytest.raises(prove.ProveError, match="a and c were both trained with seed 5"):
        prove.load_checkpoints(["a", "c"])
    with pytest.raises(prove.ProveError, match="--checkpoint d: trained with n_episodes 16, a with 8"):
        prove.load_checkpoints(["a", "d"])
    with pytest.raises(prove.ProveError, match="--checkpoint e: trained with ppo.lr 0.001, a with 0.0003"):
        prove.load_checkpoints(["a", "e"])


def test_ctrl_c_during_the_second_training_seed_keeps_the_first_and_a_resumable_checkpoint(tmp_path, capsys,
                                                                                          monkeypatch):
    from esper_fx.training import pools
    from tests.esper_fx.stops import signal_at_apply

    original, built = pools.build_pool, []

    def build_pool(config, *args):
        pool = original(config, *args)
        built.append(pool)
        if len(built) == 2:  # the second training seed's run
            signal_at_apply(pool, 5)  # the first epoch of its second batch
        return pool

    monkeypatch.setattr(pools, "build_pool", build_pool)
    out = tmp_path / "p"
    code = prove.main(["--train-seeds", "5", "9", "--arms", "ppo", "wait", "--episodes", "4", "--n-eval-seeds",
                       "2", "--out", str(out), "--quiet", *TINY_SETS, "--set", "checkpoint_every=1"])
    assert code == 130
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("esper_fx.prove")]
    assert len(err) == 1 and "of 6 finished" in err[0] and f"python -m esper_fx.prove --resume {out}" in err[0], err
    report = json.loads((out / "prove.json").read_text())
    assert report["partial"] is True and report["episodes"] == {}
    assert report["training"]["ppo[seed=5]"]["episodes"] == 4  # the first seed's run finished and is kept
    assert report["stopped"]["training_run_dir"] == str(out / "train" / "ppo-seed9")
    assert Path(report["stopped"]["training_checkpoint"]).is_dir()


def test_prove_spells_the_fields_it_shares_with_train_as_train_does():
    """Issue 37: `prove` said `--train-episodes` where `train` says `--episodes`, and had no `--device`
    (the old spelling still parses, out of `--help`)."""
    from esper_fx.cli.train import build_parser as train_parser

    args = prove.build_parser().parse_args(["--episodes", "3", "--device", "cpu", "--seed", "4"])
    config = prove.resolve(args)[0]
    assert (config.n_episodes, config.device, config.seed) == (3, "cpu", 4)
    assert prove.build_parser().parse_args(["--train-episodes", "5"]).n_episodes == 5
    shared = {"--episodes", "--device", "--seed", "--env-workers", "--data-dir"}
    for parser in (prove.build_parser(), train_parser()):
        assert shared <= set(parser._option_string_actions)
    assert "--train-episodes" not in prove.build_parser().format_help()


def test_an_old_key_in_set_reads_as_todays_with_one_note_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = {}
    monkeypatch.setattr(prove, "run_prove", lambda args, config, *rest, **kw: got.setdefault("config", config) and 0)
    base = ["--arms", "ppo", "wait", "--n-eval-seeds", "1", "--out", "o"]
    assert prove.main([*base, "--set", "lr=1e-3", "--set", "reward_mode=sparse", "--set",
                       "reward.reward_family=contribution"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esper_fx: note: config key 'lr' is now 'ppo.lr', ")
    assert "'reward_mode' is now 'reward.reward_mode'" in err[0]
    old = got.pop("config")
    assert prove.main([*base, "--set", "ppo.lr=1e-3", "--set", "reward.reward_mode=sparse", "--set",
                       "reward.reward_family=contribution"]) == 0
    assert capsys.readouterr().err == ""
    assert got["config"] == old and old.ppo.lr == 1e-3 and old.reward.reward_mode == "sparse"
