"""`--task fashion_mnist` with missing or corrupt files: one line naming the file or package, exit 2, nothing written."""

import numpy as np
import pytest

from esper_fx.cli import prove
from esper_fx.cli.train import main
from esper_fx.command import EXIT_SETUP_ERROR as EXIT_CONFIG_ERROR
from hosts.data.fashion_mnist import SPLIT_FILES
from hosts.data.idx import idx_bytes
from tests.hosts.data.fashion_fixture import fashion_arrays, write_fashion_fixture

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


# A broken file of each kind: (the file's stem, its bytes, what the line says).
_IMAGES, _LABELS = SPLIT_FILES["train"]
BROKEN = {
    "truncated": (_IMAGES, idx_bytes(fashion_arrays()[_IMAGES])[:-100], "truncated"),
    "bad magic": (_LABELS, b"\x12\x34" + idx_bytes(fashion_arrays()[_LABELS])[2:], "bad magic number"),
    "mis-counted": (_LABELS, idx_bytes((np.arange(11) % 10).astype(np.uint8)), "11 labels for the 12 images"),
}
# prove at the fuzz's tiny size, evaluating the fixed arms only (nothing is trained)
PROVE_ARGS = ["--quiet", "--arms", "wait", "oracle", "--n-eval-seeds", "2", "--set", "task=fashion_mnist",
              "--set", "device=cpu", "--set", "n_envs=2", "--set", "max_epochs=2", "--out", "out"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_with_ray_workers_a_broken_file_is_the_in_process_line_for_train_and_prove(tmp_path, monkeypatch, capsys,
                                                                                      fault):
    """Issue 39, item 2: with Ray env workers (the fashion_mnist preset's default under `auto`) a broken file
    killed worker 0 in its creation task: exit 1 and 2-23 lines for train, a 72-line traceback and an
    `out/` for prove. The driver reads the files before Ray starts: the in-process line, exit 2, nothing
    written."""
    stem, data, needle = BROKEN[fault]
    write_fashion_fixture(tmp_path / "fm", raw={stem: data})
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    data_dir = ["--data-dir", str(tmp_path / "fm")]
    assert main([*ARGS, *data_dir, "--env-workers", "0"]) == EXIT_CONFIG_ERROR
    in_process = _one_line(capsys)
    assert str(tmp_path / "fm" / stem) in in_process and needle in in_process
    assert main([*ARGS, *data_dir, "--env-workers", "2"]) == EXIT_CONFIG_ERROR
    assert _one_line(capsys) == in_process
    assert prove.main([*PROVE_ARGS, *data_dir, "--env-workers", "0"]) == EXIT_CONFIG_ERROR  # (--data-dir: issue 39)
    prove_line = _one_line(capsys)
    assert prove.main([*PROVE_ARGS, *data_dir, "--env-workers", "2"]) == EXIT_CONFIG_ERROR
    assert _one_line(capsys) == prove_line == in_process.replace("esper_fx.train", "esper_fx.prove")
    assert list(work.iterdir()) == []
