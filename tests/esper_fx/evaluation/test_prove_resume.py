"""`prove --resume` and `compare(..., resume=DIR)` (issue 57, item 1): a prove stopped in each stage (a training
seed, the best_fixed search, the static arms, the evaluation), by SIGINT and by SIGTERM, continues to exactly
the rows, table and prove.json of an unbroken run, playing every unit once; flags that would change the
result are refused by name."""

import contextlib
import io
import json
import os
import signal
from pathlib import Path

import pytest

from esper_fx.cli import prove
from esper_fx.evaluation import episodes as evaluate
from tests.esper_fx.stops import VOLATILE_KEYS, signal_at_apply, signal_at_call, without_keys

# a tiny prove with every stage: a training seed of three batches (a checkpoint after each), one evaluation
# seed, a best_fixed search of one slot and one blueprint under the reference's clock (4 schedules), static_final
# rebuilding the trained network, on its whole budget and on half of it
TINY_SETS = ["--set", "n_envs=2", "--set", "synthetic_train_samples=256", "--set", "synthetic_test_samples=64",
             "--set", "batch_size_per_env=32", "--set", "max_train_batches=2", "--set", "max_epochs=4",
             "--set", "ppo.num_minibatches=1", "--set", "tensorboard=false", "--set", "report=false"]
ARGS = ["--train-seeds", "5", "--arms", "ppo", "wait", "best_fixed", "static_final", "--static-budgets", "0.5",
        "--episodes", "6", "--n-eval-seeds", "1", "--env-workers", "0", "--quiet", *TINY_SETS,
        "--set", "checkpoint_every=1", "--set", 'slots=["r0c1"]', "--set", 'blueprint_menu=["noop","conv_light"]',
        "--set", "lifecycle=reference"]
# clock readings and where it ran: the only things a resumed prove may write differently
CLOCKS = VOLATILE_KEYS | {"wall_s", "command", "run_dir", "resumes"}
# one prove stopped twice in each stage, once by each signal, in the order it reaches them: (stage, signal, the
# arm whose n-th episode of that start is stopped as it begins; in training, the n-th controller step of it)
STOPS = [("training", signal.SIGINT, None, 5),  # the first epoch of the second batch
         ("training", signal.SIGTERM, None, 5),  # resumed at the second batch: the first epoch of the third
         ("evaluation", signal.SIGINT, "ppo[seed=5]", 1),
         ("evaluation", signal.SIGTERM, "wait", 1),
         ("search", signal.SIGINT, "best_fixed", 2),  # the second schedule
         ("search", signal.SIGTERM, "best_fixed", 2),  # the third (the first two are kept)
         ("static", signal.SIGINT, "static_final[seed=5]", 1),
         ("static", signal.SIGTERM, "static_final@0.5[seed=5]", 1)]


def _prove(argv, monkeypatch, stop=None, played=None):
    """(exit code, stdout, stderr lines) of one prove in this process, stopped as `stop` (a STOPS entry) says;
    `played` collects (arm, seed) of every episode it plays to the end."""
    stage, signum, arm, nth = stop or (None, None, None, None)
    out, err = io.StringIO(), io.StringIO()
    with monkeypatch.context() as patch:
        original, hits = evaluate.Arm.run, {"n": 0}

        def run(self, seed):
            if arm is not None and self.name == arm:
                hits["n"] += 1
                if hits["n"] == nth:
                    os.kill(os.getpid(), signum)
            episode = original(self, seed)
            if played is not None:
                played.append((self.name, int(seed)))
            return episode

        patch.setattr(evaluate.Arm, "run", run)
        if stage == "training":
            from esper_fx.training import pools

            build = pools.build_pool

            def build_pool(config, *args):
                pool = build(config, *args)
                signal_at_apply(pool, nth, signum)
                return pool

            patch.setattr(pools, "build_pool", build_pool)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = prove.main(argv)
    return code, out.getvalue(), err.getvalue().strip().splitlines()


def _table(stdout: str) -> str:
    """The printed table, without the lines that read a clock."""
    return "\n".join(line for line in stdout.splitlines() if not line.startswith(("trained ", "prove: ")))


