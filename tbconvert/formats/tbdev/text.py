"""Strings from export JSON made writable: lone surrogates escaped.

JSON may spell a lone UTF-16 surrogate (``"\\ud800"``); Python then holds a str
that no UTF-8 writer (event files, HDF5, Parquet, CSV) can encode. Run and tag
names keep them: the copy loop escapes names for every writer in one place
(:func:`tbconvert.names.storable`). Experiment facts and summary metadata strings
are escaped here, in the same spelling, and the change is reported.
"""

from __future__ import annotations

from tbconvert import names


def escape(s: str) -> str:
    """``s`` with lone surrogates spelled as their UTF-8 bytes (``%ED%A0%80``), as
    :func:`tbconvert.names.text` spells them for every format; ``s`` itself when it has none."""
    return names.text(s)


def escape_all(obj):
    """``obj`` (parsed JSON, depth already bounded) with every string, keys included, escaped."""
    if isinstance(obj, str):
        return escape(obj)
    if isinstance(obj, list):
        return [escape_all(x) for x in obj]
    if isinstance(obj, dict):
        return {escape(k): escape_all(v) for k, v in obj.items()}
    return obj
