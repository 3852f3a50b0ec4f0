"""pytext (BEHAVIOUR §6.7): the standard library as a deterministic byte-level LM corpus."""

import time
import zlib
from pathlib import Path

import pytest
import torch

from hosts.data import pytext as P
from hosts.data.task_data import load_task_data
from hosts.tasks import get_task


@pytest.fixture(scope="module")
def built():
    start = time.perf_counter()
    train, val = P.build_pytext()
    return train, val, time.perf_counter() - start


def test_real_stdlib_build_is_fast_and_full_size(built):
    train, val, seconds = built
    assert seconds < 10.0
    assert train.shape == (4_194_303 // 128, 129) and val.shape == (32_767 // 128, 129)
    assert train.dtype == val.dtype == torch.int32
    assert int(train.min()) >= 0 and int(train.max()) < 256


def test_real_stdlib_build_is_deterministic(built):
    train, val, _ = built
    again_train, again_val = P.build_pytext()
    assert torch.equal(train, again_train) and torch.equal(val, again_val)


def test_chunks_start_every_128_bytes_and_overlap_by_one(built):
    train = built[0]
    assert torch.equal(train[:-1, 128], train[1:, 0])


def test_corpus_skips_tests_idlelib_site_packages_and_pycache():
    files = P.corpus_files(P.stdlib_dir())
    assert files and all(f.endswith(".py") for f in files)
    for f in files:
        assert not P.SKIP_DIRS.intersection(f.split("/"))
    assert files == sorted(files, key=lambda p: p.encode("utf-8"))


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_streams_follow_order_split_separator_and_skip_rules(tmp_path):
    names = [f"m{i}.py" for i in range(60)] + ["pkg/z.py", "pkg/A.py", "Zed.py"]
    for name in names:
        _write(tmp_path, name, f"# {name}\n")
    for skipped in ("test/t.py", "pkg/tests/t.py", "idlelib/i.py", "site-packages/s.py", "dist-packages/d.py",
                    "__pycache__/c.py", "pkg/notes.txt"):
        _write(tmp_path, skipped, "SKIPPED\n")
    train, val = P.split_streams(tmp_path)
    ordered = sorted(names, key=lambda p: p.encode("utf-8"))  # "Zed.py" < "m0.py" < "pkg/A.py"
    expect_val = [n for n in ordered if zlib.crc32(n.encode()) % 20 == 0]
    expect_train = [n for n in ordered if zlib.crc32(n.encode()) % 20 != 0]
    assert expect_val, "the fixture should put at least one file in validation"
    assert val == b"".join(f"# {n}\n".encode() + b"\x00" for n in expect_val)
    assert train == b"".join(f"# {n}\n".encode() + b"\x00" for n in expect_train)
    assert b"SKIPPED" not in train + val


def test_streams_are_truncated_to_4_mib_and_32_kib(tmp_path):
    body = "x = 1\n" * 20_000  # 120,000 bytes per file
    for i in range(60):
        _write(tmp_path, f"f{i:02d}.py", body)
    train, val = P.split_streams(tmp_path)
    assert len(train) == P.TRAIN_BYTES
    assert len(val) <= P.VAL_BYTES


def test_chunk_stream_drops_the_incomplete_tail():
    stream = bytes(range(256)) * 2  # 512 bytes -> chunks at 0, 128, 256 (383 <= 511), not 384
    blocks = P.chunk_stream(stream)
    assert blocks.shape == (3, 129)
    assert blocks[1].tolist() == list(stream[128:257])
    assert P.chunk_stream(bytes(128)).shape == (0, 129)
    assert P.chunk_stream(bytes(129)).shape == (1, 129)


def test_too_few_training_bytes_raises_the_documented_error(tmp_path):
    _write(tmp_path, "small.py", "pass\n")
    with pytest.raises(ValueError, match=r"^pytext: standard library sources not found$"):
        P.build_pytext(tmp_path)
    with pytest.raises(ValueError, match="pytext: standard library sources not found"):
        P.build_pytext(tmp_path / "missing")


def test_pytext_task_data_is_int32_blocks_on_the_device():
    data = load_task_data(get_task("pytext"), "cpu")
    assert data.kind == "lm" and data.x_train.dtype == torch.int32 and data.x_train.shape[1] == 129
    assert data.y_train is None and data.pad_value is None and not data.augment
