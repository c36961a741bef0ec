"""Where two series differ, in constant memory: sums of per-point hashes in buckets of steps.

A :class:`Sketch` per series sits beside its digests (:mod:`tbconvert.verify.fingerprint`),
which alone decide whether two series differ; the sketches only tell where (:func:`locate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tbconvert.verify.fingerprint import Fingerprint

# Where two series differ is told by sums of per-point hashes in buckets of steps: at most
# BUCKETS of them per series, whatever its length.
BUCKETS = 64
SLICE = 1 << 16            # points hashed at a time: bounds the temporary arrays
MASK = (1 << 64) - 1
K_STEP, K_VALUE, K_WALL, K_LANE, K_WIDTH, K_NAN, K_BIG = (np.uint64(k) for k in (
    0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5,
    0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB))


def mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, in place on uint64s. It is a bijection, so that two points of
    one step with other values never share a hash."""
    t = np.empty_like(z)
    for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        np.right_shift(z, np.uint64(shift), out=t)
        z ^= t
        if factor:
            z *= np.uint64(factor)
    return z


def step_hashes(steps: np.ndarray) -> np.ndarray:
    return mix(np.ascontiguousarray(steps, np.int64).view(np.uint64) ^ K_STEP)


class Sketch:
    """Sums of per-point hashes by buckets of steps, telling where two series differ.

    Bucket ``b`` holds the points whose step ``s`` has ``s >> shift == b``: buckets are aligned
    the same way in any source, and ``shift`` is the least that keeps the series' steps in
    :data:`BUCKETS` buckets, so two series of the same step range end with the same buckets,
    and a finer side is merged into a coarser one exactly. Each located quantity (``steps``,
    ``values``, ``walls``) has a column: the sum, mod 2**64, of its per-point hashes, which
    finds the first bucket where it differs. Two more columns (``at``) sum c * step and
    c * m(step), c being the sum of a point's hashes and m the step's own hash. Sums depend
    neither on the order nor on the chunking of the points. Where a bucket's points differ at
    one step s only, the differences of its sums of c, c * step and c * m(step) are d, s * d
    and m(s) * d: s is solved for, and m(s) checks it.
    """

    __slots__ = ("columns", "shift", "base", "rows", "lo", "hi")

    def __init__(self, columns: dict[str, int]):
        self.columns = columns
        self.shift = 0
        self.base = 0
        self.rows: np.ndarray | None = None     # bucket base + i in row i
        self.lo = self.hi = None                # the steps the buckets are for

    def fit(self, lo: int, hi: int, rows: bool = True) -> None:
        """Buckets for the steps ``lo``..``hi`` (the series' so far, or fewer: a batched chunk
        may be placed after a later one); without ``rows``, the rows of a new sketch are left
        to the caller."""
        if self.lo is not None:
            if self.lo <= lo and hi <= self.hi:
                return
            lo, hi = min(lo, self.lo), max(hi, self.hi)
        self.lo, self.hi = lo, hi
        k = self.shift
        while (hi >> k) - (lo >> k) >= BUCKETS:
            k += 1
        base, size = lo >> k, (hi >> k) - (lo >> k) + 1
        if self.rows is None:
            if rows:
                self.rows = np.zeros((size, len(self.columns) + 1), np.uint64)
        elif (k, base, size) != (self.shift, self.base, len(self.rows)):
            self.rows = _regrouped(self.rows, self.base, k - self.shift, base, size)
        self.shift, self.base = k, base

    def size(self) -> int:
        return (self.hi >> self.shift) - self.base + 1

    def add(self, steps: np.ndarray, lo: int, hi: int, hashes: np.ndarray, m: np.ndarray,
            extras: np.ndarray | None = None) -> None:
        """Add points at ``steps`` (all within ``lo``..``hi``, the steps so far): ``hashes``
        holds a row of per-point hashes for each located quantity, ``m`` the steps' hashes,
        ``extras`` rows summed as they are (all uint64)."""
        self.fit(lo, hi)
        k, base = self.shift, self.base
        step_u = steps.view(np.uint64)
        c = hashes.sum(axis=0, dtype=np.uint64)
        n = len(hashes)
        if int(steps.min()) >> k == int(steps.max()) >> k:     # one bucket: no grouping
            row = self.rows[(int(steps[0]) >> k) - base]
            row[:n] += hashes.sum(axis=1)
            row[n:n + 2] += (c @ step_u, c @ m)
            if extras is not None:
                row[n + 2:] += extras.sum(axis=1)
            return
        rel = (steps >> k) - base
        if (rel[1:] < rel[:-1]).any():
            order = np.argsort(rel.astype(np.uint8), kind="stable")    # (a radix sort)
            rel, hashes, c, step_u, m = rel[order], hashes[:, order], c[order], \
                step_u[order], m[order]
            extras = None if extras is None else extras[:, order]
        starts = np.concatenate(([0], np.flatnonzero(rel[1:] != rel[:-1]) + 1))
        _add_sums(self.rows, rel[starts], starts, hashes, c, step_u, m, extras)

    def at_shift(self, shift: int) -> tuple[int, np.ndarray]:
        """The first bucket and the rows with buckets of ``shift`` (not finer than this one's)."""
        if shift == self.shift:
            return self.base, self.rows
        up = shift - self.shift
        lo, hi = self.base >> up, (self.base + len(self.rows) - 1) >> up
        return lo, _regrouped(self.rows, self.base, up, lo, hi - lo + 1)


