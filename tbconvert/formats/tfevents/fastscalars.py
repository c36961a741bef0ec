"""Vectorised decoding of plain scalar events, the bulk of most event files.

A training loop writes millions of events that differ only in wall time,
step and value: ``Event{wall_time, step, summary{value{tag, simple_value}}}``
or the same with a rank-0 DT_FLOAT/DT_DOUBLE tensor. Records of one length
and one tag share every other byte, so we learn the layout from one record,
check that the others match it byte for byte (numpy, all at once) and slice
the varying fields out as columns. Anything that does not match exactly
(metadata, several values, other payloads) is left to the protobuf path, so
the result is always what protobuf would have decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tbconvert import dtypes as dt

MIN_GROUP = 16        # below this, protobuf is as fast and simpler
MAX_TEMPLATES = 64    # layouts tried per record length before giving up on the rest


@dataclass
class Layout:
    tag: bytes
    wall_off: int          # -1: field absent (wall time 0.0)
    step_off: int          # -1: field absent (step 0)
    step_len: int
    value_off: int
    value_dtype: str       # "<f4" or "<f8"
    code: int              # TensorFlow dtype of the point
    simple: bool           # legacy simple_value (metadata is made by the loader)


@dataclass
class ScalarColumns:
    """Decoded scalar events of one tag: record indices, steps, wall times, values."""

    tag: str
    simple: bool
    code: int
    index: np.ndarray
    steps: np.ndarray
    wall_times: np.ndarray
    values: np.ndarray


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise ValueError("bad varint")


def _fields(buf: bytes, pos: int, end: int):
    """(field number, wire type, value start, value end, varint value) for each field."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            start = pos
            value, pos = _varint(buf, pos, end)
            yield field, wire, start, pos, value
        elif wire == 1:
            yield field, wire, pos, pos + 8, None
            pos += 8
        elif wire == 5:
            yield field, wire, pos, pos + 4, None
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            yield field, wire, pos, pos + length, length
            pos += length
        else:
            raise ValueError("unsupported wire type")
        if pos > end:
            raise ValueError("field runs past its message")


def learn_layout(buf: bytes) -> Layout | None:
    """The layout of a plain scalar event, or None if ``buf`` is anything else."""
    try:
        return _learn(buf)
    except (ValueError, IndexError):
        return None


def _learn(buf: bytes) -> Layout | None:
    wall_off = step_off = -1
    step_len = 0
    summary = None
    seen = set()
    for field, wire, start, end, _ in _fields(buf, 0, len(buf)):
        if field in seen:
            return None
        seen.add(field)
        if field == 1 and wire == 1:
            wall_off = start
        elif field == 2 and wire == 0:
            step_off, step_len = start, end - start
        elif field == 5 and wire == 2:
            summary = (start, end)
        else:
            return None
    if summary is None:
        return None
    values = list(_fields(buf, *summary))
    if len(values) != 1 or values[0][:2] != (1, 2):
        return None
    tag = None
    value = None
    for field, wire, start, end, _ in _fields(buf, values[0][2], values[0][3]):
        if field == 1 and wire == 2 and tag is None:
            tag = bytes(buf[start:end])
        elif field == 2 and wire == 5 and value is None:
            value = (start, "<f4", dt.DT_FLOAT, True)
        elif field == 8 and wire == 2 and value is None:
            value = _tensor_value(buf, start, end)
            if value is None:
                return None
        else:
            return None
    if not tag or value is None:
        return None
    try:
        tag.decode("utf-8")
    except UnicodeDecodeError:
        return None
    value_off, value_dtype, code, simple = value
    return Layout(tag, wall_off, step_off, step_len, value_off, value_dtype, code, simple)


