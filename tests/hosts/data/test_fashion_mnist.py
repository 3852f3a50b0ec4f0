"""Fashion-MNIST: the loader on small IDX files the tests write, and on the real files when installed."""

from pathlib import Path

import numpy as np
import pytest
import torch

from esper_fx.contracts.tasks import FASHION_MNIST_DATA_ROOT
from hosts.data import fashion_mnist as F
from hosts.data.external import DatasetUnavailableError
from hosts.data.idx import idx_bytes
from hosts.data.task_data import load_task_data
from hosts.tasks import get_task
from tests.hosts.data.fashion_fixture import fashion_arrays, write_fashion_fixture

TRAIN_IMAGES, TRAIN_LABELS = F.SPLIT_FILES["train"]
TEST_IMAGES, TEST_LABELS = F.SPLIT_FILES["test"]


@pytest.mark.parametrize("gz", [False, True])
def test_the_four_files_are_read_in_order(tmp_path, gz):
    arrays = write_fashion_fixture(tmp_path, gz=gz)
    x_tr, y_tr, x_te, y_te = F.load_fashion_mnist(tmp_path)
    assert x_tr.shape == (12, 1, 28, 28) and x_tr.dtype == torch.uint8 and x_te.shape == (5, 1, 28, 28)
    assert np.array_equal(x_tr[:, 0].numpy(), arrays[TRAIN_IMAGES])
    assert y_tr.dtype == torch.int64 and y_tr.tolist() == arrays[TRAIN_LABELS].tolist()
    assert y_te.tolist() == arrays[TEST_LABELS].tolist()


def test_the_files_may_sit_in_a_fashion_mnist_subfolder(tmp_path):
    write_fashion_fixture(tmp_path / "fashion-mnist")
    assert F.load_fashion_mnist(tmp_path)[0].shape[0] == 12


def test_task_data_is_grey_normalised_with_the_fashion_statistics(tmp_path):
    arrays = write_fashion_fixture(tmp_path)
    data = load_task_data(get_task("fashion_mnist"), "cpu", data_root=tmp_path)
    expected = (torch.from_numpy(arrays[TRAIN_IMAGES]).float().unsqueeze(1) / 255.0 - F.MEAN[0]) / F.STD[0]
    torch.testing.assert_close(data.x_train, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(data.pad_value, torch.tensor([-F.MEAN[0] / F.STD[0]]))
    assert data.n_train == 12 and data.n_test == 5 and data.kind == "classification"


def test_a_missing_root_names_the_package_and_data_dir(tmp_path):
    with pytest.raises(DatasetUnavailableError) as info:
        F.load_fashion_mnist(tmp_path / "nowhere")
    message = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in message and "--data-dir" in message
    assert str(tmp_path / "nowhere") in message and "no such directory" in message


def test_a_root_without_the_files_lists_where_it_looked(tmp_path):
    (tmp_path / "other.txt").write_text("x")
    with pytest.raises(DatasetUnavailableError, match="neither.*other.txt"):
        F.load_fashion_mnist(tmp_path)


def _broken(tmp_path, stem, data):
    write_fashion_fixture(tmp_path, raw={stem: data})
    with pytest.raises(DatasetUnavailableError) as info:
        F.load_fashion_mnist(tmp_path)
    message = str(info.value)
    assert str(tmp_path / stem) in message and "\n" not in message
    return message


def test_a_truncated_image_file_is_named(tmp_path):
    good = idx_bytes(fashion_arrays()[TRAIN_IMAGES])
    assert "truncated" in _broken(tmp_path, TRAIN_IMAGES, good[:-100])


def test_a_bad_magic_number_is_named(tmp_path):
    good = idx_bytes(fashion_arrays()[TEST_LABELS])
    assert "bad magic number" in _broken(tmp_path, TEST_LABELS, b"\x12\x34" + good[2:])


def test_labels_are_checked_to_be_unsigned_bytes(tmp_path):
    labels = fashion_arrays()[TRAIN_LABELS].astype(np.int32)
    assert "dtype int, expected ubyte" in _broken(tmp_path, TRAIN_LABELS, idx_bytes(labels))


def test_mismatched_counts_are_named(tmp_path):
    labels = (np.arange(11) % 10).astype(np.uint8)  # 11 labels for 12 images
    assert "11 labels for the 12 images" in _broken(tmp_path, TRAIN_LABELS, idx_bytes(labels))


def test_images_of_the_wrong_size_are_named(tmp_path):
    images = np.zeros((12, 32, 32), dtype=np.uint8)
    assert "32x32 pixels, expected 28x28" in _broken(tmp_path, TRAIN_IMAGES, idx_bytes(images))


def test_labels_outside_the_ten_classes_are_named(tmp_path):
    labels = np.full(5, 10, dtype=np.uint8)
    assert "label 10 outside 0..9" in _broken(tmp_path, TEST_LABELS, idx_bytes(labels))


REAL = Path(FASHION_MNIST_DATA_ROOT)


@pytest.mark.skipif(not (REAL / "train-images-idx3-ubyte.gz").is_file() and not (REAL / "train-images-idx3-ubyte").is_file(),
                    reason=f"the real Fashion-MNIST files are not installed in {FASHION_MNIST_DATA_ROOT} "
                           f"(apt-get install dataset-fashion-mnist)")
def test_the_real_files_hold_60000_and_10000_balanced_images():
    x_tr, y_tr, x_te, y_te = F.load_fashion_mnist(None)
    assert x_tr.shape == (60000, 1, 28, 28) and x_te.shape == (10000, 1, 28, 28)
    assert torch.bincount(y_tr).tolist() == [6000] * 10 and torch.bincount(y_te).tolist() == [1000] * 10
    mean = x_tr.float().div(255).mean().item()
    std = x_tr.float().div(255).std().item()
    assert abs(mean - F.MEAN[0]) < 5e-4 and abs(std - F.STD[0]) < 5e-4


def test_the_run_default_root_reads_its_own_files_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_fashion_fixture(tmp_path / "data" / "fashion-mnist")
    assert F.find_files("./data")["train"][0] == Path("data/fashion-mnist") / TRAIN_IMAGES


def test_the_run_default_root_falls_back_to_the_package_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(F, "FASHION_MNIST_DATA_ROOT", str(tmp_path / "pkg"))
    write_fashion_fixture(tmp_path / "pkg", gz=True)
    assert F.find_files("./data")["test"][1] == tmp_path / "pkg" / f"{TEST_LABELS}.gz"
    assert F.find_files(None)["test"][1] == tmp_path / "pkg" / f"{TEST_LABELS}.gz"
    with pytest.raises(DatasetUnavailableError, match="no such directory"):  # an explicit root: no fallback
        F.find_files(tmp_path / "elsewhere")
