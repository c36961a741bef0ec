"""Strings from export JSON made writable: lone surrogates escaped.

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``); Python then holds a str
that no UTF-8 writer (event files, HDF5, Parquet, CSV) can encode. The reader
replaces each lone surrogate with six characters, ``%uD800`` (no backslash: an
export reads ``\\`` in run names as ``/``), and reports the renaming, so names
stay readable, survive a round trip through every format, and every output
format can hold them.
"""

from __future__ import annotations


def escape(s: str) -> str:
    """``s`` with lone surrogates spelled as ``%uDXXX``; ``s`` itself when it has none."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return "".join(f"%u{ord(c):04X}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


def escape_all(obj):
    """``obj`` (parsed JSON, depth already bounded) with every string, keys included, escaped."""
    if isinstance(obj, str):
        return escape(obj)
    if isinstance(obj, list):
        return [escape_all(x) for x in obj]
    if isinstance(obj, dict):
        return {escape(k): escape_all(v) for k, v in obj.items()}
    return obj
