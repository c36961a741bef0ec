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
