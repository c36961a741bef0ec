"""An event record holding one large payload (an image, a big tensor), read with one copy of it.

protobuf's parsed message holds a copy of the payload beside the record's bytes, and taking a
``bytes`` field out of the message copies it once more: a 92 MB image cost three copies at
once. The payload of a summary value (``tensor_content``, one of the ``string_val``, a legacy
image's or audio clip's encoded bytes) is therefore found by walking the wire format, and
protobuf parses the record without it (with that field empty, the lengths around it made
shorter: a few hundred bytes). The record's bytes are then let go and the payload is read
from the file again, straight into its own ``bytes`` object, checked against the record's
checksum together with the bytes around it. It takes the place of the empty field in the
decoded point.

Only a plain layout is taken: the summary once in the event, the payload's message once in
its value, ``tensor_content`` (or the image's or clip's bytes) once in it. Anything else,
or anything that does not decode as it would from the whole record, goes to protobuf with
the whole record, so that what is read (and what is reported of damage) is what protobuf
gives.
"""

from __future__ import annotations

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.checksum import crc32c
from tbconvert.errors import CorruptDataError
from tbconvert.formats.tfevents import legacy, records
from tbconvert.formats.tfevents.encode import read_varint, varint

# A payload smaller than this is left in the record for protobuf: its copies cost little.
PAYLOAD_BYTES = 8 << 20
# A message of more fields than this is not walked (a record of a million short strings).
_MAX_FIELDS = 4096

_EVENT_SUMMARY, _SUMMARY_VALUE = 5, 1
# Summary.Value's fields holding a payload: the message, its oneof name, and the payload's
# field in it (TensorProto: tensor_content 4, string_val 8; Image and Audio: their bytes, 4)
_TENSOR, _IMAGE, _AUDIO = 8, 4, 6
_KINDS = {_TENSOR: "tensor", _IMAGE: "image", _AUDIO: "audio"}
_CONTENT, _STRING_VAL, _ENCODED = 4, 8, 4
_LEN = 2


