"""A strict reader of IDX files, the format of MNIST and Fashion-MNIST (plain or gzipped).

An IDX file is a 4-byte magic number — two zero bytes, a dtype code, the number of dimensions n — then
n big-endian uint32 sizes, then exactly prod(sizes) items of that dtype, big-endian, row-major. The
reader checks every part and raises `IdxFormatError` naming the file and what is wrong: a bad magic
number, an unknown dtype code, a dtype or rank other than the caller expects, a header or payload
shorter than it says (truncated), trailing bytes, or a gzip stream that is itself broken.

    images = read_idx(path, dtype="ubyte", ndim=3)   # numpy uint8 [N, rows, cols]
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np

# dtype code -> (name, numpy big-endian dtype)
IDX_DTYPES: dict[int, tuple[str, str]] = {
    0x08: ("ubyte", ">u1"),
    0x09: ("byte", ">i1"),
    0x0B: ("short", ">i2"),
    0x0C: ("int", ">i4"),
    0x0D: ("float", ">f4"),
    0x0E: ("double", ">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"


class IdxFormatError(ValueError):
    """An IDX file is malformed or not what the caller expects; the message names the file."""


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when the file starts with the gzip magic (whatever its name)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise IdxFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as exc:
        raise IdxFormatError(f"{path}: broken or truncated gzip stream ({exc})") from None


def parse_header(data: bytes, name: str) -> tuple[str, tuple[int, ...], int]:
    """(dtype name, dimensions, header length in bytes) of IDX bytes; IdxFormatError if malformed."""
    if len(data) < 4:
        raise IdxFormatError(f"{name}: truncated: {len(data)} bytes, shorter than the 4-byte magic number")
    if data[0] != 0 or data[1] != 0:
        raise IdxFormatError(f"{name}: bad magic number 0x{data[:4].hex()} (an IDX file starts with two zero bytes)")
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        raise IdxFormatError(f"{name}: unknown IDX dtype code 0x{code:02x} (known: "
                             f"{', '.join(f'0x{c:02x}' for c in IDX_DTYPES)})")
    if ndim < 1:
        raise IdxFormatError(f"{name}: the magic number gives 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxFormatError(f"{name}: truncated: {len(data)} bytes, shorter than its {header}-byte header")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    return IDX_DTYPES[code][0], dims, header


def parse_idx(data: bytes, name: str, *, dtype: str | None = None, ndim: int | None = None) -> np.ndarray:
    """The array held by IDX bytes (native byte order), checked against the expected dtype and rank."""
    kind, dims, header = parse_header(data, name)
    if dtype is not None and kind != dtype:
        raise IdxFormatError(f"{name}: dtype {kind}, expected {dtype}")
    if ndim is not None and len(dims) != ndim:
        raise IdxFormatError(f"{name}: {len(dims)} dimensions {list(dims)}, expected {ndim}")
    item = np.dtype(next(np_dt for nm, np_dt in IDX_DTYPES.values() if nm == kind))
    expected = math.prod(dims) * item.itemsize  # (python ints: dimensions past 2^64 in product cannot wrap)
    payload = len(data) - header
    if payload < expected:
        raise IdxFormatError(f"{name}: truncated: dimensions {list(dims)} need {expected} bytes of data, "
                             f"the file holds {payload}")
    if payload > expected:
        raise IdxFormatError(f"{name}: {payload - expected} bytes after the {expected} bytes its dimensions "
                             f"{list(dims)} describe")
    array = np.frombuffer(data, dtype=item, offset=header).reshape(dims)
    return array.astype(item.newbyteorder("="), copy=True)


def read_idx(path: str | Path, *, dtype: str | None = None, ndim: int | None = None) -> np.ndarray:
    """Read one IDX file (plain or gzipped) strictly; IdxFormatError naming the file otherwise."""
    path = Path(path)
    return parse_idx(_read_bytes(path), str(path), dtype=dtype, ndim=ndim)


def idx_bytes(array: np.ndarray) -> bytes:
    """The IDX encoding of an array (the inverse of `parse_idx`; tests write their files with it)."""
    array = np.asarray(array)
    codes = {np.dtype(np_dt).newbyteorder("="): code for code, (_, np_dt) in IDX_DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("="))
    if code is None:
        raise ValueError(f"no IDX dtype for {array.dtype}")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    big = array.astype(array.dtype.newbyteorder(">"))
    return header + big.tobytes()
