"""Varints, and bulk encoding of scalar values for the writer, with numpy.

Scalar points after a tag's first have the same ``Summary.Value`` bytes but
for the value, so a whole column becomes one uint8 matrix.
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert import dtypes as dt


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` in ``buf`` and where it ends; ValueError if it runs past
    ``end`` or 64 bits."""
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


def read_field(buf, pos: int, end: int, key: int) -> tuple[int, int]:
    """The bounds of the length-delimited field whose key byte is ``key`` at ``pos``, or
    (-1, -1) when another field (or none) is there or its length runs past ``end``."""
    if pos >= end or buf[pos] != key:
        return -1, -1
    length, pos = read_varint(buf, pos + 1, end)
    if pos + length > end:
        return -1, -1
    return pos, pos + length


def read_text(buf, pos: int, end: int, key: int) -> tuple[str | None, int]:
    """The string field ``key`` at ``pos`` if it is there ("" if not), and where the next
    field starts; None for one that is not UTF-8 (protobuf refuses it)."""
    at, stop = read_field(buf, pos, end, key)
    if at < 0:
        return "", pos
    try:
        return bytes(buf[at:stop]).decode("utf-8"), stop
    except UnicodeDecodeError:
        return None, stop


_F64 = struct.Struct("<d")
_WALL, _STEP = 0x09, 0x10     # Event.wall_time (double), Event.step (varint)


def event_head(buf, pos: int, end: int) -> tuple[float, int, int] | None:
    """``(wall_time, step, where the next field starts)`` of an ``Event`` in ``buf[pos:end]``,
    each of the two fields read if it is there (protobuf leaves out zeros); None for a step
    past 64 bits. ValueError for a varint that runs past ``end``."""
    wall, step = 0.0, 0
    if pos < end and buf[pos] == _WALL:
        if pos + 9 > end:
            return None
        wall = _F64.unpack_from(buf, pos + 1)[0]
        pos += 9
    if pos < end and buf[pos] == _STEP:
        step, pos = read_varint(buf, pos + 1, end)
        if step >= 1 << 64:
            return None
        if step >= 1 << 63:
            step -= 1 << 64
    return wall, step, pos


_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def varint_widths(values: np.ndarray) -> np.ndarray:
    """Bytes of each int64's varint (negative numbers take ten)."""
    u = np.ascontiguousarray(values, np.int64).view(np.uint64)
    return 1 + np.searchsorted(_VARINT_LIMITS, u, side="right").astype(np.int64)


# Summary.Value pieces of a float32 scalar: the tag field's key, simple_value's key, and a
# DT_FLOAT rank-0 tensor field up to its packed float_val's four bytes.
TAG_KEY, SIMPLE_KEY = b"\x0a", b"\x15"
_FLOAT_TENSOR = b"\x08" + bytes([dt.DT_FLOAT]) + b"\x12\x00" + b"\x2a\x04"
FLOAT_TENSOR_HEAD = b"\x42" + varint(len(_FLOAT_TENSOR) + 4) + _FLOAT_TENSOR


# A value's four bytes go in ``tensor_content`` instead of ``float_val`` (the same length): a
# signaling NaN, which TensorBoard's loaders would quiet on their way from float_val through a
# Python float, keeps its bits there.
CONTENT_KEY = 0x22


def signaling_nans(values: np.ndarray) -> np.ndarray:
    """Per float32 value: is it a signaling NaN?"""
    bits = np.ascontiguousarray(values, "<f4").view(np.uint32)
    return ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x7FFFFF) != 0) \
        & ((bits & 0x400000) == 0)


def scalar_values(tag: bytes, values: np.ndarray, *, simple: bool) -> np.ndarray:
    """``Summary.Value`` bytes of float32 scalar points without metadata, one row per point.

    ``simple``: as ``simple_value`` (which cannot hold a signaling NaN); otherwise as DT_FLOAT
    rank-0 tensors (the only scalar tensors TensorBoard's data server shows).
    """
    if values.dtype != np.float32:
        raise TypeError(f"float32 scalars expected, got {values.dtype}")
    head = TAG_KEY + varint(len(tag)) + tag + (SIMPLE_KEY if simple else FLOAT_TENSOR_HEAD)
    mat = np.empty((len(values), len(head) + 4), dtype=np.uint8)
    mat[:, :len(head)] = np.frombuffer(head, np.uint8)
    mat[:, len(head):] = np.ascontiguousarray(values.astype("<f4")).view(np.uint8).reshape(-1, 4)
    if not simple:
        mat[signaling_nans(values), len(head) - 2] = CONTENT_KEY
    return mat
