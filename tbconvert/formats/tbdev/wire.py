"""A ``SummaryMetadata`` whose strings are not UTF-8, read field by field.

protobuf refuses a whole message when one string field holds bytes that are
not UTF-8 (a lone surrogate written by a lenient writer, say). For an export
line that would cost the whole series over a display name. This reads the four
fields TensorBoard uses straight from the wire format, decoding the strings
with their bad bytes kept as escapes (see :mod:`.text`).
"""

from __future__ import annotations

from tbconvert.formats.tbdev import text


class WireError(ValueError):
    """Not a protobuf message at all."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise WireError("a varint runs past the end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def fields(buf: bytes) -> list[tuple[int, int, object]]:
    """``(field number, wire type, value)`` for each field; length-delimited values as bytes."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wtype = key >> 3, key & 7
        if wtype == 0:
            value, pos = _varint(buf, pos)
        elif wtype == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise WireError("a field runs past the end")
            value, pos = buf[pos:pos + n], pos + n
        elif wtype in (1, 5):
            size = 8 if wtype == 1 else 4
            if pos + size > len(buf):
                raise WireError("a field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise WireError(f"wire type {wtype}")
        out.append((number, wtype, value))
    return out


def _string(raw: bytes) -> str:
    return text.escape(raw.decode("utf-8", "surrogateescape"))


def summary_metadata(buf: bytes) -> tuple[str, bytes, str, str, int]:
    """``(plugin_name, plugin_content, display_name, description, data_class)``."""
    plugin_name, content, display, description, data_class = "", b"", "", "", 0
    for number, wtype, value in fields(buf):
        if number == 1 and wtype == 2:
            for n2, w2, v2 in fields(value):
                if n2 == 1 and w2 == 2:
                    plugin_name = _string(v2)
                elif n2 == 2 and w2 == 2:
                    content = bytes(v2)
        elif number == 2 and wtype == 2:
            display = _string(value)
        elif number == 3 and wtype == 2:
            description = _string(value)
        elif number == 4 and wtype == 0:
            data_class = value
    return plugin_name, content, display, description, data_class
