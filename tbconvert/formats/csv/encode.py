"""CSV text from Arrow tables, vectorized, with floats that parse back bit-exact.

* Floats are written in the shortest form that round-trips (Arrow's
  formatter), always with a ``.`` or exponent so readers infer float (``-0.0``
  keeps its sign); NaN and infinities are ``nan``, ``inf``, ``-inf``, which
  pandas and Python's ``float()`` read.
* Strings are quoted only when they hold a comma, a quote or a line break.
* Nulls (wide tables: no point at that step) are empty cells.
"""

from __future__ import annotations

import re

BATCH_ROWS = 1 << 16
_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def escape(text: str) -> str:
    """One CSV field (RFC 4180 quoting when needed)."""
    if _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def header(names) -> bytes:
    return (",".join(escape(n) for n in names) + "\n").encode("utf-8")


def _strings(col):
    """An Arrow array as escaped CSV text (nulls stay null)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_dictionary(t):
        words = pa.array([None if w is None else escape(w) for w in col.dictionary.to_pylist()],
                         pa.string())
        return pc.take(words, col.indices)
    if pa.types.is_floating(t):
        text = pc.cast(col.cast(pa.float64()), pa.string())
        return pc.replace_substring_regex(text, r"^(-?[0-9]+)$", r"\1.0")
    if pa.types.is_integer(t):
        return pc.cast(col, pa.string())
    if pa.types.is_boolean(t):
        return pc.cast(col, pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        col = col.cast(pa.string())
        needs = pc.match_substring_regex(col, r'[,"\r\n]')
        quoted = pc.binary_join_element_wise('"', pc.replace_substring(col, '"', '""'), '"', "")
        return pc.if_else(needs, quoted, col)
    raise TypeError(f"no CSV form for Arrow type {t}")


def encode(table):
    """The rows of ``table`` (no header) as byte buffers to write in order, a batch of rows
    at a time (made as they are written: a table's text is never held whole)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for start in range(0, table.num_rows, BATCH_ROWS):
        part = table.slice(start, BATCH_ROWS)
        cols = [_strings(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c)
                for c in part.columns]
        if len(cols) == 1:
            lines = pc.binary_join_element_wise(cols[0], "", "\n", null_handling="replace",
                                                null_replacement="")
        else:
            lines = pc.binary_join_element_wise(*cols, ",", null_handling="replace",
                                                null_replacement="")
            lines = pc.binary_join_element_wise(lines, "\n", "")
        offsets = lines.buffers()[1]
        first, last = (int.from_bytes(offsets[i * 4:i * 4 + 4], "little", signed=True)
                       for i in (lines.offset, lines.offset + len(lines)))
        yield lines.buffers()[2][first:last]


def write(table, fileobj, *, with_header: bool = True) -> None:
    """Write ``table`` as CSV to a binary file object."""
    if with_header:
        fileobj.write(header(table.column_names))
    for buf in encode(table):
        fileobj.write(buf)
