"""TFRecord framing: ``u64 length | masked crc32c(length) | payload | masked crc32c(payload)``.

The framing follows TensorFlow's record writer (spec section 1.1); the
CRC-32C comes from the C-backed ``crc32c`` package. Reading never stops at the
first bad record as TensorBoard does: a bad payload CRC costs that record
only, and a bad length field makes the scanner search forward for the next
record whose two CRCs check out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from crc32c import crc32c

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
HEADER = 12
FOOTER = 4


def masked_crc32c(data) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def mask(crc: np.ndarray) -> np.ndarray:
    """Vectorised CRC masking of a uint32 array."""
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA & 0xFFFFFFFF).astype(np.uint32)


def frame(payload: bytes) -> bytes:
    """One complete record holding ``payload``."""
    header = _U64.pack(len(payload))
    return b"".join((header, _U32.pack(masked_crc32c(header)), payload,
                     _U32.pack(masked_crc32c(payload))))


@dataclass
class Damage:
    """A stretch of a file that could not be read as records."""

    offset: int
    length: int
    reason: str


def scan(buf: bytes) -> tuple[np.ndarray, np.ndarray, list[Damage]]:
    """Find every valid record in ``buf``.

    Returns the payload offsets and lengths (int64 arrays, in file order) and
    the damaged stretches that were skipped. A length is trusted only once its
    own CRC checks out, so a garbage length never causes a large allocation.
    """
    starts: list[int] = []
    lengths: list[int] = []
    damage: list[Damage] = []
    n = len(buf)
    mv = memoryview(buf)
    unpack_u64 = _U64.unpack_from
    unpack_u32 = _U32.unpack_from
    length_crcs: dict[int, int] = {}  # the length CRC depends only on the length
    append_start, append_length = starts.append, lengths.append
    off = 0
    while off + HEADER <= n:
        (length,) = unpack_u64(buf, off)
        expected = length_crcs.get(length)
        if expected is None:
            expected = masked_crc32c(mv[off:off + 8])
            if len(length_crcs) < 4096:
                length_crcs[length] = expected
        if unpack_u32(buf, off + 8)[0] != expected:
            nxt = _resync(buf, mv, off + 1)
            damage.append(Damage(off, nxt - off, "bad length checksum"))
            off = nxt
            continue
        end = off + HEADER + length + FOOTER
        if end > n:
            nxt = _resync(buf, mv, off + 1)
            reason = "truncated record" if nxt >= n else "record length runs past the next record"
            damage.append(Damage(off, nxt - off, reason))
            off = nxt
            continue
        data_start = off + HEADER
        if unpack_u32(buf, end - FOOTER)[0] != masked_crc32c(mv[data_start:end - FOOTER]):
            damage.append(Damage(off, end - off, "bad payload checksum"))
        else:
            append_start(data_start)
            append_length(length)
        off = end
    if off < n:
        damage.append(Damage(off, n - off, "truncated record"))
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), damage


def _resync(buf: bytes, mv: memoryview, off: int) -> int:
    """The next offset at or after ``off`` where a fully valid record starts (or the end)."""
    n = len(buf)
    unpack_u64 = _U64.unpack_from
    unpack_u32 = _U32.unpack_from
    while off + HEADER + FOOTER <= n:
        (length,) = unpack_u64(buf, off)
        end = off + HEADER + length + FOOTER
        if end <= n and unpack_u32(buf, off + 8)[0] == masked_crc32c(mv[off:off + 8]) and \
                unpack_u32(buf, end - FOOTER)[0] == masked_crc32c(mv[off + HEADER:end - FOOTER]):
            return off
        off += 1
    return n