def _add_sums(rows, at, starts, hashes, c, step_u, m, extras=None) -> None:
    """Add to ``rows[at]`` the sums of the points from each of ``starts`` to the next."""
    n = len(hashes)
    rows[at, :n] += np.add.reduceat(hashes, starts, axis=1).T
    rows[at, n] += np.add.reduceat(c * step_u, starts)
    rows[at, n + 1] += np.add.reduceat(c * m, starts)
    if extras is not None:
        rows[at, n + 2:] += np.add.reduceat(extras, starts, axis=1).T


def _regrouped(rows: np.ndarray, base: int, up: int, new_base: int, size: int) -> np.ndarray:
    """``rows`` of buckets from ``base`` in buckets ``2**up`` times as wide, from ``new_base``."""
    at = ((base + np.arange(len(rows), dtype=np.int64)) >> up) - new_base
    out = np.zeros((size, rows.shape[1]), np.uint64)
    np.add.at(out, at, rows)
    return out


SMALL = 4096              # fewer points than this: the chunk is hashed in a Batch
_KEYS = np.array([[K_VALUE], [K_WALL]], np.uint64)


def _layout(walls: bool, blobs: bool) -> dict[str, int]:
    """A sketch's columns: a column per located quantity, then ``at`` (two columns), then for
    blobs what the values' column would be if missing blobs were empty ones (less that
    column), and how many blobs are missing."""
    names = ["steps", "values"] + (["walls"] if walls else []) + ["at", "", "as_empty", "missing"]
    return {name: i for i, name in enumerate(names[:len(names) - 2 * (not blobs)]) if name}


# by (keep_walls, blob series): wall times kept whole are compared without a sketch
LAYOUTS = {(keep, blobs): _layout(not keep, blobs) for keep in (False, True)
            for blobs in (False, True)}


def hashes(steps: np.ndarray, words: np.ndarray, walls: np.ndarray | None):
    """The steps' hashes m, and per point the hashes of its step (m itself), of (step, value
    word) and, unless ``walls`` is None, of (step, wall time bits)."""
    m = step_hashes(steps)
    h = np.empty((2 if walls is None else 3, len(m)), np.uint64)
    h[0] = m
    np.multiply(m, _KEYS[:len(h) - 1], out=h[1:])
    h[1] += words
    if walls is not None:
        h[2] += walls
    mix(h[1:])
    return m, h


class Batch:
    """Small chunks of a source's series, hashed together: a chunk of a few points costs its
    numpy calls more than its points, and a source may hold many thousands of small series."""

    CHUNKS = 1024           # chunks at most: their buckets (64 each at most) in one array

    def __init__(self):
        self.sketches: list[tuple[Sketch, int, int]] = []    # with the series' steps so far
        self.steps: list[np.ndarray] = []
        self.words: list[np.ndarray] = []
        self.walls: list[np.ndarray] = []
        self.points = 0

    def add(self, fp: Fingerprint, steps: np.ndarray, words: np.ndarray,
            walls: np.ndarray | None) -> None:
        # (copies: a reader may reuse the arrays of a chunk for the next)
        self.sketches.append((fp.sketch, fp.step_min, fp.step_max))
        self.steps.append(np.array(steps, np.int64))
        self.words.append(words)
        if walls is not None:
            self.walls.append(np.array(walls, np.float64).view(np.uint64))
        self.points += len(steps)
        if self.points >= SLICE or len(self.steps) >= self.CHUNKS:
            self.flush()

    def flush(self) -> None:
        if not self.steps:
            return
        sketches, lengths = self.sketches, [len(s) for s in self.steps]
        steps = np.concatenate(self.steps)
        m, h = hashes(steps, np.concatenate(self.words),
                       np.concatenate(self.walls) if self.walls else None)
        self.__init__()
        for sk, lo, hi in sketches:
            sk.fit(lo, hi, rows=False)
        sketches = [sk for sk, _, _ in sketches]
        # each chunk's buckets are rows of their own in one array, after the previous chunk's
        blocks = np.cumsum([0] + [sk.size() for sk in sketches])
        at = (steps >> np.repeat(np.array([sk.shift for sk in sketches], np.int64), lengths)) \
            - np.repeat(np.array([sk.base for sk in sketches], np.int64), lengths) \
            + np.repeat(blocks[:-1], lengths)
        c = h.sum(axis=0, dtype=np.uint64)
        if (at[1:] < at[:-1]).any():
            order = np.argsort(at, kind="stable")
            at, h, c, m, steps = at[order], h[:, order], c[order], m[order], steps[order]
        starts = np.concatenate(([0], np.flatnonzero(at[1:] != at[:-1]) + 1))
        rows = np.zeros((blocks[-1], len(h) + 2), np.uint64)
        _add_sums(rows, at[starts], starts, h, c, steps.view(np.uint64), m)
        blocks = blocks.tolist()
        for i, sk in enumerate(sketches):
            if sk.rows is None:
                # (a new series': its rows alone, copied: a view would keep the whole array)
                sk.rows = rows[blocks[i]:blocks[i + 1]].copy()
            else:
                sk.rows += rows[blocks[i]:blocks[i + 1]]


