"""A single point larger than a row group, its payload column chunk written without Arrow.

Arrow encodes a column chunk into a page buffer and compresses it into another, while the
point's own bytes and its Arrow column are held: four to five times the point at once (a
92 MB image converted to Parquet peaked at 450 MiB). A point that large is alone in its
row group anyway (see ``_FileSink.add_piece``), so its payload column (``tensor_content``
of a numeric tensor, or ``blobs``) is written here as one uncompressed PLAIN data page,
straight from the point's bytes, after Arrow has written the row group with that column
null; the footer Arrow wrote is then made to point at this chunk instead (:func:`patch`).
The null chunk Arrow wrote stays in the file, unlisted: a few dozen bytes, and the same in
a file joined from runs encoded apart (:mod:`join` copies what lies between a row group's
chunks).

Readers see an ordinary Parquet file: PLAIN and uncompressed are every reader's baseline.
"""

from __future__ import annotations

import zlib

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet.digest import ColumnDigest, _crc
from tbconvert.formats.parquet.pages import DATA_PAGE, PLAIN, RLE, signed_crc
from tbconvert.model import BlobSequenceSeries, TensorSeries

# A lone point whose payload is over this: below it a point may share its row group with
# others, and the files written for it stay those Arrow writes.
LARGE_BYTES = 32 << 20
# The payload is checksummed and written in pieces of this size: no piece is copied whole.
_PIECE = 1 << 20

# parquet.thrift: the codec enum and ColumnMetaData fields (pages' are in :mod:`pages`)
_UNCOMPRESSED = 0
_CM_ENCODINGS, _CM_CODEC, _CM_NUM_VALUES = 2, 4, 5
_CM_STATISTICS, _CM_ENCODING_STATS, _CM_SIZE_STATISTICS = 12, 13, 16


class Payload:
    """The payload column of one lone point: its items (bytes-like, None for a null) in the
    column's ``name``; ``listed`` for a list column (``blobs``), else a single binary value."""

    def __init__(self, name: str, items: list, listed: bool) -> None:
        self.name = name
        self.items = items
        self.listed = listed

    def digest(self) -> ColumnDigest:
        """What :class:`ColumnDigest` gives for the column holding this one row."""
        d = ColumnDigest()
        c = d.crcs
        lengths = np.array([-1 if b is None else len(b) for b in self.items], np.int64)
        c[0] = _crc(c[0], b"\x01")
        if self.listed:
            c[1] = _crc(c[1], np.array([len(self.items)], np.int64))
            c[2] = _crc(c[2], np.array([b is not None for b in self.items], np.uint8))
            c[3] = _crc(c[3], lengths)
            at = 4
        else:
            c[1] = _crc(c[1], lengths)
            at = 2
        for item in self.items:
            if item is not None:
                c[at] = _crc(c[at], memoryview(item).cast("B"))
        return d

    def levels(self) -> tuple[list, list]:
        """The repetition and definition levels of its values (a list and its element are
        nullable: 3 is a present element, 2 a null one, 1 an empty list)."""
        if not self.listed:
            return [], [1]
        if not self.items:
            return [0], [1]
        return [0] + [1] * (len(self.items) - 1), [2 if b is None else 3 for b in self.items]


def split(chunk):
    """``(piece, payload)`` of ``chunk`` in order: each large point alone with its
    :class:`Payload`, the points between them as pieces with payload None (the chunk
    itself when it holds no large point)."""
    sizes = _sizes(chunk)
    large = [] if sizes is None else np.flatnonzero(sizes > LARGE_BYTES).tolist()
    if not large:
        yield chunk, None
        return
    if len(chunk) == 1:
        yield chunk, payload_of(chunk)
        return
    at = 0
    for k in large:
        if k > at:
            yield chunk.take(np.arange(at, k)), None
        point = chunk.take([k])
        yield point, payload_of(point)
        at = k + 1
    if at < len(chunk):
        yield chunk.take(np.arange(at, len(chunk))), None


