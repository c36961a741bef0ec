"""Reading the manifest a run at a time.

A manifest of 50,000 runs is about 40 MB of JSON; ``json.loads`` made it 400 MB of dicts,
all held at once, on every sync (one that finds nothing new, too). Here its text is read
a piece at a time, and each run's state is kept as a
:class:`~tbconvert.incremental.manifest.RunState` as soon as it is parsed, so that only
one run's dicts exist at a time.

Only a manifest as JSON would give it, whole and intact, is read so: anything unusual
(not UTF-8, not an object, a run's state that is not one, deeper than readers take, a
checksum that does not match, trailing text...) gives None, and the caller reads it the
usual way, which tells what is wrong in the usual words.
"""

from __future__ import annotations

import codecs
import json
import re

from tbconvert.budget import MAX_JSON_DEPTH, json_depth

# (the text in hand at once; a value larger than this is read on until it is whole)
_CHUNK = 1 << 20
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Unusual(Exception):
    """The manifest is not one this module reads (see the module's notes)."""


class _Text:
    """The text of a file, read on as it is parsed; what was parsed is let go of."""

    def __init__(self, fh) -> None:
        self._fh = fh
        # as json.loads decodes bytes it was given (lone surrogates are kept)
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        self.buf = ""
        self.pos = 0
        self.eof = False
        first = fh.read(_CHUNK)
        # json.loads takes UTF-16 and UTF-32 text, and a byte order mark: not read here
        if first.startswith(codecs.BOM_UTF8) or b"\x00" in first[:4]:
            raise _Unusual
        self._add(first)

    def _add(self, data: bytes) -> None:
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise _Unusual from None
        self.buf = self.buf[self.pos:] + text
        self.pos = 0
        self.eof = not data

    def _more(self) -> bool:
        if self.eof:
            return False
        # (as much again as is held: a large value is parsed again a few times, not many)
        self._add(self._fh.read(max(_CHUNK, len(self.buf) - self.pos)))
        return True

    def _space(self) -> None:
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._more():
                return

    def char(self) -> str:
        """The next character that is not white space, taken."""
        self._space()
        if self.pos >= len(self.buf):
            raise _Unusual
        c = self.buf[self.pos]
        self.pos += 1
        return c

    def peek(self) -> str:
        self._space()
        return self.buf[self.pos] if self.pos < len(self.buf) else ""

    def value(self):
        """The next JSON value, as json.loads gives it."""
        self._space()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except ValueError:
                obj = end = None
            except RecursionError:
                raise _Unusual from None
            # a value that ends where the text in hand does may go on (a number)
            if end is not None and (end < len(self.buf) or self.eof):
                self.pos = end
                return obj
            if not self._more():
                raise _Unusual

    def end(self) -> None:
        """Nothing but white space is left."""
        self._space()
        if self.pos < len(self.buf):
            raise _Unusual


def _members(text: _Text):
    """The keys of the object whose ``{`` comes next, each once the text is at its value
    (which the caller then takes)."""
    if text.char() != "{":
        raise _Unusual
    if text.peek() == "}":
        text.char()
        return
    while True:
        key = text.value()
        if not isinstance(key, str) or text.char() != ":":
            raise _Unusual
        yield key
        c = text.char()
        if c == "}":
            return
        if c != ",":
            raise _Unusual


# How deep a run's state may go: the manifest's own levels (the manifest, sync, runs) are
# above it.
_RUN_DEPTH = MAX_JSON_DEPTH - 3


def read(path, each=None) -> dict | None:
    """The manifest at ``path`` with its runs' states as
    :class:`~tbconvert.incremental.manifest.RunState`, its checksum checked; None when it
    is not read here (see the module's notes). ``each(name, state)``: called with every
    run's state as a dict, before it is kept (what it changes of it is kept)."""
    from tbconvert.formats.parquet import MARKER_DIGEST
    from tbconvert.incremental.manifest import RunState, marker_digest
    try:
        with open(path, "rb") as fh:
            text = _Text(fh)
            marker: dict = {}
            for key in _members(text):
                if key == "sync" and text.peek() == "{":
                    marker[key] = _sync(text, each, RunState)
                else:
                    marker[key] = text.value()
            text.end()
    except (_Unusual, OSError, MemoryError):
        return None
    if json_depth({k: v for k, v in marker.items() if k != "sync"}) > MAX_JSON_DEPTH:
        return None
    digest = marker.pop(MARKER_DIGEST, None)
    if digest is None or digest != marker_digest(marker):
        return None
    return marker


def _sync(text: _Text, each, RunState) -> dict:
    state: dict = {}
    for key in _members(text):
        if key == "runs" and text.peek() == "{":
            state[key] = runs = {}
            for name in _members(text):
                run = text.value()
                if not isinstance(run, dict) or not isinstance(run.get("parts"), list) or \
                        not isinstance(run.get("index"), int) or json_depth(run) > _RUN_DEPTH:
                    raise _Unusual
                if each is not None:
                    each(name, run)
                runs[name] = RunState(run)
        else:
            value = text.value()
            if json_depth(value) > MAX_JSON_DEPTH - 2:
                raise _Unusual
            state[key] = value
    return state
