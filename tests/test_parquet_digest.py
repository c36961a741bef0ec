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


@pytest.mark.e2e
def test_the_digest_never_asks_for_pandas(tmp_path):
    """The command runs without pandas; some pyarrow versions import it for
    ``to_pandas_dtype`` or compute functions (and fail there), so the digest uses neither."""
    import subprocess
    import sys
    code = """
import sys
asked = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pandas":
            asked.append(name)
        return None
sys.meta_path.insert(0, Watch())
import numpy as np, pyarrow as pa
from tbconvert.formats.parquet import columns as C, digest
d = digest.ColumnDigest()
for column in (C.fixed(np.arange(5), pa.int64()),
               C.fixed(np.ones(2), pa.float64(), np.array([True, False])),
               C.fixed(np.arange(3, dtype=np.int8), pa.int8()),
               C.const_dict("a", 4)):
    d.update(column)
print(asked)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