def _sizes(chunk) -> np.ndarray | None:
    """The payload bytes of each point, or None where no point can be large."""
    if isinstance(chunk, BlobSequenceSeries):
        lengths = np.fromiter((0 if b is None else len(b) for b in chunk.blobs), np.int64,
                              len(chunk.blobs))
        if lengths.sum() <= LARGE_BYTES:
            return None
        ends = np.concatenate(([0], np.cumsum(lengths)))
        return ends[chunk.offsets[1:]] - ends[chunk.offsets[:-1]]
    if not isinstance(chunk, TensorSeries) or not len(chunk):
        return None
    if chunk.block is not None:
        return np.full(len(chunk), chunk.block.nbytes // len(chunk), np.int64)
    return np.fromiter((0 if code == dt.DT_STRING else np.asarray(a).nbytes
                        for code, a in zip(chunk.dtypes.tolist(), chunk.tensors, strict=True)),
                       np.int64, len(chunk))


def payload_of(chunk) -> Payload | None:
    """The payload of a series of one point to write with :func:`write_chunk`, or None when
    it is not a lone large point of a kind written so (a string tensor goes to Arrow)."""
    if len(chunk) != 1:
        return None
    if isinstance(chunk, BlobSequenceSeries):
        items = list(chunk.blobs)
        size = sum(len(b) for b in items if b is not None)
        return Payload("blobs", items, True) if size > LARGE_BYTES else None
    if not isinstance(chunk, TensorSeries):
        return None
    code = int(chunk.dtypes[0])
    if code == dt.DT_STRING:
        return None
    a = chunk.tensors[0]
    a = a if isinstance(a, np.ndarray) else np.asarray(a)
    if a.dtype.kind == "O" or a.nbytes <= LARGE_BYTES:
        return None
    data = np.ascontiguousarray(a, dtype=dt.numpy_dtype(code))
    return Payload("tensor_content", [memoryview(data.reshape(-1)).cast("B")], False)


def _rle(levels: list, width: int) -> bytes:
    """Levels in the RLE/bit-packed hybrid, one run of repeats after another, behind their
    length (as a v1 data page holds them)."""
    out = bytearray()
    k = 0
    while k < len(levels):
        end = k
        while end < len(levels) and levels[end] == levels[k]:
            end += 1
        n = (end - k) << 1
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
        out += levels[k].to_bytes((width + 7) // 8, "little")
        k = end
    return len(out).to_bytes(4, "little") + bytes(out)


def write_chunk(fh, payload: Payload) -> dict:
    """Write the payload as a column chunk of one page at the position of ``fh`` (Arrow's
    sink); what :func:`patch` needs to list it."""
    at = fh.tell()
    rep, defs = payload.levels()
    levels = (_rle(rep, 1) if payload.listed else b"") + _rle(defs, 2 if payload.listed else 1)
    present = [b for b in payload.items if b is not None]
    size = len(levels) + sum(4 + len(b) for b in present)
    crc = zlib.crc32(levels)
    for b in present:
        crc = zlib.crc32(len(b).to_bytes(4, "little"), crc)
        for a in range(0, len(b), _PIECE):
            crc = zlib.crc32(b[a:a + _PIECE], crc)
    header = F.encode([
        [1, F.I32, DATA_PAGE], [2, F.I32, size], [3, F.I32, size], [4, F.I32, signed_crc(crc)],
        [5, F.STRUCT, [[1, F.I32, len(defs)], [2, F.I32, PLAIN], [3, F.I32, RLE],
                       [4, F.I32, RLE]]]])
    fh.write(header)
    fh.write(levels)
    for b in present:
        fh.write(len(b).to_bytes(4, "little"))
        for a in range(0, len(b), _PIECE):
            fh.write(b[a:a + _PIECE])
    top = 3 if payload.listed else 1
    return {"at": at, "size": len(header) + size, "values": len(defs),
            "bytes": sum(len(b) for b in present),
            "rep": [rep.count(k) for k in range(2)] if payload.listed else [],
            "def": [defs.count(k) for k in range(top + 1)]}


def _chunk(arrow_chunk: list, written: dict) -> list:
    """The ``ColumnChunk`` of the chunk :func:`write_chunk` wrote, made from the one Arrow
    wrote for the null stand-in (its column's path, type and the fields Arrow sets)."""
    chunk = F.copied(arrow_chunk)
    meta = F.get(chunk, F.CC_META)
    meta[:] = [f for f in meta if f[0] not in (F.CM_DICTIONARY_PAGE_OFFSET, _CM_STATISTICS)]
    F.put(meta, _CM_ENCODINGS, F.LIST, (F.I32, [RLE, PLAIN]))
    F.put(meta, _CM_CODEC, F.I32, _UNCOMPRESSED)
    F.put(meta, _CM_NUM_VALUES, F.I64, written["values"])
    F.put(meta, F.CM_UNCOMPRESSED_SIZE, F.I64, written["size"])
    F.put(meta, F.CM_COMPRESSED_SIZE, F.I64, written["size"])
    F.put(meta, F.CM_DATA_PAGE_OFFSET, F.I64, written["at"])
    F.put(meta, _CM_ENCODING_STATS, F.LIST,
          (F.STRUCT, [[[1, F.I32, DATA_PAGE], [2, F.I32, PLAIN], [3, F.I32, 1]]]))
    if F.get(meta, _CM_SIZE_STATISTICS) is not None:
        F.put(meta, _CM_SIZE_STATISTICS, F.STRUCT, [
            [1, F.I64, written["bytes"]], [2, F.LIST, (F.I64, written["rep"])],
            [3, F.LIST, (F.I64, written["def"])]])
    return chunk


def patch(path, chunks: dict) -> None:
    """Make the footer of the Parquet file ``path`` list the chunks ``chunks`` (``{(row
    group, column): what write_chunk gave, or a ColumnChunk struct}``) in place of those
    Arrow wrote there."""
    with open(path, "r+b") as fh:
        fields, start = F.read(fh)
        _, groups = F.get(fields, F.FILE_ROW_GROUPS)
        for (g, c), written in chunks.items():
            etype, columns = F.get(groups[g], F.RG_COLUMNS)
            old = columns[c]
            # (a ColumnChunk struct made already: a payload encoded in halves, see halves.py)
            new = columns[c] = written if isinstance(written, list) else _chunk(old, written)
            for fid, size in ((F.RG_TOTAL_BYTE_SIZE, F.CM_UNCOMPRESSED_SIZE),
                              (F.RG_TOTAL_COMPRESSED_SIZE, F.CM_COMPRESSED_SIZE)):
                if F.get(groups[g], fid) is not None:
                    F.put(groups[g], fid, F.I64, F.get(groups[g], fid)
                          + F.get(F.get(new, F.CC_META), size)
                          - F.get(F.get(old, F.CC_META), size))
        fh.seek(start)
        fh.truncate()
        F.write(fh, fields)
