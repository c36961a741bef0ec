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

from tbconvert.formats.tfevents import fastframe

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
HEADER = 12
BULK_CRC_MAX_LENGTH = 96
FOOTER = 4


def masked_crc32c(data) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def mask(crc: np.ndarray) -> np.ndarray:
    """Vectorised CRC masking of a uint32 array."""
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA & 0xFFFFFFFF).astype(np.uint32)


def _tables() -> np.ndarray:
    """Slicing-by-4 tables of the reflected Castagnoli polynomial."""
    poly = 0x82F63B78
    t0 = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t0[i] = c
    tables = [t0]
    for _ in range(3):
        prev = tables[-1]
        tables.append((prev >> np.uint32(8)) ^ t0[prev & np.uint32(0xFF)])
    return np.stack(tables)


_T = None


def crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """Raw CRC-32C of every row of a uint8 matrix, computed column-wise in numpy.

    Equal-length records (most of an event file) get their checksums in a few
    dozen array operations instead of one C call each.
    """
    global _T
    if _T is None:
        _T = _tables()
    t0, t1, t2, t3 = _T
    n, width = rows.shape
    crc = np.full(n, 0xFFFFFFFF, dtype=np.uint32)
    words = width // 4
    if words:
        block = np.ascontiguousarray(rows[:, :words * 4]).view("<u4")
        ff = np.uint32(0xFF)
        for j in range(words):
            crc ^= block[:, j]
            crc = (t3[crc & ff] ^ t2[(crc >> np.uint32(8)) & ff]
                   ^ t1[(crc >> np.uint32(16)) & ff] ^ t0[crc >> np.uint32(24)])
    for j in range(words * 4, width):
        crc = t0[(crc ^ rows[:, j]) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


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
    the damaged stretches that were skipped. A record counts only when both of
    its CRCs check out. A length is trusted only once its own CRC checks out,
    so a garbage length never causes a large allocation; and a record whose
    length CRC is fine but whose payload CRC is not is searched for valid
    records inside it, so a forged or spliced length cannot swallow the
    intact records it covers.
    """
    n = len(buf)
    data = np.frombuffer(buf, dtype=np.uint8)
    mv = memoryview(buf)
    budget = _Budget(_RESYNC_BUDGET_PER_BYTE * n + _RESYNC_BUDGET_BASE)
    out_starts: list[np.ndarray] = []
    out_lengths: list[np.ndarray] = []
    damage: list[Damage] = []
    pos = 0
    batch = _FIRST_BATCH
    while pos < n:
        starts, lengths = fastframe.walk(buf, pos, batch)
        ok = _valid_prefix(data, mv, starts, lengths)
        if ok:
            out_starts.append(starts[:ok])
            out_lengths.append(lengths[:ok])
            pos = int(starts[ok - 1] + lengths[ok - 1]) + FOOTER
        if ok == len(starts) == batch:
            batch = min(batch * 4, _MAX_BATCH)   # all good: take bigger bites
            continue
        if pos >= n:
            break
        batch = _FIRST_BATCH
        pos = _skip_damage(buf, data, mv, pos, damage, budget)
    if not out_starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), damage
    return np.concatenate(out_starts), np.concatenate(out_lengths), damage


_FIRST_BATCH = 256
_MAX_BATCH = 1 << 20
_RESYNC_CHUNK = 1 << 18
# Payload bytes that searching damaged stretches may checksum, per byte of file plus a base.
# Ordinary damage needs a tiny fraction of it; a crafted file full of long forged records
# would otherwise need time that grows with the square of its size.
_RESYNC_BUDGET_PER_BYTE = 8
_RESYNC_BUDGET_BASE = 256 << 20


class _Budget:
    def __init__(self, left: int) -> None:
        self.left = left
        self.skipped = 0      # candidate records too long to check once the budget ran low


def _payload_crcs(buf, data, starts, lengths) -> np.ndarray:
    """Raw CRC of every payload: in bulk for common lengths, one C call for the rest."""
    raw = np.empty(len(starts), dtype=np.uint32)
    uniq, inverse, counts = np.unique(lengths, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    single = np.zeros(len(starts), dtype=bool)
    # column-wise numpy wins only on short records; past ~100 bytes one C call each is faster
    for gi in np.flatnonzero((counts >= 64) & (uniq <= BULK_CRC_MAX_LENGTH)).tolist():
        members = np.flatnonzero(inverse == gi)
        length = int(uniq[gi])
        if length == 0:
            raw[members] = 0
            continue
        raw[members] = crc32c_rows(sliding_window_view(data, length)[starts[members]])
        single[members] = True
    rest = np.flatnonzero(~single)
    mv = memoryview(buf) if not isinstance(buf, memoryview) else buf
    raw[rest] = np.fromiter((crc32c(mv[s:s + k]) for s, k in
                             zip(starts[rest].tolist(), lengths[rest].tolist())),
                            dtype=np.uint32, count=len(rest))
    return raw


def _frame_quickly(buf: bytes, off: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Follow up to ``limit`` length fields from ``off`` without checking anything
    (checked afterwards, in bulk). Stops before a record that runs past the end."""
    starts: list[int] = []
    lengths: list[int] = []
    append_start, append_length = starts.append, lengths.append
    unpack = _U64.unpack_from
    n = len(buf)
    while off + HEADER <= n and len(starts) < limit:
        (length,) = unpack(buf, off)
        end = off + HEADER + length + FOOTER
        if end > n:
            break
        append_start(off + HEADER)
        append_length(length)
        off = end
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)


