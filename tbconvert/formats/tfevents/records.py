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
from numpy.lib.stride_tricks import sliding_window_view
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
    n = len(buf)
    data = np.frombuffer(buf, dtype=np.uint8)
    starts, lengths = _frame_quickly(buf)
    damage: list[Damage] = []
    good = _length_crcs_ok(data, starts, lengths)
    if good < len(starts) or (starts[-1] + lengths[-1] + FOOTER if len(starts) else 0) < n:
        # Damage somewhere: from the first doubtful record on, go carefully and resynchronise.
        resume = int(starts[good]) - HEADER if good < len(starts) else \
            (int(starts[-1] + lengths[-1]) + FOOTER if len(starts) else 0)
        more_starts, more_lengths, damage = _frame_carefully(buf, resume)
        starts = np.concatenate([starts[:good], np.array(more_starts, np.int64)])
        lengths = np.concatenate([lengths[:good], np.array(more_lengths, np.int64)])
    if not len(starts):
        return starts, lengths, damage
    # Payload CRCs: C calls in one comprehension, masking and comparing in numpy.
    mv = memoryview(buf)
    raw = np.fromiter((crc32c(mv[s:s + k]) for s, k in zip(starts.tolist(), lengths.tolist())),
                      dtype=np.uint32, count=len(starts))
    stored = np.ascontiguousarray(sliding_window_view(data, 4)[starts + lengths]).view("<u4")[:, 0]
    bad = mask(raw) != stored
    if bad.any():
        for i in np.flatnonzero(bad).tolist():
            damage.append(Damage(int(starts[i]) - HEADER, int(lengths[i]) + HEADER + FOOTER,
                                 "bad payload checksum"))
        damage.sort(key=lambda d: d.offset)
        starts, lengths = starts[~bad], lengths[~bad]
    return starts, lengths, damage


def _frame_quickly(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Follow the length fields without checking anything (checked afterwards, in bulk)."""
    starts: list[int] = []
    lengths: list[int] = []
    append_start, append_length = starts.append, lengths.append
    unpack = _U64.unpack_from
    n = len(buf)
    off = 0
    while off + HEADER <= n:
        (length,) = unpack(buf, off)
        end = off + HEADER + length + FOOTER
        if end > n:
            break
        append_start(off + HEADER)
        append_length(length)
        off = end
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)


def _length_crcs_ok(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """How many leading records have a correct length CRC."""
    if not len(starts):
        return 0
    stored = np.ascontiguousarray(sliding_window_view(data, 4)[starts - 4]).view("<u4")[:, 0]
    uniq, inverse = np.unique(lengths, return_inverse=True)
    expected = np.array([masked_crc32c(_U64.pack(int(v))) for v in uniq], dtype=np.uint32)
    wrong = np.flatnonzero(expected[inverse.reshape(-1)] != stored)
    return int(wrong[0]) if len(wrong) else len(starts)


def _frame_carefully(buf: bytes, off: int) -> tuple[list[int], list[int], list[Damage]]:
    """Frame from ``off`` checking each length CRC, skipping and resynchronising on damage."""
    starts: list[int] = []
    lengths: list[int] = []
    damage: list[Damage] = []
    n = len(buf)
    mv = memoryview(buf)
    unpack_u64 = _U64.unpack_from
    unpack_u32 = _U32.unpack_from
    while off + HEADER <= n:
        (length,) = unpack_u64(buf, off)
        if unpack_u32(buf, off + 8)[0] != masked_crc32c(mv[off:off + 8]):
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
        starts.append(off + HEADER)
        lengths.append(length)
        off = end
    if off < n:
        damage.append(Damage(off, n - off, "truncated record"))
    return starts, lengths, damage


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
