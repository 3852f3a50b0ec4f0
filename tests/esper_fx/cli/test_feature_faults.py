"""The last round's features under faults (issue 57, item 3): W&B logging, `esper_fx.run` and `compare` with bad
run directories, `prove --train-seeds` with bad lists, the lifecycle, schedule and tempo fields with bad values
(on the command line and on resume), and the notebook progress line outside Jupyter.

Each fault ends as the fuzz's cases do (tests/esper_fx/bad_inputs.py, whose `Case` and `run_case` these reuse):
exit code 2, one line on stderr naming the bad value, no traceback and nothing written; from the Python API, an
exception of the project (or a ValueError, as every configuration check raises) naming it. Every case fails
before training starts, except the resumes of the one finished run the file makes (a W&B-logged tiny run).

Already covered elsewhere, and not repeated here: a missing wandb package and `check_wandb` online without
credentials (outputs/test_wandb_log.py); the Python API's range checks of lifecycle, lr_schedule,
lr_schedule_steps, the warmup and decay fractions, seed_lr_rewarm_steps, seed_lr_scale and host_width
(test_config.py, hosts/env/test_lr_schedule.py, test_growth_settings.py); a run directory that is a file,
inside a file, holds a previous run or is locked, and a read-only or full disk (the fuzz); prove's --seed,
--eval-seeds and --tuning-seeds beyond 64 bits (the fuzz); --train-seeds empty, repeated, beyond 64 bits or beside
--seed or --checkpoint (evaluation/test_prove.py), and compare's train_seeds empty, repeated or beyond 64 bits
(evaluation/test_across_seeds.py); the notebook line in a kernel and without IPython
(outputs/test_notebook_bar.py).

W&B offline with its folder on a full disk: W&B's service would drop its log without a word (tried by hand: the
run finished whole, exit 0, its W&B log lost), so the run refuses before anything is written when W&B's folder
has less than `wandb_log.MIN_FREE_BYTES` free. A full run directory without W&B ends as the fuzz's full disk does
(exit 2 at the checkpoint).

W&B never touches the network here: offline runs, and online ones against a closed local port, with every W&B
folder and the netrc in a temporary directory.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import types
from pathlib import Path

import pytest

import esper_fx
from esper_fx.config import TrainingConfig
from esper_fx.errors import RunDirectoryError, SetupError
from esper_fx.outputs import console as console_module
from esper_fx.outputs import notebook_bar
from esper_fx.outputs.wandb_log import RUN_ID_NAME, WANDB_SUBDIR
from tests.esper_fx import bad_inputs, tiny
from tests.esper_fx.bad_inputs import BASE, Case

wandb = pytest.importorskip("wandb")

CLOSED_PORT_URL = "http://127.0.0.1:9"  # the discard port, closed: refused at once, nothing leaves the machine
FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 hex characters, the shape of a W&B key
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module", autouse=True)
def offline_wandb(tmp_path_factory):
    """No WANDB_* setting of the machine; W&B offline, its folders and the netrc in a temporary directory.
    W&B's process-wide settings are dropped before and after, so no other module sees these."""
    home = tmp_path_factory.mktemp("wandb_home")
    with pytest.MonkeyPatch.context() as patch:
        for name in [k for k in os.environ if k.startswith("WANDB_")]:
            patch.delenv(name)
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("NETRC", str(home / "netrc"))
        for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
            patch.setenv(name, str(home / name.lower()))
        wandb.teardown()
        yield home
        wandb.teardown()


@pytest.fixture
def fresh_wandb():
    """W&B's process-wide settings read again from this test's environment (W&B reads them once)."""
    wandb.teardown()
    yield
    wandb.teardown()


def assert_clean(case: Case, workdir: Path, needle: str) -> bad_inputs.Outcome:
    """The case ends with exit 2, one line naming `needle`, no traceback and nothing written."""
    with bad_inputs.offline():
        outcome = bad_inputs.run_case(case, workdir)
    assert outcome.code == 2 and not outcome.traceback, outcome.describe()
    assert len(outcome.stderr.strip().splitlines()) == 1, outcome.stderr
    assert needle in outcome.stderr, outcome.stderr
    assert outcome.wrote == [], outcome.wrote
    return outcome


