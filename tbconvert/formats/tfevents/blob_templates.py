"""Vectorised decoding of repetitive events that end in one variable-length blob: images.

An image logged every N steps is written the same way each time: PyTorch and
tensorboardX as ``Summary.Value{tag, image{height, width, colorspace,
encoded_image_string}}``, TensorFlow 2 as a string tensor
``[width, height, png]`` with its metadata. Only wall time, step, the
encoded image and the length prefixes that enclose it change, and every
length prefix is the blob's length plus a constant. So from one record we
learn where each length prefix sits; for every other record, its total
length gives its blob's length, hence the exact bytes every length prefix
must hold; the records whose bytes are the template's everywhere else
(numpy, all at once) are decoded without protobuf. Anything else is left to
the protobuf path, so the result is always what protobuf would have decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import encode, legacy
from tbconvert.formats.tfevents.summary_templates import (
    _fields,
    _metadata,
    _parse_metadata,
    _shape,
    event_fields,
)
from tbconvert.formats.tfevents.windows import windows
from tbconvert.model import Metadata

MIN_GROUP = 16
MAX_TEMPLATES = 16
MAX_HEAD = 4096     # bytes before the blob a template may hold


@dataclass
class BlobColumns:
    """Events of one tag whose point is ``head + (blob,)`` as a DT_STRING vector."""

    tag: str
    index: np.ndarray
    steps: np.ndarray
    wall_times: np.ndarray
    head: tuple
    blobs: list
    metadata: Metadata


@dataclass
class _Template:
    tag: str
    wall_off: int
    step_off: int
    step_len: int
    prefix: bytes          # every byte before the blob
    suffix: bytes          # every byte after it
    lengths: list          # (offset, width, constant): a length prefix holding blob length + constant
    head: tuple
    metadata: Metadata


def _varint_width(v: np.ndarray) -> np.ndarray:
    u = v.astype(np.uint64)
    width = np.ones(len(u), dtype=np.int64)
    for k in range(1, 10):
        width += (u >= np.uint64(1) << np.uint64(7 * k)).astype(np.int64)
    return width


def learn(buf: bytes) -> _Template | None:
    try:
        return _learn(buf)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _learn(buf: bytes) -> _Template | None:
    head = event_fields(buf)
    if head is None or head[3][1] != len(buf):
        return None
    wall_off, step_off, step_len, summary = head
    values = list(_fields(buf, *summary))
    if len(values) != 1 or values[0][:2] != (1, 2):
        return None
    vstart, vend = values[0][2], values[0][3]
    tag = payload = raw_md = None
    for field, wire, s, e, _ in _fields(buf, vstart, vend):
        if field == 1 and wire == 2 and tag is None:
            tag = bytes(buf[s:e]).decode("utf-8")
        elif field in (4, 8) and wire == 2 and payload is None:
            payload = (field, s, e)
        elif field == 9 and wire == 2 and raw_md is None:
            raw_md = bytes(buf[s:e])
            if _parse_metadata(raw_md) is None:
                return None
        else:
            return None
    if not tag or payload is None:
        return None
    kind, pstart, pend = payload
    if kind == 4:
        if raw_md is not None:
            return None
        found = _image(buf, pstart, pend)
        if found is None:
            return None
        (height, width), blob = found
        head = (str(width).encode(), str(height).encode())
        md = legacy.legacy_value_metadata("images", tag, legacy.IMAGE_CONTENT)
    else:
        found = _string_vector(buf, pstart, pend)
        if found is None:
            return None
        head, blob = found
        md = _metadata(tag, False, raw_md)
        if md is None:
            return None
    bstart, bend = blob
    if bstart > MAX_HEAD:
        return None
    blob_len = bend - bstart
    lengths = []
    for value_end, key_end in ((len(buf), summary[0]), (vend, vstart), (pend, pstart), (bend, bstart)):
        # the length prefix sits just before its message; it counts bytes up to value_end
        size = value_end - key_end
        width = len(encode.varint(size))
        if bytes(buf[key_end - width:key_end]) != encode.varint(size):
            return None
        lengths.append((key_end - width, width, size - blob_len))
    return _Template(tag, wall_off, step_off, step_len, bytes(buf[:bstart]), bytes(buf[bend:]),
                     lengths, head, md)

def _image(buf: bytes, start: int, end: int):
    dims = {}
    blob = None
    for field, wire, s, e, v in _fields(buf, start, end):
        if blob is not None or field in dims:
            return None           # the blob must be the image's last field
        if field in (1, 2, 3) and wire == 0:
            if v >= 1 << 31:
                return None       # int32 fields: protobuf would read a negative number
            dims[field] = v
        elif field == 4 and wire == 2:
            blob = (s, e)
        else:
            return None
    if blob is None:
        return None
    return (dims.get(1, 0), dims.get(2, 0)), blob


def _string_vector(buf: bytes, start: int, end: int):
    code = shape = None
    strings = []
    for field, wire, s, e, v in _fields(buf, start, end):
        if field == 1 and wire == 0 and code is None and not strings:
            code = v
        elif field == 2 and wire == 2 and shape is None and not strings:
            shape = _shape(buf, s, e)
        elif field == 8 and wire == 2:
            strings.append((s, e))
        else:
            return None
    if code != dt.DT_STRING or shape is None or len(shape) != 1 or shape[0] != len(strings) \
            or not strings:
        return None
    head = tuple(bytes(buf[s:e]) for s, e in strings[:-1])
    return head, strings[-1]


def decode(buf: bytes, starts: np.ndarray, lengths: np.ndarray, rest: np.ndarray,
           min_group: int | None = None):
    """Decode what it can of the records ``rest``; returns ``(columns, still rest)``.
    ``min_group``: the fewest records worth a template (default :data:`MIN_GROUP`, read
    when called, so that it can be switched off)."""
    if min_group is None:
        min_group = MIN_GROUP
    if len(rest) < min_group:
        return [], rest
    data = np.frombuffer(buf, dtype=np.uint8)
    pending = np.ones(len(rest), dtype=bool)
    columns: list[BlobColumns] = []
    failures = 0
    for _ in range(MAX_TEMPLATES + 4):
        todo = np.flatnonzero(pending)
        if len(todo) < min_group or failures >= 4:
            break
        i = int(rest[todo[0]])
        template = learn(buf[int(starts[i]):int(starts[i] + lengths[i])])
        if template is None:
            failures += 1
            pending[todo[0]] = False
            continue
        hit = _matches(data, starts[rest[todo]], lengths[rest[todo]], template)
        if not len(hit):
            failures += 1
            pending[todo[0]] = False
            continue
        matched = todo[hit]
        if len(matched) < min_group:
            pending[todo[0]] = False
            failures += 1
            continue
        pending[matched] = False
        columns.append(_columns(buf, data, rest[matched], starts, lengths, template))
    keep = np.ones(len(rest), dtype=bool)
    for cols in columns:
        keep[np.searchsorted(rest, cols.index)] = False
    return columns, rest[keep]


def _matches(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, t: _Template) -> np.ndarray:
    fixed = len(t.prefix) + len(t.suffix)
    blob = lengths - fixed
    ok = blob >= 0
    for _, width, const in t.lengths:
        ok &= _varint_width(np.maximum(blob, 0) + const) == width
    idx = np.flatnonzero(ok)
    if not len(idx):
        return idx
    s, blob = starts[idx], blob[idx]
    head = windows(data, len(t.prefix))[s]
    expect = np.frombuffer(t.prefix, np.uint8)
    variable = np.zeros(len(t.prefix), dtype=bool)
    if t.wall_off >= 0:
        variable[t.wall_off:t.wall_off + 8] = True
    if t.step_off >= 0:
        variable[t.step_off:t.step_off + t.step_len] = True
    for off, width, _ in t.lengths:
        variable[off:off + width] = True
    cols = np.flatnonzero(~variable)
    good = (head[:, cols] == expect[cols]).all(axis=1)
    for off, width, const in t.lengths:
        u = (blob + const).astype(np.uint64)
        for j in range(width):
            more = 0x80 if j < width - 1 else 0
            byte = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8) | more
            good &= head[:, off + j] == byte
    if t.step_off >= 0:
        step = head[:, t.step_off:t.step_off + t.step_len]
        good &= (step[:, :-1] & 0x80 != 0).all(axis=1) & (step[:, -1] & 0x80 == 0)
    if t.suffix:
        tail = windows(data, len(t.suffix))[s + len(t.prefix) + blob]
        good &= (tail == np.frombuffer(t.suffix, np.uint8)).all(axis=1)
    return idx[good]


def _columns(buf, data, index, starts, lengths, t: _Template) -> BlobColumns:
    s = starts[index]
    n = len(index)
    head = windows(data, len(t.prefix))[s]
    if t.wall_off >= 0:
        walls = np.ascontiguousarray(head[:, t.wall_off:t.wall_off + 8]).view("<f8")[:, 0].copy()
    else:
        walls = np.zeros(n, np.float64)
    steps = np.zeros(n, dtype=np.uint64)
    if t.step_off >= 0:
        for j in range(t.step_len):
            steps |= (head[:, t.step_off + j].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * j)
    begin = (s + len(t.prefix)).tolist()
    end = (starts[index] + lengths[index] - len(t.suffix)).tolist()
    blobs = [bytes(buf[b:e]) for b, e in zip(begin, end, strict=True)]
    return BlobColumns(t.tag, index, steps.view(np.int64), walls, t.head, blobs, t.metadata)
