"""An int32 column chunk renumbered where it lies: every value ``v`` made ``v + offset`` by
changing only the pages' headers and its dictionary.

A run encoded on its own (``--jobs N`` to one file) numbers its series from 0, and joins
the file after runs that already hold series: its ``series`` column must be moved up by
their count. Arrow dictionary-encodes that column: a dictionary page holding the run's
numbers (PLAIN int32, in first-seen order), then data pages of indices into it. Moving the
numbers therefore changes the dictionary page (decompressed, moved, compressed again as
Arrow compresses it) and the minimum and maximum kept in each data page's header and in the
chunk's metadata; the data pages' bytes and checksums stay as they are. The result is the
chunk Arrow writes for the moved numbers (``tests/test_parquet_join.py`` compares bytes),
at a fraction of encoding it again.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np
import pyarrow as pa

from tbconvert.formats.parquet import footer as F

# field ids and values of parquet.thrift
PH_TYPE, PH_UNCOMPRESSED, PH_COMPRESSED, PH_CRC, PH_DATA = 1, 2, 3, 4, 5
DPH_VALUES, DPH_ENCODING, DPH_DEF, DPH_REP = 1, 2, 3, 4
DATA_PAGE, DICTIONARY_PAGE = 0, 2
PLAIN, RLE = 0, 3               # encodings
DPH_STATISTICS = 5
CM_TYPE, CM_CODEC, CM_STATISTICS = 1, 4, 12
ST_BOUNDS = (1, 2, 5, 6)        # max, min (deprecated) and max_value, min_value
INT32 = 1
_CODECS = {0: None, 6: "zstd"}  # UNCOMPRESSED, ZSTD: what tbconvert writes

_INT32_MAX = (1 << 31) - 1


def moved_int32_chunk(raw: bytes, chunk: list, offset: int,
                      level: int | None) -> tuple[bytes, list] | None:
    """The column chunk ``raw`` (its bytes from its first page on; ``chunk`` its footer
    ``ColumnChunk``) with its values moved up by ``offset``, and its new ``ColumnChunk``
    (offsets still those of where ``raw`` lies); ``level`` is the compression level the
    chunk was written with. None when the chunk is not a dictionary-encoded int32 chunk of
    the plain layout Arrow writes (the caller then encodes the column anew)."""
    meta = F.get(chunk, F.CC_META)
    if meta is None or F.get(meta, CM_TYPE) != INT32 or F.get(meta, CM_CODEC) not in _CODECS \
            or F.get(meta, F.CM_DICTIONARY_PAGE_OFFSET) is None:
        return None
    codec = _CODECS[F.get(meta, CM_CODEC)]
    try:
        head, pos = F.decode_prefix(raw, 0)
        if F.get(head, PH_TYPE) != DICTIONARY_PAGE:
            return None
        size = F.get(head, PH_COMPRESSED)
        if pos + size > len(raw):
            return None
        page = _moved_values(raw[pos:pos + size], F.get(head, PH_UNCOMPRESSED), codec, level,
                             offset)
        if page is None:
            return None
        new_head = F.copied(head)
        F.put(new_head, PH_COMPRESSED, F.I32, len(page))
        if F.get(head, PH_CRC) is not None:
            F.put(new_head, PH_CRC, F.I32, signed_crc(zlib.crc32(page)))
        out = [F.encode(new_head), page]
        grown = len(out[0]) + len(page) - (pos + size)
        header_grown = len(out[0]) - pos
        pos += size
        while pos < len(raw):
            header, end = F.decode_prefix(raw, pos)
            if F.get(header, PH_TYPE) != DATA_PAGE:
                return None
            stats = F.get(F.get(header, PH_DATA, []), DPH_STATISTICS)
            if stats is not None and not _move_bounds(stats, offset):
                return None
            encoded = F.encode(header)
            if len(encoded) != end - pos:
                return None
            body = end + F.get(header, PH_COMPRESSED)
            if body > len(raw):
                return None
            out += [encoded, raw[end:body]]
            pos = body
    except (ValueError, IndexError, TypeError):
        return None
    new_chunk = F.copied(chunk)
    new_meta = F.get(new_chunk, F.CC_META)
    stats = F.get(new_meta, CM_STATISTICS)
    if stats is not None and not _move_bounds(stats, offset):
        return None
    for fid, delta in ((F.CM_UNCOMPRESSED_SIZE, header_grown), (F.CM_COMPRESSED_SIZE, grown),
                       (F.CM_DATA_PAGE_OFFSET, grown)):
        F.put(new_meta, fid, F.I64, F.get(new_meta, fid) + delta)
    return b"".join(out), new_chunk


def _moved_values(page: bytes, plain_size: int, codec: str | None, level: int | None,
                  offset: int) -> bytes | None:
    """A dictionary page's PLAIN int32 values moved up by ``offset``, compressed again."""
    coder = None if codec is None else _codec(codec, level)
    plain = page if coder is None else \
        coder.decompress(page, decompressed_size=plain_size, asbytes=True)
    if len(plain) != plain_size or plain_size % 4:
        return None
    values = np.frombuffer(plain, dtype="<i4")
    if len(values) and int(values.max()) > _INT32_MAX - offset:
        return None
    moved = (values.astype(np.int64) + offset).astype("<i4").tobytes()
    return moved if coder is None else coder.compress(moved, asbytes=True)


@lru_cache(maxsize=8)
def _codec(codec: str, level: int | None) -> pa.Codec:
    return pa.Codec(codec, compression_level=level)


def _move_bounds(stats: list, offset: int) -> bool:
    for fid in ST_BOUNDS:
        value = F.get(stats, fid)
        if value is None:
            continue
        if len(value) != 4:
            return False
        moved = int.from_bytes(value, "little", signed=True) + offset
        if moved > _INT32_MAX:
            return False
        F.put(stats, fid, F.BINARY, moved.to_bytes(4, "little", signed=True))
    return True


def signed_crc(crc: int) -> int:
    """A CRC-32 as a page header holds it (a signed 32-bit field)."""
    return crc - (1 << 32) if crc >= 1 << 31 else crc
