"""Reading a ``scalars.json`` line without building a Python object per number.

A line in the exporter's exact shape
(``{"points": {"steps": [...], "values": [...], "wall_times": [...]}, ...``)
has its three number lists parsed by numpy's C parser; only the small rest of
the line goes through ``json``. Anything unexpected returns None and the
caller parses the line with json, so the result is always json's.
"""

from __future__ import annotations

import re

import numpy as np

from tbconvert import budget
from tbconvert.errors import CorruptDataError

_SCALAR_LINE = re.compile(
    rb'\{"points": \{"steps": \[([^\]]*)\], "values": \[([^\]]*)\], '
    rb'"wall_times": \[([^\]]*)\]\}, ')
_INT_CHARS = b"0123456789-, \t\r\n"
_FLOAT_CHARS = b"0123456789-+.eE, \t\r\n"
_I64 = np.iinfo(np.int64)
# Integers json reads otherwise than numpy: one of 16 digits or more may lie beyond 2**53, and
# json reads it exactly, as the caller must, to tell that float64 rounds it (the exporter
# writes decimals, others may not); ``-0`` is json's integer 0, which is no float -0.0.
# (Two patterns: one alternative ``(?:^|,)`` makes re try every position, several times slower.)
_JSON_INT = re.compile(rb",\s*(?:-?\d{16,}|-0)\s*(?:,|\Z)")
_FIRST_JSON_INT = re.compile(rb"\s*(?:-?\d{16,}|-0)\s*(?:,|\Z)")


def _numbers(text: bytes, dtype, allowed: bytes) -> np.ndarray | None:
    """The list's numbers, or None for anything numpy might read differently from json.

    numpy reads lowercase ``inf``/``nan`` and ``infinity``, json does not: only the
    exporter's ``NaN``/``Infinity`` tokens pass, every other letter but an exponent's
    ``e`` sends the line to json. numpy refuses what it cannot read to the end
    (``1.2.3``, ``1e``, ``1 2``). It is more lenient than json only about spellings
    that have one obvious value (``+1``, ``01``, ``.5``, ``5.``), which no exporter wrote.
    """
    if not text.strip():
        return np.zeros(0, dtype)
    squeezed = text.translate(None, b" \t\r\n")
    if squeezed.startswith(b",") or squeezed.endswith(b",") or b",," in squeezed:
        return None  # numpy reads a blank item ([1, , 2], [1, ]) as -1 or 0; json refuses it
    if dtype is np.float64:
        bare = text.replace(b"-Infinity", b"").replace(b"Infinity", b"").replace(b"NaN", b"")
        if bare.translate(None, allowed) or _FIRST_JSON_INT.match(text) or _JSON_INT.search(text):
            return None
        text = text.replace(b"-Infinity", b"-inf").replace(b"Infinity", b"inf") \
            .replace(b"NaN", b"nan")
    elif text.translate(None, allowed):
        return None
    try:
        arr = np.fromstring(text, dtype=dtype, sep=",")
    except ValueError:
        return None
    if len(arr) != text.count(b",") + 1:
        return None
    if dtype is np.int64 and len(arr) and (arr.max() == _I64.max or arr.min() == _I64.min):
        return None  # possibly clamped: let json decide
    return arr


def scalar_line(raw: bytes):
    """``(obj_without_points, steps, values, wall_times)`` or None to use the slow path."""
    m = _SCALAR_LINE.match(raw)
    if m is None:
        return None
    steps = _numbers(m.group(1), np.int64, _INT_CHARS)
    if steps is None:
        return None
    values = _numbers(m.group(2), np.float64, _FLOAT_CHARS)
    walls = _numbers(m.group(3), np.float64, _FLOAT_CHARS)
    if values is None or walls is None:
        return None
    try:
        rest = budget.loads_json(b'{"points": null, ' + raw[m.end():], "line")
    except CorruptDataError:
        return None
    # a repeated "points" key later in the line wins in json: leave such lines to it
    if not isinstance(rest, dict) or rest.get("points", 0) is not None:
        return None
    return rest, steps, values, walls