def _fresh(name: str, *flags: str) -> Case:
    """A fresh tiny run of the fuzz's config with `flags`."""
    return Case(name, ["--config", "base.json", "--run-dir", "run", "--quiet", *flags], {"base.json": BASE})


# ----------------------------------------------------------------------------------------------
# the lifecycle, schedule and tempo fields on the command line
# ----------------------------------------------------------------------------------------------

FIELD_CASES = [
    # (flags, what the one line names)
    (["--lifecycle", "slow"], "lifecycle must be one of"),
    (["--set", "lifecycle=5"], "lifecycle must be one of"),
    (["--set", "lifecycle=[\"reference\"]"], "lifecycle must be one of"),
    (["--set", "fossil_release=\"yes\""], "fossil_release must be true or false (got 'yes')"),
    (["--set", "fossil_release=2"], "fossil_release must be true or false (got 2)"),
    (["--min-cull-age", "0"], "min_cull_age must be None or >= 1"),
    (["--set", "min_cull_age=NaN"], "min_cull_age must be an integer (got nan)"),
    (["--set", "one_seed_at_a_time=3"], "one_seed_at_a_time must be true or false"),
    (["--lr-schedule", "step"], "lr_schedule must be one of"),
    (["--set", "lr_schedule=[1]"], "lr_schedule must be one of"),
    (["--lr-schedule-steps", "0"], "lr_schedule_steps must be None or >= 1"),
    (["--set", "lr_schedule_steps=1.5"], "lr_schedule_steps must be an integer"),
    (["--lr-warmup-fraction", "nan"], "lr_warmup_fraction must be a number"),
    (["--lr-warmup-fraction", "2"], "lr_warmup_fraction must be in [0, 1]"),
    (["--lr-decay-fraction", "inf"], "lr_decay_fraction must be a number"),
    (["--set", "lr_decay_fraction=\"0.2\""], "lr_decay_fraction must be a number (got '0.2')"),
    (["--lr-warmup-fraction", "0.6", "--lr-decay-fraction", "0.6"], "lr_warmup_fraction + lr_decay_fraction"),
    (["--seed-lr-rewarm-steps", "-1"], "seed_lr_rewarm_steps must be >= 0"),
    (["--train-steps-budget", "0"], "train_steps_budget must be None or >= 1"),
    (["--seed-lr-scale", "nan"], "seed_lr_scale must be a number"),
    (["--host-width", "0"], "host_width must be in (0, 64]"),
    (["--heuristic.tempo", "quick"], "heuristic.tempo must be one of"),
    (["--set", "heuristic.tempo=3"], "heuristic.tempo must be one of"),
    (["--oracle.tempo", "quick"], "oracle.tempo must be one of"),
    (["--set", "oracle.tempo=[1]"], "oracle.tempo must be one of"),
    (["--set", "oracle.germinate_epoch=NaN"], "oracle.germinate_epoch must be an integer"),
    (["--set", "oracle.germinate_epoch=0"], "oracle.germinate_epoch must be >= 1"),
    (["--set", "heuristic.min_fit_gap=NaN"], "heuristic.min_fit_gap must be a finite number"),
]


