"""The archive's JSON read with its lists of series, row groups and run records an entry at
a time.

``json.loads`` of the JSON of 100,000 series makes a dict of nine values of each, 90 MB of
Python objects at once. Here each entry of the list goes into the reader's
:class:`~tbconvert.formats.parquet.seriestable.SeriesTable` as soon as it is read, and its
dict is let go; so are the row groups it records (see :mod:`recorded`), and each run's
records (a run of a million session logs and log messages was 450 MB of dicts), which go
to a :class:`~tbconvert.formats.recordlog.RecordLog`.
"""

from __future__ import annotations

import json
from json.decoder import WHITESPACE

from tbconvert import budget
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.recorded import Recorded
from tbconvert.formats.parquet.seriestable import SeriesTable

_DECODER = json.JSONDecoder()


class Entries:
    """The archive's series, each put in ``table`` as :func:`schema.series_entry` gives it,
    up to the first that is damaged (``damaged``: its index and its JSON)."""

    def __init__(self) -> None:
        self.table = SeriesTable()
        self.damaged: tuple[int, object] | None = None
        self.count = 0

    def add(self, obj) -> None:
        if self.damaged is None:
            try:
                self.table.append(S.series_entry(obj, self.count))
            except S.BadMetadata:
                self.damaged = self.count, obj
        self.count += 1

    def checked(self, run_count: int) -> SeriesTable:
        """The table, each entry of a run among ``run_count``: :class:`schema.BadMetadata`
        for the first that is not, or is damaged, as :func:`schema.series_from_json` says."""
        table = self.table
        for i in range(len(table)):
            S.check_run(table.run(i), i, run_count)
        if self.damaged is not None:
            S.series_from_json(self.damaged[1], self.damaged[0], run_count)
        table.done()
        return table


def _streamed(entries):
    """A reader of a list whose items go to ``entries()`` one at a time (see _entries)."""
    return lambda text, i: _entries(text, i, entries())


def _runs(text: str, i: int):
    """The list of runs at ``i`` (its ``[``), each run's records streamed (see
    :class:`schema.StreamedRecords`); as :func:`_entries` gives."""
    runs: list = []
    deepest = 0
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return runs, i + 1, deepest
    while True:
        if text[i:i + 1] == "{":
            records = _streamed(lambda: S.StreamedRecords(len(runs)))
            item, i, depth = _members(text, i, {"records": records})
        else:
            item, i = _DECODER.raw_decode(text, i)
            depth = budget.json_depth(item)
        deepest = max(deepest, depth)
        runs.append(item)
        i = _skip(text, i)
        if text[i:i + 1] == "]":
            return runs, i + 1, deepest
        if text[i:i + 1] != ",":
            raise ValueError("no ',' between items")
        i = _skip(text, i + 1)


# the lists of an archive's JSON read an item at a time, and what reads them
_STREAMED = {"series": _streamed(Entries), S.ROW_GROUPS_KEY: _streamed(Recorded),
             "runs": _runs}


def loads(raw, where: str):
    """``budget.loads_json(raw, where)``, but an object's ``"series"`` list as
    :class:`Entries`, its ``"row_groups"`` as :class:`recorded.Recorded`. ``raw``: bytes,
    or a bytearray, emptied once read."""
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
    except (UnicodeDecodeError, LookupError):
        text = None
    if text is not None:
        if isinstance(raw, bytearray):
            raw.clear()     # (the footer's bytes: of no use once decoded)
        try:
            found = _object(text)
        except (ValueError, RecursionError):
            found = None
        if found is not None:
            obj, depth = found
            if depth > budget.MAX_JSON_DEPTH:
                raise budget.too_deep(where, budget.MAX_JSON_DEPTH)
            return obj
    # not an object, or not JSON: the error (or value) json.loads gives
    return budget.loads_json(raw if text is None else text, where)


def _skip(text: str, i: int) -> int:
    return WHITESPACE.match(text, i).end()


def _object(text: str) -> tuple[dict, int] | None:
    """The object ``text`` holds and its depth (counted as ``budget.json_depth`` counts
    it), or None for another value; ValueError if it is not JSON."""
    i = _skip(text, 0)
    if text[i:i + 1] != "{":
        return None
    out, i, depth = _members(text, i, _STREAMED)
    if _skip(text, i) != len(text):
        raise ValueError("text after the object")
    return out, depth


def _members(text: str, i: int, streamed: dict) -> tuple[dict, int, int]:
    """The object at ``i`` (its ``{``), where it ends and its depth; a list under a key of
    ``streamed`` is read by the function there."""
    out: dict = {}
    depth = 1
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        i += 1
    else:
        while True:
            key, i = _DECODER.raw_decode(text, i)
            if not isinstance(key, str):
                raise ValueError("a key that is not a string")
            i = _skip(text, i)
            if text[i:i + 1] != ":":
                raise ValueError("no ':' after a key")
            i = _skip(text, i + 1)
            if key in streamed and text[i:i + 1] == "[":
                value, i, deepest = streamed[key](text, i)
                depth = max(depth, 2 + deepest)
            else:
                value, i = _DECODER.raw_decode(text, i)
                depth = max(depth, 1 + budget.json_depth(value))
            out[key] = value
            i = _skip(text, i)
            if text[i:i + 1] == "}":
                i += 1
                break
            if text[i:i + 1] != ",":
                raise ValueError("no ',' between values")
            i = _skip(text, i + 1)
    return out, i, depth


def _entries(text: str, i: int, entries):
    """The list at ``i`` (its ``[``), each item given to ``entries.add``; ``entries``,
    where the list ends, and the depth of its deepest item."""
    deepest = 0
    i = _skip(text, i + 1)
    if text[i:i + 1] == "]":
        return entries, i + 1, deepest
    while True:
        item, i = _DECODER.raw_decode(text, i)
        deepest = max(deepest, budget.json_depth(item))
        entries.add(item)
        i = _skip(text, i)
        if text[i:i + 1] == "]":
            return entries, i + 1, deepest
        if text[i:i + 1] != ",":
            raise ValueError("no ',' between items")
        i = _skip(text, i + 1)