def _valid_prefix(data: np.ndarray, mv: memoryview, starts: np.ndarray, lengths: np.ndarray) -> int:
    """How many leading records have both CRCs right."""
    good = _length_crcs_ok(data, starts, lengths)
    if not good:
        return 0
    s, k = starts[:good], lengths[:good]
    raw = _payload_crcs(mv, data, s, k)
    stored = np.ascontiguousarray(sliding_window_view(data, 4)[s + k]).view("<u4")[:, 0]
    wrong = np.flatnonzero(mask(raw) != stored)
    return int(wrong[0]) if len(wrong) else good


def _length_crcs_ok(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """How many leading records have a correct length CRC."""
    if not len(starts):
        return 0
    stored = np.ascontiguousarray(sliding_window_view(data, 4)[starts - 4]).view("<u4")[:, 0]
    uniq, inverse = np.unique(lengths, return_inverse=True)
    expected = np.array([masked_crc32c(_U64.pack(int(v))) for v in uniq], dtype=np.uint32)
    wrong = np.flatnonzero(expected[inverse.reshape(-1)] != stored)
    return int(wrong[0]) if len(wrong) else len(starts)


def _skip_damage(buf: bytes, data: np.ndarray, mv: memoryview, off: int,
                 damage: list[Damage], budget: _Budget) -> int:
    """The record at ``off`` is not valid: record why, and return where reading goes on."""
    skipped = budget.skipped
    nxt, reason = _next_after_damage(buf, data, mv, off, budget)
    if budget.skipped > skipped:
        reason += (f"; {budget.skipped - skipped} candidate records inside were too long to "
                   "check (the file looks crafted)")
    damage.append(Damage(off, nxt - off, reason))
    return nxt


def _next_after_damage(buf: bytes, data: np.ndarray, mv: memoryview, off: int,
                       budget: _Budget) -> tuple[int, str]:
    n = len(buf)
    if off + HEADER > n:
        return n, "truncated record"
    (length,) = _U64.unpack_from(buf, off)
    if _U32.unpack_from(buf, off + 8)[0] != masked_crc32c(mv[off:off + 8]):
        return _resync(buf, data, mv, off + 1, n, budget), "bad length checksum"
    end = off + HEADER + length + FOOTER
    if end > n:
        nxt = _resync(buf, data, mv, off + 1, n, budget)
        return nxt, "truncated record" if nxt >= n else "record length runs past the next record"
    # The length checks out but the payload does not: either the payload is damaged (then the
    # next record starts at ``end``) or the length lies (then valid records hide inside).
    return _resync(buf, data, mv, off + 1, end, budget), "bad payload checksum"


def _resync(buf: bytes, data: np.ndarray, mv: memoryview, lo: int, hi: int,
            budget: _Budget) -> int:
    """The first offset in ``[lo, hi)`` where a fully valid record starts (``hi`` if none).

    Vectorised: candidate offsets are those whose length field fits in the
    file and whose length CRC matches (numpy, a chunk at a time); only those
    get their payload CRC checked. Memory stays bounded by the chunk size.
    """
    n = len(buf)
    last = n - HEADER - FOOTER          # the last offset where a record (even empty) fits
    pos = lo
    chunk = 256                          # damage is usually short: look near first, then wider
    while pos < hi and pos <= last:
        stop = min(hi, pos + chunk, last + 1)
        chunk = min(chunk * 4, _RESYNC_CHUNK)
        m = stop - pos
        window = data[pos:stop + HEADER - 1]
        lens = np.ascontiguousarray(sliding_window_view(window[:m + 7], 8)).view("<u8")[:, 0]
        room = (n - HEADER - FOOTER) - np.arange(pos, stop, dtype=np.int64)
        cand = np.flatnonzero(lens <= room.astype(np.uint64))
        if len(cand):
            clen = lens[cand]
            stored = np.ascontiguousarray(
                sliding_window_view(window[8:m + HEADER - 1], 4)[cand]).view("<u4")[:, 0]
            uniq, inverse = np.unique(clen, return_inverse=True)
            expected = np.array([masked_crc32c(_U64.pack(int(v))) for v in uniq], dtype=np.uint32)
            for i in cand[expected[inverse.reshape(-1)] == stored].tolist():
                off = pos + i
                length = int(lens[i])
                if length > budget.left:
                    budget.skipped += 1
                    continue
                budget.left -= length
                end = off + HEADER + length
                if _U32.unpack_from(buf, end)[0] == masked_crc32c(mv[off + HEADER:end]):
                    return off
        pos = stop
    return hi


BLOCK_SIZE = 16 << 20


@dataclass
class Block:
    """Records found in one stretch of a file.

    ``starts``/``lengths`` locate payloads inside ``buf``; ``offset`` is the file
    offset of ``buf[0]``; ``damage`` offsets are file offsets. A record never
    straddles two blocks.
    """

    buf: bytes
    offset: int
    starts: np.ndarray
    lengths: np.ndarray
    damage: list[Damage]


def scan_file(path, *, block_size: int = BLOCK_SIZE):
    """Yield :class:`Block` objects covering the file at ``path`` in file order."""
    from tbconvert import sourcefiles
    buf = sourcefiles.read_bytes(path)
    starts, lengths, damage = scan(buf)
    yield Block(buf, 0, starts, lengths, damage)
