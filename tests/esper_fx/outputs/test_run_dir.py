"""A run owns its directory: refusal of one that holds another run, the lock, default names, the batch as one
unit of checkpoint + row + events, metrics.csv's fixed header, truncation by batch number (issue 12)."""

import csv
import fcntl
import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path

import pytest

import esper_fx
from esper_fx.training import pools, run_state
from esper_fx.config import TrainingConfig
from esper_fx.command import EXIT_SETUP_ERROR
from esper_fx.errors import RunDirectoryError
from esper_fx.outputs.history import BatchSummary
from esper_fx.outputs.metrics_csv import metric_columns
from esper_fx.outputs.run_directory import LOCK_NAME, RunDirectory
from esper_fx.cli.train import main
from esper_fx.outputs.run_names import default_run_dir
from tests.esper_fx.bad_inputs import snapshot
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, device="cpu")


def tiny(**overrides) -> TrainingConfig:
    return TrainingConfig(**{**TINY, **overrides})


def _metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------------------------
# defect 2: a run directory that holds a run is refused; a live run's lock is respected
# ----------------------------------------------------------------------------------------------


def test_a_second_run_into_a_used_run_directory_is_refused_and_changes_nothing(tmp_path):
    """Issue 12, defect 2: a second run silently reused (and interleaved) a run directory."""
    esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r")
    before = snapshot(tmp_path)
    with pytest.raises(RunDirectoryError, match="already holds a run.*--resume"):
        esper_fx.run(tiny(n_episodes=2, controller="wait", seed=9), run_dir=tmp_path / "r")
    assert snapshot(tmp_path) == before


def test_the_cli_refuses_a_used_run_directory_with_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.csv").write_text("batch\n0\n")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({**TINY, "controller": "wait"}))
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    assert main(["--config", "c.json", "--run-dir", "r", "--quiet"]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a run" in err[0] and str(tmp_path / "r") in err[0]
    assert snapshot(tmp_path) == before


def test_a_locked_run_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "r").mkdir()
    with open(tmp_path / "r" / LOCK_NAME, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunDirectoryError, match=f"{tmp_path / 'r'} is in use by another process"):
            esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r")
        with pytest.raises(RunDirectoryError, match="in use by another process"):
            RunDirectory.claim(tmp_path / "r")
    assert os.listdir(tmp_path / "r") == [LOCK_NAME]


