"""Issue 71, item 2: `train --resume` takes a path as the user typed it. A data folder a run is given is kept
absolute from its first start; on a resume a relative `--data-dir` is read from the folder the first start was
typed in (provenance.json's `cwd`), in one line when that is not this one; a run of an earlier version that kept
it relative reads it from there too. (prove's --resume: evaluation/test_prove_resume.py.)"""

from __future__ import annotations

import json

from esper_fx.cli.train import resolve_config
from esper_fx.config import TrainingConfig
from tests.esper_fx.bad_inputs import BASE


def _stopped_run(tmp_path, first_cwd, data_root="data"):
    """A run directory a run stopped before its first checkpoint left (config.json, provenance.json): a resume
    restarts it in place."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(TrainingConfig(**BASE, data_root=data_root,
                                                               run_dir=str(run)).to_dict()))
    (run / "provenance.json").write_text(json.dumps({"cwd": str(first_cwd), "resumes": []}))
    return run


def test_a_data_folder_given_to_a_run_is_kept_absolute_and_the_default_as_it_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config(["--data-dir", "mine", "--run-dir", "r"])
    assert config.data_root == str(tmp_path / "mine")
    config, _ = resolve_config(["--run-dir", "r"])
    assert config.data_root == "./data"  # the task's own default place (fashion_mnist: the package's folder)


def test_a_relative_data_dir_typed_on_a_resume_elsewhere_is_read_from_the_first_starts_folder(tmp_path, monkeypatch,
                                                                                             capsys):
    first = tmp_path / "first"
    run = _stopped_run(tmp_path, first)
    monkeypatch.chdir(first.parent)
    config, _ = resolve_config(["--resume", str(run), "--data-dir", "other"])
    assert config.data_root == str(first / "other")
    assert capsys.readouterr().err.strip().splitlines() == [
        f"esper_fx.train: --data-dir other: a relative path, read from the first start's folder {first} (this resume "
        f"runs in {first.parent})"]


def test_a_resume_where_the_run_started_reads_a_relative_data_dir_from_there_silently(tmp_path, monkeypatch,
                                                                                      capsys):
    run = _stopped_run(tmp_path, tmp_path)
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config(["--resume", str(run), "--data-dir", "other"])
    assert config.data_root == str(tmp_path / "other") and capsys.readouterr().err == ""


def test_a_relative_data_folder_an_earlier_version_kept_is_read_from_its_first_start(tmp_path, monkeypatch):
    first = tmp_path / "first"
    run = _stopped_run(tmp_path, first, data_root="old/data")
    monkeypatch.chdir(tmp_path)
    config, _ = resolve_config(["--resume", str(run)])
    assert config.data_root == str(first / "old" / "data")
