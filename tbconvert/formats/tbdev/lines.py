"""The lines of an export's JSON-lines file, the long ones without holding them.

A series' points all sit on one line: a series of 20 million points makes a
line of close to a gigabyte. The index pass only needs such a line's start
and end (its run is in the last few hundred kilobytes), so lines longer than
:data:`LONG_LINE_BYTES` are passed over in blocks and their bytes left in the
file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

# Lines up to this long are read whole, as json reads them; longer ones are left in the file.
LONG_LINE_BYTES = 8 << 20
_SKIP_BYTES = 1 << 20


class Line(NamedTuple):
    line_no: int
    offset: int
    length: int
    raw: bytes | None      # None for a long line
    head: bytes            # a long line's first bytes (all of a short one)
    ends: bool             # whether it ends in a newline (the last one of a cut file may not)


def lines(f) -> Iterator[Line]:
    """Every line of the binary file ``f`` from its start, as ``for line in f`` splits
    them. A caller may move ``f`` between lines: the next one is read from where the last
    one ended."""
    offset = 0
    line_no = 0
    while True:
        f.seek(offset)
        raw = f.readline(LONG_LINE_BYTES + 1)
        if not raw:
            return
        line_no += 1
        if len(raw) <= LONG_LINE_BYTES or raw.endswith(b"\n"):
            yield Line(line_no, offset, len(raw), raw, raw, raw.endswith(b"\n"))
            offset += len(raw)
            continue
        head, length, ends = raw[:64], len(raw), False
        del raw
        while True:
            more = f.readline(_SKIP_BYTES)
            length += len(more)
            if not more or more.endswith(b"\n"):
                ends = bool(more)
                break
        yield Line(line_no, offset, length, None, head, ends)
        offset += length