@dataclass
class Place:
    """Where two series first differ in one quantity: the steps ``low``..``high`` (one step
    when equal), and the rows of that bucket in A and B. ``low`` None: every bucket is the
    same, so the same points are there in another order."""

    low: int | None = None
    high: int | None = None
    row_a: np.ndarray | None = None
    row_b: np.ndarray | None = None

    def at(self) -> str:
        if self.low == self.high:
            return f"at step {self.low}"
        return f"at steps {self.low} to {self.high} (first differing range)"

    def first(self) -> str:
        """As the end of a message that says what differs."""
        if self.low == self.high:
            return f", first at step {self.low}"
        return f", first within steps {self.low} to {self.high}"


def locate(x: Fingerprint, y: Fingerprint, kind: str, hidden: bool = False) -> Place | None:
    """Where ``kind`` (``steps``, ``values``, ``walls``) first differs between ``x`` and ``y``,
    by their sketches; None where they cannot tell (their sketches are not alike)."""
    sketches = [f.hidden_sketch if hidden else f.sketch for f in (x, y)]
    present = [s for s in sketches if s is not None]
    if not present or kind not in present[0].columns or \
            any(s.columns != present[0].columns for s in present):
        return None
    columns = present[0].columns
    shift = max(s.shift for s in present)
    spans = [s.at_shift(shift) if s is not None else None for s in sketches]
    # the buckets of both (the steps of A and B need not overlap)
    buckets = np.unique(np.concatenate([base + np.arange(len(rows), dtype=np.int64)
                                        for base, rows in filter(None, spans)]))
    dense = []
    for span in spans:
        rows = np.zeros((len(buckets), len(columns) + 1), np.uint64)
        if span is not None:
            base, part = span
            rows[np.searchsorted(buckets, base)[()] + np.arange(len(part))] = part
        dense.append(rows)
    a, b = dense
    differ = np.flatnonzero(a[:, columns[kind]] != b[:, columns[kind]])
    if not len(differ):
        return Place()
    i = int(differ[0])
    bucket = int(buckets[i])
    low = max(bucket << shift, min(x.step_min, y.step_min))
    high = min(((bucket + 1) << shift) - 1, max(x.step_max, y.step_max))
    at = columns["at"]
    sums = [(int(u[:at].sum(dtype=np.uint64)), int(u[at]), int(u[at + 1])) for u in (a[i], b[i])]
    step = _one_step(*sums, low, high)
    if step is not None:
        low = high = step
    return Place(low, high, a[i], b[i])


def _one_step(sums_a: tuple, sums_b: tuple, low: int, high: int) -> int | None:
    """The one step in ``low``..``high`` where a bucket's points differ, from its sums of c,
    c * step and c * m(step) in A and B; None if they differ at more than one step (then the
    solved step fails the check with m, but by a chance of about 2**-64)."""
    d, ds, dm = ((u - v) & MASK for u, v in zip(sums_a, sums_b, strict=True))
    if not d:
        return None
    zeros = (d & -d).bit_length() - 1       # d * s = ds mod 2**64 fixes s mod 2**(64 - zeros)
    if ds & ((1 << zeros) - 1):
        return None
    modulus = 1 << (64 - zeros)
    s = ((ds >> zeros) * pow(d >> zeros, -1, modulus)) % modulus
    candidates = range(low + (s - low) % modulus, high + 1, modulus)
    if len(candidates) > BUCKETS:
        return None             # too many to tell
    found = [s for s in candidates
             if (int(step_hashes(np.array([s], np.int64))[0]) * d - dm) & MASK == 0]
    return found[0] if len(found) == 1 else None
