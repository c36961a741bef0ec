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

import codecs
import json
from json.decoder import WHITESPACE

from tbconvert import budget
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.recorded import Recorded
from tbconvert.formats.parquet.seriestable import SeriesTable

_DECODER = json.JSONDecoder()
# Bytes of the JSON decoded to text at a time (see _Cursor)
WINDOW_BYTES = 1 << 20
# Characters of a number that may follow what is read of it where the text is cut ("e-")
_CUT_NUMBER = 2


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
    return lambda cur: _entries(cur, entries())


def _runs(cur: _Cursor):
    """The list of runs at the cursor (its ``[``), each run's records streamed (see
    :class:`schema.StreamedRecords`); as :func:`_entries` gives."""
    runs: list = []

    def run():
        if cur.peek() != "{":
            item = cur.value()
            return item, budget.json_depth(item)
        records = _streamed(lambda: S.StreamedRecords(len(runs)))
        return _members(cur, {"records": records})
    return runs, _items(cur, run, runs.append)


# the lists of an archive's JSON read an item at a time, and what reads them
_STREAMED = {"series": _streamed(Entries), S.ROW_GROUPS_KEY: _streamed(Recorded),
             "runs": _runs}


def loads(raw, where: str):
    """``budget.loads_json(raw, where)``, but an object's ``"series"`` list as
    :class:`Entries`, its ``"row_groups"`` as :class:`recorded.Recorded`, its runs' records
    in record logs. ``raw``: bytes, or a bytearray, emptied once read."""
    try:
        encoding = json.detect_encoding(raw)
        codecs.getincrementaldecoder(encoding)
    except LookupError:
        encoding = None
    if encoding is not None:
        try:
            found = _object(_Cursor(raw, encoding))
        except (ValueError, RecursionError):   # (UnicodeDecodeError too)
            found = None
        if found is not None:
            if isinstance(raw, bytearray):
                raw.clear()     # (the footer's bytes: of no use once read)
            obj, depth = found
            if depth > budget.MAX_JSON_DEPTH:
                raise budget.too_deep(where, budget.MAX_JSON_DEPTH)
            return obj
    # not an object, or not JSON: the error (or value) json.loads gives
    try:
        text = raw.decode(encoding or "utf-8", "surrogatepass")
    except (UnicodeDecodeError, LookupError):
        text = None
    return budget.loads_json(raw if text is None else text, where)


class _Cursor:
    """A place in the JSON text, which is decoded from ``raw`` a window at a time as the
    reading reaches it, what is read of it let go: the text of a run of a million records
    (140 MB) whole beside its bytes was half the peak of reading its archive.

    A value is taken only where the window holds more text after it (or the text ends
    there), so that no value cut by the window's end passes for a whole one (a number: of
    ``1.5e10`` cut after the ``e``, ``1.5`` is read); a value cut so is read again over a
    window twice as long."""

    def __init__(self, raw, encoding: str) -> None:
        self.raw = raw
        self.fed = 0
        self.decoder = codecs.getincrementaldecoder(encoding)("surrogatepass")
        self.text = ""
        self.i = 0

    def more(self) -> bool:
        """The window moved on past what is read, and at least as much again decoded onto
        it; False at the end of the text."""
        while self.fed < len(self.raw):
            size = max(WINDOW_BYTES, 2 * (len(self.text) - self.i))
            chunk = self.raw[self.fed:self.fed + size]
            self.fed += len(chunk)
            added = self.decoder.decode(chunk, self.fed >= len(self.raw))
            if added:
                self.text = self.text[self.i:] + added
                self.i = 0
                return True
        return False

    def peek(self) -> str:
        """The character at the cursor ("" at the end)."""
        while self.i >= len(self.text) and self.more():
            pass
        return self.text[self.i:self.i + 1]

    def skip(self) -> None:
        """Past whitespace."""
        while True:
            self.i = WHITESPACE.match(self.text, self.i).end()
            if self.i < len(self.text) or not self.more():
                return

    def value(self):
        """The JSON value at the cursor (ValueError: none), the cursor moved past it."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.i)
            except ValueError:
                if self.more():
                    continue
                raise
            if end + _CUT_NUMBER < len(self.text) or not self.more():
                self.i = end
                return value


def _object(cur: _Cursor) -> tuple[dict, int] | None:
    """The object the text holds and its depth (counted as ``budget.json_depth`` counts
    it), or None for another value; ValueError if it is not JSON."""
    cur.skip()
    if cur.peek() != "{":
        return None
    out, depth = _members(cur, _STREAMED)
    cur.skip()
    if cur.peek() != "":
        raise ValueError("text after the object")
    return out, depth


def _members(cur: _Cursor, streamed: dict) -> tuple[dict, int]:
    """The object at the cursor (its ``{``) and its depth, the cursor moved past it; a list
    under a key of ``streamed`` is read by the function there."""
    out: dict = {}
    depth = 1
    cur.i += 1
    cur.skip()
    if cur.peek() == "}":
        cur.i += 1
        return out, depth
    while True:
        key = cur.value()
        if not isinstance(key, str):
            raise ValueError("a key that is not a string")
        cur.skip()
        if cur.peek() != ":":
            raise ValueError("no ':' after a key")
        cur.i += 1
        cur.skip()
        if key in streamed and cur.peek() == "[":
            value, deepest = streamed[key](cur)
            depth = max(depth, 2 + deepest)
        else:
            value = cur.value()
            depth = max(depth, 1 + budget.json_depth(value))
        out[key] = value
        cur.skip()
        if cur.peek() == "}":
            cur.i += 1
            return out, depth
        if cur.peek() != ",":
            raise ValueError("no ',' between values")
        cur.i += 1
        cur.skip()


def _entries(cur: _Cursor, entries):
    """The list at the cursor (its ``[``), each item given to ``entries.add``; ``entries``
    and the depth of its deepest item, the cursor moved past the list."""
    def item():
        value = cur.value()
        return value, budget.json_depth(value)
    return entries, _items(cur, item, entries.add)


def _items(cur: _Cursor, item, add) -> int:
    """Walk the list at the cursor (its ``[``): each item read by ``item()`` (the item and
    its depth) and given to ``add``; the depth of the deepest, the cursor moved past the
    list."""
    deepest = 0
    cur.i += 1
    cur.skip()
    if cur.peek() == "]":
        cur.i += 1
        return deepest
    while True:
        value, depth = item()
        deepest = max(deepest, depth)
        add(value)
        cur.skip()
        if cur.peek() == "]":
            cur.i += 1
            return deepest
        if cur.peek() != ",":
            raise ValueError("no ',' between items")
        cur.i += 1
        cur.skip()