def _results(out: Path) -> dict:
    return without_keys(json.loads((out / "prove.json").read_text()), CLOCKS)


def test_a_prove_stopped_twice_in_every_stage_resumes_to_the_unbroken_result(tmp_path, monkeypatch):
    reference, reference_played = tmp_path / "unbroken", []
    code, stdout, _ = _prove([*ARGS, "--out", str(reference)], monkeypatch, played=reference_played)
    assert code == 0
    out, played = tmp_path / "p", []
    for i, stop in enumerate(STOPS):
        stage, signum = stop[:2]
        argv = [*ARGS, "--out", str(out)] if i == 0 else ["--resume", str(out)]
        code, _, err = _prove(argv, monkeypatch, stop, played)
        assert code == (130 if signum == signal.SIGINT else 143), (stop, err)
        lines = [line for line in err if line.startswith("esper_fx.prove")]
        assert len(lines) == 1 and f"interrupted ({signal.Signals(signum).name})" in lines[0], (stop, err)
        assert lines[0].endswith(f"continue with: python -m esper_fx.prove --resume {out}"), (stop, lines)
        assert json.loads((out / "prove.json").read_text())["partial"] is True
        training = out / "train" / "ppo-seed5"
        if stage == "training":
            assert (training / "checkpoints").is_dir() and not (training / "summary.json").exists()
        elif stage == "evaluation" and signum == signal.SIGINT:  # the run finished in this start
            finished_at = (training / "summary.json").stat().st_mtime_ns
    code, resumed_stdout, err = _prove(["--resume", str(out)], monkeypatch, played=played)
    assert code == 0, err
    assert _table(resumed_stdout) == _table(stdout)
    assert _results(out) == _results(reference)
    # every unit once: the finished training run read back, not trained again; every episode played once
    assert (training / "summary.json").stat().st_mtime_ns == finished_at
    assert sorted(played) == sorted(reference_played)
    # prove.json names the first start's command line, which the results answer, and each resume's after it
    kept = json.loads((out / "prove.json").read_text())
    assert kept["command"][1:] == [*ARGS, "--out", str(out)]
    assert [r["argv"] for r in kept["resumes"]] == [["--resume", str(out)]] * len(STOPS)
    assert all(r["utc"].endswith("Z") and r["cwd"] == os.getcwd() for r in kept["resumes"])
    assert json.loads((reference / "prove.json").read_text())["resumes"] == []


