"""The row groups of a Parquet footer that holds many, read by Arrow a slice at a time.

Arrow keeps a footer it reads as C++ structs of about 13 KB a row group: an archive of
20,000 runs (a row group each, a footer of 18 MB) took 270 MB for as long as it was read.
Here the footer (without the archive's JSON) is cut where each row group's struct lies,
and Arrow is given a footer of the same file holding only the row groups of one slice (the
offsets of their column chunks are the file's own), made when a row group of that slice is
read; the row groups' bytes are read again from the file then (kept, from a file without
a descriptor: 19 MB for 20,000).
"""

from __future__ import annotations

import io
import os
from array import array

import pyarrow as pa
import pyarrow.parquet as pq

from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet.keyvalue import metadata_of

# A footer of more row groups than this is read a slice of this many at a time.
SLICE_ROW_GROUPS = 256


class Slices:
    """A footer's row groups as footers of ``SLICE_ROW_GROUPS`` each (see :func:`of`)."""

    def __init__(self, data: bytes, head: int, tail: int, starts: array, fh, at: int) -> None:
        """``data``: the footer, whose row groups' structs start at ``starts`` (then where
        the last ends), their list's head at ``head``, its end at ``tail``; they lie as
        they are in the file open in ``fh``, from ``at`` on."""
        self._before = data[:head]      # (the schema, the file's rows...)
        self._after = data[tail:]       # (the key-value entries but the JSON...)
        self._starts = starts
        self._fd = _descriptor(fh)
        self._at = at
        # a file without a descriptor (a remote one): its row groups kept
        self._groups = None if self._fd is not None else data[starts[0]:starts[-1]]
        self.count = len(starts) - 1
        self.size = SLICE_ROW_GROUPS    # row groups a slice
        self.rows = array("q")  # each row group's rows (see check)

    def footer(self, first: int, end: int) -> bytes:
        """The footer holding row groups ``first`` to ``end`` (not included) alone."""
        enc = F._Encoder()
        enc.list_head(end - first, F.STRUCT)
        return b"".join((self._before, enc.out, self._row_groups(first, end), self._after))

    def _row_groups(self, first: int, end: int) -> bytes:
        lo, hi = self._starts[first], self._starts[end]
        if self._groups is not None:
            base = self._starts[0]
            return self._groups[lo - base:hi - base]
        data = os.pread(self._fd, hi - lo, self._at + lo)
        if len(data) != hi - lo:
            raise OSError(f"the file ends in its footer (read {len(data)} bytes of "
                          f"{hi - lo})")
        return data

    def metadata(self, k: int) -> pq.FileMetaData:
        """Arrow's metadata of slice ``k`` (row groups ``k * size`` on)."""
        first = k * self.size
        return metadata_of(self.footer(first, min(first + self.size, self.count)))

    def head(self) -> pq.FileMetaData:
        """Arrow's metadata of the footer without its row groups: its schema, key-value..."""
        return metadata_of(self.footer(0, 0))

    def check(self) -> bool:
        """Whether Arrow reads every slice (each read once, then let go), noting each row
        group's rows; False if it does not read one (Arrow, reading the footer whole, then
        says what is wrong)."""
        rows = array("q")
        for k in range((self.count + self.size - 1) // self.size):
            try:
                meta = self.metadata(k)
            except (OSError, pa.ArrowException, ValueError):
                return False
            rows.extend(meta.row_group(g).num_rows for g in range(meta.num_row_groups))
        if len(rows) != self.count:
            return False
        self.rows = rows
        return True


def of(data: bytes, groups, fh, at: int) -> Slices | None:
    """The footer ``data`` (read from ``at`` in the file open in ``fh``) as :class:`Slices`
    when it holds more than ``SLICE_ROW_GROUPS`` row groups, where ``groups`` (as
    :func:`footer.without_key` gives them) say they lie; None otherwise (Arrow then reads it
    whole)."""
    if len(groups) < SLICE_ROW_GROUPS + 3:
        return None
    return Slices(data, groups[0], groups[-1], array("q", groups[1:]), fh, at)


def _descriptor(fh) -> int | None:
    """The descriptor of the file ``fh`` when it has one that reads at an offset."""
    try:
        fd = fh.fileno()
        os.pread(fd, 0, 0)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return fd
