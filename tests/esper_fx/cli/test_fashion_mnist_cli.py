"""`--task fashion_mnist` with missing or corrupt files: one line naming the file or package, exit 2, nothing written."""

import pytest

from esper_fx.cli.train import main
from esper_fx.errors import EXIT_SETUP_ERROR as EXIT_CONFIG_ERROR
from hosts.data.fashion_mnist import SPLIT_FILES
from tests.hosts.data.fashion_fixture import write_fashion_fixture

ARGS = ["--task", "fashion_mnist", "--device", "cpu", "--n-envs", "2", "--episodes", "1", "--max-epochs", "2"]


def _rejects(tmp_path, monkeypatch, capsys, data_dir):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main([*ARGS, "--data-dir", str(data_dir)]) == EXIT_CONFIG_ERROR
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert list(work.iterdir()) == []
    return err


def test_a_missing_data_root_names_the_package(tmp_path, monkeypatch, capsys):
    err = _rejects(tmp_path, monkeypatch, capsys, tmp_path / "absent")
    assert "apt-get install dataset-fashion-mnist" in err and "--data-dir" in err


@pytest.mark.parametrize("cut", [1, 500])
def test_a_truncated_file_names_the_file(tmp_path, monkeypatch, capsys, cut):
    data = tmp_path / "fm"
    write_fashion_fixture(data)
    stem = SPLIT_FILES["test"][0]
    (data / stem).write_bytes((data / stem).read_bytes()[:-cut])
    err = _rejects(tmp_path, monkeypatch, capsys, data)
    assert str(data / stem) in err and "truncated" in err
