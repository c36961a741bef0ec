"""Tensor points an archive keeps back to back in one byte column, handed out a bounded
slice at a time.

Both archives store a series' tensors as one run of bytes cut by offsets. Reading a whole
row group or a 32 MiB window of it as one chunk, with a ``bytes`` object per point, made an
archive -> archive conversion of 100,000 histograms hold several copies of that window at
once (the read bytes, one object per point, the writer's joined column) and scattered
glibc's heap with objects of a few KiB that it could not hand back: 300-450 MiB at peak,
growing with the run. A chunk here is at most :data:`CHUNK_BYTES` of payload, copied once
into its own buffer (never pinning the reader's Arrow batches or HDF5 windows), and each
point is a read-only view of that buffer.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tbconvert import dtypes as dt

# Payload of one chunk of tensor points (at least one point, whatever its size).
CHUNK_BYTES = 4 << 20


def spans(ends: np.ndarray, limit: int | None = None) -> Iterator[tuple[int, int]]:
    """Consecutive ranges ``(a, b)`` of the ``len(ends) - 1`` points whose cumulative
    payload is ``ends`` (rising from ``ends[0]``), each at most ``limit`` bytes
    (:data:`CHUNK_BYTES` by default) or one point."""
    limit = CHUNK_BYTES if limit is None else limit
    n = len(ends) - 1
    a = 0
    while a < n:
        b = int(np.searchsorted(ends, ends[a] + limit, side="right")) - 1
        b = min(n, max(a + 1, b))
        yield a, b
        a = b


def owned(data, lo: int, hi: int) -> np.ndarray:
    """Bytes ``lo:hi`` of ``data`` (bytes-like: an Arrow buffer) copied into a read-only
    array of their own: the points' views keep it alive, not the buffer they came from."""
    arr = np.frombuffer(data, np.uint8, hi - lo, lo).copy() if hi > lo else \
        np.empty(0, np.uint8)
    arr.flags.writeable = False
    return arr


def point(data: np.ndarray, lo: int, hi: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """The tensor held in ``data[lo:hi]`` (whose length the caller checked)."""
    return data[lo:hi].view(dtype).reshape(shape)


def block_of(data: np.ndarray, codes, shapes: list) -> np.ndarray | None:
    """Every point as one array (see ``TensorSeries.block``) when they are of one numeric
    dtype and shape and fill ``data`` exactly (the caller checked each point's length);
    None otherwise."""
    n = len(shapes)
    if not n:
        return None
    code = int(codes[0])
    if code in (dt.DT_STRING, dt.DT_RAW_PROTO) or (np.asarray(codes) != code).any():
        return None
    first = shapes[0]
    if any(s != first for s in shapes):
        return None
    dtype = dt.numpy_dtype(code)
    if dtype.kind not in "biufc" or data.nbytes % dtype.itemsize:
        return None
    values = data.view(dtype)
    if values.size != n * int(np.prod(first, dtype=np.int64)):
        return None
    return values.reshape((n, *first))
