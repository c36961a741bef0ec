"""Compare two sources (any formats) through the model, series by series.

Each series is reduced to a fingerprint as it streams past (point count,
metadata, and SHA-256 digests of steps, wall times and values, independent of
how the points were chunked), so two sources of any size compare with memory
bounded by one run; beside the digests, a sketch of at most 64 buckets of steps
per series tells where a difference is (see :class:`_Sketch`). Each run's
run-level events (meta graphs, session logs, log messages) are compared as well,
and so are runs without series wherever both formats can hold them. Users run
this after archiving and before deleting the originals.
"""

from __future__ import annotations

import collections
import hashlib
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from tbconvert import api, names
from tbconvert.columns import rounded_in_float64
from tbconvert.describe import SeriesStats, scan
from tbconvert.formats.base import Options
from tbconvert.model import (
    BlobSequenceSeries,
    Experiment,
    RunRecord,
    ScalarSeries,
    Series,
    TensorSeries,
    as_scalar_series,
)
from tbconvert.report import Report, given, plural

# One integer that float64 cannot hold: its position in the series, then its value as a
# 128-bit two's complement number, so that an int64 and a uint64 of one value are equal.
_BIG_INT = np.dtype([("at", "<i8"), ("high", "<i8"), ("low", "<u8")])

# Where two series differ is told by sums of per-point hashes in buckets of steps: at most
# _BUCKETS of them per series, whatever its length.
_BUCKETS = 64
_SLICE = 1 << 16            # points hashed at a time: bounds the temporary arrays
_MASK = (1 << 64) - 1
_K_STEP, _K_VALUE, _K_WALL, _K_LANE, _K_WIDTH, _K_NAN, _K_BIG = (np.uint64(k) for k in (
    0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5,
    0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, in place on uint64s. It is a bijection, so that two points of
    one step with other values never share a hash."""
    t = np.empty_like(z)
    for shift, factor in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
        np.right_shift(z, np.uint64(shift), out=t)
        z ^= t
        if factor:
            z *= np.uint64(factor)
    return z


def _step_hashes(steps: np.ndarray) -> np.ndarray:
    return _mix(np.ascontiguousarray(steps, np.int64).view(np.uint64) ^ _K_STEP)


class _Sketch:
    """Sums of per-point hashes by buckets of steps, telling where two series differ.

    Bucket ``b`` holds the points whose step ``s`` has ``s >> shift == b``: buckets are aligned
    the same way in any source, and ``shift`` is the least that keeps the series' steps in
    :data:`_BUCKETS` buckets, so two series of the same step range end with the same buckets,
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
        while (hi >> k) - (lo >> k) >= _BUCKETS:
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


_SMALL = 4096              # fewer points than this: the chunk is hashed in a _Batch
_KEYS = np.array([[_K_VALUE], [_K_WALL]], np.uint64)


def _layout(walls: bool, blobs: bool) -> dict[str, int]:
    """A sketch's columns: a column per located quantity, then ``at`` (two columns), then for
    blobs what the values' column would be if missing blobs were empty ones (less that
    column), and how many blobs are missing."""
    names = ["steps", "values"] + (["walls"] if walls else []) + ["at", "", "as_empty", "missing"]
    return {name: i for i, name in enumerate(names[:len(names) - 2 * (not blobs)]) if name}


# by (keep_walls, blob series): wall times kept whole are compared without a sketch
_LAYOUTS = {(keep, blobs): _layout(not keep, blobs) for keep in (False, True)
            for blobs in (False, True)}


def _hashes(steps: np.ndarray, words: np.ndarray, walls: np.ndarray | None):
    """The steps' hashes m, and per point the hashes of its step (m itself), of (step, value
    word) and, unless ``walls`` is None, of (step, wall time bits)."""
    m = _step_hashes(steps)
    h = np.empty((2 if walls is None else 3, len(m)), np.uint64)
    h[0] = m
    np.multiply(m, _KEYS[:len(h) - 1], out=h[1:])
    h[1] += words
    if walls is not None:
        h[2] += walls
    _mix(h[1:])
    return m, h


class _Batch:
    """Small chunks of a source's series, hashed together: a chunk of a few points costs its
    numpy calls more than its points, and a source may hold many thousands of small series."""

    CHUNKS = 1024           # chunks at most: their buckets (64 each at most) in one array

    def __init__(self):
        self.sketches: list[tuple[_Sketch, int, int]] = []    # with the series' steps so far
        self.steps: list[np.ndarray] = []
        self.words: list[np.ndarray] = []
        self.walls: list[np.ndarray] = []
        self.points = 0

    def add(self, fp: _Fingerprint, steps: np.ndarray, words: np.ndarray,
            walls: np.ndarray | None) -> None:
        # (copies: a reader may reuse the arrays of a chunk for the next)
        self.sketches.append((fp.sketch, fp.step_min, fp.step_max))
        self.steps.append(np.array(steps, np.int64))
        self.words.append(words)
        if walls is not None:
            self.walls.append(np.array(walls, np.float64).view(np.uint64))
        self.points += len(steps)
        if self.points >= _SLICE or len(self.steps) >= self.CHUNKS:
            self.flush()

    def flush(self) -> None:
        if not self.steps:
            return
        sketches, lengths = self.sketches, [len(s) for s in self.steps]
        steps = np.concatenate(self.steps)
        m, h = _hashes(steps, np.concatenate(self.words),
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
                sk.rows = rows[blocks[i]:blocks[i + 1]]     # (a new series': its rows alone)
            else:
                sk.rows += rows[blocks[i]:blocks[i + 1]]


@dataclass
class _Fingerprint(SeriesStats):
    """The counts of :class:`~tbconvert.describe.SeriesStats`, digests of the points, and
    sketches of where they are (the digests decide whether two series differ)."""

    metadata: tuple = ()
    keep_walls: bool = False
    steps: hashlib._Hash = field(default_factory=hashlib.sha256)
    walls: hashlib._Hash = field(default_factory=hashlib.sha256)
    values: hashlib._Hash = field(default_factory=hashlib.sha256)
    big_ints: hashlib._Hash = field(default_factory=hashlib.sha256)
    nans: hashlib._Hash = field(default_factory=hashlib.sha256)
    hidden_at: hashlib._Hash = field(default_factory=hashlib.sha256)   # which points are hidden
    wall_list: list = field(default_factory=list)
    step_list: list = field(default_factory=list)      # with wall_list: where walls differ
    scalar_dtypes: list = field(default_factory=list)   # [dtype name, points] in point order
    sketch: _Sketch | None = None
    hidden_sketch: _Sketch | None = None
    batch: _Batch | None = None

    def add(self, s: Series) -> None:
        first = self.points
        super().add(s)
        if s.hidden is not None and s.hidden.any():
            self.hidden_at.update((first + np.flatnonzero(s.hidden)).astype("<i8").tobytes())
        self.steps.update(s.steps.astype("<i8").tobytes())
        if self.keep_walls:
            self.wall_list.append(s.wall_times.copy())
            self.step_list.append(s.steps.copy())
        else:
            self.walls.update(s.wall_times.astype("<f8").tobytes())
        scalars = as_scalar_series(s)
        if scalars is not None:
            words, holes = self._add_scalars(scalars, first), None
        else:
            words, holes = _value_words(self.values, s)
        if len(s):
            self._sketch(s, words, holes)

    def _add_scalars(self, s: ScalarSeries, first: int) -> np.ndarray:
        # Scalars compare by value: a float32 read back from a float64 archive is the same point,
        # and so is an integer kept as a double where the double is that integer.
        with np.errstate(invalid="ignore"):     # (a signaling NaN is quieted: see _nans)
            doubles = s.values.astype("<f8")
        self.values.update(doubles.tobytes())
        # the words hashed per point stand for all three digests: the double's bits, and a
        # NaN's bits or an integer's 128 bits where the double does not tell them
        words = doubles.view(np.uint64)
        nan = np.flatnonzero(np.isnan(s.values)) if s.values.dtype.kind == "f" else ()
        if len(nan):
            marks = np.zeros(len(nan), [("at", "<i8"), ("bits", "<u4")])
            marks["at"] = first + nan
            marks["bits"] = _nan_bits(s.values[nan])
            self.nans.update(marks.tobytes())
            words[nan] = _mix(words[nan] ^ _K_NAN) + marks["bits"].astype(np.uint64)
        at = np.flatnonzero(rounded_in_float64(s.values))
        if len(at):
            big = np.zeros(len(at), _BIG_INT)
            big["at"] = first + at
            v = s.values[at].astype(s.values.dtype.kind + "8")
            big["low"] = v.view(np.uint64)
            big["high"] = np.where(v < 0, -1, 0)
            self.big_ints.update(big.tobytes())
            words[at] = _mix(_mix(words[at] ^ _K_BIG) + big["low"].astype(np.uint64)) \
                + big["high"].view(np.uint64)
        if len(s):
            name = s.values.dtype.name
            if self.scalar_dtypes and self.scalar_dtypes[-1][0] == name:
                self.scalar_dtypes[-1][1] += len(s)
            else:
                self.scalar_dtypes.append([name, len(s)])
        return words

    def _sketch(self, s: Series, words: np.ndarray, holes: tuple | None) -> None:
        if self.sketch is None:
            self.sketch = _Sketch(_LAYOUTS[self.keep_walls, isinstance(s, BlobSequenceSeries)])
        columns = self.sketch.columns
        walls = s.wall_times if "walls" in columns else None
        if len(s) < _SMALL and self.batch is not None and s.hidden is None \
                and "missing" not in columns:
            self.batch.add(self, s.steps, words, walls)
            return
        steps = np.ascontiguousarray(s.steps, np.int64)
        if walls is not None:
            walls = np.ascontiguousarray(walls, np.float64).view(np.uint64)
        holes = holes if "missing" in columns else None
        lo, hi = self.step_min, self.step_max
        for a in range(0, len(s), _SLICE):
            part = slice(a, a + _SLICE)
            m, h = _hashes(steps[part], words[part], None if walls is None else walls[part])
            extras = None
            if holes is not None:
                as_empty, missing = holes
                extras = np.stack([_mix(m * _K_VALUE + as_empty[part]) - h[1], missing[part]])
            self.sketch.add(steps[part], lo, hi, h, m, extras)
            hidden = None if s.hidden is None else np.flatnonzero(s.hidden[part])
            if hidden is not None and len(hidden):
                if self.hidden_sketch is None:
                    self.hidden_sketch = _Sketch({"steps": 0, "at": 1})
                self.hidden_sketch.add(steps[part][hidden], lo, hi, m[None, hidden], m[hidden])


def _nan_bits(values: np.ndarray) -> np.ndarray:
    """NaNs' sign, quiet bit and payload as the bits of a float32 NaN, whatever their width: a
    NaN widened exactly (float32 to float64) keeps them, one quieted on the way does not."""
    if values.dtype.itemsize == 4:
        return values.view("<u4")
    if values.dtype.itemsize == 8:
        b = values.view("<u8")
        return (((b >> np.uint64(32)) & np.uint64(0x80000000)) | np.uint64(0x7F800000)
                | ((b >> np.uint64(29)) & np.uint64(0x7FFFFF))).astype("<u4")
    h = values.astype("<f2").view("<u2").astype("<u4")
    return ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)


def _value_words(h, s: Series) -> tuple[np.ndarray, tuple | None]:
    """A 64-bit word per point of a tensor or blob series, for its sketch, with ``h`` (the
    values' digest) updated; and for blobs with some missing, the words as if the missing
    blobs were empty ones and how many are missing per point (else None)."""
    if isinstance(s, BlobSequenceSeries):
        return _blob_words(h, s)
    if isinstance(s, TensorSeries):
        return _tensor_words(h, s), None
    return np.zeros(len(s), np.uint64), None


def _blob_words(h, s: BlobSequenceSeries) -> tuple[np.ndarray, tuple | None]:
    # A point is hashed as its blobs' sizes (-1: missing, so that a missing blob is no empty
    # one), then their bytes; the values' digest takes each point's own digest, so that the
    # blobs are hashed once. The sizes of every point are laid out at once: point i's are
    # the count then the sizes, from index offsets[i] + i.
    blobs, offsets = s.blobs, s.offsets
    sizes = np.fromiter((-1 if b is None else len(b) for b in blobs), np.int64, len(blobs))
    counts = np.diff(offsets)
    heads = np.empty(len(blobs) + len(s), np.int64)
    at = offsets[:-1] + np.arange(len(s))
    of_blob = np.ones(len(heads), bool)
    of_blob[at] = False
    heads[at] = counts
    heads[of_blob] = sizes
    datas = [b or b"" for b in blobs]
    digests = _point_digests(heads.tobytes(), datas, offsets.tolist())
    h.update(digests)
    words = np.frombuffer(digests, "<u8")[::2].astype(np.uint64)
    if not (sizes < 0).any():
        return words, None
    # the words as if the missing blobs were empty, for the points that have some
    holed = np.concatenate(([0], np.cumsum(sizes < 0)))
    missing = (holed[offsets[1:]] - holed[offsets[:-1]]).astype(np.uint64)
    heads[heads < 0] = 0
    as_empty = words.copy()
    some = np.flatnonzero(missing)
    as_empty[some] = np.frombuffer(_point_digests(heads.tobytes(), datas, offsets.tolist(),
                                                  some.tolist()), "<u8")[::2]
    return words, (as_empty, missing)


def _point_digests(heads: bytes, datas: list, offsets: list, points=None) -> bytes:
    """16-byte digests of the points (all, or those listed), joined."""
    out = []
    for i in range(len(offsets) - 1) if points is None else points:
        a, b = offsets[i], offsets[i + 1]
        d = hashlib.blake2b(heads[8 * (a + i):8 * (b + i + 1)], digest_size=16)
        d.update(b"".join(datas[a:b]))
        out.append(d.digest())
    return b"".join(out)


def _tensor_words(h, s: TensorSeries) -> np.ndarray:
    """Numeric points are hashed a run of one dtype and shape at a time: the digest takes the
    same bytes, and the words are the same, whether the reader gave a block or not."""
    words = np.empty(len(s), np.uint64)
    if s.block is not None and len(s) and not s.block.dtype.hasobject:
        _numeric_words(h, int(s.dtypes[0]), s.block, words[:])
        return words
    run: list = []
    key = None
    for i, (code, arr) in enumerate(zip(s.dtypes.tolist(), s.tensors, strict=True)):
        arr = np.asarray(arr)
        this = None if arr.dtype.hasobject else (code, arr.shape, arr.dtype.str)
        if run and this != key:
            _numeric_words(h, key[0], np.stack(run), words[i - len(run):i])
            run = []
        if this is None:
            words[i] = _object_word(h, code, arr)
        else:
            run.append(arr)
            key = this
    if run:
        _numeric_words(h, key[0], np.stack(run), words[len(s) - len(run):])
    return words


def _object_word(h, code: int, arr: np.ndarray) -> int:
    d = hashlib.blake2b(digest_size=8)
    for part in (code.to_bytes(4, "little", signed=True) + repr(arr.shape).encode(),
                 *(len(x).to_bytes(8, "little") + bytes(x) for x in arr.reshape(-1))):
        h.update(part)
        d.update(part)
    return int.from_bytes(d.digest(), "little")


def _numeric_words(h, code: int, points: np.ndarray, out: np.ndarray) -> None:
    """``points`` (point x shape): ``h`` updated with each point's dtype code, shape and bytes,
    and a word per point in ``out``, from its bytes as 64-bit lanes."""
    shape = points.shape[1:]
    head = np.frombuffer(code.to_bytes(4, "little", signed=True) + repr(shape).encode(),
                         np.uint8)
    body = np.ascontiguousarray(points).reshape(len(points), math.prod(shape))
    body = body.view(np.uint8) if body.size else np.zeros((len(points), 0), np.uint8)
    width = len(head) + body.shape[1]
    lanes = -(-width // 8)
    keys = _mix(np.arange(lanes, dtype=np.uint64) + _K_LANE)
    step = max(1, (4 << 20) // (lanes * 8))     # a few MiB of points at a time
    for a in range(0, len(points), step):
        n = len(body[a:a + step])
        rows = np.zeros((n, lanes * 8), np.uint8)
        rows[:, :len(head)] = head
        rows[:, len(head):width] = body[a:a + step]
        h.update(rows if width % 8 == 0 else np.ascontiguousarray(rows[:, :width]))
        z = rows.view(np.uint64) ^ keys
        sums = _mix(z).sum(axis=1, dtype=np.uint64)
        sums += np.uint64(width * int(_K_WIDTH) & _MASK)
        out[a:a + n] = _mix(sums)


def _metadata_key(s: Series) -> tuple:
    md = s.metadata
    return (md.plugin_name, md.plugin_content, md.display_name, md.description, int(md.data_class))


def _record_key(rec: RunRecord) -> tuple:
    wall = rec.wall_time if not math.isnan(rec.wall_time) else None   # NaN equals no NaN
    return rec.step, rec.kind, wall, hashlib.sha256(rec.payload).digest()


@dataclass
class _Source:
    """What one source holds, reduced for comparing."""

    series: dict[str, dict[str, _Fingerprint]]     # {run: {tag: fingerprint}}, every selected run
    records: dict[str, collections.Counter]         # {run: Counter of record keys}
    experiment: Experiment
    # A TensorBoard.dev export knows a run only by the lines of its series: it holds neither
    # runs without series nor run-level events, nor start times (its runs start at their
    # first point).
    tbdev: bool = False
    starts: dict = field(default_factory=dict)      # {run: start time, or None}
    # An event-file logdir's files of TensorBoard's plugins (plugin_copy's source of them;
    # None: a format that holds none), read only to be compared with another logdir's.
    plugin_files: object = None


def fingerprints(path, *, fmt: str | None, options: Options, report: Report,
                 keep_walls: bool) -> _Source:
    """The fingerprints of a source's series, and its runs' records, streaming."""
    out: dict[str, dict[str, _Fingerprint]] = {}
    records: dict[str, collections.Counter] = {}
    starts: dict = {}
    batch = _Batch()

    def fingerprint_of(run, s: Series) -> _Fingerprint:
        # names as conversions store them (odd bytes %XX), so a round trip compares equal
        tags = out.setdefault(names.text(run.name), {})
        tag = names.text(s.tag)
        fp = tags.get(tag)
        if fp is None:
            fp = tags[tag] = _Fingerprint(s.metadata.plugin_name, s.data_class.name,
                                          metadata=_metadata_key(s), keep_walls=keep_walls,
                                          batch=batch)
        return fp

    with api.open_reader(path, format=fmt, options=options, report=report) as reader:
        experiment = reader.experiment()
        for run, selected in scan(reader, options, fingerprint_of, visible_only=True):
            name = names.text(run.name)
            if not selected:
                out.pop(name, None)
                continue
            out.setdefault(name, {})
            starts[name] = run.start_time
            # A restart marker is TensorBoard's only to hide points, and which points are
            # hidden is compared with the points; event files written from any source hold
            # the points, not the markers.
            records.setdefault(name, collections.Counter()).update(
                _record_key(r) for r in run.records if not r.is_restart_marker())
        batch.flush()
        tbdev = _is_tbdev(reader)
        plugin_files = getattr(reader, "plugin_source", lambda: None)()
    return _Source(out, records, experiment, tbdev, starts, plugin_files)


def _is_tbdev(reader) -> bool:
    # Only a loaded module makes readers: sources of other formats need not import this one.
    module = sys.modules.get("tbconvert.formats.tbdev.reader")
    inner = getattr(reader, "_inner", reader)   # a remote source's reader of its staged copy
    return module is not None and isinstance(inner, module.TbdevReader)


_MD_FIELDS = ("plugin name", "plugin content", "display name", "description", "data class")


def compare(a, b, *, from_a=None, from_b=None, options: Options | None = None,
            wall_time_tolerance: float = 0.0, report: Report | None = None,
            plugin_files: bool = True) -> list[str]:
    """Differences between sources ``a`` and ``b``; an empty list means they hold the same data.

    A series whose steps, wall times, values or hidden points differ is named with the first
    step where they do ("values differ at step 3"), or else the narrowest range of steps
    that holds it ("at steps 300 to 363 (first differing range)").

    Scalars compare by value, integers exactly; scalars of other dtypes but equal values
    (a float32 read back from a float64 archive, integers kept as an export's doubles) are
    the same points, and their dtypes are noted in ``report`` (``scalar_dtypes_differ``).
    Experiment facts (id, name, description, times, other facts) are compared field by field,
    one held by a single source included. With ``restarts="keep-all"`` in ``options``, which
    points TensorBoard's restart rule hides is compared too. Runs' start times are compared,
    one lost included (but with a TensorBoard.dev export, which has none), and
    their run-level events (meta graphs, session logs, log messages) as a
    multiset of (kind, step, wall time, bytes) per run, except restart markers (SessionLog
    START), whose effect is in which points are hidden. A TensorBoard.dev export holds no
    run-level events, so those of the other source are differences; it holds no runs without
    series either, so these are compared only between other formats.
    ``wall_time_tolerance`` (seconds) allows for TensorBoard.dev exports, which store wall times
    to about a microsecond. Between two event-file logdirs, the files of TensorBoard's plugins
    beside the event files (those an event-file output carries) are compared byte for byte,
    unless ``plugin_files`` is False (a logdir rebuilt from an archive, which holds none).
    """
    if not (isinstance(wall_time_tolerance, (int, float)) and 0 <= wall_time_tolerance < math.inf):
        from tbconvert.errors import UsageError
        raise UsageError(f"the wall-time tolerance must be a number of seconds, 0 or more, "
                         f"not {wall_time_tolerance!r}")
    options = options or Options()
    report = given(report)
    keep = wall_time_tolerance > 0
    sa = fingerprints(a, fmt=from_a, options=options, report=report, keep_walls=keep)
    sb = fingerprints(b, fmt=from_b, options=options, report=report, keep_walls=keep)
    ea, eb = sa.experiment, sb.experiment
    diffs = []
    for name in ("experiment_id", "name", "description", "create_time", "update_time"):
        if getattr(ea, name) != getattr(eb, name):
            diffs.append(f"experiment {name.replace('_', ' ')}: {getattr(ea, name)!r} in A, "
                         f"{getattr(eb, name)!r} in B")
    for key in sorted(set(ea.extra) | set(eb.extra)):
        if ea.extra.get(key) != eb.extra.get(key):
            diffs.append(f"experiment fact {key!r}: {ea.extra.get(key)!r} in A, "
                         f"{eb.extra.get(key)!r} in B")
    empty_runs = not (sa.tbdev or sb.tbdev)

    def listed(src: _Source) -> set[str]:
        return {r for r, tags in src.series.items() if tags or src.records[r] or empty_runs}

    runs_a, runs_b = listed(sa), listed(sb)
    for run in sorted(runs_a - runs_b):
        diffs.append(f"run {run!r}: only in A ({_run_contents(sa, run, sb)})")
    for run in sorted(runs_b - runs_a):
        diffs.append(f"run {run!r}: only in B ({_run_contents(sb, run, sa)})")
    for run in sorted(runs_a & runs_b):
        ta, tb = sa.series[run], sb.series[run]
        for tag in sorted(set(ta) - set(tb)):
            diffs.append(f"{run}/{tag}: only in A ({plural(ta[tag].points, 'point')})")
        for tag in sorted(set(tb) - set(ta)):
            diffs.append(f"{run}/{tag}: only in B ({plural(tb[tag].points, 'point')})")
        for tag in sorted(set(ta) & set(tb)):
            diffs.extend(_compare_series(run, tag, ta[tag], tb[tag], wall_time_tolerance, report))
        start_a, start_b = sa.starts.get(run), sb.starts.get(run)
        if empty_runs and (start_a is None) != (start_b is None):
            diffs.append(f"run {run!r}: start time {start_a!r} in A, {start_b!r} in B (a run "
                         "without one shows TensorBoard no start)")
        elif empty_runs and start_a is not None and \
                not _same_wall(start_a, start_b, wall_time_tolerance):
            diffs.append(f"run {run!r}: start time {start_a!r} in A, {start_b!r} in B")
        for side, mine, other in (("A", sa, sb), ("B", sb, sa)):
            extra = mine.records[run] - other.records[run]
            if extra:
                n = sum(extra.values())
                diffs.append(f"run {run!r}: {plural(n, 'run-level event')} only in {side} "
                             f"({_records_text(extra)}){_no_place(other)}")
    if sa.plugin_files is not None and sb.plugin_files is not None:
        if plugin_files:
            diffs.extend(_compare_plugin_files(sa, sb, report))
        _take_back_notes(sa, sb, report)    # (compared, or left out on purpose)
    return diffs


def _take_back_notes(sa: _Source, sb: _Source, report: Report) -> None:
    from tbconvert.formats.tfevents.plugin_files import take_back
    take_back(report, [*sa.plugin_files.places.values(), *sb.plugin_files.places.values()])


def _compare_plugin_files(sa: _Source, sb: _Source, report: Report) -> list[str]:
    """Two event-file logdirs: their plugins' files compared byte for byte."""
    from tbconvert.formats.tfevents.plugin_copy import digests
    # by the text spelling of their paths, as runs are compared: a run directory whose name
    # is not UTF-8 is written spelled %XX
    fa, fb = ({names.text(rel): v for rel, v in digests(side.plugin_files).items()}
              for side in (sa, sb))
    diffs = [f"plugin file {rel}: only in {side}" for side, mine, other in
             (("A", fa, fb), ("B", fb, fa)) for rel in sorted(set(mine) - set(other))]
    same = 0
    for rel in sorted(set(fa) & set(fb)):
        unread = [f"{v} in {side}" for side, v in (("A", fa[rel]), ("B", fb[rel]))
                  if v.startswith("cannot")]
        if unread:
            diffs.append(f"plugin file {rel}: {unread[0]}")
        elif fa[rel] != fb[rel]:
            diffs.append(f"plugin file {rel}: other bytes in B than in A")
        else:
            same += 1
    if fa or fb:
        report.add("plugin_files_compared", f"{plural(same, 'file')} of TensorBoard's plugins "
                   f"the same, byte for byte, in both (of {len(fa)} in A and {len(fb)} in B)",
                   count=same, lost=False)
    return diffs


def _same_wall(a: float, b: float, tol: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _run_contents(src: _Source, run: str, other: _Source) -> str:
    n, records = len(src.series[run]), src.records[run]
    if not records:
        return f"{n} series" if n else "no series"
    events = sum(records.values())
    return (f"{n or 'no'} series, {plural(events, 'run-level event')}: "
            f"{_records_text(records)}{_no_place(other)}")


def _no_place(src: _Source) -> str:
    return "; a TensorBoard.dev export has no place for them" if src.tbdev else ""


def _records_text(records: collections.Counter, shown: int = 3) -> str:
    keys = sorted(records.elements(), key=lambda k: k[:2])
    text = ", ".join(f"{kind} at step {step}" for step, kind, *_ in keys[:shown])
    return text + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def _dtypes_text(fp: _Fingerprint) -> str:
    if len(fp.scalar_dtypes) == 1:
        return fp.scalar_dtypes[0][0]
    return ", ".join(f"{name} ({plural(n, 'point')})" for name, n in fp.scalar_dtypes)


@dataclass
class _Place:
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


def _place(x: _Fingerprint, y: _Fingerprint, kind: str, hidden: bool = False) -> _Place | None:
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
        return _Place()
    i = int(differ[0])
    bucket = int(buckets[i])
    low = max(bucket << shift, min(x.step_min, y.step_min))
    high = min(((bucket + 1) << shift) - 1, max(x.step_max, y.step_max))
    at = columns["at"]
    sums = [(int(u[:at].sum(dtype=np.uint64)), int(u[at]), int(u[at + 1])) for u in (a[i], b[i])]
    step = _one_step(*sums, low, high)
    if step is not None:
        low = high = step
    return _Place(low, high, a[i], b[i])


def _one_step(sums_a: tuple, sums_b: tuple, low: int, high: int) -> int | None:
    """The one step in ``low``..``high`` where a bucket's points differ, from its sums of c,
    c * step and c * m(step) in A and B; None if they differ at more than one step (then the
    solved step fails the check with m, but by a chance of about 2**-64)."""
    d, ds, dm = ((u - v) & _MASK for u, v in zip(sums_a, sums_b, strict=True))
    if not d:
        return None
    zeros = (d & -d).bit_length() - 1       # d * s = ds mod 2**64 fixes s mod 2**(64 - zeros)
    if ds & ((1 << zeros) - 1):
        return None
    modulus = 1 << (64 - zeros)
    s = ((ds >> zeros) * pow(d >> zeros, -1, modulus)) % modulus
    candidates = range(low + (s - low) % modulus, high + 1, modulus)
    if len(candidates) > _BUCKETS:
        return None             # too many to tell
    found = [s for s in candidates
             if (int(_step_hashes(np.array([s], np.int64))[0]) * d - dm) & _MASK == 0]
    return found[0] if len(found) == 1 else None


def _holes_text(place: _Place, columns: dict[str, int]) -> str:
    """Whether the bucket's points differ only where a blob missing on one side is empty on
    the other (then the sums as if missing blobs were empty agree)."""
    if "missing" not in columns or place.row_a is None:
        return ""
    values, as_empty, missing = (columns[k] for k in ("values", "as_empty", "missing"))
    a, b = place.row_a, place.row_b
    if (int(a[values]) + int(a[as_empty]) - int(b[values]) - int(b[as_empty])) & _MASK:
        return ""
    lost_a, lost_b = int(a[missing]), int(b[missing])
    if lost_a and not lost_b:
        n, side, other = lost_a, "A", "B"
    elif lost_b and not lost_a:
        n, side, other = lost_b, "B", "A"
    else:
        return " (blobs missing on one side where the other has empty ones)"
    blobs = "a blob" if n == 1 else f"{n} blobs"
    return f" ({blobs} missing in {side}, empty in {other})"


def _differs(what: str, place: _Place | None, columns=None) -> str:
    """``what`` differ, and where: "values differ at step 3"."""
    if place is None:
        return f"{what} differ"
    if place.low is None:
        return f"{what} differ (the same points, in another order)"
    return f"{what} differ {place.at()}" + (_holes_text(place, columns) if columns else "")


def _step_of(steps_a: np.ndarray, steps_b: np.ndarray, i: int) -> str:
    if steps_a[i] == steps_b[i]:
        return f"step {steps_a[i]}"
    return f"point {i + 1} (step {steps_a[i]} in A, {steps_b[i]} in B)"


def _compare_series(run: str, tag: str, x: _Fingerprint, y: _Fingerprint, tol: float,
                    report: Report) -> list[str]:
    where = f"{run}/{tag}"
    out = []
    for name, u, v in zip(_MD_FIELDS, x.metadata, y.metadata, strict=True):
        if u != v:
            out.append(f"{where}: {name} differs: {u!r} != {v!r}")
    if x.points != y.points:
        out.append(f"{where}: {x.points} points != {y.points} points "
                   f"(steps {x.step_range} vs {y.step_range})")
        return out
    if x.steps.digest() != y.steps.digest():
        place = _place(x, y, "steps")
        first = ("" if place is None else ", the same steps in another order"
                 if place.low is None else place.first())
        if x.step_range == y.step_range:
            low, high = x.step_range
            out.append(f"{where}: steps differ within the same range, {low} to {high} "
                       f"({plural(x.points, 'point')} each){first}")
        else:
            out.append(f"{where}: steps differ (ranges {x.step_range} vs {y.step_range})"
                       f"{first}")
    if tol > 0:
        wa = np.concatenate(x.wall_list) if x.wall_list else np.zeros(0)
        wb = np.concatenate(y.wall_list) if y.wall_list else np.zeros(0)
        nan_a, nan_b = np.isnan(wa), np.isnan(wb)
        gap = np.abs(wa - wb)
        worst = float(np.max(gap[~nan_a & ~nan_b], initial=0.0))
        if (nan_a != nan_b).any() or worst > tol:
            steps_a, steps_b = (np.concatenate(f.step_list) for f in (x, y))
        if (nan_a != nan_b).any():
            i = int(np.flatnonzero(nan_a != nan_b)[0])
            out.append(f"{where}: wall times differ (NaN in one, a time in the other, at "
                       f"{plural(int((nan_a != nan_b).sum()), 'point')}, the first at "
                       f"{_step_of(steps_a, steps_b, i)})")
        elif worst > tol:
            i = int(np.flatnonzero(~nan_a & ~nan_b & (gap > tol))[0])
            out.append(f"{where}: wall times differ by up to {worst:.3g} s (the first beyond "
                       f"the tolerance at {_step_of(steps_a, steps_b, i)})")
    elif x.walls.digest() != y.walls.digest():
        out.append(f"{where}: {_differs('wall times', _place(x, y, 'walls'))}")
    if x.values.digest() != y.values.digest() or x.big_ints.digest() != y.big_ints.digest() \
            or x.nans.digest() != y.nans.digest():
        place = _place(x, y, "values")
        columns = x.sketch.columns if x.sketch is not None else None
        out.append(f"{where}: {_differs('values', place, columns)}")
    if x.scalar_dtypes and y.scalar_dtypes and x.scalar_dtypes != y.scalar_dtypes:
        # Not a difference: values are compared exactly, and a format that stores scalars as
        # doubles holds every value but integers beyond 2**53, which then differ as values.
        report.add("scalar_dtypes_differ", f"{where}: scalars are {_dtypes_text(x)} in A and "
                   f"{_dtypes_text(y)} in B", run=run, tag=tag, lost=False)
    if x.hidden != y.hidden:
        out.append(f"{where}: {x.hidden} hidden points != {y.hidden}")
    elif x.hidden_at.digest() != y.hidden_at.digest():
        place = _place(x, y, "steps", hidden=True)
        first = "" if place is None or place.low is None else place.first()
        out.append(f"{where}: other points hidden by the restart rule ({x.hidden} each){first}")
    return out