@pytest.mark.parametrize("flags, needle", FIELD_CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_bad_lifecycle_schedule_or_tempo_value_on_the_command_line_is_one_line(flags, needle, workdir):
    assert_clean(_fresh(f"field {' '.join(flags)}", *flags), workdir, needle)


@pytest.mark.parametrize("changes, needle", [
    (dict(lifecycle=["reference"]), "lifecycle must be one of"),
    (dict(lr_warmup_fraction=math.nan), "lr_warmup_fraction must be a finite number"),
    (dict(lr_schedule={"kind": "cosine"}), "lr_schedule must be one of"),
    (dict(controller="oracle", oracle={"tempo": ["fast"]}), "oracle.tempo must be one of"),
    (dict(controller="heuristic", heuristic={"tempo": None}), "heuristic.tempo must be one of"),
], ids=["lifecycle list", "warmup NaN", "lr_schedule object", "oracle tempo list", "heuristic tempo null"])
def test_a_bad_lifecycle_schedule_or_tempo_value_in_a_config_file_is_one_line(changes, needle, workdir):
    case = Case(f"json {sorted(changes)}", ["--config", "cfg.json", "--run-dir", "run", "--quiet"],
                {"cfg.json": {**BASE, **changes}})
    assert_clean(case, workdir, needle)


def test_the_python_api_names_a_bad_fossil_release():
    with pytest.raises(ValueError, match=r"fossil_release must be true or false \(got 'no'\)"):
        TrainingConfig(fossil_release="no")
    assert TrainingConfig(fossil_release=False).fossil_release is False


# ----------------------------------------------------------------------------------------------
# prove --train-seeds, and compare's train_seeds
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seeds, needle", [
    (["1.5"], "argument --train-seeds: invalid int value: '1.5'"),
    (["1,2"], "argument --train-seeds: invalid int value: '1,2'"),
    (["nan"], "argument --train-seeds: invalid int value: 'nan'"),
    (["-"], "argument --train-seeds: invalid int value: '-'"),
], ids=["fraction", "comma list", "nan", "a dash"])
def test_prove_refuses_a_bad_train_seeds_list_in_one_line(seeds, needle, workdir):
    case = bad_inputs._prove_case(f"train-seeds {seeds}", "--train-seeds", *seeds)
    assert_clean(case, workdir, needle)


@pytest.mark.parametrize("train_seeds, needle", [
    ([1.5, 2], "training seed 1.5 is not an integer"),
    ([True, 2], "training seed True is not an integer"),
    (["a"], "training seed 'a' is not an integer"),
    ([math.nan], "training seed nan is not an integer"),
    ("12", "training seeds must be a list of integers (got the string '12')"),
], ids=["fraction", "bool", "word", "nan", "string"])
def test_compare_names_a_bad_train_seeds_list_before_any_training(train_seeds, needle, tmp_path):
    config = TrainingConfig(**dict(tiny.TINY, device="cpu"))
    with pytest.raises(ValueError) as caught:
        esper_fx.compare({"ppo": "ppo_lstm", "wait": "wait"}, config, train_seeds=train_seeds,
                         train_dir=str(tmp_path / "train"), progress=None)
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------
# esper_fx.run and compare with a bad run directory
# ----------------------------------------------------------------------------------------------

def _users_files(tmp_path: Path) -> Path:
    """A file and a folder of the user's, with their own contents."""
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "data.csv").write_text("a,b\n1,2\n")
    (tmp_path / "theirs" / "ppo").mkdir()
    (tmp_path / "theirs" / "ppo" / "draft.txt").write_text("mine too")
    return tmp_path


@pytest.mark.parametrize("where, needle", [
    ("notes.txt", "exists and is not a directory"),
    ("notes.txt/run", "is not a directory"),
    ("theirs", "already holds a run (data.csv, ppo)"),
], ids=["a file", "inside a file", "a non-empty foreign folder"])
def test_run_refuses_a_bad_run_dir_naming_it_and_leaves_the_users_files(where, needle, tmp_path):
    root = _users_files(tmp_path)
    before = bad_inputs.snapshot(root)
    config = TrainingConfig(**dict(tiny.TINY, device="cpu", controller="wait"))
    with pytest.raises(RunDirectoryError) as caught:
        esper_fx.run(config, run_dir=root / where, quiet=True)
    assert needle in str(caught.value) and str(root / where.split("/")[0]) in str(caught.value)
    assert bad_inputs.snapshot(root) == before  # not even a lock file left in the user's folder


