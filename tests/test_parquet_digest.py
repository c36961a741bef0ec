"""The row-group digest's fast paths give the CRCs of the plain decode-everything digest.

Archives already written carry digests of the plain definition below; every column shape
the writer makes (and some it does not) must digest the same through the fast paths.
"""

# -- the plain definition: decode the column, then CRC its streams ----------------------------
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tbconvert.formats.parquet import digest


def _crc(crc: int, data) -> int:
    return crc32c.crc32c(memoryview(data).cast("B"), crc) if len(data) else crc


def _offsets(arr) -> np.ndarray:
    """The ``len + 1`` value offsets of a (sliced) binary or list array."""
    buf = arr.buffers()[1]
    width = 8 if pa.types.is_large_binary(arr.type) or pa.types.is_large_list(arr.type) \
        or pa.types.is_large_string(arr.type) else 4
    dtype = np.int64 if width == 8 else np.int32
    return np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr) + 1)[arr.offset:]


def _validity(arr) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), np.uint8)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.uint8)


def _lengths(offsets: np.ndarray, valid: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets).astype(np.int64)
    lengths[valid == 0] = -1
    return lengths


class PlainDigest:
    """Running CRCs of one column's streams."""

    def __init__(self) -> None:
        self.crcs = [0, 0, 0, 0, 0]

    def update(self, arr) -> None:
        if isinstance(arr, pa.ChunkedArray):
            for piece in arr.chunks:
                self.update(piece)
            return
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        c = self.crcs
        valid = _validity(arr)
        c[0] = _crc(c[0], valid)
        t = arr.type
        if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
                or pa.types.is_large_string(t):
            off = _offsets(arr)
            c[1] = _crc(c[1], _lengths(off, valid))
            if len(arr):
                c[2] = _crc(c[2], memoryview(arr.buffers()[2] or b"")[int(off[0]):int(off[-1])])
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            off = _offsets(arr)
            c[1] = _crc(c[1], _lengths(off, valid))
            child = arr.values.slice(int(off[0]), int(off[-1] - off[0])) if len(arr) else \
                arr.values.slice(0, 0)
            sub = PlainDigest()
            sub.crcs = [c[2], c[3], c[4], 0, 0]
            sub.update(child)
            c[2], c[3], c[4] = sub.crcs[:3]
        else:
            if arr.null_count:
                arr = pc.fill_null(arr, pa.scalar(False if pa.types.is_boolean(t) else 0, t))
            values = arr.to_numpy(zero_copy_only=False)
            if values.dtype == bool:
                values = values.view(np.uint8)
            c[1] = _crc(c[1], np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"),
                                                                 copy=False)))

    def hexdigest(self) -> str:
        return "".join(f"{x:08x}" for x in self.crcs)




def _columns(n: int, rng):
    valid = rng.random(n) < 0.7
    yield pa.array(rng.integers(-5, 5, n), pa.int64())
    yield pa.array(rng.random(n).tolist(), pa.float64(), mask=~valid)
    yield pa.array((rng.random(n) < .5).tolist(), pa.bool_(), mask=~valid)
    yield pa.array((rng.random(n) < .5).tolist(), pa.bool_())
    yield pa.array(rng.integers(0, 9, n).astype(np.int32), pa.int32())
    yield pa.array(rng.integers(0, 9, n).astype(np.int8), pa.int8())
    yield pa.nulls(n, pa.float64())
    yield pa.nulls(n, pa.binary())
    yield pa.nulls(n, pa.list_(pa.int64()))
    yield pa.nulls(n, pa.dictionary(pa.int8(), pa.string()))
    yield pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["abc"]))
    yield pa.DictionaryArray.from_arrays(pa.array(np.ones(n, np.int8), mask=~valid),
                                         pa.array(["x", "hello"]))
    yield pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 2, n).astype(np.int32)),
                                         pa.array(["a", "bb"]))
    yield pa.array([b"x" * int(k) if v else None
                    for k, v in zip(rng.integers(0, 4, n), valid, strict=True)], pa.binary())
    yield pa.array([list(range(int(k))) if v else None
                    for k, v in zip(rng.integers(0, 4, n), valid, strict=True)],
                   pa.list_(pa.int64()))
    # null slots that still span bytes (no writer of ours makes these)
    yield pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(np.zeros(1, np.uint8)),
                                                 pa.py_buffer(np.array([0, 2, 3], np.int32)),
                                                 pa.py_buffer(b"abc")])


@pytest.mark.parametrize("n", [0, 1, 7, 100, 1000])
def test_fast_paths_digest_as_the_plain_definition(n):
    rng = np.random.default_rng(n)
    columns = list(_columns(n, rng))
    assert len(columns) == 16
    for column in columns:
        m = len(column)
        for piece in (column, column.slice(min(3, m), max(0, m - 5)), column.slice(m // 2),
                      pa.chunked_array([column, column.slice(m // 3)], column.type)):
            plain, fast = PlainDigest(), digest.ColumnDigest()
            plain.update(piece)
            fast.update(piece)
            assert fast.hexdigest() == plain.hexdigest(), (column.type, len(piece))
