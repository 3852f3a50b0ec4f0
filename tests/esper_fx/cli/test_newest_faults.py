"""Issue 71, item 4: the newest features' faults, each one line naming the bad thing and the fix, exit 2 for a bad
input, no traceback, nothing half written and nothing lost.

- A kept evaluation episode that is not its place's (another arm's, seed's or configuration's, or not an
  episode at all) is played again, in one line, never used.
- `prove --device cuda:99` and a W&B setting W&B rejects are refused before OUT is created.
- prove.json, doctor's JSON and report.html are written whole or not at all; a full disk names the file.
- `doctor --full` stopped by SIGTERM stops its running part, removes its temporary folder and keeps the JSON of
  the parts that ran; `--quickstart-dir` is read from where the doctor was typed and a full one is refused first.
- A setting that does nothing in the run says so in one line; a mistyped key gets "did you mean".

(Elsewhere: the reinforce checkpoint's arm, width and name, and a cut-short summary.json,
controllers/test_reinforce.py; two proves in one OUT and a damaged prove_command.json,
evaluation/test_prove_resume.py; a stop inside a gc callback, test_stopping.py.)"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from esper_fx.cli import prove
from esper_fx.cli.train import resolve_config
from esper_fx.doctor import cli as doctor_cli
from esper_fx.doctor import full
from esper_fx.errors import ConfigError, OutputError
from esper_fx.evaluation import resume
from esper_fx.evaluation.episodes import Episode
from esper_fx.outputs import durable
from tests.esper_fx import bad_inputs
from tests.esper_fx.bad_inputs import BASE, Case


# ----------------------------------------------------------------------------------------------
# kept episodes: the file in a place must be that place's episode
# ----------------------------------------------------------------------------------------------


class FakeArm:
    """What `episode_key` reads of an arm."""

    def __init__(self, name: str, **changes):
        from esper_fx.config import TrainingConfig

        self.name, self.controller, self.policy, self.per_seed = name, name, None, None
        self.config = TrainingConfig(**{**BASE, **changes})


def _episode(arm: str, seed: int) -> Episode:
    return Episode(arm, seed, (10.0, 20.0, 30.0), 0.0, 0, 0, (), (), 1.0, params=1000.0, task="shapes10")


def test_a_kept_episode_is_used_in_its_own_place_only(tmp_path, capsys):
    store = resume.EpisodeStore(tmp_path)
    wait, rand = FakeArm("wait"), FakeArm("random")
    store.put(wait, 7, _episode("wait", 7))
    assert store.get(wait, 7) == _episode("wait", 7) and capsys.readouterr().err == ""
    path = store.dir / f"{resume.episode_key(rand, 7)}.json"
    moved = [  # another arm's, another seed's, another configuration's (its key inside), and no episode at all
        (json.dumps({**json.loads((store.dir / f"{resume.episode_key(wait, 7)}.json").read_text())}),
         "holds the episode of arm 'wait' on seed 7"),
        (json.dumps({**_episode("random", 8).__dict__, "key": resume.episode_key(rand, 8)}),
         "holds the episode of arm 'random' on seed 8"),
        (json.dumps({**_episode("random", 7).__dict__, "key": resume.episode_key(FakeArm("random", max_epochs=4), 7)}),
         "with digest"),
        ("[1, 2]", "is not an episode (a JSON object was expected, not list)"),
        (json.dumps({**_episode("random", 7).__dict__, "val_accs": ["10", "20"]}), "val_accs must be a list of numbers"),
        (json.dumps({**_episode("random", 7).__dict__, "seed": "7"}), "seed must be an integer"),
        ('{"arm": "random", "seed"', "cannot be read"),
    ]
    for text, needle in moved:
        path.write_text(text)
        assert store.get(rand, 7) is None, needle  # played again
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0] and needle in err[0], (needle, err)
        assert err[0].endswith("playing that episode again")


# ----------------------------------------------------------------------------------------------
# refused before anything is written
# ----------------------------------------------------------------------------------------------


def _prove_case(name: str, *flags: str) -> Case:
    return Case(name, ["--arms", "wait", "--n-eval-seeds", "1", "--out", "p", "--quiet", "--env-workers", "0",
                       *flags], command="prove")


def _assert_clean(case: Case, workdir: Path, needle: str) -> None:
    with bad_inputs.offline():
        outcome = bad_inputs.run_case(case, workdir)
    assert outcome.code == 2 and not outcome.traceback, outcome.describe()
    assert len(outcome.stderr.strip().splitlines()) == 1 and needle in outcome.stderr, outcome.stderr
    assert outcome.wrote == [], outcome.wrote


def test_prove_on_a_device_this_machine_lacks_writes_nothing(tmp_path):
    _assert_clean(_prove_case("cuda 99", "--device", "cuda:99"), tmp_path, "cuda:99")


def test_prove_with_a_wandb_setting_wandb_rejects_writes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    import wandb

    monkeypatch.setenv("WANDB_MODE", "bogus")
    wandb.teardown()
    try:
        _assert_clean(_prove_case("wandb bogus", "--set", "wandb=offline"), tmp_path,
                      "W&B rejects the environment's WANDB_MODE='bogus'")
    finally:
        wandb.teardown()


# ----------------------------------------------------------------------------------------------
# whole or not at all
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def full_disk(monkeypatch):
    """Every durable write fails as on a full disk (after writing part of its temporary file)."""

    def no_room(path, data):
        Path(path).write_bytes(data[:10])
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(durable, "write_durably", no_room)


def test_prove_json_on_a_full_disk_names_the_file_and_leaves_it_as_it_was(tmp_path, full_disk):
    target = tmp_path / "prove.json"
    target.write_text('{"before": true}\n')
    with pytest.raises(OutputError, match=f"cannot write {target}: No space left on device"):
        prove.write_json(target, {"after": True})
    assert json.loads(target.read_text()) == {"before": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prove.json"]  # no temporary file left


def test_doctor_json_on_a_full_disk_is_one_line_and_no_partial_file(tmp_path, full_disk, capsys):
    target = tmp_path / "doctor.json"
    skip = [name for name, _, _ in doctor_cli.CHECKS if name != "versions"]
    assert doctor_cli.main(["--device", "cpu", "--json", str(target), "--skip", *skip]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cannot write --json {target}: No space left on device" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_pipe_or_device_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.update(text=fifo.read_text()))
    reader.start()
    durable.write_whole(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got["text"] == "through the pipe\n" and fifo.is_fifo()


# ----------------------------------------------------------------------------------------------
# doctor --full: a stop, and its quickstart folder
# ----------------------------------------------------------------------------------------------


def test_doctor_full_stopped_by_sigterm_stops_its_part_and_keeps_the_json_of_what_ran(tmp_path, monkeypatch, capsys):
    pids = tmp_path / "pids"
    quick = [sys.executable, "-c", "print('quick part')"]
    slow = [sys.executable, "-c", f"import os, time; open({str(pids)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
    scratch: list[Path] = []

    def plan(device, folder, **_):
        scratch.append(folder)
        return [full.Part("checks", quick, cap_s=30, floor_s=1), full.Part("quickstart", slow, cap_s=60, floor_s=1),
                full.Part("bench", quick, cap_s=30, floor_s=1)]

    monkeypatch.setattr(full, "plan", plan)

    def stop_when_the_slow_part_runs():
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_the_slow_part_runs, daemon=True).start()
    target = tmp_path / "full.json"
    code = full.full_check("cpu", str(target), budget_s=100, say=lambda line: None)
    assert code == 143
    report = json.loads(target.read_text())
    assert report["stopped"] == "SIGTERM" and report["ok"] is False
    assert {name: part["status"] for name, part in report["parts"].items()} == {"checks": "passed",
                                                                                "quickstart": "stopped"}
    child = int(pids.read_text())
    with pytest.raises(ProcessLookupError):  # no orphan: the stopped part's process is gone
        os.kill(child, 0)
    assert scratch and not scratch[0].exists()  # nor its temporary folder


def test_doctor_full_reads_the_quickstart_folder_from_where_it_was_typed_and_refuses_a_full_one(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert doctor_cli.check_quickstart_dir("qs") == str(tmp_path / "qs")
    (tmp_path / "qs").mkdir()
    (tmp_path / "qs" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"--quickstart-dir: {tmp_path / 'qs'} is not empty"):
        doctor_cli.check_quickstart_dir("qs")


def test_doctor_full_with_a_full_quickstart_folder_exits_2_before_any_part(tmp_path):
    (tmp_path / "qs").mkdir()
    (tmp_path / "qs" / "summary.json").write_text("{}")
    proc = subprocess.run([sys.executable, "-m", "esper_fx.doctor", "--full", "--tiny", "--quickstart-dir", "qs"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3])))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "is not empty" in proc.stderr


# ----------------------------------------------------------------------------------------------
# settings that do nothing, and typos
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, needle", [
    (["--set", "controller=reinforce", "--set", "ppo.lr=0.1"],
     "ppo.lr has no effect here: no controller of this run (reinforce) reads ppo's settings"),
    (["--set", "heuristic.blend=linear"], "heuristic.blend has no effect here"),
    (["--set", "lifecycle=immediate", "--set", 'blueprint_menu=["noop","copy_block"]', "--set", "fossil_release=true"],
     "fossil_release has no effect here: under lifecycle=immediate no seed isolates the host"),
])
def test_a_setting_that_does_nothing_in_the_run_says_so_in_one_line(flags, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    resolve_config([*flags, "--run-dir", "r"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("esper_fx.train: note: ") and needle in err[0], err


def test_settings_every_run_reads_say_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    resolve_config(["--set", "controller=reinforce", "--set", "learner.gamma=0.9", "--set", "reinforce.lr=0.01",
                    "--set", "ppo.num_minibatches=1", "--run-dir", "r"])
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, needle", [
    (["--set", "host_widht=2"], "unknown config key 'host_widht' (did you mean 'host_width'?)"),
    (["--set", "ppo.lrr=2"], "unknown config key 'ppo.lrr' (did you mean 'ppo.lr'?)"),
    (["--config", "c.json"], "--config c.json: Unknown config keys: ['seed_lr_scal'] (did you mean 'seed_lr_scale'?)"),
])
def test_a_mistyped_key_is_refused_with_the_key_it_is_closest_to(argv, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.json").write_text(json.dumps({**BASE, "seed_lr_scal": 2}))
    with pytest.raises(ConfigError) as info:
        resolve_config(argv)
    assert needle in str(info.value)