@pytest.mark.parametrize("where, needle", [
    ("notes.txt", "notes.txt is not a directory"),
    ("theirs", "theirs/ppo already holds a run (draft.txt)"),
], ids=["a file", "a folder whose arm folder is the user's"])
def test_compare_refuses_a_bad_train_dir_before_any_episode(where, needle, tmp_path):
    root = _users_files(tmp_path)
    before = bad_inputs.snapshot(root)
    config = TrainingConfig(**dict(tiny.TINY, device="cpu"))
    with pytest.raises(RunDirectoryError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        esper_fx.compare({"ppo": "ppo_lstm", "wait": "wait"}, config, train_dir=str(root / where), progress=None)
    assert bad_inputs.snapshot(root) == before


def test_run_and_compare_refuse_a_run_dir_without_write_permission(tmp_path):
    if IS_ROOT:
        pytest.skip("root writes through any permission bits, so chmod cannot make a folder unwritable here; the "
                    "read-only disk cases of the fuzz cover the refusal for root")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        config = TrainingConfig(**dict(tiny.TINY, device="cpu", controller="wait"))
        with pytest.raises(RunDirectoryError, match="is not writable"):
            esper_fx.run(config, run_dir=locked / "run", quiet=True)
        with pytest.raises(RunDirectoryError, match="is not writable"):
            esper_fx.compare({"ppo": "ppo_lstm", "wait": "wait"}, config, train_dir=str(locked), progress=None)
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


# ----------------------------------------------------------------------------------------------
# W&B
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, value, needle", [
    ("WANDB_MODE", "bogus", "W&B rejects the environment's WANDB_MODE='bogus'"),
    ("WANDB_INIT_TIMEOUT", "soon", "W&B rejects the environment's WANDB_INIT_TIMEOUT='soon'"),
    ("WANDB_SILENT", "maybe", "W&B rejects the environment's WANDB_SILENT='maybe'"),
    ("WANDB_CONSOLE", "loud", "W&B rejects the environment's WANDB_CONSOLE='loud'"),
    ("WANDB_BASE_URL", "not a url", "W&B rejects the environment's WANDB_BASE_URL='not a url'"),
    ("WANDB_PROJECT", "a/b", "Invalid project name 'a/b'"),
    ("WANDB_RUN_ID", "a/b", "W&B rejects the environment's WANDB_RUN_ID='a/b'"),
], ids=lambda v: v if isinstance(v, str) and v.startswith("WANDB_") else "")
def test_a_wandb_setting_from_the_environment_that_wandb_rejects_is_one_line_before_anything_is_written(
        name, value, needle, workdir, monkeypatch, fresh_wandb):
    monkeypatch.setenv(name, value)
    assert_clean(_fresh(f"wandb env {name}", "--wandb", "offline"), workdir, needle)


def test_a_wandb_project_that_wandb_rejects_is_one_line(workdir, fresh_wandb):
    case = _fresh("wandb project", "--wandb", "offline", "--wandb-project", "team/project")
    assert_clean(case, workdir, "--wandb-project / wandb_project 'team/project': W&B rejects it")


def test_a_wandb_api_key_that_wandb_rejects_is_named_without_its_value():
    from esper_fx.outputs.wandb_log import check_settings

    class Refusing(wandb.Settings):
        def update_from_env_vars(self, environ):
            if "WANDB_API_KEY" in environ:
                raise ValueError("bad key")

    fake = types.SimpleNamespace(Settings=Refusing, errors=wandb.errors)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_API_KEY", "secret-value")
        with pytest.raises(SetupError) as caught:
            check_settings(fake, "offline", "esper_fx")
    assert "WANDB_API_KEY" in str(caught.value) and "secret-value" not in str(caught.value)


def test_online_without_credentials_is_one_line_exit_2_from_the_command_line(workdir, monkeypatch, fresh_wandb):
    monkeypatch.delenv("WANDB_MODE")
    assert_clean(_fresh("wandb online without a key", "--wandb", "online"), workdir,
                 "--wandb online needs W&B credentials")


