"""Legacy histogram events read without protobuf.

PyTorch and tensorboardX log a histogram as ``Event{wall_time, step, summary{value{tag,
histo{min, max, num, sum, sum_squares, bucket_limit, bucket}}}}``: one value whose two
bucket fields are packed doubles, kilobytes a record. TensorFlow 1's ``merge_all`` puts
every summary of a step in one event: a histogram per layer or parameter, and the
``simple_value`` scalars and images beside them. Through protobuf each record costs an
``Event`` object and a copy of every array; here its bytes are walked once and the arrays
are read where they lie. Only that form, as protobuf writes it, is taken: each field at most
once, in field order, values of a tag and a histogram, a ``simple_value`` or an image and
nothing else, at least one histogram, bucket arrays of equal length. Any other record gives
None and goes to protobuf, so the points are what protobuf would have given.
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert.formats.tfevents.encode import event_head, read_field, read_text, read_varint

_F64 = struct.Struct("<d")
_F32 = struct.Struct("<f")
# Event.summary
_SUMMARY = 0x2A
# Summary.value, Value.tag, Value.simple_value, Value.image, Value.histo
_VALUE, _TAG, _SIMPLE, _IMAGE, _HISTO = 0x0A, 0x0A, 0x15, 0x22, 0x2A
# Image: height, width, colorspace (int32 varints), encoded_image_string
_IMAGE_INTS = (0x08, 0x10, 0x18)
_ENCODED = 0x22
# HistogramProto: min, max, num, sum, sum_squares (doubles), bucket_limit, bucket (packed)
_MIN, _MAX = 0x09, 0x11
_DOUBLES = (0x09, 0x11, 0x19, 0x21, 0x29)
_LIMITS, _COUNTS = 0x32, 0x3A
_EMPTY = np.zeros(0, dtype=np.float64)

# What a value of ``values`` (see parse) is
HISTOGRAM, SCALAR, IMAGE = "histogram", "scalar", "image"


def parse(buf, start: int, end: int):
    """``(wall_time, step, values)`` of the legacy-histogram event in ``buf[start:end]``, or
    None when it is anything else. ``values``, in the event's order, ``(kind, tag, ...)``:
    ``(HISTOGRAM, tag, min, max, bucket_limit, bucket)``, ``(SCALAR, tag, simple_value)``
    (the Python float protobuf gives) and ``(IMAGE, tag, width, height, image bytes)``."""
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
    values = []
    histograms = 0
    while pos < end:
        pos, stop = read_field(buf, pos, end, _VALUE)
        if pos < 0:
            return None
        tag, pos = read_text(buf, pos, stop, _TAG)
        if tag is None or pos == stop:
            return None
        key = buf[pos]
        if key == _SIMPLE and pos + 5 == stop:
            values.append((SCALAR, tag, _F32.unpack_from(buf, pos + 1)[0]))
        else:
            at, value_end = read_field(buf, pos, stop, key)
            if value_end != stop:
                return None
            found = _histogram(buf, at, stop) if key == _HISTO else \
                _image(buf, at, stop) if key == _IMAGE else None
            if found is None:
                return None
            if key == _HISTO:
                if len(found[2]) != len(found[3]):
                    return None
                histograms += 1
            values.append((HISTOGRAM if key == _HISTO else IMAGE, tag) + found)
        pos = stop
    return (wall, step, values) if histograms else None


def _image(buf, pos: int, end: int):
    """``(width, height, encoded bytes)`` of the ``Summary.Image`` in ``buf[pos:end]`` as
    protobuf writes it, or None."""
    ints = [0, 0, 0]
    for k, key in enumerate(_IMAGE_INTS):
        if pos < end and buf[pos] == key:
            raw, pos = read_varint(buf, pos + 1, end)
            # an int32 field: protobuf keeps the low 32 bits of the varint, signed
            raw &= 0xFFFFFFFF
            ints[k] = raw - (1 << 32) if raw >= 1 << 31 else raw
    at, stop = read_field(buf, pos, end, _ENCODED)
    if at < 0:
        at = stop = pos
    if stop != end:
        return None
    return ints[1], ints[0], bytes(buf[at:stop])


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
