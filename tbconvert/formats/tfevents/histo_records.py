"""Legacy histogram events read without protobuf.

PyTorch and tensorboardX log a histogram as ``Event{wall_time, step, summary{value{tag,
histo{min, max, num, sum, sum_squares, bucket_limit, bucket}}}}``: one value whose two
bucket fields are packed doubles, kilobytes a record. Through protobuf each record costs an
``Event`` object and a copy of both arrays; here its bytes are walked once and the arrays
are read where they lie. Only that form, as protobuf writes it, is taken: each field at most
once, in field order, nothing else, bucket arrays of equal length. Any other record gives
None and goes to protobuf, so the points are what protobuf would have given.
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert.formats.tfevents.encode import event_head, read_field, read_text

_F64 = struct.Struct("<d")
# Event.summary
_SUMMARY = 0x2A
# Summary.value, Value.tag, Value.histo
_VALUE, _TAG, _HISTO = 0x0A, 0x0A, 0x2A
# HistogramProto: min, max, num, sum, sum_squares (doubles), bucket_limit, bucket (packed)
_MIN, _MAX = 0x09, 0x11
_DOUBLES = (0x09, 0x11, 0x19, 0x21, 0x29)
_LIMITS, _COUNTS = 0x32, 0x3A
_EMPTY = np.zeros(0, dtype=np.float64)


def parse(buf, start: int, end: int):
    """``(wall_time, step, tag, min, max, bucket_limit, bucket)`` of the legacy-histogram
    event in ``buf[start:end]``, or None when it is anything else."""
    try:
        return _event(buf, start, end)
    except ValueError:          # a varint that runs past its message or 64 bits
        return None


def _event(buf, pos: int, end: int):
    head = event_head(buf, pos, end)
    if head is None:
        return None
    wall, step, pos = head
    pos, stop = read_field(buf, pos, end, _SUMMARY)
    if stop != end:
        return None
    pos, stop = read_field(buf, pos, end, _VALUE)
    if stop != end:
        return None
    tag, pos = read_text(buf, pos, end, _TAG)
    if tag is None:
        return None
    pos, stop = read_field(buf, pos, end, _HISTO)
    if stop != end:
        return None
    found = _histogram(buf, pos, end)
    if found is None or len(found[2]) != len(found[3]):
        return None
    return (wall, step, tag) + found


def histogram(buf, pos: int, end: int):
    """``(min, max, bucket_limit, bucket)`` of the ``HistogramProto`` in ``buf[pos:end]``
    as protobuf writes it (the two arrays may differ in length), or None."""
    try:
        return _histogram(buf, pos, end)
    except ValueError:
        return None


def _histogram(buf, pos: int, end: int):
    lo = hi = 0.0
    for key in _DOUBLES:
        if pos < end and buf[pos] == key:
            if pos + 9 > end:
                return None
            if key == _MIN:
                lo = _F64.unpack_from(buf, pos + 1)[0]
            elif key == _MAX:
                hi = _F64.unpack_from(buf, pos + 1)[0]
            pos += 9
    arrays = []
    for key in (_LIMITS, _COUNTS):
        at, stop = read_field(buf, pos, end, key)
        if at < 0:
            arrays.append(_EMPTY)
            continue
        if (stop - at) % 8:
            return None
        arrays.append(np.frombuffer(buf, "<f8", (stop - at) // 8, at))
        pos = stop
    if pos != end:
        return None
    return lo, hi, arrays[0], arrays[1]