def test_online_without_a_network_is_one_line_exit_2_before_anything_is_written(workdir, monkeypatch, fresh_wandb):
    """A key, but W&B's server cannot be reached (a closed local port): refused within W&B's own ~10 s bound,
    not at the first batch after minutes of retries (it was exit 1 there, the run directory half started)."""
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    monkeypatch.setenv("WANDB_BASE_URL", CLOSED_PORT_URL)
    outcome = assert_clean(_fresh("wandb online without a network", "--wandb", "online"), workdir,
                           "--wandb online: W&B could not check its credentials")
    assert FAKE_KEY not in outcome.stderr


# -------------------------------------------------------------------- resumes of one W&B-logged run

@pytest.fixture(scope="module")
def finished_run(workdir):
    """One finished tiny run logged with --wandb offline (2 episodes, a checkpoint per batch)."""
    root = workdir / "_finished_wandb"
    root.mkdir()
    (root / "base.json").write_text(json.dumps({**BASE, "n_episodes": 2, "wandb": "offline", "report": False}))
    code, err = bad_inputs._call_main(["--config", str(root / "base.json"), "--run-dir", str(root / "run"),
                                       "--quiet"], root)
    assert code == 0, err
    return root / "run"


def _copy_of(run: Path, edit=None):
    def setup(d: Path) -> None:
        shutil.copytree(run, d / "run", symlinks=True)
        (d / "run" / bad_inputs.LOCK_NAME).unlink(missing_ok=True)
        if edit is not None:
            edit(d / "run")

    return setup


# A resume refuses a field that fixes the run's result by name before reading its value: a bad value and a changed
# one both end at that line.
RESUME_FIELD_CASES = [
    (["--lifecycle", "proportional"], "lifecycle cannot change on resume"),
    (["--set", "lifecycle=\"slow\""], "lifecycle cannot change on resume (the checkpoint has 'reference', the "
                                      "command line 'slow')"),
    (["--set", "fossil_release=\"yes\""], "fossil_release cannot change on resume"),
    (["--lr-warmup-fraction", "nan"], "lr_warmup_fraction cannot change on resume"),
    (["--lr-schedule", "cosine"], "lr_schedule cannot change on resume"),
    (["--set", "oracle.tempo=3"], "oracle.tempo cannot change on resume"),
    (["--heuristic.tempo", "slow"], "heuristic.tempo cannot change on resume"),
]


@pytest.mark.parametrize("flags, needle", RESUME_FIELD_CASES, ids=lambda v: " ".join(v) if isinstance(v, list)
                         else "")
def test_on_resume_a_bad_or_changed_lifecycle_schedule_or_tempo_value_is_one_line(flags, needle, workdir,
                                                                                   finished_run):
    case = Case(f"resume {' '.join(flags)}", ["--resume", "run", "--episodes", "4", "--quiet", *flags],
                setup=_copy_of(finished_run))
    assert_clean(case, workdir, needle)


def _checkpoint_config(change):
    """Edit the copied run's checkpoint config as `change` does, the manifest resealed (its checksum recomputed)."""
    def edit(run: Path) -> None:
        edit_manifest = bad_inputs._edit_manifest(bad_inputs._resealed(lambda m: change(m["config"])))
        edit_manifest(run / "checkpoints" / "batch-000000")

    return edit


@pytest.mark.parametrize("change, needle", [
    (lambda c: c.update(lifecycle="slow"), "lifecycle must be one of"),
    (lambda c: c.update(fossil_release="yes"), "fossil_release must be true or false (got 'yes')"),
    (lambda c: c.update(lr_decay_fraction=float("nan")), "lr_decay_fraction must be a finite number"),
    (lambda c: c["oracle"].update(tempo=3), "oracle.tempo must be one of"),
], ids=["lifecycle", "fossil_release", "lr_decay_fraction NaN", "oracle tempo"])
def test_a_checkpoint_whose_config_holds_a_bad_lifecycle_schedule_or_tempo_value_is_one_line(change, needle, workdir,
                                                                                             finished_run):
    case = Case(f"resume checkpoint config {needle[:20]}", ["--resume", "run", "--episodes", "4", "--quiet"],
                setup=_copy_of(finished_run, _checkpoint_config(change)))
    assert_clean(case, workdir, needle)


