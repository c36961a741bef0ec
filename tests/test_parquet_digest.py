"""The row-group digest's fast paths give the CRCs of the plain decode-everything digest.

Archives already written carry digests of the plain definition below; every column shape
the writer makes (and some it does not) must digest the same through the fast paths.
"""

import numpy as np
import pyarrow as pa
import pytest

from tbconvert.formats.parquet import digest


class PlainDigest(digest.ColumnDigest):
    """The digest's plain definition: every column decoded, then its streams' CRCs."""

    def _fast(self, arr) -> bool:
        return False

    def _fast_chunked(self, arr) -> bool:
        return False


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
    # stretches of one value (the tags of short series sharing a row group), nulls between
    stretch = np.repeat(rng.integers(0, 3, n // 7 + 1), 7)[:n].astype(np.int8)
    yield pa.DictionaryArray.from_arrays(pa.array(stretch), pa.array(["", "é", "tag/x"]))
    yield pa.DictionaryArray.from_arrays(pa.array(stretch, mask=~valid),
                                         pa.array([b"\x00", b"ab", b""], pa.binary()))
    yield pa.array([b"x" * int(k) if v else None
                    for k, v in zip(rng.integers(0, 4, n), valid, strict=True)], pa.binary())
    yield pa.array([list(range(int(k))) if v else None
                    for k, v in zip(rng.integers(0, 4, n), valid, strict=True)],
                   pa.list_(pa.int64()))
    # 64-bit offsets (Arrow's large types: not the archive's, but a digest of any column)
    yield pa.array([b"y" * int(k) if v else None
                    for k, v in zip(rng.integers(0, 4, n), valid, strict=True)], pa.large_binary())
    yield pa.nulls(n, pa.large_list(pa.int64()))
    # null slots that still span bytes (no writer of ours makes these)
    yield pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(np.zeros(1, np.uint8)),
                                                 pa.py_buffer(np.array([0, 2, 3], np.int32)),
                                                 pa.py_buffer(b"abc")])


@pytest.mark.parametrize("n", [0, 1, 7, 100, 1000])
def test_fast_paths_digest_as_the_plain_definition(n):
    rng = np.random.default_rng(n)
    columns = list(_columns(n, rng))
    assert len(columns) == 20
    for column in columns:
        m = len(column)
        for piece in (column, column.slice(min(3, m), max(0, m - 5)), column.slice(m // 2),
                      pa.chunked_array([column, column.slice(m // 3)], column.type)):
            plain, fast = PlainDigest(), digest.ColumnDigest()
            plain.update(piece)
            fast.update(piece)
            assert fast.hexdigest() == plain.hexdigest(), (column.type, len(piece))


def test_constant_streams_taken_from_memory_digest_as_computed(monkeypatch):
    """The CRCs of constant streams (valid slots, nulls, one value repeated) are kept from one
    row group to the next: taken from memory, they are what computing them gives, whether the
    memo is empty, warm or full."""
    monkeypatch.setattr(digest, "_MEMO", {})
    monkeypatch.setattr(digest, "_MEMO_SIZE", 5)
    rng = np.random.default_rng(7)
    for n in (3, 1000, 3, 64):
        columns = list(_columns(n, rng)) + [_const("x" * 300, n), _const("run", n, np.int8)]
        for _ in range(2):
            for column in columns:
                plain, fast = PlainDigest(), digest.ColumnDigest()
                plain.update(column)
                fast.update(column)
                assert fast.hexdigest() == plain.hexdigest(), (column.type, n)
        assert len(digest._MEMO) <= 5


def _const(value: str, n: int, index=np.int32) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, index)), pa.array([value]))


@pytest.mark.parametrize("pieces", [
    [_const("run", 3), _const("run", 0), _const("run", 5)],     # one value, many batches
    [_const("loss", 3), _const("acc", 4)],                       # a value per batch: tags
    [_const("x", 2, np.int8), pa.DictionaryArray.from_arrays(
        pa.array(np.array([1, 0], np.int8)), pa.array(["x", "y"]))],
    [pa.nulls(4, pa.binary()), pa.nulls(0, pa.binary()), pa.nulls(2, pa.binary())],
    [pa.nulls(2, pa.list_(pa.int64())), pa.array([[1]], pa.list_(pa.int64()))],
    [pa.array([1.5, 2.5]), pa.array([], pa.float64()), pa.array([3.5])],
    [pa.array([True, False, True]), pa.array([False] * 9)],
    [pa.array([1, 2], pa.int32()), pa.array([3, None], pa.int32())],
])
def test_a_row_group_of_many_batches_digests_as_one_array(pieces):
    """A sync's part holds a few points per series, one batch each: the column is taken in
    one go, with the CRCs of the plain definition."""
    column = pa.chunked_array(pieces, pieces[0].type)
    plain, fast = PlainDigest(), digest.ColumnDigest()
    plain.update(column)
    fast.update(column)
    assert fast.hexdigest() == plain.hexdigest()


@pytest.mark.e2e
def test_the_digest_never_asks_for_pandas(tmp_path):
    """The command runs without pandas; some pyarrow versions import it for
    ``to_pandas_dtype`` or compute functions (and fail there), so the digest uses neither.
    Nor does it import pyarrow.compute for the columns the writer makes (27 ms of a
    sync command's start)."""
    import subprocess
    import sys
    code = """
import sys
asked = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pandas" or name == "pyarrow.compute":
            asked.append(name)
        return None
sys.meta_path.insert(0, Watch())
import numpy as np, pyarrow as pa
from tbconvert.formats.parquet import columns as C, digest
from tbconvert.formats.parquet.writer import _names
d = digest.ColumnDigest()
for column in (C.fixed(np.arange(5), pa.int64()),
               C.fixed(np.ones(2), pa.float64(), np.array([True, False])),
               C.fixed(np.arange(3, dtype=np.int8), pa.int8()),
               C.const_dict("a", 4),
               _names(["loss", "acc", "loss"], [3, 2, 4])):
    d.update(column)
print(asked)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