# -- a line too long to hold ---------------------------------------------------------------

# How much of a long line is read at a time: a few megabytes of text, some 200,000 numbers.
STREAM_BLOCK_BYTES = 4 << 20
# A list item longer than this is no number any exporter wrote.
_MAX_ITEM_BYTES = 1 << 20
# A longer rest after the three lists (run, metadata, tag) is no exporter's: json reads it.
_MAX_REST_BYTES = 16 << 20
_HEAD = b'{"points": {"steps": ['
_COLUMNS = ((np.int64, _INT_CHARS, b'], "values": ['),
            (np.float64, _FLOAT_CHARS, b'], "wall_times": ['),
            (np.float64, _FLOAT_CHARS, b']}, '))


def streamed_scalar_line(f, offset: int, length: int, spill):
    """:func:`scalar_line` for a line left in the file ``f`` (``length`` bytes at
    ``offset``), read a block at a time: ``(obj_without_points, steps, values,
    wall_times)`` with the three lists as :class:`~.spill.MeasuredColumn` in ``spill``
    (a :class:`~tbconvert.arrayfile.ArrayFile`), or None for the caller to read the line whole as for
    :func:`scalar_line`.

    Each list is cut at commas into pieces of a few megabytes, and each piece goes
    through :func:`_numbers`. A list's pieces are read as the whole list would be: its
    checks look at one item at a time, and a blank item next to a cut leaves a piece
    that is blank or starts or ends with a comma, which is refused as in the whole list.
    """
    from tbconvert.formats.tbdev.spill import MeasuredColumn

    f.seek(offset)
    left = length

    def read(n: int) -> bytes:
        nonlocal left
        data = f.read(min(n, left))
        left -= len(data)
        return data

    if read(len(_HEAD)) != _HEAD:
        return None
    mark = spill.size()
    done = False
    try:
        columns, data = [], b""
        for dtype, allowed, after in _COLUMNS:
            column = MeasuredColumn(spill, dtype)
            data = _stream_list(read, data, column, allowed)
            if data is None:
                return None
            while len(data) < len(after) and left:
                data += read(STREAM_BLOCK_BYTES)
            if not data.startswith(after):
                return None
            data = data[len(after):]
            columns.append(column)
        if left > _MAX_REST_BYTES:
            return None
        try:
            rest = budget.loads_json(b'{"points": null, ' + data + read(left), "line")
        except CorruptDataError:
            return None
        if not isinstance(rest, dict) or rest.get("points", 0) is not None:
            return None
        done = True
        return rest, *columns
    finally:
        if not done:
            spill.truncate(mark)


def _stream_list(read, data: bytes, column, allowed: bytes) -> bytes | None:
    """Put the numbers up to the list's ``]`` into ``column``; the bytes from that ``]``
    on, or None where :func:`_numbers` would refuse the list."""
    pieces = 0
    while True:
        close = data.find(b"]")
        if close >= 0:
            body, data = data[:close], data[close:]
            if pieces == 0 and not body.strip():
                return data          # an empty list
            return data if _put(body, column, allowed) else None
        cut = data.rfind(b",")
        if cut >= 0:
            if not _put(data[:cut], column, allowed):
                return None
            pieces += 1
            data = data[cut + 1:]
        if len(data) > _MAX_ITEM_BYTES:
            return None              # no number the exporter wrote: json reads the line
        more = read(STREAM_BLOCK_BYTES)
        if not more:
            return None              # the line ends inside the list
        data += more


def _put(piece: bytes, column, allowed: bytes) -> bool:
    if not piece.strip():
        return False
    arr = _numbers(piece, column.dtype.type, allowed)
    if arr is None:
        return False
    column.add(arr)
    return True
