"""Following the chain of record lengths through an event file, in bulk where it repeats.

Each record's length says where the next one starts, so the chain is
sequential by nature, and a Python step per record costs more than decoding
the record. But training loops log the same tags in the same order every
step, so record lengths repeat with a short period (one record per tag).
We walk a few records one by one, find the period, predict the positions of
the next many records from it, and read every predicted length field at
once: the prefix where each field holds exactly the predicted length is
precisely what the one-by-one walk would have found. Where the pattern
breaks (a new step-varint width, a histogram, an image), we walk one by one
again. Nothing is checked here; the caller checks CRCs in bulk afterwards.
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert.formats.tfevents.windows import windows

HEADER = 12
FOOTER = 4
SAMPLE = 48          # records walked one by one before looking for a period
MAX_PERIOD = 16      # tags logged per step that we recognise as a cycle
MAX_PREDICT = 1 << 18  # records predicted per round (bounds the temporary arrays)
FIRST_PREDICT = 256    # records predicted in a period's first round

_U64 = struct.Struct("<Q")


def _walk_one_by_one(buf, off: int, limit: int, starts: list, lengths: list) -> int:
    unpack = _U64.unpack_from
    n = len(buf)
    taken = 0
    while off + HEADER <= n and taken < limit:
        (length,) = unpack(buf, off)
        end = off + HEADER + length + FOOTER
        if end > n:
            break
        starts.append(off + HEADER)
        lengths.append(length)
        off = end
        taken += 1
    return taken


def _period(lengths: list) -> int:
    """The shortest period of the tail of ``lengths``, or 0 if it has none."""
    tail = lengths[-SAMPLE:]
    for p in range(1, min(MAX_PERIOD, len(tail) // 2) + 1):
        if tail[p:] == tail[:-p]:
            return p
    return 0


def walk(buf, off: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Follow up to ``limit`` length fields from ``off``; stop before a record past the end.

    Returns payload starts and lengths (int64), exactly as a record-by-record walk would.
    """
    n = len(buf)
    data = np.frombuffer(buf, dtype=np.uint8)
    parts_s: list[np.ndarray] = []
    parts_l: list[np.ndarray] = []
    starts: list[int] = []
    lengths: list[int] = []
    count = 0
    while count < limit:
        want = min(SAMPLE, limit - count)
        taken = _walk_one_by_one(buf, off, want, starts, lengths)
        count += taken
        if taken < want or count >= limit:
            break       # the end of the buffer (or of what was asked for)
        off = starts[-1] + lengths[-1] + FOOTER
        p = _period(lengths)
        if not p:
            continue
        pattern = np.array(lengths[-p:], dtype=np.int64)
        # Predict a few cycles first, then four times more each time all of them held: a
        # period found in a short sample can be part of a longer one (a metric per layer
        # repeats the lengths of one layer's names), which holds for a few records only, and
        # predicting far past them cost as much as the records that were right.
        ask = max(FIRST_PREDICT, 4 * p)
        while count < limit:
            want = min(limit - count, ask)
            got_s, got_l = _predicted(data, n, off, pattern, want)
            if not len(got_s):
                break
            if starts:
                parts_s.append(np.array(starts, dtype=np.int64))
                parts_l.append(np.array(lengths, dtype=np.int64))
                starts, lengths = [], []
            parts_s.append(got_s)
            parts_l.append(got_l)
            count += len(got_s)
            off = int(got_s[-1] + got_l[-1]) + FOOTER
            if len(got_s) < want:
                break       # the pattern broke here (or the buffer ends)
            pattern = np.roll(pattern, -(len(got_s) % p))
            ask = min(4 * ask, MAX_PREDICT)
    parts_s.append(np.array(starts, dtype=np.int64))
    parts_l.append(np.array(lengths, dtype=np.int64))
    return np.concatenate(parts_s), np.concatenate(parts_l)


def _predicted(data: np.ndarray, n: int, off: int, pattern: np.ndarray, most: int):
    """The longest run of records from ``off`` whose lengths follow ``pattern`` cyclically."""
    cycle = int((pattern + HEADER + FOOTER).sum())
    p = len(pattern)
    m = min(most, ((n - off) // cycle + 1) * p)
    if m <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lens = np.resize(pattern, m)
    sizes = lens + HEADER + FOOTER
    heads = off + np.concatenate(([0], np.cumsum(sizes[:-1])))
    fits = heads + sizes <= n
    k = int(np.argmin(fits)) if not fits.all() else m
    heads, lens = heads[:k], lens[:k]
    if not k:
        return heads, lens
    found = np.ascontiguousarray(windows(data, 8)[heads]).view("<u8")[:, 0]
    wrong = np.flatnonzero(found != lens.astype(np.uint64))
    k = int(wrong[0]) if len(wrong) else k
    return heads[:k] + HEADER, lens[:k]
