"""A row group's payload column encoded in two halves at once, on two cores.

Arrow encodes a row group's column chunks one after another in the thread that writes it.
For histograms and images the payload column (``tensor_content``, ``blobs``) is most of
the row group, and its compression most of the writing: 39 of 48 ms for a row group of
20,000 TF2 histograms, on one core. Such a column is encoded here as two halves of its
rows, each by Arrow into a Parquet file of its own, the first in another thread while
this one writes the row group with that column null (as for a large point, see
:mod:`large`) and then encodes the second. The halves' pages, one after the other, are
the column's chunk, written after the row group; the footer is made to list it
(:func:`large.patch`). A column chunk is a sequence of pages, each whole on its own (its
levels, values, compression and checksum), so readers see an ordinary Parquet file.

Only the last row group of a run's rows (or of the file's) is split: a run of 20,000 legacy
histograms in five row groups took longer with every one split (1.22 -> 1.26 s; their
payload compresses 60-fold, cheaply), and each split holds both halves' buffers at once (9-15
MiB more at the peak). Which row groups those are depends on the rows alone, so the bytes
are the same however the file is written (in one process, or joined from runs encoded
apart: see :mod:`join`).
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from tbconvert.formats.parquet import footer as F
from tbconvert.interrupts import Thread

# A payload column of at least this many (Arrow) bytes in a row group is split: below it,
# the thread's start and the second file's set-up cost more than half the encoding.
SPLIT_BYTES = 4 << 20
# The other thread's share of the rows, a little over half: this one writes the rest of the
# row group first (20,000 TF2 histograms: 0.110 s best at a half, 0.107 s at 11/20).
_SHARE = (11, 20)
COLUMNS = ("tensor_content", "blobs")

# parquet.thrift, ColumnMetaData
_CM_ENCODINGS, _CM_NUM_VALUES = 2, 5
_CM_STATISTICS, _CM_ENCODING_STATS, _CM_SIZE_STATISTICS = 12, 13, 16


def column_to_split(table: pa.Table, compressed: bool) -> int | None:
    """The index of the payload column of ``table`` to encode in halves, or None."""
    if not compressed or table.num_rows < 2:
        return None
    for name in COLUMNS:
        c = table.schema.get_field_index(name)
        if c >= 0 and table.column(c).nbytes >= SPLIT_BYTES:
            return c
    return None


def begin(column: pa.ChunkedArray, field: pa.Field, encode) -> Callable[[], list]:
    """Start encoding the first half of the column's rows (see :data:`_SHARE`) in another thread;
    the call returned encodes the second half in this one and gives both as ``[(pages, ColumnChunk
    struct)]``. ``encode(column, field)`` gives a column's chunk as the archive's writer
    encodes it within the whole (``writer.column_chunk``)."""
    n = len(column)
    cut = n * _SHARE[0] // _SHARE[1]
    halves = [column.slice(0, cut), column.slice(cut)]
    out: list = [None, None]
    failed: list = []

    def one(k: int) -> None:
        try:
            out[k] = _encoded(halves[k], field, encode)
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            failed.append(exc)
    helper = Thread(one, name="tbconvert-parquet-half", args=(0,))
    helper.start()

    def finish() -> list:
        one(1)
        # (waited for on its event: before Python 3.13 a join cut short by Ctrl-C left a
        # thread marked as ended while it still ran, see tbconvert.interrupts)
        helper.wait_held()
        if failed:
            raise failed[0]
        return out
    return finish


def _encoded(half: pa.ChunkedArray, field: pa.Field, encode) -> tuple[pa.Buffer, list]:
    pages, chunk, _ = encode(half, field)
    meta = F.get(chunk, F.CC_META)
    if F.get(meta, F.CM_DICTIONARY_PAGE_OFFSET) or F.get(meta, _CM_STATISTICS) is not None:
        raise AssertionError("a payload column is written without dictionary or statistics")
    return pages, chunk


def write(fh, halves: list) -> list:
    """Write the halves' pages at the position of ``fh`` (Arrow's sink): the ``ColumnChunk``
    struct that lists them, for :func:`large.patch`."""
    at = fh.tell()
    for pages, _ in halves:
        fh.write(pages)
    return merged([chunk for _, chunk in halves], at)


def merged(chunks: list, at: int) -> list:
    """One ``ColumnChunk`` struct of the pages of ``chunks`` laid one after another from
    ``at`` on: their counts and sizes added up, their encodings and level histograms
    joined."""
    chunk = F.copied(chunks[0])
    meta = F.get(chunk, F.CC_META)
    metas = [F.get(c, F.CC_META) for c in chunks]
    for fid in (_CM_NUM_VALUES, F.CM_UNCOMPRESSED_SIZE, F.CM_COMPRESSED_SIZE):
        F.put(meta, fid, F.I64, sum(F.get(m, fid) for m in metas))
    F.put(meta, F.CM_DATA_PAGE_OFFSET, F.I64, at)
    etype, encodings = F.get(meta, _CM_ENCODINGS)
    for m in metas[1:]:
        encodings += [e for e in F.get(m, _CM_ENCODINGS)[1] if e not in encodings]
    F.put(meta, _CM_ENCODINGS, F.LIST, (etype, encodings))
    if F.get(meta, _CM_ENCODING_STATS) is not None:
        counts: dict = {}
        for m in metas:
            for stat in F.get(m, _CM_ENCODING_STATS)[1]:
                key = (F.get(stat, 1), F.get(stat, 2))
                counts[key] = counts.get(key, 0) + F.get(stat, 3)
        F.put(meta, _CM_ENCODING_STATS, F.LIST, (F.STRUCT, [
            [[1, F.I32, page], [2, F.I32, encoding], [3, F.I32, n]]
            for (page, encoding), n in counts.items()]))
    if F.get(meta, _CM_SIZE_STATISTICS) is not None:
        F.put(meta, _CM_SIZE_STATISTICS, F.STRUCT,
              _size_statistics([F.get(m, _CM_SIZE_STATISTICS) for m in metas]))
    return chunk


def _size_statistics(stats: list) -> list:
    """``SizeStatistics`` of pages that several such structs describe: the unencoded bytes
    added up (1), the repetition (2) and definition (3) level histograms bucket by bucket."""
    out = []
    for fid in (1, 2, 3):
        values = [F.get(s, fid) for s in stats]
        if any(v is None for v in values):
            continue
        if fid == 1:
            out.append([1, F.I64, sum(values)])
        else:
            etype = values[0][0]
            out.append([fid, F.LIST, (etype, [sum(b) for b in zip(*(v[1] for v in values),
                                                                   strict=True)])])
    return out