def _tensor_value(buf: bytes, start: int, end: int):
    code = None
    payload = None
    shape_ok = False
    for field, wire, s, e, v in _fields(buf, start, end):
        if field == 1 and wire == 0 and code is None:
            code = v
        elif field == 2 and wire == 2 and e == s and not shape_ok:
            shape_ok = True
        elif field in (4, 5, 6) and wire == 2 and payload is None:
            payload = (field, s, e - s)
        else:
            return None
    if payload is None or not shape_ok:
        return None
    field, off, size = payload
    if code == dt.DT_FLOAT and size == 4 and field in (4, 5):
        return off, "<f4", code, False
    if code == dt.DT_DOUBLE and size == 8 and field in (4, 6):
        return off, "<f8", code, False
    return None


def decode(buf: bytes, starts: np.ndarray, lengths: np.ndarray):
    """Split records into decoded scalar columns and the indices left for protobuf.

    Returns ``(columns, rest)``: a list of :class:`ScalarColumns` and a sorted
    int64 array of record indices that still need the general decoder.
    """
    data = np.frombuffer(buf, dtype=np.uint8)
    columns: list[ScalarColumns] = []
    rest = [np.zeros(0, np.int64)]
    uniq, inverse, counts = np.unique(lengths, return_inverse=True, return_counts=True)
    for gi, length in enumerate(uniq):
        members = np.flatnonzero(inverse == gi)
        if counts[gi] < MIN_GROUP:
            rest.append(members)
            continue
        # Rows of a zero-copy window view: no (n x length) index matrix is ever built.
        rows = sliding_window_view(data, int(length))[starts[members]]
        pending = np.ones(len(members), dtype=bool)
        for _ in range(MAX_TEMPLATES):
            todo = np.flatnonzero(pending)
            if len(todo) < MIN_GROUP:
                break
            first = todo[0]
            layout = learn_layout(rows[first].tobytes())
            if layout is None:
                pending[first] = False
                rest.append(members[first:first + 1])
                continue
            matched = todo[_matches(rows[todo], rows[first], layout)]
            pending[matched] = False
            columns.append(_columns(layout, members[matched], rows[matched]))
        rest.append(members[pending])
    return columns, np.sort(np.concatenate(rest))


def _variable_bytes(layout: Layout, length: int) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    if layout.wall_off >= 0:
        mask[layout.wall_off:layout.wall_off + 8] = True
    if layout.step_off >= 0:
        mask[layout.step_off:layout.step_off + layout.step_len] = True
    size = 4 if layout.value_dtype == "<f4" else 8
    mask[layout.value_off:layout.value_off + size] = True
    return mask


def _matches(rows: np.ndarray, template: np.ndarray, layout: Layout) -> np.ndarray:
    fixed = ~_variable_bytes(layout, rows.shape[1])
    ok = (rows[:, fixed] == template[fixed]).all(axis=1)
    if layout.step_off >= 0:
        step = rows[:, layout.step_off:layout.step_off + layout.step_len]
        ok &= (step[:, :-1] & 0x80 != 0).all(axis=1) & (step[:, -1] & 0x80 == 0)
    return np.flatnonzero(ok)


def _columns(layout: Layout, index: np.ndarray, rows: np.ndarray) -> ScalarColumns:
    n = len(index)
    if layout.wall_off >= 0:
        walls = np.ascontiguousarray(rows[:, layout.wall_off:layout.wall_off + 8]).view("<f8")[:, 0]
    else:
        walls = np.zeros(n, np.float64)
    steps = np.zeros(n, dtype=np.uint64)
    if layout.step_off >= 0:
        for j in range(layout.step_len):
            byte = rows[:, layout.step_off + j].astype(np.uint64) & np.uint64(0x7F)
            steps |= byte << np.uint64(7 * j)
    size = 4 if layout.value_dtype == "<f4" else 8
    values = np.ascontiguousarray(rows[:, layout.value_off:layout.value_off + size]) \
        .view(layout.value_dtype)[:, 0]
    return ScalarColumns(layout.tag.decode("utf-8"), layout.simple, layout.code, index,
                         steps.view(np.int64), walls.astype(np.float64), values.copy())
