"""A series reduced as it streams past: counts, SHA-256 digests of its points, and the
sketch of where they are (:mod:`tbconvert.verify.sketch`), independent of how the points
were chunked."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.columns import rounded_in_float64
from tbconvert.describe import SeriesStats
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    RunRecord,
    ScalarSeries,
    Series,
    TensorSeries,
    as_scalar_series,
)
from tbconvert.verify.sketch import (
    K_BIG,
    K_LANE,
    K_NAN,
    K_VALUE,
    K_WIDTH,
    LAYOUTS,
    MASK,
    SLICE,
    SMALL,
    Batch,
    Sketch,
    hashes,
    mix,
)

# One integer that float64 cannot hold: its position in the series, then its value as a
# 128-bit two's complement number, so that an int64 and a uint64 of one value are equal.
_BIG_INT = np.dtype([("at", "<i8"), ("high", "<i8"), ("low", "<u8")])

@dataclass
class Fingerprint(SeriesStats):
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
    sketch: Sketch | None = None
    hidden_sketch: Sketch | None = None
    batch: Batch | None = None

    def add(self, s: Series) -> np.ndarray:
        """Add a chunk; its points' words (see :meth:`value_words`)."""
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
        words, holes = self.value_words(s, first)
        if len(s):
            self._sketch(s, words, holes)
        return words

    def value_words(self, s: Series, first: int) -> tuple[np.ndarray, tuple | None]:
        """A 64-bit word per point of chunk ``s`` (its points from ``first`` in the series)
        that stands for its value, with the digests of the values and ``scalar_dtypes``
        updated; and for blobs with some missing, see :func:`_blob_words`."""
        if isinstance(s, TensorSeries) and s.data_class == DataClass.SCALAR:
            return self._add_scalar_tensors(s, first), None
        if isinstance(s, ScalarSeries):
            return self._add_scalars(s, first), None
        return _value_words(self.values, s)

    def _add_scalar_tensors(self, s: TensorSeries, first: int) -> np.ndarray:
        """Tensors of the scalar data class: each run of single numbers of one dtype hashed as
        scalars, any other point as a tensor, so that a point is hashed alike however the
        reader cut the series into chunks (a chunk made scalars as a whole takes the dtype
        of all its points, and is hashed as tensors if one of them is no single number)."""
        words = np.empty(len(s), np.uint64)
        for a, b, single in _runs_alike(s):
            part = s if (a, b) == (0, len(s)) else s.take(np.arange(a, b))
            if single:
                words[a:b] = self._add_scalars(as_scalar_series(part), first + a)
            else:
                words[a:b] = _value_words(self.values, part)[0]
        return words

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
            words[nan] = mix(words[nan] ^ K_NAN) + marks["bits"].astype(np.uint64)
        at = np.flatnonzero(rounded_in_float64(s.values))
        if len(at):
            big = np.zeros(len(at), _BIG_INT)
            big["at"] = first + at
            v = s.values[at].astype(s.values.dtype.kind + "8")
            big["low"] = v.view(np.uint64)
            big["high"] = np.where(v < 0, -1, 0)
            self.big_ints.update(big.tobytes())
            words[at] = mix(mix(words[at] ^ K_BIG) + big["low"].astype(np.uint64)) \
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
            self.sketch = Sketch(LAYOUTS[self.keep_walls, isinstance(s, BlobSequenceSeries)])
        columns = self.sketch.columns
        walls = s.wall_times if "walls" in columns else None
        if len(s) < SMALL and self.batch is not None and s.hidden is None \
                and "missing" not in columns:
            self.batch.add(self, s.steps, words, walls)
            return
        steps = np.ascontiguousarray(s.steps, np.int64)
        if walls is not None:
            walls = np.ascontiguousarray(walls, np.float64).view(np.uint64)
        holes = holes if "missing" in columns else None
        lo, hi = self.step_min, self.step_max
        for a in range(0, len(s), SLICE):
            part = slice(a, a + SLICE)
            m, h = hashes(steps[part], words[part], None if walls is None else walls[part])
            extras = None
            if holes is not None:
                as_empty, missing = holes
                extras = np.stack([mix(m * K_VALUE + as_empty[part]) - h[1], missing[part]])
            self.sketch.add(steps[part], lo, hi, h, m, extras)
            hidden = None if s.hidden is None else np.flatnonzero(s.hidden[part])
            if hidden is not None and len(hidden):
                if self.hidden_sketch is None:
                    self.hidden_sketch = Sketch({"steps": 0, "at": 1})
                self.hidden_sketch.add(steps[part][hidden], lo, hi, m[None, hidden], m[hidden])


def _runs_alike(s: TensorSeries):
    """``(start, stop, single)`` runs of points of ``s`` hashed alike: single numbers of one
    dtype (``single`` True), or points that are not (see :func:`as_scalar_series`)."""
    keys = []
    for code, tensor in zip(s.dtypes.tolist(), s.tensors, strict=True):
        arr = np.asarray(tensor)
        single = arr.size == 1 and arr.dtype.kind in "fiub" and code != dt.DT_RAW_PROTO
        keys.append((True, code, arr.dtype.str) if single else (False,))
    a = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[a]:
            yield a, i, keys[a][0]
            a = i


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
    keys = mix(np.arange(lanes, dtype=np.uint64) + K_LANE)
    step = max(1, (4 << 20) // (lanes * 8))     # a few MiB of points at a time
    for a in range(0, len(points), step):
        n = len(body[a:a + step])
        rows = np.zeros((n, lanes * 8), np.uint8)
        rows[:, :len(head)] = head
        rows[:, len(head):width] = body[a:a + step]
        h.update(rows if width % 8 == 0 else np.ascontiguousarray(rows[:, :width]))
        z = rows.view(np.uint64) ^ keys
        sums = mix(z).sum(axis=1, dtype=np.uint64)
        sums += np.uint64(width * int(K_WIDTH) & MASK)
        out[a:a + n] = mix(sums)


def metadata_key(s: Series) -> tuple:
    md = s.metadata
    return (md.plugin_name, md.plugin_content, md.display_name, md.description, int(md.data_class))


def record_key(rec: RunRecord) -> tuple:
    wall = rec.wall_time if not math.isnan(rec.wall_time) else None   # NaN equals no NaN
    return rec.step, rec.kind, wall, hashlib.sha256(rec.payload).digest()
