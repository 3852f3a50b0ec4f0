"""CIFAR-10 (BEHAVIOUR §6.2) and TinyStories (§6.5) loaders: local fixtures only, never the network."""

import builtins
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from hosts.data import external as X
from hosts.data.task_data import load_task_data
from hosts.tasks import get_task
from tests.hosts.cifar_fixture import write_cifar10_fixture

# ------------------------------------------------------------------------------------------
# CIFAR-10
# ------------------------------------------------------------------------------------------


def test_cifar_fixture_is_read_in_order(tmp_path):
    train, train_y, test, test_y = write_cifar10_fixture(tmp_path)
    x_tr, y_tr, x_te, y_te = X.load_cifar10(tmp_path, download=False)
    assert x_tr.dtype == torch.uint8 and x_tr.shape == (20, 3, 32, 32) and x_te.shape == (6, 3, 32, 32)
    assert np.array_equal(x_tr.numpy(), train) and np.array_equal(x_te.numpy(), test)
    assert y_tr.dtype == torch.int64 and y_tr.tolist() == train_y.tolist() and y_te.tolist() == test_y.tolist()


@pytest.mark.parametrize("task", ["cifar10", "cifar10_deep"])
def test_cifar_task_data_is_normalised_with_the_cifar_statistics(tmp_path, task):
    train, train_y, test, _ = write_cifar10_fixture(tmp_path)
    data = load_task_data(get_task(task), "cpu", data_root=tmp_path, download=False)
    mean = torch.tensor(X.CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(X.CIFAR_STD).view(1, 3, 1, 1)
    expected = (torch.from_numpy(train).float() / 255.0 - mean) / std
    torch.testing.assert_close(data.x_train, expected, rtol=0, atol=1e-6)
    assert data.x_train.dtype == torch.float32 and data.y_train.tolist() == train_y.tolist()
    assert data.n_test == 6 and data.kind == "classification"
    torch.testing.assert_close(data.pad_value, -torch.tensor(X.CIFAR_MEAN) / torch.tensor(X.CIFAR_STD))


def test_missing_cifar_without_download_names_the_directory_and_suggests_shapes10(tmp_path):
    with pytest.raises(X.DatasetUnavailableError) as info:
        load_task_data(get_task("cifar10"), "cpu", data_root=tmp_path / "nowhere", download=False)
    message = str(info.value)
    assert "CIFAR-10" in message and str(tmp_path / "nowhere") in message and "shapes10" in message
    assert isinstance(info.value, FileNotFoundError)


def test_failed_cifar_download_raises_the_clear_error(tmp_path, monkeypatch):
    def no_network(root):
        raise OSError("network is unreachable")

    monkeypatch.setattr(X, "_download_cifar", no_network)
    with pytest.raises(X.DatasetUnavailableError, match="download failed.*network is unreachable") as info:
        X.load_cifar10(tmp_path, download=True)
    assert "shapes10" in str(info.value)


def test_corrupt_cifar_files_raise_the_clear_error(tmp_path):
    write_cifar10_fixture(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(X.DatasetUnavailableError, match="unreadable"):
        X.load_cifar10(tmp_path, download=False)


# ------------------------------------------------------------------------------------------
# TinyStories
# ------------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 50255), max_size=900))
def test_chunk_tokens_windows_of_257_every_256_padded_with_eos(tokens):
    chunks = X.chunk_tokens(tokens)
    starts = [s for s in range(0, len(tokens), 256) if len(tokens) - s >= 2]
    assert len(chunks) == len(starts)
    for start, chunk in zip(starts, chunks):
        piece = tokens[start : start + 257]
        assert len(chunk) == 257
        assert chunk == piece + [X.GPT2_EOS] * (257 - len(piece))


def test_chunk_tokens_edge_cases():
    assert X.chunk_tokens([]) == [] and X.chunk_tokens([7]) == []
    assert X.chunk_tokens([7, 8]) == [[7, 8] + [50256] * 255]
    exact = list(range(257))
    assert X.chunk_tokens(exact) == [exact]  # the 1-token tail at 256 is skipped
    two = X.chunk_tokens(list(range(258)))
    assert len(two) == 2 and two[1][:2] == [256, 257] and two[0][256] == two[1][0]


def test_token_blocks_with_a_fake_tokenizer_give_x_and_y():
    def encode(text):
        return [ord(c) for c in text]

    texts = ["a" * 300, "bc", "d"]
    blocks = X.token_blocks(texts, encode)
    assert blocks.dtype == torch.int32 and blocks.shape == (3, 257)  # 2 windows + "bc"; "d" is skipped
    x, y = blocks[:, :256], blocks[:, 1:257]
    assert x[2, :2].tolist() == [98, 99] and y[2, 0].item() == 99 and y[2, 1].item() == X.GPT2_EOS


def _block_import(monkeypatch, name):
    real_import = builtins.__import__

    def fake_import(module, *args, **kwargs):
        if module == name or module.startswith(name + "."):
            raise ImportError(f"No module named {name!r}")
        return real_import(module, *args, **kwargs)

    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(builtins, "__import__", fake_import)


@pytest.mark.parametrize("package", ["tiktoken", "datasets"])
def test_missing_text_extra_names_what_to_install_and_suggests_pytext(tmp_path, monkeypatch, package):
    _block_import(monkeypatch, package)
    if package == "datasets":  # get past the tokenizer with a fake one
        monkeypatch.setattr(X, "gpt2_encoder", lambda root: (lambda text: [1, 2, 3]))
    with pytest.raises(X.DatasetUnavailableError) as info:
        load_task_data(get_task("tinystories"), "cpu", data_root=tmp_path)
    message = str(info.value)
    assert package in message and "text" in message and "pytext" in message
    assert "TinyStories" in message and str(tmp_path) in message


def test_missing_tinystories_data_names_where_it_should_be(tmp_path, monkeypatch):
    class FakeDatasets:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    monkeypatch.setattr(X, "gpt2_encoder", lambda root: (lambda text: [1, 2, 3]))
    with pytest.raises(X.DatasetUnavailableError, match="offline") as info:
        X.load_tinystories(tmp_path)
    assert str(tmp_path / "tinystories") in str(info.value) and "pytext" in str(info.value)


def test_tinystories_loader_with_fake_packages_keeps_the_first_max_samples(tmp_path, monkeypatch):
    class FakeSplit(list):
        def select(self, indices):
            return FakeSplit(self[i] for i in indices)

        def __getitem__(self, key):
            if key == "text":
                return [row["text"] for row in self]
            return list.__getitem__(self, key)

    stories = {"train": ["ab" * 200, "cd", "ef"], "validation": ["gh"]}

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, split, cache_dir):
            assert name == X.TINYSTORIES_DATASET and cache_dir == str(tmp_path / "tinystories")
            return FakeSplit({"text": t} for t in stories[split])

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    monkeypatch.setattr(X, "gpt2_encoder", lambda root: (lambda text: [ord(c) for c in text]))
    train, val = X.load_tinystories(tmp_path, max_samples=2)
    assert train.shape == (3, 257) and val.shape == (1, 257)  # 400 tokens -> 2 windows, "cd" -> 1
    data = load_task_data(get_task("tinystories"), "cpu", data_root=tmp_path, max_samples=1)
    assert data.kind == "lm" and data.n_train == 2 and data.x_train.dtype == torch.int32


# ------------------------------------------------------------------------------------------
# issue 12: hostile or malformed files, and what is checked first
# ------------------------------------------------------------------------------------------


def test_a_planted_cifar_pickle_cannot_run_code(tmp_path, monkeypatch):
    """Issue 12, defect 16: the CIFAR-10 batch files were unpickled without restriction."""
    write_cifar10_fixture(tmp_path)
    monkeypatch.chdir(tmp_path)
    planted = b"cos\nsystem\n(S'touch PWNED'\ntR."
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(planted)
    with pytest.raises(X.DatasetUnavailableError, match="os.system is not allowed") as info:
        X.load_cifar10(tmp_path, download=False)
    assert not (tmp_path / "PWNED").exists() and "shapes10" in str(info.value)


@pytest.mark.parametrize("entry", [
    [1, 2, 3], {"labels": [1]}, {"data": np.zeros((2, 3072), np.float32), "labels": [1, 2]},
    {"data": np.zeros((2, 3072), np.uint8), "labels": [1]}, {"data": np.zeros((2, 3072), np.uint8), "labels": [1, 12]},
    {"data": np.zeros((2, 10), np.uint8), "labels": [1, 2]},
])
def test_a_malformed_cifar_batch_is_the_clear_dataset_error(tmp_path, entry):
    import pickle

    write_cifar10_fixture(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as fh:
        pickle.dump(entry, fh, protocol=2)
    with pytest.raises(X.DatasetUnavailableError, match="unreadable files"):
        X.load_cifar10(tmp_path, download=False)


def test_a_failed_download_leaves_no_directory_behind(tmp_path, monkeypatch):
    def half_download(root):
        (root / "cifar-10-batches-py").mkdir(parents=True)
        raise OSError("network is unreachable")

    monkeypatch.setattr(X, "_download_cifar", half_download)
    with pytest.raises(X.DatasetUnavailableError, match="download failed"):
        X.load_cifar10(tmp_path / "data", download=True)
    assert list(tmp_path.iterdir()) == []


def test_tinystories_checks_its_data_before_fetching_a_tokenizer(tmp_path, monkeypatch):
    """Issue 12, defect 12: a TinyStories run needed a tokenizer download before it checked its data."""
    fetched = []
    monkeypatch.setattr(X, "gpt2_encoder", lambda root: fetched.append(root) or (lambda text: [1]))

    class Offline:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", Offline)
    with pytest.raises(X.DatasetUnavailableError, match="offline"):
        X.load_tinystories(tmp_path)
    assert fetched == []
