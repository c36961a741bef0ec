"""A lone large point's payload column chunk read without Arrow, its value read once.

Arrow reads a page into a buffer and decodes it into its column, and the point taken out of
the column (a blob's ``bytes``) is one more copy: reading a 92 MB image from an archive held
it twice at once. The chunk :mod:`large` writes for such a point is one uncompressed PLAIN
data page, so it is read here instead: its levels and small values from its first bytes,
each large value from the file straight into its own object (a blob's ``bytes``, a tensor's
content), and the whole page checked against the CRC in its header as it is read. The row
group's other columns go through Arrow as ever, and the archive's own checksum of the row
group's values (:mod:`digest`) is checked with this column's computed from its values.

A chunk of any other layout, or one whose page does not check out, is left to Arrow, which
then reads (and reports) it as before.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa

from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet import large
from tbconvert.formats.parquet.pages import (
    DATA_PAGE,
    DPH_DEF,
    DPH_ENCODING,
    DPH_REP,
    DPH_VALUES,
    PH_COMPRESSED,
    PH_CRC,
    PH_DATA,
    PH_TYPE,
    PH_UNCOMPRESSED,
    PLAIN,
    RLE,
    signed_crc,
)

# A value this large is read into its own object (smaller ones from the page's first bytes).
_OWN_READ = 1 << 20
# The page's bytes read at a time for its header, levels and small values.
_HEAD_READ = 64 << 10
_COLUMNS = {"tensor_content": False, "blobs.list.element": True}    # path: a list column


class Batches(list):
    """The row group's batches, the payload column in them a stand-in for ``large``."""

    large: LargeColumn | None = None


class LargeColumn:
    """The payload column of a lone point: ``items`` (bytes, None for a null element)."""

    def __init__(self, name: str, listed: bool, items: list) -> None:
        self.name = name
        self.listed = listed
        self.items = items

    def digest(self):
        return large.Payload(self.name, self.items, self.listed).digest()

    def stand_in(self, arrow_type: pa.DataType) -> pa.Array:
        """The column for the row group's batch: a list of the blobs with each read apart
        left empty (the decoded point takes :attr:`items`), or the content itself,
        without a copy."""
        if self.listed:
            return pa.array([[None if b is None else b if len(b) < _OWN_READ else b""
                              for b in self.items]], arrow_type)
        data = self.items[0]
        offsets = np.array([0, len(data)], np.int32)
        return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])

    def content(self) -> np.ndarray:
        """A tensor's content as the reader holds it (read-only bytes)."""
        return np.frombuffer(self.items[0], np.uint8)


def find(pf, local: int) -> tuple | None:
    """``(name, listed, offset, size, values)`` of the payload column chunk of row group
    ``local`` of ``pf`` when it is a lone point's large chunk of the layout read here."""
    rg = pf.metadata.row_group(local)
    if rg.num_rows != 1:
        return None
    for c in range(rg.num_columns):
        cc = rg.column(c)
        listed = _COLUMNS.get(cc.path_in_schema)
        if listed is None or cc.total_compressed_size < large.LARGE_BYTES:
            continue
        column = pf.schema.column(c)
        if cc.compression != "UNCOMPRESSED" or cc.has_dictionary_page or \
                (column.max_definition_level, column.max_repetition_level) != \
                ((3, 1) if listed else (1, 0)) or column.physical_type != "BYTE_ARRAY":
            return None
        return (cc.path_in_schema.split(".")[0], listed, cc.data_page_offset,
                cc.total_compressed_size, cc.num_values)
    return None


class _Page:
    """The bytes of one page read in order from ``fh``, their CRC kept as they go."""

    def __init__(self, fh, at: int, end: int) -> None:
        self.fh = fh
        self.pos = at           # the file offset of the next byte taken
        self.end = end
        self.buf = b""
        self.buf_at = at        # the file offset of ``buf[0]``
        self.crc = 0

    def _read(self, at: int, n: int) -> bytes:
        self.fh.seek(at)
        data = self.fh.read(n)
        if len(data) != n:
            raise ValueError("the page runs past the end of the file")
        return data

    def take(self, n: int, count: bool = True) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ValueError("a value runs past its page")
        if n >= _OWN_READ:
            data = self._read(self.pos, n)
        else:
            if self.pos + n > self.buf_at + len(self.buf):
                size = min(max(n, _HEAD_READ), self.end - self.pos)
                self.buf, self.buf_at = self._read(self.pos, size), self.pos
            a = self.pos - self.buf_at
            data = self.buf[a:a + n]
        self.pos += n
        if count:
            self.crc = zlib.crc32(data, self.crc)
        return data


def _levels(page: _Page, count: int, width: int) -> list:
    """``count`` levels in the RLE/bit-packed hybrid behind their length (runs of repeats
    only, as :mod:`large` writes them)."""
    size = int.from_bytes(page.take(4), "little")
    data = page.take(size)
    out, pos = [], 0
    while pos < len(data) and len(out) < count:
        head, pos = F._varint(data, pos)
        if head & 1:
            raise ValueError("bit-packed levels")
        value = int.from_bytes(data[pos:pos + (width + 7) // 8], "little")
        pos += (width + 7) // 8
        out += [value] * min(head >> 1, count - len(out))
    if pos != len(data) or len(out) != count:
        raise ValueError("levels that do not match the page")
    return out


def read(fh, found: tuple) -> LargeColumn | None:
    """The chunk ``found`` (what :func:`find` gave) read from ``fh``; None when its page is
    not of the layout read here or does not check out (Arrow's way then)."""
    name, listed, at, size, values = found
    try:
        return _read(fh, name, listed, at, size, values)
    except (ValueError, IndexError, TypeError):
        return None


def _read(fh, name: str, listed: bool, at: int, size: int, values: int) -> LargeColumn | None:
    page = _Page(fh, at, at + size)
    head = page.take(min(size, _HEAD_READ), count=False)
    header, pos = F.decode_prefix(head, 0)
    data = F.get(header, PH_DATA)
    length = F.get(header, PH_COMPRESSED)
    if F.get(header, PH_TYPE) != DATA_PAGE or data is None or F.get(header, PH_CRC) is None \
            or F.get(header, PH_UNCOMPRESSED) != length or pos + length != size \
            or F.get(data, DPH_VALUES) != values or F.get(data, DPH_ENCODING) != PLAIN \
            or F.get(data, DPH_DEF) != RLE or (listed and F.get(data, DPH_REP) != RLE):
        return None
    page.pos = at + pos
    if listed:
        reps = _levels(page, values, 1)
        defs = _levels(page, values, 2)
        if reps != [0] + [1] * (values - 1) or any(d not in (2, 3) for d in defs):
            return None     # (one row of a list with elements: a lone point's blobs)
    else:
        defs = _levels(page, values, 1)
        if defs != [1]:
            return None
    top = 3 if listed else 1
    items = [page.take(int.from_bytes(page.take(4), "little")) if d == top else None
             for d in defs]
    if page.pos != page.end or signed_crc(page.crc) != F.get(header, PH_CRC):
        return None
    return LargeColumn(name, listed, items)
