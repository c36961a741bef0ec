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
again. A step of many tags (a metric or a histogram per layer: hundreds of records a
cycle) is found in the lengths walked and predicted so far, looked for at doubling counts
so that records without a period cost little. Nothing is checked here; the caller checks
CRCs in bulk afterwards.
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
LONG_PERIOD = 4096     # the longest cycle looked for in the records seen (tags per step)
FIRST_PROBE = 64       # records seen before the first look for a long cycle

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
    seen: list[int] = []    # the last lengths found (two to four long cycles), in order
    since, gap = 0, FIRST_PROBE     # lengths found since the last look for a long cycle
    count = 0
    while count < limit:
        if len(seen) > 4 * LONG_PERIOD:
            del seen[:-2 * LONG_PERIOD]     # (what a look reads, and a bound on memory)
        want = min(SAMPLE, limit - count)
        done = len(lengths)
        taken = _walk_one_by_one(buf, off, want, starts, lengths)
        seen.extend(lengths[done:])
        since += taken
        count += taken
        if taken < want or count >= limit:
            break       # the end of the buffer (or of what was asked for)
        off = starts[-1] + lengths[-1] + FOOTER
        p = _period(lengths)
        pattern = np.array(lengths[-p:], dtype=np.int64) if p else None
        long = False
        if since >= gap:
            # A short period is often part of a longer one (one layer's names in a step of
            # many tags): the lengths seen tell which has held the longest.
            since, gap = 0, 2 * gap     # (looks that find nothing grow rarer)
            q = _long_period(seen)
            if q > p:
                p, pattern, long = q, np.array(seen[-q:], dtype=np.int64), True
        if not p:
            continue
        # Predict a few cycles first, then four times more each time all of them held: a
        # period found in a short sample can be part of a longer one (a metric per layer
        # repeats the lengths of one layer's names), which holds for a few records only, and
        # predicting far past them cost as much as the records that were right.
        ask = max(FIRST_PREDICT, 4 * p)
        got = 0
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
            seen.extend(got_l[-2 * LONG_PERIOD:].tolist())
            got += len(got_s)
            count += len(got_s)
            off = int(got_s[-1] + got_l[-1]) + FOOTER
            if len(got_s) < want:
                break       # the pattern broke here (or the buffer ends)
            pattern = np.roll(pattern, -(len(got_s) % p))
            ask = min(4 * ask, MAX_PREDICT)
        if long and got >= 2 * p:
            since, gap = 0, FIRST_PROBE     # a long cycle that held broke: look again soon
    parts_s.append(np.array(starts, dtype=np.int64))
    parts_l.append(np.array(lengths, dtype=np.int64))
    return np.concatenate(parts_s), np.concatenate(parts_l)


def _long_period(seen: list) -> int:
    """The period (at most LONG_PERIOD) with which the most of ``seen``'s last lengths
    repeat, once over at least: the guess for the records that follow (0: none)."""
    a = np.array(seen[-2 * LONG_PERIOD:], dtype=np.int64)
    n = len(a)
    # the periods p whose length p records back equals the last one, shortest first
    candidates = (n - 1) - np.flatnonzero(a[:n - 1] == a[-1])[::-1]
    best, held = 0, 0
    for p in candidates[candidates <= n // 2][:_CANDIDATES].tolist():
        if not np.array_equal(a[n - p:], a[n - 2 * p:n - p]):
            continue        # the last cycle is not the one before it (cheap to tell)
        wrong = np.flatnonzero(a[p:] != a[:-p])
        run = n - p - (int(wrong[-1]) + 1 if len(wrong) else 0)   # how long it has held
        if run > held:      # (at least p: the last cycle repeats the one before)
            best, held = p, run
    return best


# Periods tried per look: lengths that are nearly all equal offer many, and a look that
# finds none must stay cheap.
_CANDIDATES = 256


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