def _fields(buf, pos: int, end: int):
    """``(number, wire type, where its length starts, where its body starts, where it ends)``
    of each field of the message in ``buf[pos:end]`` (the length's bounds only for a
    length-delimited field); ValueError for bytes that are not one."""
    count = 0
    while pos < end:
        count += 1
        if count > _MAX_FIELDS:
            raise ValueError("too many fields")
        key, pos = read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        length_at = pos
        if wire == 0:
            _, pos = read_varint(buf, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == _LEN:
            length, pos = read_varint(buf, pos, end)
            body = pos
            pos += length
            if pos > end:
                raise ValueError("a field runs past its message")
            yield number, wire, length_at, body, pos
            continue
        else:
            raise ValueError("a group or a bad wire type")
        if pos > end:
            raise ValueError("a field runs past its message")
        yield number, wire, length_at, pos, pos


def _len_fields(buf, pos: int, end: int, number: int) -> list:
    """The length-delimited fields ``number`` of the message in ``buf[pos:end]``."""
    return [f[2:] for f in _fields(buf, pos, end) if f[0] == number and f[1] == _LEN]


class Spot:
    """Where the payload lies in a record, and what holds it."""

    def __init__(self, value: int, kind: str, item: int, outer: list, leaf: tuple) -> None:
        self.value = value      # the index of its Summary.Value
        self.kind = kind        # "tensor" (tensor_content), "strings" (string_val), "image", "audio"
        self.item = item        # its index among the tensor's string_val
        self.outer = outer      # the fields around it: (length at, body at, end)
        self.at, self.end = leaf[1], leaf[2]
        self.length_at = leaf[0]


def locate(buf, start: int, end: int) -> Spot | None:
    """The largest payload of a summary value in the record ``buf[start:end]``, if it is
    large and of the plain layout taken here; else None."""
    try:
        return _locate(buf, start, end)
    except ValueError:
        return None


def _locate(buf, start: int, end: int) -> Spot | None:
    summaries = _len_fields(buf, start, end, _EVENT_SUMMARY)
    if len(summaries) != 1:
        return None
    summary = summaries[0]
    best = None
    for k, value in enumerate(_len_fields(buf, summary[1], summary[2], _SUMMARY_VALUE)):
        for number, wire, *inner in _fields(buf, value[1], value[2]):
            if wire != _LEN or number not in _KINDS:
                continue
            for leaf_number, leaf_wire, *leaf in _fields(buf, inner[1], inner[2]):
                if leaf_wire == _LEN and leaf[2] - leaf[1] >= PAYLOAD_BYTES and \
                        (best is None or leaf[2] - leaf[1] > best[4][2] - best[4][1]):
                    best = (k, value, number, tuple(inner), tuple(leaf), leaf_number)
    if best is None:
        return None
    k, value, number, inner, leaf, leaf_number = best
    if len([f for f in _fields(buf, value[1], value[2]) if f[0] == number]) != 1:
        return None     # the message twice: protobuf merges them
    leaves = _len_fields(buf, inner[1], inner[2], leaf_number)
    if number == _TENSOR and leaf_number == _STRING_VAL:
        return Spot(k, "strings", leaves.index(leaf), [summary, value, inner], leaf)
    if leaf_number != (_CONTENT if number == _TENSOR else _ENCODED) or len(leaves) != 1 \
            or [f for f in _fields(buf, inner[1], inner[2]) if f[0] == leaf_number][1:]:
        return None
    return Spot(k, _KINDS[number], 0, [summary, value, inner], leaf)


class Large:
    """A large record read by :func:`prepare`: ``event``, decoded without its payload, and
    what :meth:`point` needs to read the payload from the file and check it."""

    def __init__(self, spot: Spot, event, start: int, length: int, crc: int, after: bytes,
                 stored: int) -> None:
        self.spot = spot
        self.event = event
        self.start, self.length = start, length   # the record's payload in its block
        self._crc = crc             # of the record's bytes before the payload
        self._after = after         # its bytes after the payload
        self._stored = stored       # the record's checksum

    def point(self, read_at, offset: int):
        """``(metadata, (code, array))`` of the value holding the payload, read from the
        file (``read_at(offset, size)``; ``offset``: where the block starts in it); None when
        the payload is not what was checked, or the value does not decode here as it would
        from the whole record (protobuf's way then)."""
        spot = self.spot
        size = spot.end - spot.at
        payload = read_at(offset + spot.at, size)
        if len(payload) != size or records.masked_crc32c_from_raw(
                crc32c(self._after, crc32c(payload, self._crc))) != self._stored:
            return None
        value = self.event.summary.value[spot.value]
        try:
            if spot.kind == "tensor":
                return legacy.migrate_value(value, "a large tensor", content=payload)
            md, point = legacy.migrate_value(value, "a large value")
        except (dt.TensorDecodeError, ValueError, CorruptDataError):
            return None
        count, item = {"strings": (len(value.tensor.string_val), spot.item),
                       "image": (3, 2), "audio": (1, 0)}[spot.kind]
        arr = None if point is None else point[1]
        if not isinstance(arr, np.ndarray) or arr.dtype != object or arr.size != count \
                or arr.flat[item] != b"":
            return None
        arr.flat[item] = payload
        return md, point

    def record(self, read_at, offset: int) -> bytes | None:
        """The whole record read again (``None`` if it no longer matches its checksum)."""
        data = read_at(offset + self.start, self.length)
        if len(data) != self.length or records.masked_crc32c(data) != self._stored:
            return None
        return data


def prepare(buf, start: int, length: int, event_cls) -> Large | None:
    """The record ``buf[start:start + length]`` decoded without its large payload; None when
    it holds none (or not in a form taken here)."""
    end = start + length
    spot = locate(buf, start, end)
    if spot is None:
        return None
    mv = memoryview(buf)
    # from the inside out: each message's length is what it holds once the ones within
    # it (the payload's own length among them) are shorter
    body = [mv[spot.outer[-1][1]:spot.length_at], b"\x00", mv[spot.end:spot.outer[-1][2]]]
    for k in range(len(spot.outer) - 1, 0, -1):
        length_at, at, stop = spot.outer[k]
        outer = spot.outer[k - 1]
        body = [mv[outer[1]:length_at], varint(sum(map(len, body))), *body, mv[stop:outer[2]]]
    length_at, at, stop = spot.outer[0]
    rest = b"".join([mv[start:length_at], varint(sum(map(len, body))), *body, mv[stop:end]])
    try:
        event = event_cls.FromString(rest)
    except Exception:   # noqa: BLE001 (protobuf's errors: the whole record shows which)
        return None
    if event.WhichOneof("what") != "summary" or len(event.summary.value) <= spot.value:
        return None
    value = event.summary.value[spot.value]
    kind = "tensor" if spot.kind == "strings" else spot.kind
    if value.WhichOneof("value") != kind:
        return None
    held = {"tensor": lambda: value.tensor.tensor_content,
            "strings": lambda: value.tensor.string_val[spot.item]
            if spot.item < len(value.tensor.string_val) else None,
            "image": lambda: value.image.encoded_image_string,
            "audio": lambda: value.audio.encoded_audio_string}[spot.kind]()
    if held != b"":
        return None
    stored = records._U32.unpack_from(buf, end)[0]
    return Large(spot, event, start, length, crc32c(mv[start:spot.at]),
                 bytes(mv[spot.end:end]), stored)
