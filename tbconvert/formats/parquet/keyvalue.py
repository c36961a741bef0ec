"""The archive's JSON taken out of a Parquet footer before Arrow reads the footer.

Arrow keeps every key-value string of a footer it reads twice over while the file is open
(its Parquet metadata and its Arrow schema's), and gives them to Python as a third copy:
for an archive of 100,000 series, whose JSON is 22 MB, 60 MB more at the peak for as long
as the archive is read. Read here, the JSON is the footer's bytes (nothing else of them
kept), and Arrow reads the rest of the footer.
"""

from __future__ import annotations

from array import array

import pyarrow as pa
import pyarrow.parquet as pq

from tbconvert.errors import CorruptDataError
from tbconvert.formats.parquet import footer as F

# Arrow's own limit on the strings of a footer it decodes (see reader._strings_limit)
ARROW_FOOTER_STRINGS = 100_000_000


def split(fh, key: bytes) -> tuple[pq.FileMetaData, bytearray] | None:
    """Arrow's metadata of the Parquet file open in ``fh`` without the key-value entry
    ``key``, and that entry's value; None when the footer is not one this reads (damaged,
    encrypted, without the entry or with it twice: Arrow then reads it whole, and says what
    is wrong)."""
    found = split_footer(fh, key)
    if found is None:
        return None
    rest, data, _, _ = found
    try:
        metadata = metadata_of(rest)
    except (OSError, pa.ArrowException, ValueError):
        return None
    return metadata, data


def split_footer(fh, key: bytes) -> tuple[bytes, bytearray, array, int] | None:
    """:func:`split`, the rest of the footer as its bytes, with where its row groups lie
    (see :func:`footer.without_key`) and where the footer starts in the file, Arrow not
    asked to read it."""
    try:
        data = _footer_bytes(fh)
        start = fh.tell() - len(data) if data is not None else 0
    except (OSError, ValueError):
        data = None
    try:
        fh.seek(0)
    except (OSError, ValueError):
        return None
    if data is None:
        return None
    groups = array("q")
    found = F.without_key(data, key, groups)
    if found is None:
        return None
    rest, lo, hi = found
    try:    # the value cut out of the footer's bytes where they are, not copied
        del data[hi:]
        del data[:lo]
    except BufferError:     # (a file object that kept a view of them)
        data = data[lo:hi]
    return rest, data, groups, start


def metadata_of(footer: bytes) -> pq.FileMetaData:
    """Arrow's metadata of ``footer`` (the bytes of a ``FileMetaData``)."""
    return pq.ParquetFile(
        pa.BufferReader(F.MAGIC + footer + len(footer).to_bytes(4, "little") + F.MAGIC),
        thrift_string_size_limit=max(ARROW_FOOTER_STRINGS, len(footer))).metadata


def _footer_bytes(fh) -> bytearray | None:
    try:
        start, length = F.span(fh)
    except CorruptDataError:
        return None
    fh.seek(start)
    if not hasattr(fh, "readinto"):
        data = bytearray(fh.read(length))
        return data if len(data) == length else None
    data = bytearray(length)
    view = memoryview(data)
    got = 0
    while got < length:
        n = fh.readinto(view[got:])
        if not n:
            return None
        got += n
    view.release()
    return data