def test_a_resume_refuses_a_flag_that_changes_the_result_by_name(tmp_path, capsys):
    out = tmp_path / "p"
    out.mkdir()
    (out / prove.COMMAND_NAME).write_text(json.dumps({"argv": [*ARGS, "--out", str(out)], "cwd": str(tmp_path)}))
    before = sorted(p.name for p in out.iterdir())
    for flags, needle in [(["--arms", "ppo", "wait"], "--resume: --arms cannot change on resume (the first start has "
                                                       "['ppo', 'wait', 'best_fixed', 'static_final'], the "
                                                       "command line ['ppo', 'wait'])"),
                          (["--n-eval-seeds", "2"], "--resume: --n-eval-seeds cannot change on resume"),
                          (["--episodes", "8"], "--resume: n_episodes cannot change on resume (the first start "
                                                "has 6, the command line 8)"),
                          (["--set", "max_epochs=5"], "--resume: max_epochs cannot change on resume"),
                          (["--out", str(tmp_path / "q")], "drop --out")]:
        assert prove.main(["--resume", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], (flags, err)
    assert prove.main(["--resume", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no prove was started there" in err[0], err
    assert sorted(p.name for p in out.iterdir()) == before and not (tmp_path / "none").exists()


def test_a_resume_may_change_where_and_how_it_runs(tmp_path):
    out = tmp_path / "p"
    out.mkdir()
    (out / prove.COMMAND_NAME).write_text(json.dumps({"argv": [*ARGS, "--out", str(out)], "cwd": str(tmp_path)}))
    args = prove.resumed_args(["--resume", str(out), "--device", "cpu", "--set", "checkpoint_every=2"])
    config = prove.resolve(args).config
    assert args.out == str(out) and args.arms == ["ppo", "wait", "best_fixed", "static_final"]
    assert config.device == "cpu" and config.checkpoint_every == 2 and config.max_epochs == 4


def test_a_resume_reads_a_relative_data_dir_from_the_first_starts_folder(tmp_path, monkeypatch):
    out = tmp_path / "p"
    out.mkdir()
    (out / prove.COMMAND_NAME).write_text(json.dumps({"argv": [*ARGS, "--data-dir", "data", "--out", str(out)],
                                                      "cwd": str(tmp_path / "first")}))
    monkeypatch.chdir(out)  # resumed from another folder
    config = prove.resolve(prove.resumed_args(["--resume", str(out)])).config
    assert config.data_root == str(tmp_path / "first" / "data")
    config = prove.resolve(prove.resumed_args(["--resume", str(out), "--data-dir", "elsewhere"])).config
    # issue 71: a relative path typed on the resume is read from the first start's folder too (a line says so)
    assert config.data_root == str(tmp_path / "first" / "elsewhere")
    config = prove.resolve(prove.resumed_args(["--resume", str(out), "--data-dir", str(out / "d")])).config
    assert config.data_root == str(out / "d")  # an absolute one is as typed


def test_compare_with_resume_keeps_each_episode_and_continues_to_the_unbroken_table(tmp_path, monkeypatch):
    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.comparison import compare

    config = TrainingConfig.preset("quickstart").replace(
        n_envs=2, synthetic_train_samples=256, synthetic_test_samples=64, batch_size_per_env=32,
        max_train_batches=2, max_epochs=3, env_workers=0)
    arms, seeds = {"wait": "wait", "random": "random"}, [900_000, 900_001]
    whole = compare(arms, config, seeds, progress=None)
    restore = signal_at_call(evaluate.Arm, "run", 3)  # the second arm's first seed
    try:
        with pytest.raises(KeyboardInterrupt):
            compare(arms, config, seeds, progress=None, resume=tmp_path / "c")
    finally:
        restore()
    assert len(list((tmp_path / "c" / "episodes").glob("*.json"))) == 2
    calls, original = [], evaluate.Arm.run
    monkeypatch.setattr(evaluate.Arm, "run", lambda self, seed: calls.append((self.name, seed)) or original(self, seed))
    resumed = compare(arms, config, seeds, progress=None, resume=tmp_path / "c")
    assert calls == [("random", s) for s in seeds]  # the random arm's two episodes; wait's were kept
    assert without_keys(resumed.to_dict(), CLOCKS) == without_keys(whole.to_dict(), CLOCKS)


def test_compare_refuses_a_resume_folder_of_the_users_and_touches_nothing(tmp_path):
    """A resume folder holding the user's own files (and none a comparison writes), or a file, is refused
    before anything runs, naming it; the user's files are left as they were."""
    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.comparison import compare

    config = TrainingConfig.preset("quickstart").replace(env_workers=0)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="holds files of its own"):
        compare({"wait": "wait"}, config, [900_000], progress=None, resume=mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        compare({"wait": "wait"}, config, [900_000], progress=None, resume=tmp_path / "file")


def test_the_episode_key_of_a_fixed_config_is_the_one_earlier_versions_computed():
    """The key's digest reads the config in the keys it had before they were nested by group
    (`configuration.keys.legacy_dict`): a prove folder kept by an earlier version still finds its episodes. The
    digests below were computed by the version before the one key style."""
    from types import SimpleNamespace

    from esper_fx.config import TrainingConfig
    from esper_fx.evaluation.resume import episode_key

    changed = TrainingConfig.preset("quickstart", **{"reward.probation_base": 4, "lr": 1e-3,
                                                     "heuristic": {"blend": "linear"}})
    arm = SimpleNamespace(name="heuristic", config=changed, controller=SimpleNamespace(name="heuristic"),
                          policy=None, per_seed=None)
    assert episode_key(arm, 7) == "39576a202a3f9a14b8cc6f543bdb7630"
    per_seed = SimpleNamespace(name="ppo", config=TrainingConfig.preset("quickstart"),
                               controller=SimpleNamespace(name="ppo_lstm"), policy=None,
                               per_seed=lambda seed: {"max_epochs": 5})
    assert episode_key(per_seed, 3) == "b0519692395ec5ebc2ea048cf36da46e"
    assert episode_key(per_seed, 4) != episode_key(per_seed, 3)


# ----------------------------------------------------------------------------------------------
# issue 71: a resume takes what the user typed, and one prove at a time holds OUT
# ----------------------------------------------------------------------------------------------


def _kept(tmp_path, *flags, cwd=None):
    """A stopped prove's OUT (its prove_command.json alone), first started in `cwd` (default tmp_path) with
    ARGS and `flags`."""
    out = tmp_path / "p"
    out.mkdir()
    (out / prove.COMMAND_NAME).write_text(json.dumps({"argv": [*ARGS, *flags, "--out", str(out)],
                                                      "cwd": str(cwd or tmp_path)}))
    return out


def test_a_resume_takes_a_relative_json_path_and_a_typed_default_as_the_first_start_had_them(tmp_path, monkeypatch,
                                                                                            capsys):
    out = _kept(tmp_path, "--json", "part.json")
    monkeypatch.chdir(tmp_path)  # where the prove was started
    args = prove.resumed_args(["--resume", "p", "--json", "part.json", "--tuning-seeds", "800000"])
    assert args.json == str(tmp_path / "part.json") and args.tuning_seeds == [800000]
    assert capsys.readouterr().err == ""
    assert prove.resumed_args(["--resume", str(out), "--json", str(tmp_path / "x" / ".." / "part.json")]).json == \
        str(tmp_path / "part.json")  # the same file, however it is spelled
    with pytest.raises(prove.ProveError, match="--tuning-seeds cannot change on resume"):
        prove.resumed_args(["--resume", "p", "--tuning-seeds", "800001"])


def test_a_relative_path_typed_on_a_resume_elsewhere_is_read_from_the_first_starts_folder(tmp_path, monkeypatch,
                                                                                         capsys):
    (tmp_path / "elsewhere").mkdir()
    _kept(tmp_path, "--json", "part.json")
    monkeypatch.chdir(tmp_path / "elsewhere")
    args = prove.resumed_args(["--resume", str(tmp_path / "p"), "--json", "part.json"])
    assert args.json == str(tmp_path / "part.json")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"esper_fx.prove: --json part.json: a relative path, read from the first start's folder {tmp_path} "
                   f"(this resume runs in {tmp_path / 'elsewhere'})"]


@pytest.mark.parametrize("kept, needle", [
    ('["--arms"]', "a JSON object was expected, not list"),
    ('{"argv": "--arms wait", "cwd": "/"}', "argv must be a list of strings"),
    ('{"argv": ["--arms", 5], "cwd": "/"}', "argv must be a list of strings"),
    ('{"argv": [], "cwd": 5}', "cwd must be a folder's path"),
    ('{"argv": []', "JSONDecodeError"),
])
def test_a_damaged_prove_command_json_is_one_line(kept, needle, tmp_path, capsys):
    out = tmp_path / "p"
    out.mkdir()
    (out / prove.COMMAND_NAME).write_text(kept)
    assert prove.main(["--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "start the prove again in a new --out" in err[0], err


def test_a_second_prove_in_the_same_out_is_refused_naming_the_one_that_holds_it(tmp_path, capsys):
    from esper_fx.outputs.folder_lock import FolderLock

    out = _kept(tmp_path)
    before = (out / prove.COMMAND_NAME).read_text()
    held = FolderLock.take(out, "prove output folder")  # a prove running in OUT
    try:
        assert prove.main(["--resume", str(out)]) == 2
    finally:
        held.release()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"prove output folder {out} is in use by process {os.getpid()} on " in err[0], err
    assert (out / prove.COMMAND_NAME).read_text() == before  # refused before it recorded its resume
