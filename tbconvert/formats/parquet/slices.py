"""The row groups of a Parquet footer that holds many, read by Arrow a slice at a time.

Arrow keeps a footer it reads as C++ structs of about 13 KB a row group: an archive of
20,000 runs (a row group each, a footer of 18 MB) took 270 MB for as long as it was read.
Here the footer's bytes are kept (without the archive's JSON), cut where each row group's
struct lies, and Arrow is given a footer of the same file holding only the row groups of
one slice (the offsets of their column chunks are the file's own), made when a row group
of that slice is read.
"""

from __future__ import annotations

from array import array

import pyarrow as pa
import pyarrow.parquet as pq

from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet.keyvalue import metadata_of

# A footer of more row groups than this is read a slice of this many at a time.
SLICE_ROW_GROUPS = 256


class Slices:
    """A footer's row groups as footers of ``SLICE_ROW_GROUPS`` each (see :func:`of`)."""

    def __init__(self, data: bytes, head: int, tail: int, starts: array) -> None:
        self._data = data
        self._head = head       # where the list of row groups starts (its size and type)
        self._tail = tail       # where it ends
        self._starts = starts   # where each row group's struct starts, then where the last ends
        self.count = len(starts) - 1
        self.rows = array("q")  # each row group's rows (see check)

    def footer(self, first: int, end: int) -> bytes:
        """The footer holding row groups ``first`` to ``end`` (not included) alone."""
        enc = F._Encoder()
        enc.list_head(end - first, F.STRUCT)
        data = self._data
        return b"".join((data[:self._head], enc.out, data[self._starts[first]:self._starts[end]],
                         data[self._tail:]))

    def metadata(self, k: int) -> pq.FileMetaData:
        """Arrow's metadata of slice ``k`` (row groups ``k * SLICE_ROW_GROUPS`` on)."""
        first = k * SLICE_ROW_GROUPS
        return metadata_of(self.footer(first, min(first + SLICE_ROW_GROUPS, self.count)))

    def head(self) -> pq.FileMetaData:
        """Arrow's metadata of the footer without its row groups: its schema, key-value..."""
        return metadata_of(self.footer(0, 0))

    def check(self) -> bool:
        """Whether Arrow reads every slice (each read once, then let go), noting each row
        group's rows; False if it does not read one (Arrow, reading the footer whole, then
        says what is wrong)."""
        rows = array("q")
        for k in range((self.count + SLICE_ROW_GROUPS - 1) // SLICE_ROW_GROUPS):
            try:
                meta = self.metadata(k)
            except (OSError, pa.ArrowException, ValueError):
                return False
            rows.extend(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
        if len(rows) != self.count:
            return False
        self.rows = rows
        return True


def of(data: bytes, groups) -> Slices | None:
    """The footer ``data`` as :class:`Slices` when it holds more than ``SLICE_ROW_GROUPS``
    row groups, where ``groups`` (as :func:`footer.without_key` gives them) say they lie;
    None otherwise (Arrow then reads it whole)."""
    if len(groups) < SLICE_ROW_GROUPS + 3:
        return None
    return Slices(data, groups[0], groups[-1], array("q", groups[1:]))
