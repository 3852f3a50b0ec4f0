"""The strict IDX reader: every header field and size is checked, and the error names the file."""

import gzip

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hosts.data.idx import IdxFormatError, idx_bytes, parse_header, parse_idx, read_idx


def test_header_fields_are_read_from_a_hand_written_file(tmp_path):
    # magic 0x00000803 (ubyte, 3 dims), dims 2 x 1 x 3, then 6 bytes of data
    path = tmp_path / "hand"
    path.write_bytes(bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6]))
    assert parse_header(path.read_bytes(), "hand") == ("ubyte", (2, 1, 3), 16)
    array = read_idx(path, dtype="ubyte", ndim=3)
    assert array.shape == (2, 1, 3) and array.dtype == np.uint8
    assert array.ravel().tolist() == [1, 2, 3, 4, 5, 6]


def test_big_endian_items_are_converted():
    data = bytes([0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE])  # two int16: 258, -2
    assert parse_idx(data, "x").tolist() == [258, -2]


@settings(deadline=None, max_examples=25)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.sampled_from(["u1", "i1", "i2", "i4", "f4", "f8"]))
def test_writing_then_reading_round_trips(dims, kind):
    array = (np.arange(int(np.prod(dims))) % 100).astype(kind).reshape(dims)
    back = parse_idx(idx_bytes(array), "x")
    assert back.dtype == array.dtype.newbyteorder("=") and np.array_equal(back, array)


def test_gzipped_and_plain_files_read_the_same(tmp_path):
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a").write_bytes(idx_bytes(array))
    (tmp_path / "a.gz").write_bytes(gzip.compress(idx_bytes(array)))
    assert np.array_equal(read_idx(tmp_path / "a"), read_idx(tmp_path / "a.gz"))


@pytest.mark.parametrize("data, needle", [
    (b"\x00\x00", "shorter than the 4-byte magic"),
    (b"\x01\x02\x08\x01" + bytes(8), "bad magic number 0x01020801"),
    (b"\x00\x00\x07\x01" + bytes(8), "unknown IDX dtype code 0x07"),
    (b"\x00\x00\x08\x00", "0 dimensions"),
    (b"\x00\x00\x08\x03\x00\x00\x00\x02", "shorter than its 16-byte header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x05" + bytes(3), "truncated: dimensions [5] need 5 bytes of data, the file holds 3"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x02" + bytes(3), "1 bytes after the 2 bytes"),
    # dimensions whose product passes 2^64: it wrapped to 0 and a reshape failed without the file (issue 39)
    (b"\x00\x00\x08\x04" + b"\x00\x01\x00\x00" * 4 + bytes(3),
     "truncated: dimensions [65536, 65536, 65536, 65536] need 18446744073709551616 bytes"),
])
def test_malformed_files_name_the_file_and_the_fault(tmp_path, data, needle):
    path = tmp_path / "broken-idx"
    path.write_bytes(data)
    with pytest.raises(IdxFormatError) as info:
        read_idx(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_expected_dtype_and_rank_are_enforced(tmp_path):
    path = tmp_path / "labels"
    path.write_bytes(idx_bytes(np.zeros((3, 2), dtype=np.int32)))
    with pytest.raises(IdxFormatError, match="dtype int, expected ubyte"):
        read_idx(path, dtype="ubyte")
    with pytest.raises(IdxFormatError, match=r"2 dimensions \[3, 2\], expected 1"):
        read_idx(path, ndim=1)


def test_a_truncated_gzip_stream_is_reported(tmp_path):
    path = tmp_path / "cut.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.zeros((50, 28, 28), dtype=np.uint8)))[:-40])
    with pytest.raises(IdxFormatError, match="cut.gz: broken or truncated gzip"):
        read_idx(path)


def test_a_missing_file_is_reported_by_name(tmp_path):
    with pytest.raises(IdxFormatError, match="nothing-here: cannot be read"):
        read_idx(tmp_path / "nothing-here")
