"""TFRecord framing: ``u64 length | masked crc32c(length) | payload | masked crc32c(payload)``.

The framing follows TensorFlow's record writer (docs/format-notes.md, "Record framing"); the
CRC-32C comes from the C-backed ``crc32c`` package. Reading never stops at the
first bad record as TensorBoard does. A record counts only when both of its
CRCs check out; everything else is reported as :class:`Damage` and reading goes
on at the next place a record can be trusted to start.

Where reading goes on after a record at ``off`` that is not valid:

* **Bad length CRC** (or garbage): search forward for the next *anchor*.
* **Length CRC fine, payload CRC bad**: what lies inside the claimed record is
  read only from a *proven chain*: a run of valid records (damaged records
  whose own end lines up with a correct header count as links) that starts
  inside the claimed record and reaches its claimed end or goes beyond it, or
  runs to the end of the file. That is what a forged or spliced length looks
  like (a record cut short by a crash, with other records appended after it):
  the records it swallowed are found. A chain that stops short of the claimed
  end is the record's own content (a damaged text summary that happens to hold
  the bytes of a framed event) and is never read; TensorBoard shows nothing of
  it either. A last record cut short within its payload still ends a chain at
  the end of the file; one cut inside its 12-byte header cannot be told from
  the tail of the claimed record, so a claim ending exactly at the end of the
  file after such a cut is skipped whole.
* Without a proven chain, a record whose claimed end lands exactly on a
  correct header (or the end of the file) has a damaged payload and a right
  length: it is skipped whole. Otherwise the length is suspect too, and the
  search goes on at the claimed end (or at the end of the file).

An *anchor* is an offset holding a header with a correct length CRC whose
record is either fully valid or ends exactly on another correct header (or the
end of the file); the latter is then skipped whole as above. A random 12-byte
window passes a length CRC with odds of 2^-32, so anchors are not found in
garbage by accident.

Valid records are checked a batch at a time: one C call over a copy of their bytes
in which every stored CRC is replaced by the four bytes that take the CRC register back
to its start after a right record (:func:`_span_ok`); only a batch that fails is checked
record by record, to find the damage.

Everything is linear in the size of the input. Candidate headers are found
vectorised (a plausible length has its top three bytes zero and a header is
never twelve zero bytes, so zeros and random bytes are passed over at memory
speed), and the payload CRCs of many candidates are checked in bulk in constant
time each (:mod:`crcmath`), so a file holding a forged header every 12 bytes,
each claiming most of the file, is searched in one pass and the intact records
after it are all found.

:func:`scan_file` reads a file in bounded blocks (:data:`BLOCK_SIZE`), skips
holes of sparse files without reading them, and never lets a record straddle
two blocks: a block grows to hold one large record (up to :data:`MAX_RECORD`),
after its checksum was verified by streaming, so memory stays bounded by the
block size (twice it, :data:`WIDE_BLOCKS`, in a file of records of a few hundred
bytes to a few KiB) plus the largest valid record. A length field is never used to
allocate memory before its record is known to be valid. Each block is read with
lookahead (as many bytes again, at most :data:`LOOKAHEAD`, 1 MiB: a whole block's
worth had every byte read twice), so a record or a search near its edge is judged
with what follows. One compromise: a record longer than the lookahead whose end is
not followed by a correct header (damage right after it) cannot be verified without
holding it, and is reported as damage like its bytes.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tbconvert.checksum import crc32c
from tbconvert.formats.tfevents import crcmath, record_chain
from tbconvert.formats.tfevents.windows import windows

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
HEADER = 12
BULK_CRC_MAX_LENGTH = 96
# Column-wise numpy costs a fixed ~0.2 ms per group of equal-length records: below about a
# thousand records one C call each is faster (the new records of a sync come in such groups).
BULK_CRC_MIN_ROWS = 1024
FOOTER = 4


def masked_crc32c(data) -> int:
    return masked_crc32c_from_raw(crc32c(data))


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
    dozen array operations instead of one C call each. Records of one layout differ in
    a few bytes (wall time, step, value): the first row's CRC is taken in C, and each
    other row's differs from it by what its differing bytes add (the CRC is linear).
    """
    global _T
    if _T is None:
        _T = _tables()
    n, width = rows.shape
    if n > 1 and width:
        differ = np.flatnonzero((rows != rows[0]).any(axis=0))
        if 4 * len(differ) < 3 * width:
            first = np.ascontiguousarray(rows[0])
            crc = np.full(n, crc32c(first), dtype=np.uint32)
            for j in differ.tolist():
                crc ^= _byte_table(width - 1 - j)[rows[:, j] ^ first[j]]
            return crc
    if n < 16 * (width // 4):
        # few wide rows (large images, long strings): the column loop would cost a numpy
        # call per four bytes of a row, where C takes a row in about a microsecond
        return np.fromiter((crc32c(row) for row in np.ascontiguousarray(rows)), np.uint32, n)
    return _crc32c_words(rows)


@functools.lru_cache(maxsize=1024)
def _byte_table(after: int) -> np.ndarray:
    """What each byte value adds to a CRC when ``after`` more bytes follow it."""
    return crcmath.shift(_T[0], np.full(256, after, dtype=np.int64))


def _crc32c_words(rows: np.ndarray) -> np.ndarray:
    """:func:`crc32c_rows` four columns at a time (slicing-by-4)."""
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


def scan(buf) -> tuple[np.ndarray, np.ndarray, list[Damage]]:
    """Find every valid record in ``buf``, the whole content of one file.

    Returns the payload offsets and lengths (int64 arrays, in file order) and
    the damaged stretches that were skipped (see the module docstring for the
    rules).
    """
    starts, lengths, damage, _ = _Scanner(buf).run()
    return starts, lengths, damage


_FIRST_BATCH = 256
_MAX_BATCH = 1 << 20
_WHOLE_BATCH = 1 << 14
_RESYNC_CHUNK = 1 << 20
_DIRECT_CRC = 4096       # candidate payloads up to this long are checksummed directly
_EMPTY = np.zeros(0, dtype=np.int64)


class _Scanner:
    """One pass over a buffer: the whole file, or (with ``peek``) one block of it.

    ``peek(i, k)`` returns up to ``k`` bytes at buffer offset ``i >= len(buf)``
    (``b""`` at the end of the file); it is given when the buffer does not end
    at the end of the file. Then scanning stops (``run`` returns how much was
    consumed) where a record or a search needs bytes beyond the buffer, and
    ``need`` says how many bytes the record starting there needs; ``eof`` is the
    buffer offset where the file ends. ``searching`` says that the buffer starts in
    the middle of a search for an anchor (the previous block stopped one there), and
    ``searching`` after ``run`` says the same of where this one stopped.
    """

    def __init__(self, buf, peek=None, own=None, eof=None, searching=False,
                 limit=None) -> None:
        self.buf = buf
        self.n = len(buf)
        self.data = np.frombuffer(buf, dtype=np.uint8)
        self.mv = memoryview(buf)
        self.peek = peek
        self.final = peek is None
        self.eof = self.n if eof is None or self.final else eof   # buffer offset of EOF
        # A block owns its first ``own`` bytes: scanning stops once past them, and the bytes
        # after them are lookahead, so a record or a search near the edge is still judged
        # with the bytes that follow it.
        self.own = self.n if own is None or self.final else own
        # ``limit``: no record starting at or after this buffer offset is taken (the end of
        # a segment of the file, see :func:`segment_starts`); None: any
        self.limit = limit
        self.limited = False
        self.damage: list[Damage] = []
        self.need = 0
        self.searching = searching
        self._prefix = None

    # -- the main loop --------------------------------------------------------------------
    def run(self):
        buf, data, mv = self.buf, self.data, self.mv
        out_starts: list[np.ndarray] = []
        out_lengths: list[np.ndarray] = []
        pos = 0
        if self.searching:
            # Go on with the previous block's search: its first offset is a candidate
            # still to be judged, not a record known to start there.
            self.searching = False
            p, found = self._resync(0, self.n)
            pos = self._skip(0, p, "bad length checksum") if p else 0
            self.searching = not found and not self.final
        # A small block (the bytes a sync finds appended) is walked and checked in one go:
        # a record takes 16 bytes at least.
        own = self.own // (HEADER + FOOTER)
        batch = max(own, _FIRST_BATCH) if own <= _WHOLE_BATCH else _FIRST_BATCH
        limit = self.limit
        while pos < self.own and (limit is None or pos < limit):
            self.searching = False
            starts, lengths = record_chain.walk(buf, pos, batch)
            ok = _valid_prefix(data, mv, starts, lengths)
            if limit is not None and ok:
                within = int(np.searchsorted(starts[:ok], limit + HEADER))
                if within < ok:
                    # the records from the limit on are the next segment's
                    if within:
                        out_starts.append(starts[:within])
                        out_lengths.append(lengths[:within])
                        pos = int(starts[within - 1] + lengths[within - 1]) + FOOTER
                    break
            if ok:
                out_starts.append(starts[:ok])
                out_lengths.append(lengths[:ok])
                pos = int(starts[ok - 1] + lengths[ok - 1]) + FOOTER
            if ok == len(starts) == batch:
                batch = min(batch * 4, _MAX_BATCH)   # all good: take bigger bites
                continue
            if pos >= self.own:
                break
            batch = _FIRST_BATCH
            nxt = self._after_damage(pos)
            if nxt is None:
                break
            pos = nxt
        # (the rest of the buffer, past the limit, is left: the end of the file too)
        self.limited = limit is not None and pos >= limit
        if not out_starts:
            return _EMPTY, _EMPTY, self.damage, pos
        return np.concatenate(out_starts), np.concatenate(out_lengths), self.damage, pos

    def _skip(self, off: int, nxt: int, reason: str) -> int:
        self.damage.append(Damage(off, nxt - off, reason))
        return nxt

    def _after_damage(self, off: int):
        """The record at ``off`` is not valid: where reading goes on (None: stop this block)."""
        n = self.n
        if off + HEADER > n:
            if not self.final:
                return None
            return self._skip(off, n, "truncated record")
        length = self._header_len(off)
        if length is None:
            nxt, found = self._resync(off + 1, n)
            self.searching = not found and not self.final
            return self._skip(off, nxt, "bad length checksum")
        end = off + HEADER + length + FOOTER
        if end <= n:
            p, frontier = self._proven(off, end)
            if p is None and self._anchored(end):
                return self._skip(off, end, "bad payload checksum")
            if p is None:
                return self._skip(off, end, "bad payload checksum, and its end does not line up "
                                            "with a record")
            return self._skip(off, p, "bad payload checksum")
        if not self.final and self._anchored(end):
            self.need = end - off
            return None
        p, frontier = self._proven(off, end)
        if p is not None:
            return self._skip(off, p, "record length runs past the next record")
        if self.final:
            return self._skip(off, n, "truncated record")
        self.searching = True
        return self._skip(off, max(frontier, off + 1), "record length runs past the end of "
                                                        "what could be checked")

    # -- headers --------------------------------------------------------------------------
    def _header_len(self, off: int):
        """The length at ``off`` if its CRC is right (``off + HEADER <= n``), else None."""
        if _U32.unpack_from(self.buf, off + 8)[0] != masked_crc32c(self.mv[off:off + 8]):
            return None
        return _U64.unpack_from(self.buf, off)[0]

    def _anchored(self, end: int) -> bool:
        """Whether a correct header (or the end of the file) starts at buffer offset ``end``."""
        n = self.n
        if end + HEADER <= n:
            return self._header_len(end) is not None
        if self.final:
            return end <= n      # the file ends there, or inside the next header (cut short)
        if end > self.eof:
            return False
        if end + HEADER > self.eof:
            return True          # the file ends there, or inside the next header (cut short)
        if end >= n:
            head = self.peek(end, HEADER)
        else:
            head = bytes(self.mv[end:n]) + self.peek(n, HEADER - (n - end))
        return len(head) == HEADER and _U32.unpack_from(head, 8)[0] == masked_crc32c(head[:8])

    def _headers_ok(self, offs: np.ndarray) -> np.ndarray:
        """Vectorised: a correct length CRC at each offset (each ``+ HEADER <= n``)."""
        if not len(offs):
            return np.zeros(0, dtype=bool)
        rows = windows(self.data, HEADER)[offs]
        stored = np.ascontiguousarray(rows[:, 8:12]).view("<u4")[:, 0]
        return mask(crc32c_rows(rows[:, :8])) == stored

    def _header_hits(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Offsets in ``[lo, hi)`` (each ``+ HEADER <= n``) holding a correct header, and
        their lengths."""
        win = self.data[lo:hi + HEADER - 1]
        m = hi - lo
        zero = win == 0
        if zero.all():
            return _EMPTY, _EMPTY
        # A length a file can hold has its three top bytes zero (under 1 TiB), and a header
        # is never twelve zero bytes: together they pass over zeros and random bytes fast.
        plausible = zero[5:m + 5] & zero[6:m + 6]
        plausible &= zero[7:m + 7]
        cand = np.flatnonzero(plausible)
        if not len(cand):
            return _EMPTY, _EMPTY
        cand = cand[windows(win, HEADER)[cand].any(axis=1)]
        good = cand[self._headers_ok(cand + lo)]
        if not len(good):
            return _EMPTY, _EMPTY
        rows = windows(win, 8)[good]
        lens = np.ascontiguousarray(rows).view("<u8")[:, 0].astype(np.int64)
        return good + lo, lens

    # -- searching ------------------------------------------------------------------------
    def _resync(self, lo: int, hi: int) -> tuple[int, bool]:
        """``(p, True)`` for the first anchor ``p`` in ``[lo, hi)``; else ``(q, False)`` with
        ``q`` where the search ended (``hi``, or where this block's bytes ran out)."""
        n = self.n
        limit = n - HEADER - FOOTER + 1 if self.final else n - HEADER + 1
        top = min(hi, limit)
        pos = lo
        chunk = 256                          # damage is usually short: look near first, then wider
        while pos < top:
            stop = min(top, pos + chunk)
            chunk = min(chunk * 4, _RESYNC_CHUNK)
            offs, lens = self._header_hits(pos, stop)
            if len(offs):
                p, found = self._first_anchor(offs, lens)
                if p is not None:
                    return p, found
            pos = stop
        return (hi if self.final else max(lo, top)), False

    def _first_anchor(self, offs: np.ndarray, lens: np.ndarray):
        n = self.n
        ends = offs + HEADER + lens + FOOTER
        anchored = np.zeros(len(offs), dtype=bool)
        inside = ends + HEADER <= n
        anchored[inside] = self._headers_ok(ends[inside])
        if self.final:
            anchored[~inside] = ends[~inside] <= n
        else:
            for i in np.flatnonzero(~inside).tolist():
                anchored[i] = self._anchored(int(ends[i]))
        first = int(np.argmax(anchored)) if anchored.any() else len(offs)
        blocked = len(offs)
        if not self.final:
            # Past the owned bytes, a candidate that runs beyond the lookahead cannot be
            # judged here: the next block starts at it.
            late = np.flatnonzero((ends[:first] > n) & (offs[:first] >= self.own))
            if len(late):
                blocked = first = int(late[0])
        # Before the first anchor, a candidate still counts if it is a valid record
        # followed by damage: check those payloads, in bulk.
        early = np.flatnonzero(ends[:first] <= n)
        if len(early):
            valid = self._payloads_ok(offs[early] + HEADER, lens[early])
            if valid.any():
                return int(offs[early[int(np.argmax(valid))]]), True
        if first == blocked < len(offs):
            return int(offs[blocked]), False
        return (int(offs[first]), True) if first < len(offs) else (None, False)

    def _payloads_ok(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        raw = np.empty(len(starts), dtype=np.uint32)
        short = lengths <= _DIRECT_CRC
        if short.any():
            raw[short] = _payload_crcs(self.mv, self.data, starts[short], lengths[short])
        if not short.all():
            if self._prefix is None:
                self._prefix = crcmath.Prefix(self.buf)
            raw[~short] = self._prefix.crcs(starts[~short], lengths[~short])
        stored = np.ascontiguousarray(
            windows(self.data, FOOTER)[starts + lengths]).view("<u4")[:, 0]
        return mask(raw) == stored

    def _proven(self, off: int, end: int):
        """The start of a proven chain inside the suspect record ``[off, end)``, or None;
        and where the search ended."""
        hi = min(end, self.n)
        lo = off + 1
        while lo < hi:
            p, found = self._resync(lo, hi)
            if not found:
                return None, p
            stop, clean = self._follow(p, end)
            if stop >= end or clean:
                return p, p
            lo = max(stop, p + 1)
        return None, hi

    def _follow(self, pos: int, end: int) -> tuple[int, bool]:
        """Follow valid records (and damaged ones whose end lines up) from ``pos`` until they
        stop or pass ``end``; returns where they stopped, and whether that was cleanly at the
        end of the file (or, for a block, at the end of its bytes)."""
        buf, data, mv, n = self.buf, self.data, self.mv, self.n
        batch = _FIRST_BATCH
        while pos <= end:
            starts, lengths = record_chain.walk(buf, pos, batch)
            ok = _valid_prefix(data, mv, starts, lengths)
            if ok:
                pos = int(starts[ok - 1] + lengths[ok - 1]) + FOOTER
            if ok == len(starts) == batch:
                batch = min(batch * 4, _MAX_BATCH)
                continue
            if pos > end:
                break
            if pos >= n:
                return pos, True
            if pos + HEADER > n:
                # A few bytes before the end: the tail of the claimed record itself, or of
                # a block (judged again with the bytes after it).
                return pos, pos + HEADER <= self.eof
            length = self._header_len(pos)
            if length is None:
                return pos, False
            nxt = pos + HEADER + length + FOOTER
            if nxt > n:
                # a last record cut short, or (in a block) one that goes on after it
                return pos, nxt > self.eof or self._anchored(nxt)
            if not self._anchored(nxt):
                return pos, False
            pos = nxt
            batch = _FIRST_BATCH
        return pos, False


def _payload_crcs(buf, data, starts, lengths) -> np.ndarray:
    """Raw CRC of every payload: in bulk for common lengths, one C call for the rest."""
    raw = np.empty(len(starts), dtype=np.uint32)
    uniq, inverse, counts = np.unique(lengths, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    single = np.zeros(len(starts), dtype=bool)
    # column-wise numpy wins only on short records; past ~100 bytes one C call each is faster
    for gi in np.flatnonzero((counts >= BULK_CRC_MIN_ROWS) & (uniq <= BULK_CRC_MAX_LENGTH)).tolist():
        members = np.flatnonzero(inverse == gi)
        length = int(uniq[gi])
        if length == 0:
            raw[members] = 0
            continue
        raw[members] = crc32c_rows(windows(data, length)[starts[members]])
        single[members] = True
    rest = np.flatnonzero(~single)
    mv = memoryview(buf) if not isinstance(buf, memoryview) else buf
    raw[rest] = np.fromiter((crc32c(mv[s:s + k]) for s, k in
                             zip(starts[rest].tolist(), lengths[rest].tolist(), strict=True)),
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


# Four bytes after a message, where its CRC goes, take the CRC register wherever they say
# (they fill it exactly). Written there as ``~crc ^ _RESET``, they take it back to its
# starting value (0xFFFFFFFF) when ``crc`` is the message's CRC, and elsewhere otherwise.
_RESET = 0x641F6454
# A whole span is checked in one go up to this size. Two damaged records cancel each other
# out in that check only if their errors are multiples of a factor of the polynomial, or
# 2^31 - 1 bits (256 MiB) apart.
_SPAN_MAX = 16 << 20


def _valid_prefix(data: np.ndarray, mv: memoryview, starts: np.ndarray, lengths: np.ndarray) -> int:
    """How many leading records have both CRCs right (``starts`` are consecutive records)."""
    n = len(starts)
    ends = starts + lengths + FOOTER
    i = 0
    while i < n:
        j = int(np.searchsorted(ends, starts[i] - HEADER + _SPAN_MAX, "right"))
        if j <= i + 1:
            # one record (maybe a large graph): checked in place, never copied
            j = i + 1
            if not _checked_prefix(data, mv, starts[i:j], lengths[i:j]):
                return i
        elif not _span_ok(data, starts[i:j], lengths[i:j]):
            return i + _checked_prefix(data, mv, starts[i:j], lengths[i:j])
        i = j
    return n


def _span_ok(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether every one of these consecutive records has both CRCs right, with one C call
    over their bytes: each stored CRC is replaced (in a copy) by what brings the CRC
    register back to its start after a right one, so the whole span's CRC is 0 exactly
    when every record is right, bar errors that cancel (see :data:`_SPAN_MAX`)."""
    first = int(starts[0]) - HEADER
    span = _scratch_copy(data[first:int(starts[-1] + lengths[-1]) + FOOTER])
    covered = np.zeros(len(starts), dtype=bool)
    for a, p, rows in _periodic_stretches(lengths):
        # Lengths that repeat (the tags of a training loop): a matrix of one period per
        # row, whose CRC slots are columns, read and written without indexing.
        width = int(lengths[a:a + p].sum()) + p * (HEADER + FOOTER)
        top = int(starts[a]) - HEADER - first
        matrix = span[top:top + rows * width].reshape(rows, width)
        # every CRC slot of a period at once: the bytes of its 2p slots, 4 each, per row
        k = lengths[a:a + p].astype(np.int64)
        heads = np.concatenate(([0], np.cumsum(k + HEADER + FOOTER)[:-1]))
        slots = (np.stack((heads + HEADER - FOOTER, heads + HEADER + k), axis=1).reshape(-1, 1)
                 + np.arange(4)).reshape(-1)
        matrix[:, slots] = _reset(matrix[:, slots].reshape(-1, 4)).reshape(rows, -1)
        covered[a:a + rows * p] = True
    rest = np.flatnonzero(~covered)
    if len(rest):
        s, k = starts[rest] - first, lengths[rest]
        slots = np.concatenate((s - FOOTER, s + k))
        words = windows(span, 4, writeable=True)
        words[slots] = _reset(words[slots])
    return crc32c(span) == 0


def _scratch_copy(span: np.ndarray) -> np.ndarray:
    """A copy of ``span`` in this thread's scratch buffer, which is kept: a fresh copy of
    every block (4 MiB) was most of the check's time, its pages new each time."""
    scratch = getattr(_SCRATCH, "buffer", None)
    if scratch is None or len(scratch) < len(span):
        if len(span) > _SCRATCH_MAX:
            return span.copy()
        scratch = _SCRATCH.buffer = np.empty(max(len(span), _SCRATCH_MIN), np.uint8)
    out = scratch[:len(span)]
    np.copyto(out, span)
    return out


_SCRATCH = threading.local()
_SCRATCH_MIN = 1 << 20


def _reset(slots: np.ndarray) -> np.ndarray:
    """The ``(n, 4)`` bytes of stored (masked) CRCs, as :data:`_RESET` values."""
    masked = np.ascontiguousarray(slots).view("<u4")[:, 0] - np.uint32(_MASK_DELTA)
    raw = (masked << np.uint32(15)) | (masked >> np.uint32(17))
    return (~raw ^ np.uint32(_RESET)).astype("<u4").view(np.uint8).reshape(-1, 4)


# A stretch of repeating lengths is worth a matrix from this many periods on.
_MIN_PERIODS = 64


def _periodic_stretches(lengths: np.ndarray, longest: int = 16) -> list[tuple[int, int, int]]:
    """Stretches of records whose lengths repeat with the shortest period (up to
    ``longest``) that gives any: ``(first record, period, periods)`` each, apart."""
    n = len(lengths)
    middle = lengths[max(0, n // 2 - longest):n // 2 + longest].tolist()
    for p in range(1, min(longest, n // _MIN_PERIODS) + 1):
        if middle[-p:] != middle[-2 * p:-p]:
            continue
        # runs of i with lengths[i + p] == lengths[i]: records [i0, i1 + p) repeat
        same = np.concatenate(([False], lengths[p:] == lengths[:-p], [False]))
        edges = np.flatnonzero(same[1:] != same[:-1])
        out, end = [], 0
        for i0, i1 in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            a = max(i0, end)
            rows = (i1 + p - a) // p
            if rows >= _MIN_PERIODS:
                out.append((a, p, rows))
                end = a + rows * p
        if out:
            return out
    return []


def _checked_prefix(data: np.ndarray, mv: memoryview, starts: np.ndarray,
                    lengths: np.ndarray) -> int:
    """:func:`_valid_prefix` record by record: which one is wrong."""
    good = _length_crcs_ok(data, starts, lengths)
    if not good:
        return 0
    s, k = starts[:good], lengths[:good]
    raw = _payload_crcs(mv, data, s, k)
    stored = np.ascontiguousarray(windows(data, 4)[s + k]).view("<u4")[:, 0]
    wrong = np.flatnonzero(mask(raw) != stored)
    return int(wrong[0]) if len(wrong) else good


def _length_crcs_ok(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> int:
    """How many leading records have a correct length CRC."""
    if not len(starts):
        return 0
    stored = np.ascontiguousarray(windows(data, 4)[starts - 4]).view("<u4")[:, 0]
    uniq, inverse = np.unique(lengths, return_inverse=True)
    expected = np.array([masked_crc32c(_U64.pack(int(v))) for v in uniq], dtype=np.uint32)
    wrong = np.flatnonzero(expected[inverse.reshape(-1)] != stored)
    return int(wrong[0]) if len(wrong) else len(starts)


BLOCK_SIZE = 4 << 20   # larger blocks cost memory (numpy temporaries per record) and no speed
# ... except where records are a few hundred bytes to a few KiB (histograms, images): a
# file whose first records are such takes blocks of WIDE_BLOCKS times the bytes, as many
# records as a block of scalars or fewer. Decoding costs something per tag and block, and a
# histogram per parameter logs hundreds of tags (20,000 TF2 histograms of 256 tags ->
# Parquet: 97-98 ms in blocks of 8 MiB, 104-107 ms in blocks of 4 MiB).
WIDE_BLOCKS = 2
WIDE_RECORD = (256, 64 << 10)    # the mean length of such records, framing included
_PROBE = 64 << 10                # the first bytes whose records tell
LOOKAHEAD = 1 << 20    # read past a block's own bytes (see the module's docstring)
# A span larger than a block and its lookahead (a large record's, or a wide block's) gets a
# copy of its own in _span_ok, let go of at once: kept, it would stay in memory for the rest
# of the conversion. (A kept buffer for wide blocks was no faster: 102-103 ms against 98-100
# ms for the conversion above.)
_SCRATCH_MAX = BLOCK_SIZE + LOOKAHEAD
# The largest record read: a GraphDef may legitimately take tens of MiB; protobuf
# messages stop at 2 GiB.
MAX_RECORD = 2 << 30
_STREAM = 8 << 20


@dataclass
class Block:
    """Records found in one stretch of a file.

    ``starts``/``lengths`` locate payloads inside ``buf``; ``offset`` is the file
    offset of ``buf[0]``; ``damage`` offsets are file offsets. A record never
    straddles two blocks. ``read_at(offset, size)`` reads the file's bytes again while
    the block is being read (None where there is no file to read).
    """

    buf: bytes
    offset: int
    starts: np.ndarray
    lengths: np.ndarray
    damage: list[Damage]
    read_at: Callable[[int, int], bytes] | None = None
    end: int | None = None      # the file offset where the next block starts


def scan_file(path, *, block_size: int = BLOCK_SIZE, max_record: int = MAX_RECORD,
              start: int = 0, stop: int | None = None):
    """Yield :class:`Block` objects covering the file at ``path`` in file order.

    Only regular files are read (:class:`tbconvert.sourcefiles.NotRegularFile`
    otherwise); memory stays within ``block_size`` (:data:`WIDE_BLOCKS` times it for a file of
    wide records) plus the largest valid record.
    ``start`` must be where a record begins (the end of one read before, for a file
    that grows). ``stop``: the blocks end where the records that begin before it do (a
    segment of the file, see :func:`segment_starts`; the last block's ``end`` says where:
    ``stop`` itself unless a record runs across it, or damage does).
    """
    from tbconvert import sourcefiles
    block_size = max(int(block_size), 64)
    fd = sourcefiles.open_regular(path)

    def read_at(offset: int, k: int) -> bytes:
        if fd is None:      # (kept past the end: the number may be another file's by now)
            raise OSError(errno.EBADF, "the event file was closed")
        return _pread(fd, k, offset)

    try:
        yield from _blocks(fd, os.fstat(fd).st_size, block_size, max_record, start, read_at,
                           stop)
    finally:
        opened, fd = fd, None
        os.close(opened)


def segment_starts(path, size: int, every: int) -> list[int]:
    """Where the file at ``path`` (``size`` bytes) is cut into segments of about ``every``
    bytes, for their records to be read apart (on several cores: a single large event file
    is most runs' only one): 0, then for each further multiple of ``every`` the first record
    found at or after it as a damaged stretch is searched past (a header and a payload that
    check out, and another header right after). A file under twice ``every`` is not cut.
    The cuts depend on the file's bytes alone, so that every reader, in one process or
    several, reads the same segments. A cut inside a record (event records held as data)
    is found out by the segment before it, which then reads on past it (see
    :meth:`~tbconvert.formats.tfevents.reader.TfeventsReader.read_segments`)."""
    starts = [0]
    if size < 2 * every:
        return starts
    from tbconvert import sourcefiles
    fd = sourcefiles.open_regular(path)
    try:
        for target in range(every, size - every // 2, every):
            if target <= starts[-1]:
                continue
            # Large records (a merge_all of a histogram per layer: MiBs each) are hopped
            # over from the last cut, by their headers; else the first record is searched
            # for a window at a time, up to _CUT_SEARCH bytes on (damage, or bytes that are
            # no records at all, cost the search no more than that a cut).
            hop = _hop(fd, starts[-1], target, size)
            if hop is not None:
                if hop < size:
                    starts.append(hop)
                continue
            at = target
            while at < min(target + min(every // 2, _CUT_SEARCH), size):
                buf = _pread(fd, min(_CUT_WINDOW, size - at), at)
                final = at + len(buf) >= size

                def peek(i: int, k: int, base: int = at) -> bytes:
                    return _pread(fd, k, base + i) if base + i < size else b""

                cut = _first_record(_Scanner(buf, None if final else peek, len(buf), size - at))
                if cut is not None:
                    starts.append(at + cut)
                    break
                at += len(buf) - HEADER
    finally:
        os.close(fd)
    return starts


# The bytes searched for the first record after a cut at once, and in all.
_CUT_WINDOW = 256 << 10
_CUT_SEARCH = 4 << 20
# Records hopped over by their headers before a cut is searched for instead.
_CUT_HOPS = 64


def _hop(fd: int, pos: int, target: int, size: int) -> int | None:
    """From the record at ``pos``, the start of the first record at or after ``target``,
    going from header to header (each length's checksum checked); None when that takes
    more than _CUT_HOPS records, or a header does not check out."""
    for _ in range(_CUT_HOPS):
        if pos >= target:
            return pos
        head = _pread(fd, HEADER, pos)
        if len(head) < HEADER or _U32.unpack_from(head, 8)[0] != masked_crc32c(head[:8]):
            return None
        pos += HEADER + _U64.unpack_from(head)[0] + FOOTER
    return pos if pos >= target else None


def _first_record(sc: _Scanner) -> int | None:
    """The offset of the first record in the scanner's buffer whose header and payload
    check out and which another header follows (None: none)."""
    pos = 0
    while pos < sc.n:
        p, found = sc._resync(pos, sc.n)
        if not found:
            return None
        length = sc._header_len(p)
        end = p + HEADER + length
        if end + FOOTER <= sc.n:
            payload, footer = sc.mv[p + HEADER:end], sc.buf[end:end + FOOTER]
        elif sc.peek is not None and length <= _CUT_RECORD:
            # (a record longer than what was read for the search: read it now)
            payload = sc.peek(p + HEADER, length + FOOTER)
            payload, footer = payload[:length], payload[length:]
        else:
            payload = footer = b""
        if len(footer) == FOOTER and _U32.unpack(footer)[0] == masked_crc32c(payload):
            return p
        pos = p + 1
    return None


# The largest record looked at whole after a cut (a larger one leaves the file uncut there).
_CUT_RECORD = 64 << 20


def _pread(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break                     # the file shrank while being read
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _next_data(fd: int, pos: int, size: int) -> int:
    """The next offset at or after ``pos`` that is not in a hole (``size`` if none)."""
    seek_data = getattr(os, "SEEK_DATA", None)
    if seek_data is None:
        return pos
    try:
        return min(os.lseek(fd, pos, seek_data), size)
    except OSError as exc:
        return size if exc.errno == errno.ENXIO else pos


def _size_now(fd: int) -> int | None:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return None


def _blocks(fd: int, size: int, block_size: int, max_record: int, start: int = 0,
            read_at=None, stop: int | None = None):
    if size - start > block_size and _wide_records(_pread(fd, _PROBE, start)):
        block_size *= WIDE_BLOCKS       # (a file of one block reads as one either way)
    pos = start
    want = block_size
    searching = False      # the last block stopped inside a search for an anchor
    while pos < size and (stop is None or pos < stop):
        data_at = _next_data(fd, pos, size)
        if data_at >= size and data_at - pos >= HEADER:
            now = _size_now(fd)
            if now is not None and now <= pos:
                # no data after ``pos`` because the file ends there now: it was cut short
                # while it was read (a hole would leave its size as it was)
                yield Block(b"", pos, _EMPTY, _EMPTY, [Damage(
                    pos, size - pos, f"the file was cut to {now} bytes while it was read")],
                    end=size)
                return
        if data_at - pos >= HEADER:
            # A hole reads as zeros, and no record starts at twelve zero bytes.
            skip_to = size if data_at >= size else data_at - (HEADER - 1)
            yield Block(b"", pos, _EMPTY, _EMPTY,
                        [Damage(pos, skip_to - pos, "zero bytes (a hole in a sparse file)")],
                        end=skip_to)
            pos = skip_to
            searching = False
            continue
        # ``want`` bytes are this block's own, and up to LOOKAHEAD more are read after them.
        buf = _pread(fd, min(want + min(block_size, LOOKAHEAD), size - pos), pos)
        if not buf:
            break
        final = pos + len(buf) >= size
        base = pos

        def peek(i: int, k: int, base: int = base) -> bytes:
            return _pread(fd, k, base + i) if base + i < size else b""

        sc = _Scanner(buf, None if final else peek, want, size - pos, searching,
                      None if stop is None else stop - pos)
        starts, lengths, damage, consumed = sc.run()
        if final and not sc.limited:
            consumed = len(buf)
        if consumed == 0:
            # The first record needs more than this block: verify it before holding it.
            need = max(sc.need, 2 * want)
            if sc.need:
                verdict = _verify_streaming(fd, pos, sc.need, max_record)
                if verdict is not None:
                    yield Block(b"", pos, _EMPTY, _EMPTY, [Damage(pos, sc.need, verdict)],
                                end=pos + sc.need)
                    pos += sc.need
                    want = block_size
                    continue
            want = need
            continue
        for d in damage:
            d.offset += pos
        searching = sc.searching
        block = Block(buf, pos, starts, lengths, damage, read_at, pos + consumed)
        # the block alone holds its bytes, so that a reader can let a large record's go early
        del buf, sc
        yield block
        del block
        pos += consumed
        want = block_size


def _wide_records(head: bytes) -> bool:
    """Whether the records that ``head`` (a file's first bytes from a record on) begins
    with are of :data:`WIDE_RECORD` lengths, by their length fields alone: a guess that
    sets the size of blocks, nothing else."""
    at = count = 0
    while at + HEADER <= len(head) and count < 64:
        length = _U64.unpack_from(head, at)[0]
        if length > len(head):
            break
        at += HEADER + length + FOOTER
        count += 1
    # (the file version record comes first: short whatever the records after it)
    return count >= 8 and WIDE_RECORD[0] <= at // count <= WIDE_RECORD[1]


def _verify_streaming(fd: int, off: int, need: int, max_record: int):
    """None if the record at ``off`` (``need`` bytes) is valid and may be held in memory,
    else why it is skipped."""
    length = need - HEADER - FOOTER
    crc = 0
    pos, end = off + HEADER, off + HEADER + length
    while pos < end:
        chunk = _pread(fd, min(_STREAM, end - pos), pos)
        if not chunk:
            return "truncated record"
        crc = crc32c(chunk, crc)
        pos += len(chunk)
    footer = _pread(fd, FOOTER, end)
    if len(footer) < FOOTER:
        return "truncated record"
    if _U32.unpack(footer)[0] != masked_crc32c_from_raw(crc):
        return "bad payload checksum"
    if need > max_record:
        return f"a valid record of {length} bytes is larger than the {max_record} that are read"
    return None


def masked_crc32c_from_raw(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