def test_a_resume_whose_wandb_files_were_deleted_logs_to_a_new_wandb_run(workdir, finished_run, fresh_wandb):
    first_id = (finished_run / WANDB_SUBDIR / RUN_ID_NAME).read_text().strip()
    case = Case("resume without wandb files", ["--resume", "run", "--episodes", "4", "--quiet"],
                setup=_copy_of(finished_run, lambda run: shutil.rmtree(run / WANDB_SUBDIR)))
    outcome = bad_inputs.run_case(case, workdir)
    assert outcome.code == 0 and not outcome.traceback, outcome.describe()
    run = workdir / "resume_without_wandb_files" / "run"
    new_id = (run / WANDB_SUBDIR / RUN_ID_NAME).read_text().strip()
    assert new_id and new_id != first_id
    (offline,) = (run / WANDB_SUBDIR).glob("offline-run-*")  # this process's W&B run, the deleted one not back
    assert offline.name.endswith(new_id)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 4
    with open(run / "metrics.csv", encoding="utf-8") as fh:
        assert [line.split(",")[0] for line in fh.read().splitlines()[1:]] == ["0", "1"]


def test_a_resume_into_a_read_only_wandb_folder_is_refused_before_anything_is_written(workdir, finished_run):
    if not bad_inputs.namespaces_available():
        pytest.skip("needs `unshare` to mount a read-only folder (root writes through permission bits)")
    case = Case("resume into a read-only wandb folder", ["--resume", "run", "--episodes", "4", "--quiet"],
                setup=_copy_of(finished_run), subprocess=True,
                namespace='mount -t tmpfs -o size=64k,ro tmpfs "$PWD/run/wandb" && ')
    assert_clean(case, workdir, "cannot be written (read-only or not yours)")


def test_a_resume_onto_a_full_wandb_disk_is_refused_before_anything_is_written(workdir, finished_run):
    if not bad_inputs.namespaces_available():
        pytest.skip("needs `unshare` to mount a small tmpfs")
    case = Case("resume onto a full wandb disk", ["--resume", "run", "--episodes", "4", "--quiet"],
                setup=_copy_of(finished_run), subprocess=True,
                namespace='mount -t tmpfs -o size=16k tmpfs "$PWD/run/wandb" && ')
    assert_clean(case, workdir, "KiB free on its disk")


# ----------------------------------------------------------------------------------------------
# the notebook progress line outside Jupyter
# ----------------------------------------------------------------------------------------------

def _fake_ipython(monkeypatch, shell):
    """An IPython in sys.modules whose get_ipython returns `shell` (None: no shell is running)."""
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", module)


def _shell(name: str):
    return type(name, (), {})()


@pytest.mark.parametrize("make", [
    lambda mp: _fake_ipython(mp, None),
    lambda mp: _fake_ipython(mp, _shell("TerminalInteractiveShell")),
    lambda mp: mp.setitem(sys.modules, "IPython", types.ModuleType("IPython")),  # no get_ipython: ImportError
    lambda mp: mp.setitem(sys.modules, "IPython", None),  # a blocked import
], ids=["IPython imported, no shell", "terminal IPython", "IPython without get_ipython", "IPython blocked"])
def test_outside_a_jupyter_kernel_there_is_no_progress_line_and_the_lines_print(make, monkeypatch):
    make(monkeypatch)
    opened = []
    monkeypatch.setattr(notebook_bar, "open_display", lambda text: opened.append(text))
    assert not notebook_bar.in_notebook(sys.stdout)
    console_module.Console(2, 3, quiet=False, stream=sys.stdout, n_envs=2, n_episodes=4)
    assert opened == []  # the per-batch lines, as anywhere off a terminal


def test_in_a_kernel_only_its_stdout_gets_the_progress_line(monkeypatch):
    import io

    _fake_ipython(monkeypatch, _shell("ZMQInteractiveShell"))
    assert notebook_bar.in_notebook(sys.stdout)
    assert not notebook_bar.in_notebook(io.StringIO())  # console_stream= another stream: plain lines