def test_the_lock_is_held_while_the_run_lives_and_released_after(tmp_path):
    seen = {}
    pool = pools.build_pool(tiny(n_episodes=2, controller="wait"))
    original = pool.apply

    def probing_apply(*args, **kwargs):
        with open(tmp_path / "r" / LOCK_NAME, "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["locked"] = False
            except BlockingIOError:
                seen["locked"] = True
        return original(*args, **kwargs)

    pool.apply = probing_apply
    esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r", pool=pool)
    assert seen["locked"] is True
    with open(tmp_path / "r" / LOCK_NAME, "rb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: no exception


def test_an_empty_existing_run_directory_is_used(tmp_path):
    (tmp_path / "r").mkdir()
    result = esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=tmp_path / "r")
    assert (Path(result.run_dir) / "summary.json").exists()


def test_default_run_directories_of_one_second_differ_and_stay_recognisable():
    """Issue 12, defect 2: default run-dir names collided for two launches in the same second."""
    now = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    names = {default_run_dir("quickstart", now) for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith(os.path.join("runs", "quickstart-20250102T030405.678Z-")) for n in names)


def test_the_python_api_writes_a_run_directory_by_default_and_says_where(tmp_path, monkeypatch, capsys):
    """Issue 37: `esper_fx.run(config)` kept nothing and printed nothing; now it writes runs/<task>-<time>-<hex>
    under the working directory, as the command line does, and ends with the table and where it is."""
    monkeypatch.chdir(tmp_path)
    result = esper_fx.run(tiny(n_episodes=2, controller="wait", tensorboard=False, report=False))
    (made,) = (tmp_path / "runs").iterdir()
    assert made.name.startswith("shapes10-") and result.run_dir == str(made)
    assert json.loads((made / "summary.json").read_text())["episodes"] == 2
    out = capsys.readouterr().out
    assert "BATCH 0 |" in out and f"Run directory: {made}" in out and "Done in" in out


def test_run_dir_false_writes_nothing_and_quiet_says_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = esper_fx.run(tiny(n_episodes=2, controller="wait"), run_dir=False, quiet=True)
    assert result.run_dir is None and list(tmp_path.iterdir()) == []
    assert capsys.readouterr().out == ""


# ----------------------------------------------------------------------------------------------
# defect 3: an empty run directory name
# ----------------------------------------------------------------------------------------------


def test_an_empty_run_dir_is_rejected_on_the_command_line_and_in_json(tmp_path, monkeypatch, capsys):
    """Issue 12, defect 3: `--run-dir ""` trained to the end and saved nothing."""
    monkeypatch.chdir(tmp_path)
    assert main(["--run-dir", ""]) == EXIT_SETUP_ERROR
    (tmp_path / "c.json").write_text(json.dumps({"run_dir": ""}))
    assert main(["--config", "c.json"]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("run_dir" in line for line in err)
    assert sorted(os.listdir(tmp_path)) == ["c.json"]


# ----------------------------------------------------------------------------------------------
# defect 6: a batch's checkpoint, row and events are one unit
# ----------------------------------------------------------------------------------------------


def _interrupt_once_at(monkeypatch, target, name, after_calls: int):
    """SIGINT delivered inside the `after_calls`-th call of target.name (a write of the batch's commit)."""
    original = getattr(target, name)
    calls = {"n": 0}

    def interrupting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == after_calls:
            os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, interrupting)


COMMITTED = dict(n_episodes=6, checkpoint_every=1)  # three batches, each checkpointed


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The uninterrupted run of COMMITTED."""
    return esper_fx.run(tiny(**COMMITTED), run_dir=tmp_path_factory.mktemp("full") / "run")


@pytest.mark.parametrize("where", ["append_events", "append_metrics"])
def test_an_interrupt_inside_a_batch_commit_keeps_checkpoint_row_and_events_together(full, tmp_path, monkeypatch,
                                                                                       where):
    """Issue 12, defect 6: Ctrl-C after a batch finished but before its row and events were written lost them
    for good while the checkpoint included the batch."""
    config = tiny(**COMMITTED)
    _interrupt_once_at(monkeypatch, RunDirectory, where, after_calls=2 if where == "append_metrics" else 3)
    with pytest.raises(run_state.Interrupted) as info:
        esper_fx.run(config, run_dir=tmp_path / "cut")
    monkeypatch.undo()
    batches_on_disk = [int(r["batch"]) for r in _metrics(tmp_path / "cut")]
    done = json.loads((Path(info.value.checkpoint) / "manifest.json").read_text())["next_batch_idx"]
    assert batches_on_disk == list(range(done))  # the checkpoint never runs ahead of (or behind) the rows
    resumed = esper_fx.run(config.replace(resume_path=str(tmp_path / "cut")), run_dir=tmp_path / "cut")
    assert [h.batch for h in resumed.history] == [h.batch for h in full.history]
    assert [int(r["batch"]) for r in _metrics(tmp_path / "cut")] == [0, 1, 2]
    completed = [e["batch"] for e in _events(tmp_path / "cut") if e["event_type"] == "BATCH_COMPLETED"]
    assert completed == [0, 1, 2]


def _row(batch: int) -> BatchSummary:
    ops = {"WAIT": 1, "GERMINATE": 0, "CULL": 0, "FOSSILIZE": 0}
    return BatchSummary(batch=batch, episodes_completed=2 * (batch + 1), env_accuracies=[10.0, 20.0],
                        avg_accuracy=15.0, rolling_avg_accuracy=15.0, avg_reward=0.0, env_rewards=[0.0, 0.0],
                        host_max_accuracies=[10.0, 20.0], env_seed_params=[0.0, 0.0], action_counts=ops,
                        successful_action_counts=ops, head_counts={}, menu=[], slot_ids=[], entropy_coef=0.1,
                        seeds_created=0, seeds_fossilized=0, contributing_fossilized=0, seeds_culled=0,
                        rollbacks=0, ppo=None)


def test_resume_truncates_metrics_and_events_by_batch_number(tmp_path):
    """Issue 12, defect 6: metrics.csv was truncated by row position, not by batch number."""
    run_dir = RunDirectory(tmp_path / "r", metric_columns(2, None))
    for b in (0, 2, 1, 1, 3):  # rows out of order and twice (segments cut at different points)
        run_dir.append_metrics(_row(b))
    from esper_fx.contracts.events import EventType
    from esper_fx.outputs.events import Event

    run_dir.append_events([Event(EventType.BATCH_COMPLETED, batch=b) for b in (0, 2, 1, 3)])
    with open(run_dir.events_path, "a") as fh:
        fh.write('{"event_type": "BATCH_COMPL')  # a line cut by SIGKILL
    run_dir.truncate_history(2)
    assert [int(r["batch"]) for r in _metrics(tmp_path / "r")] == [0, 1]  # by position: [0, 2]
    assert [e["batch"] for e in _events(tmp_path / "r")] == [0, 1]


# ----------------------------------------------------------------------------------------------
# defect 7: metrics.csv's columns do not depend on the first row
# ----------------------------------------------------------------------------------------------


def test_metrics_header_has_every_ppo_column_even_when_the_first_update_is_skipped(tmp_path):
    """Issue 12, defect 7: a skipped first update fixed a header without the PPO columns for the whole run."""
    config = tiny(n_episodes=2, discard_rolled_back_envs=True)
    pool = pools.build_pool(config)
    pool.inject_nan(env=0, epoch=2)
    pool.inject_nan(env=1, epoch=2)  # every env rolls back and is discarded: the update is skipped
    result = esper_fx.run(config, run_dir=tmp_path / "r", pool=pool)
    assert result.history[0].ppo["skipped"] is True
    with open(tmp_path / "r" / "metrics.csv", newline="") as fh:
        header = next(csv.reader(fh))
    for name in ("ppo_policy_loss", "ppo_value_loss", "ppo_approx_kl", "ppo_entropy", "ppo_skipped"):
        assert name in header
    assert _metrics(tmp_path / "r")[0]["ppo_skipped"] == "True"
    skipped = [e for e in result.events if e["event_type"] == "PPO_UPDATE_COMPLETED"]
    assert skipped[0]["severity"] == "warning" and "skipped" in skipped[0]["message"]


def test_a_row_with_new_columns_widens_the_header_and_keeps_earlier_rows(tmp_path):
    run_dir = RunDirectory(tmp_path / "r")
    run_dir.append_metrics(_row(0))
    later = _row(1)
    later.ppo = {"custom": 1.5}
    run_dir.append_metrics(later)
    rows = _metrics(tmp_path / "r")
    assert [r["batch"] for r in rows] == ["0", "1"] and rows[0]["ppo_custom"] == "" and rows[1]["ppo_custom"] == "1.5"


def test_resuming_a_run_stopped_before_its_first_checkpoint_restarts_it_in_place(tmp_path, monkeypatch, capsys):
    """A run killed (or out of disk) before its first checkpoint leaves config.json, events and rows but no
    checkpoint: --resume restarts it from batch 0 in its own directory instead of leaving it unusable."""
    import shutil

    (tmp_path / "c.json").write_text(json.dumps({**TINY, "controller": "wait", "checkpoint_every": 10}))
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "c.json", "--run-dir", "r", "--quiet"]) == 0
    reference = _metrics(tmp_path / "r")
    shutil.rmtree(tmp_path / "r" / "checkpoints")
    (tmp_path / "r" / "summary.json").unlink()
    with open(tmp_path / "r" / "metrics.csv", "a") as fh:
        fh.write("7,99\n")  # a stray row of the dead run
    assert main(["--resume", "r", "--quiet"]) == 0
    assert "holds no checkpoint yet: the run restarts from batch 0" in capsys.readouterr().err
    drop = lambda rows: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]  # noqa: E731
    assert drop(_metrics(tmp_path / "r")) == drop(reference)
    assert (tmp_path / "r" / "checkpoints" / "final").exists()


# ----------------------------------------------------------------------------------------------
# issue 22: nothing outside the run directory is read as the run's own; nothing is lost before a resume can go on
# ----------------------------------------------------------------------------------------------


def test_a_latest_link_into_another_run_falls_back_to_the_runs_own_checkpoint(tmp_path, capsys):
    config = tiny(controller="random", n_episodes=6, checkpoint_every=1, report=False, tensorboard=False)
    esper_fx.run(config, run_dir=tmp_path / "other")
    esper_fx.run(config.replace(n_episodes=4), run_dir=tmp_path / "mine")
    latest = tmp_path / "mine" / "checkpoints" / "latest"
    latest.unlink()
    latest.symlink_to(tmp_path / "other" / "checkpoints" / "batch-000002")
    other_before = snapshot(tmp_path / "other")
    capsys.readouterr()
    assert main(["--resume", str(tmp_path / "mine"), "--episodes", "6", "--quiet"]) == 0
    assert "points outside" in capsys.readouterr().err
    assert snapshot(tmp_path / "other") == other_before
    assert [int(r["batch"]) for r in _metrics(tmp_path / "mine")] == [0, 1, 2]
    summary = json.loads((tmp_path / "mine" / "summary.json").read_text())
    assert summary["episodes"] == 6


def test_a_resume_that_cannot_go_on_leaves_metrics_events_and_config_untouched(tmp_path, capsys):
    import shutil

    esper_fx.run(tiny(controller="wait", n_episodes=4, report=False), run_dir=tmp_path / "r")
    before = snapshot(tmp_path / "r")
    assert main(["--resume", str(tmp_path / "r"), "--episodes", "2"]) == EXIT_SETUP_ERROR  # below the 4 done
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n_episodes 2 is below the 4 episodes" in err[0]
    assert snapshot(tmp_path / "r") == before
    shutil.rmtree(tmp_path / "r" / "checkpoints")
    (tmp_path / "r" / "checkpoints").write_text("x")
    before = snapshot(tmp_path / "r")
    assert main(["--resume", str(tmp_path / "r"), "--episodes", "6"]) == EXIT_SETUP_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoints is not a directory" in err[0]
    assert snapshot(tmp_path / "r") == before and len(_metrics(tmp_path / "r")) == 2
