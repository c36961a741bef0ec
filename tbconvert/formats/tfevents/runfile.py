"""One run's event file, built from its series chunks in bounded memory.

Chunks arrive in any interleaving of tags; each point becomes an entry (see
``entries``) that the sorter orders by time, keeping every tag's own order.
Then the file is written: the ``file_version`` event at the run's start time,
the events that keep tags whose points TensorBoard's restart rule all hides
listed, and the ordered entries, several values per event where they share
step and wall time.

What is written reads the same under both of TensorBoard's loaders (the Python
one, ``--load_fast=false``, and the data server behind the default): every
tag's first value carries its full metadata, data class included; scalars are
float32, the only scalar type the data server shows (values float32 rounds
are reported); histograms are tensors (``forms``). Points a later point of
their tag at the same or an earlier step follows are all written, and
reported, since the data server shows only what such a later point leaves.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.columns import rounded_in_float32
from tbconvert.formats import runrecords
from tbconvert.formats.tfevents import encode, event_files, forms, large_values, legacy, records
from tbconvert.formats.tfevents.entries import EVENT, VALUE, Entries, scatter, starts_of
from tbconvert.formats.tfevents.events import EventStream
from tbconvert.formats.tfevents.merge import BUFFER_BYTES, FAN_IN, Sorter
from tbconvert.formats.tfevents.windows import windows
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries, Series
from tbconvert.report import are, plural, were

# The first points of scalar tags (each with its tag's metadata) are joined into one set of
# arrays once this many are held apart.
_FIRSTS_HELD = 1024

_GRAPH_MD = Metadata(legacy.GRAPHS_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_TRM_MD = Metadata(legacy.TAGGED_RUN_METADATA_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_SESSION_START = 1
# Steps (8 bytes each) a run file may hold to follow the data server's rule over tags whose
# steps do not grow by a constant stride; a tag beyond it is followed more coarsely.
STEPS_BUDGET = 1 << 22
# Scalar chunks of at most this many points are gathered (up to BATCH_POINTS points) and
# encoded many tags at a time, a few numpy calls a batch rather than a dozen a chunk.
SMALL_CHUNK = 64
BATCH_POINTS = 1 << 16
# A run's records go to the sorter this many at a time.
RECORDS_AT_ONCE = 1 << 15
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# Summary.Value pieces (see encode.scalar_values), and the metadata field's key.
_TAG_KEY, _SIMPLE, _TENSOR = encode.TAG_KEY, encode.SIMPLE_KEY, encode.FLOAT_TENSOR_HEAD
_METADATA_KEY = b"\x4a"


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    return event_pb2, summary_pb2, tensor_pb2


class DataServerSteps:
    """Which of a tag's points TensorBoard's data server shows, followed as they are written.

    It reads a tag's points in file order and a point at step s replaces every earlier point
    at a step >= s, so what it keeps is a strictly increasing run of steps, held here in
    blocks: a constant stride as ``(first, stride, count)`` whatever its length, other steps
    as ``[array, count]`` (its first ``count`` steps kept), arrays that draw on ``budget`` (a
    one-item list a run's tags share). A tag that would overdraw it is followed by its drops
    alone: a point at or below the step before it drops at least one, so ``dropped`` is then
    a lower bound and ``exact`` False.
    """

    __slots__ = ("blocks", "kept", "seen", "budget", "exact", "lower", "last")

    def __init__(self, budget: list) -> None:
        self.blocks: list = []
        self.kept = 0
        self.seen = 0
        self.budget = budget
        self.exact = True
        self.lower = 0
        self.last: int | None = None

    @property
    def dropped(self) -> int:
        return self.seen - self.kept if self.exact else self.lower

    def feed(self, steps: np.ndarray) -> None:
        n = len(steps)
        if not n:
            return
        steps = np.ascontiguousarray(steps, np.int64)
        self.seen += n
        down = int(np.count_nonzero(steps[1:] <= steps[:-1]))
        if self.last is not None and int(steps[0]) <= self.last:
            down += 1
        self.lower += down
        self.last = int(steps[-1])   # the last point is always kept: the top of the blocks
        if not self.exact:
            return
        if down:
            self._drop_from(int(steps.min()))
            # a point of the chunk stays only below every later one
            later_min = np.minimum.accumulate(steps[::-1])[::-1]
            keep = np.ones(n, np.bool_)
            keep[:-1] = steps[:-1] < later_min[1:]
            steps = steps[keep]
        self._push(steps)

    def _drop_from(self, step: int) -> None:
        """Drop the kept steps >= ``step``."""
        blocks = self.blocks
        while blocks:
            block = blocks[-1]
            if isinstance(block, tuple):
                first, stride, count = block
                if first >= step:
                    blocks.pop()
                    self.kept -= count
                    continue
                stay = count if stride == 0 else min(count, -(-(step - first) // stride))
                self.kept -= count - stay
                blocks[-1] = (first, stride, stay)
                return
            arr, count = block
            stay = int(np.searchsorted(arr[:count], step))
            self.kept -= count - stay
            if stay:
                block[1] = stay
                return
            blocks.pop()
            self.budget[0] += len(arr)

    def _push(self, steps: np.ndarray) -> None:
        """Keep ``steps``, strictly increasing and above every kept step."""
        n = len(steps)
        self.kept += n
        # differences of increasing int64s are exact as uint64s, however far apart
        gaps = np.diff(steps.view(np.uint64))
        if n > 2 and not (gaps == gaps[0]).all():
            if self.budget[0] < n:
                self.exact = False
                self.budget[0] += sum(len(b[0]) for b in self.blocks if isinstance(b, list))
                self.blocks = []
                return
            self.budget[0] -= n
            self.blocks.append([steps.copy(), n])
            return
        first, stride = int(steps[0]), int(gaps[0]) if n > 1 else 0
        if self.blocks and isinstance(self.blocks[-1], tuple):
            f, st, c = self.blocks[-1]
            gap = first - (f + st * (c - 1))
            if (c == 1 or st == gap) and (n == 1 or stride == gap):
                self.blocks[-1] = (f, gap, c + n)
                return
        self.blocks.append((first, stride, n))


class _Tag:
    """A tag's writing state. ``shown`` is None before any point, ``(first, stride, count)``
    while the tag's steps are one constant stride fed in a single chunk (what a
    :class:`DataServerSteps` then holds, made only when more comes), else that object."""

    __slots__ = ("order", "count", "key_max", "metadata", "legacy", "special", "first_legacy",
                 "witness", "rounded", "beyond", "beyond_step", "shown", "batched")

    def __init__(self, order: int, tag: str, md: Metadata) -> None:
        self.order = order
        self.count = 0
        self.key_max = -math.inf
        self.metadata = md
        self.legacy = forms.written_kind(md, tag)
        self.special = None
        if tag == legacy.RUN_GRAPH_TAG and md == _GRAPH_MD:
            self.special = "graph"
        elif md == _TRM_MD:
            self.special = "trm"
        self.first_legacy = False
        self.witness: Series | None = None   # the tag's first hidden point (see add)
        self.rounded = 0                     # values float32 does not hold exactly
        self.beyond = 0                      # of them, finite ones beyond its range (inf, 0)
        self.beyond_step = None              # the step of the first of those
        self.shown = None
        self.batched = False                 # small scalar chunks may go to _flush


def _count_rounded(st: _Tag, s: ScalarSeries, rounded: int) -> None:
    """Count ``rounded`` values of ``s`` that float32 does not hold, and among them the finite
    ones beyond its range, which become infinite or zero (a spike, or a value gone)."""
    st.rounded += rounded
    with np.errstate(over="ignore", invalid="ignore"):
        single = s.values.astype(np.float32)
    beyond = (np.isfinite(s.values) & ~np.isfinite(single)) | ((s.values != 0) & (single == 0))
    n = int(np.count_nonzero(beyond))
    if n:
        if st.beyond == 0:
            st.beyond_step = int(s.steps[np.argmax(beyond)])
        st.beyond += n


class RunFile:
    """``keep_all``: the points TensorBoard's restart rule hides arrive to be written (``restarts
    keep-all``); otherwise only the copy loop's witnesses arrive marked hidden."""

    def __init__(self, run: Run, report, spill_dir, *, keep_all: bool = False,
                 buffer_bytes: int = BUFFER_BYTES, fan_in: int = FAN_IN) -> None:
        self.run = run
        self.report = report
        self.keep_all = keep_all
        self.hidden_written = 0
        self.sorter = Sorter(spill_dir, buffer_bytes, fan_in)
        # A chunk is encoded a slice at a time, so a reader's big chunk never doubles in memory.
        self.slice_points = max(64, buffer_bytes // 512)
        self.tags: dict[str, _Tag] = {}
        self.firsts: list[Entries] = []
        # steps the data-server rule keeps for irregular steps, over all tags of the run
        self.steps_budget = [STEPS_BUDGET]
        self.min_wall = math.inf
        self.event_pb2, self.summary_pb2, self.tensor_pb2 = _pb()
        # small scalar chunks waiting to be encoded together (see _flush), of distinct tags
        self._pending: list = []
        self._pending_tags: set = set()
        self._pending_points = 0
        # per (legacy form, empty metadata): whether _flush encodes first values as _point does
        self._encodes: dict = {}

    # -- collecting ---------------------------------------------------------------------------
    def add(self, s: Series) -> None:
        st = self.tags.get(s.tag)
        if st is None:
            st = self.tags[s.tag] = _Tag(len(self.tags), s.tag, s.metadata)
            form = (st.legacy, s.metadata == _EMPTY_MD)
            ok = self._encodes.get(form)
            if ok is None:
                ok = self._encodes[form] = self._same_encoding(s.metadata)
            st.batched = ok
        if not self.keep_all and s.hidden is not None and len(s) and s.hidden.all():
            # the copy loop's witness: written only if the tag shows no point at all
            if st.witness is None:
                st.witness = s.take([0])
            return
        self.hidden_written += s.hidden_count
        if isinstance(s, ScalarSeries) and len(s) <= SMALL_CHUNK \
                and s.values.dtype in _FLOATS and st.batched:
            if not len(s):
                return
            if st.order in self._pending_tags:
                self._flush()
            self._pending.append((st, s))
            self._pending_tags.add(st.order)
            self._pending_points += len(s)
            if self._pending_points >= BATCH_POINTS:
                self._flush()
            return
        self._flush()
        if isinstance(s, ScalarSeries):
            s = self._float32(st, s)
        n, step = len(s), self.slice_points
        if n <= step:
            self._add(st, s)
            return
        for a in range(0, n, step):
            self._add(st, s.take(np.arange(a, min(a + step, n))))

    def _add(self, st: _Tag, s: Series) -> None:
        n = len(s)
        if not n:
            return
        raw = s.wall_times
        finite = raw[np.isfinite(raw)]
        if len(finite):
            self.min_wall = min(self.min_wall, float(finite.min()))
        walls = self._clean_walls(s)
        keys = np.maximum(np.maximum.accumulate(walls), st.key_max)
        st.key_max = float(keys[-1])
        self._steps(st).feed(s.steps)
        idx = np.arange(st.count, st.count + n, dtype=np.int64)
        scalar = isinstance(s, ScalarSeries)
        # A scalar tag's first point, which carries the tag's metadata, takes the slow way
        # and is kept apart from the sorter (see _in_order): the scalar columns the sorter
        # then holds are of one width each, which it moves and frames a matrix at a time.
        slow = np.flatnonzero(idx == 0) if scalar else np.arange(n)
        if len(slow):
            kinds, blobs, kept = [], [], []
            for i in slow.tolist():
                kind, blob = self._point(st, s, i, int(idx[i]), float(walls[i]),
                                         pieces=not scalar)
                if isinstance(blob, list):
                    if sum(len(memoryview(p).cast("B")) for p in blob) >= \
                            self.sorter.buffer_bytes:
                        # a value that fills the sorter's buffer alone goes to it as its
                        # pieces: joined, it would be a second copy of the point while the
                        # point is held (smaller ones share sorted runs with others)
                        self.sorter.add_pieces(float(keys[i]), st.order, int(idx[i]),
                                               int(s.steps[i]), float(walls[i]), kind, blob)
                        continue
                    blob = b"".join(blob)
                kinds.append(kind)
                blobs.append(blob)
                kept.append(i)
            slow = slow[kept] if len(kept) < len(slow) else slow
            e = Entries.from_list(keys[slow], st.order, idx[slow], s.steps[slow], walls[slow],
                                  np.array(kinds, np.uint8), blobs)
            if scalar:
                self.firsts.append(e)
                if len(self.firsts) >= _FIRSTS_HELD:
                    # one set of arrays, not one per tag (a run of 50,000 tags held 23 MiB
                    # of small arrays and their headers until its end)
                    self.firsts = [Entries.concat(self.firsts)]
            else:
                self.sorter.add(e)
        rest = np.flatnonzero(idx > 0) if scalar else slow[:0]
        if len(rest):
            values = s.values[rest]
            simple = np.zeros(len(rest), bool)
            if st.legacy == forms.SIMPLE:
                simple = forms.simple_ok(values)
            for form in (True, False):
                pick = rest[simple == form]
                if len(pick):
                    mat = encode.scalar_values(s.tag.encode("utf-8"), s.values[pick],
                                               simple=form)
                    self.sorter.add(Entries.from_rows(keys[pick], st.order, idx[pick],
                                                      s.steps[pick], walls[pick], VALUE, mat))
        st.count += n

    def _steps(self, st: _Tag) -> DataServerSteps:
        shown = st.shown
        if isinstance(shown, DataServerSteps):
            return shown
        d = st.shown = DataServerSteps(self.steps_budget)
        if shown is not None:
            first, stride, count = shown
            d.blocks.append(shown)
            d.kept = d.seen = count
            d.last = first + stride * (count - 1)
        return d

    def _md_field(self, md: Metadata) -> bytes:
        """The ``metadata`` field of a tag's first Summary.Value."""
        blob = _metadata_proto(md, self.summary_pb2).SerializeToString()
        return _METADATA_KEY + encode.varint(len(blob)) + blob

    def _same_encoding(self, md: Metadata) -> bool:
        """Whether first values encoded as :meth:`_flush` does come out as :meth:`_point`'s
        protobuf ones for tags of ``md``'s legacy form (checked once per form, for a value
        and a signaling NaN, which a tensor's protobuf float quiets)."""
        field = self._md_field(md)
        st = _Tag(0, "t", md)
        for bits in (0x3FC00000, 0x7F800001):
            values = np.array([bits], np.uint32).view(np.float32)
            s = ScalarSeries(run="", tag="t", metadata=md, steps=np.zeros(1, np.int64),
                             wall_times=np.zeros(1), hidden=None, values=values)
            simple = st.legacy == forms.SIMPLE and bool(forms.simple_ok(values)[0])
            head = _SIMPLE if simple else _TENSOR
            if not simple and encode.signaling_nans(values)[0]:
                head = head[:-2] + bytes([encode.CONTENT_KEY]) + head[-1:]
            mine = _TAG_KEY + b"\x01t" + head + values.astype("<f4").tobytes() + field
            if self._point(st, s, 0, 0, 0.0) != (VALUE, mine):
                return False
        return True

    def _flush(self) -> None:
        """Encode the waiting small scalar chunks (each of another tag) as one batch: the
        same entries, and the same tag state, as :meth:`_add` makes of them one by one."""
        items = self._pending
        if not items:
            return
        self._pending, self._pending_tags, self._pending_points = [], set(), 0
        sts = [st for st, _ in items]
        ss = [s for _, s in items]
        nb = len(items)
        lens = np.fromiter((len(s) for s in ss), np.int64, nb)
        starts = starts_of(lens)
        ends = starts + lens - 1
        n = int(lens.sum())
        seg = np.repeat(np.arange(nb), lens)
        first_row = np.zeros(n, np.bool_)
        first_row[starts] = True
        steps = np.concatenate([s.steps for s in ss])
        raw = np.concatenate([s.wall_times for s in ss])

        # values as float32, counting per tag what float32 rounds (see _float32)
        wide = [k for k, s in enumerate(ss) if s.values.dtype != np.float32]
        if wide:
            v64 = np.concatenate([ss[k].values for k in wide])
            rounded = np.add.reduceat(rounded_in_float32(v64).astype(np.int64),
                                      starts_of(lens[wide]))
            for k, r in zip(wide, rounded.tolist(), strict=True):
                if r:
                    _count_rounded(sts[k], ss[k], r)
            with np.errstate(over="ignore", invalid="ignore"):
                values = np.concatenate([s.values.astype(np.float32) for s in ss])
        else:
            values = np.concatenate([s.values for s in ss])

        finite = np.isfinite(raw)
        if finite.all():
            walls = raw
            self.min_wall = min(self.min_wall, float(raw.min()))
        else:
            if finite.any():
                self.min_wall = min(self.min_wall, float(raw[finite].min()))
            walls = raw.copy()
            for k in np.unique(seg[~finite]).tolist():
                a, b = int(starts[k]), int(ends[k]) + 1
                walls[a:b] = self._clean_walls(ss[k])

        # keys: each tag's running maximum of its wall times (and of its earlier chunks')
        keys = walls
        falls = np.flatnonzero(walls[1:] < walls[:-1]) + 1
        falls = falls[~first_row[falls]]
        if len(falls):
            keys = walls.copy()
            for k in np.unique(seg[falls]).tolist():
                a, b = int(starts[k]), int(ends[k]) + 1
                keys[a:b] = np.maximum.accumulate(walls[a:b])
        key_max = np.fromiter((st.key_max for st in sts), np.float64, nb)
        if (key_max > -math.inf).any():
            keys = np.maximum(keys, key_max[seg])
        for st, km in zip(sts, keys[ends].tolist(), strict=True):
            st.key_max = km

        # the data server's steps: a fresh tag's one constant stride stays a tuple
        gaps = np.diff(steps.view(np.uint64))
        rise = np.ones(n, np.bool_)                  # row > the one before in its chunk
        rise[1:] = steps[1:] > steps[:-1]
        same_gap = np.ones(n, np.bool_)              # row's gap is its chunk's first gap
        two = lens >= 2
        ref = np.zeros(nb, np.uint64)
        ref[two] = gaps[starts[two]]
        rows = np.flatnonzero(~first_row)
        same_gap[rows] = gaps[rows - 1] == ref[seg[rows]]
        simple_steps = np.logical_and.reduceat(rise | first_row, starts) \
            & np.logical_and.reduceat(same_gap, starts)
        firsts_steps = steps[starts].tolist()
        strides = ref.tolist()
        for k, st in enumerate(sts):
            if st.shown is None and simple_steps[k]:
                st.shown = (firsts_steps[k], strides[k], int(lens[k]))
            else:
                a, b = int(starts[k]), int(ends[k]) + 1
                self._steps(st).feed(steps[a:b])

        counts = np.fromiter((st.count for st in sts), np.int64, nb)
        idx = np.arange(n, dtype=np.int64) - starts[seg] + counts[seg]
        for st, c in zip(sts, lens.tolist(), strict=True):
            st.count += c

        # Summary.Value bytes: tag field, value (simple or tensor form), metadata if first
        tag_fields, md_fields = [], []
        simple_tag = np.zeros(nb, np.bool_)
        for k, st in enumerate(sts):
            tb = ss[k].tag.encode("utf-8")
            tag_fields.append(_TAG_KEY + encode.varint(len(tb)) + tb)
            md_fields.append(self._md_field(st.metadata) if counts[k] == 0 else b"")
            simple_tag[k] = st.legacy == forms.SIMPLE
        simple = simple_tag[seg] & forms.simple_ok(values)
        first = idx == 0
        tf_len = np.fromiter((len(b) for b in tag_fields), np.int64, nb)
        md_len = np.fromiter((len(b) for b in md_fields), np.int64, nb)
        lengths = tf_len[seg] + np.where(simple, len(_SIMPLE), len(_TENSOR)) + 4
        lengths[first] += md_len[seg[first]]
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offs[1:])
        data = np.empty(int(offs[-1]), np.uint8)
        pos = offs[:-1]
        tf_buf = np.frombuffer(b"".join(tag_fields), np.uint8)
        scatter(tf_buf, starts_of(tf_len)[seg], tf_len[seg], data, pos)
        pos = pos + tf_len[seg]
        data[pos[simple]] = _SIMPLE[0]
        tensor = np.flatnonzero(~simple)
        if len(tensor):
            windows(data, len(_TENSOR), writeable=True)[pos[tensor]] = \
                np.frombuffer(_TENSOR, np.uint8)
        pos = pos + np.where(simple, len(_SIMPLE), len(_TENSOR))
        fi = np.flatnonzero(first)
        values = np.ascontiguousarray(values.astype("<f4"))
        windows(data, 4, writeable=True)[pos] = values.view(np.uint8).reshape(-1, 4)
        data[pos[~simple & encode.signaling_nans(values)] - 2] = encode.CONTENT_KEY
        if len(fi):
            md_buf = np.frombuffer(b"".join(md_fields), np.uint8)
            scatter(md_buf, starts_of(md_len)[seg[fi]], md_len[seg[fi]], data, pos[fi] + 4)
        orders = np.fromiter((st.order for st in sts), np.int32, nb)
        self.sorter.add(Entries(keys, orders[seg], idx, steps, walls,
                                np.full(n, VALUE, np.uint8), offs, data))

    def _float32(self, st: _Tag, s: ScalarSeries) -> ScalarSeries:
        """The series with float32 values, the only scalars both loaders show (the data
        server drops DT_DOUBLE and integer scalars, and with them the whole tag)."""
        if s.values.dtype == np.float32:
            return s
        rounded = int(np.count_nonzero(rounded_in_float32(s.values)))
        if rounded:
            _count_rounded(st, s, rounded)
        with np.errstate(over="ignore", invalid="ignore"):
            return dataclasses.replace(s, values=s.values.astype(np.float32))

    def _clean_walls(self, s: Series) -> np.ndarray:
        walls = s.wall_times
        bad = ~np.isfinite(walls)
        if bad.any():
            # A NaN wall time makes TensorBoard's fast loader drop the rest of the file.
            fixed = walls.copy()
            start = self.run.start_time
            known = start is not None and math.isfinite(start)
            fixed[bad] = start if known else 0.0
            self.report.add("wall_time_replaced",
                            f"{s.run}/{s.tag}: {plural(int(bad.sum()), 'non-finite wall time')} "
                            "written as " + ("the run's start time" if known else
                                             "0.0 (the run has no finite start time)"),
                            run=s.run, tag=s.tag, count=int(bad.sum()))
            return fixed
        return walls

    def _point(self, st: _Tag, s: Series, i: int, j: int, wall: float,
               pieces: bool = False) -> tuple[int, bytes]:
        """One point as (EVENT, Event payload) or (VALUE, Summary.Value bytes); ``pieces``:
        a large value may come as the list of pieces its bytes are (see large_values)."""
        step = int(s.steps[i])
        if st.special is not None and isinstance(s, BlobSequenceSeries):
            seq = s.sequence(i)
            if len(seq) == 1 and seq[0] is not None:
                ev = self.event_pb2.Event(wall_time=wall, step=step)
                if st.special == "graph":
                    ev.graph_def = seq[0]
                    self._check_graph(s, step, seq[0])
                else:
                    ev.tagged_run_metadata.tag = s.tag
                    ev.tagged_run_metadata.run_metadata = seq[0]
                return EVENT, ev.SerializeToString()
        value = self.summary_pb2.Summary.Value(tag=s.tag)
        used = self._legacy(st, s, i, j, value)
        if j == 0:
            st.first_legacy = used
            # With its data class named, the data server takes the metadata as it is, even
            # beside a legacy value (it would make its own, without display name, otherwise);
            # the Python loader rebuilds a legacy value's metadata from the very same fields.
            value.metadata.CopyFrom(_metadata_proto(st.metadata, self.summary_pb2))
        if not used:
            if isinstance(s, ScalarSeries):
                code, arr = dt.DT_FLOAT, s.values[i]
            elif isinstance(s, BlobSequenceSeries):
                code, arr = dt.DT_STRING, self._blob_array(s, i)
            else:
                code, arr = int(s.dtypes[i]), s.tensors[i]
            parts = large_values.value_pieces(value, code, arr, self.tensor_pb2.TensorProto)
            if parts is not None:
                return VALUE, parts if pieces else b"".join(parts)
            dt.array_to_proto(code, arr, self.tensor_pb2.TensorProto, into=value.tensor)
        return VALUE, value.SerializeToString()

    def _check_graph(self, s: Series, step: int, data: bytes) -> None:
        """Tell a graph TensorBoard cannot show (its bytes are no GraphDef): it is written as
        the source holds it, and the graph view will fail on it."""
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import graph_pb2
        try:
            graph_pb2.GraphDef.FromString(data)
        except DecodeError:
            self.report.add("graph_not_parsable", f"{s.run}/{s.tag}: the graph at step {step} "
                            f"({plural(len(data), 'byte')}) does not parse as a GraphDef; "
                            "written as it is, but TensorBoard's graph view cannot show it",
                            run=s.run, tag=s.tag, lost=False)

    def _legacy(self, st: _Tag, s: Series, i: int, j: int, value) -> bool:
        """Put point i in its legacy form if that is exact; says whether it did."""
        kind, pb = st.legacy, self.summary_pb2
        if kind == forms.SIMPLE and isinstance(s, ScalarSeries):
            if forms.simple_ok(s.values[i:i + 1])[0]:
                value.simple_value = float(s.values[i])
                return True
        elif kind == forms.IMAGE and isinstance(s, BlobSequenceSeries):
            img = forms.image(s.sequence(i), pb)
            if img is not None:
                value.image.CopyFrom(img)
                return True
        elif kind == forms.AUDIO and isinstance(s, BlobSequenceSeries) and (j == 0 or st.first_legacy):
            # Only after a legacy first value does TensorBoard reshape legacy clips for the tag.
            clip = forms.audio(s.sequence(i), pb)
            if clip is not None:
                value.audio.CopyFrom(clip)
                return True
        return False

    def _blob_array(self, s: BlobSequenceSeries, i: int) -> np.ndarray:
        seq = s.sequence(i)
        missing = sum(1 for b in seq if b is None)
        if missing:
            self.report.add("missing_blob_written_empty",
                            f"{s.run}/{s.tag} step {int(s.steps[i])}: {missing} lost blob(s) written "
                            "as empty in place, so the others keep their positions",
                            run=s.run, tag=s.tag, count=missing)
        return dt.string_array([b"" if b is None else b for b in seq])

    def _records(self) -> None:
        payloads, keys, steps, walls = [], [], [], []
        skipped = written = 0
        # (a Run made by a program may hold what no event holds: told, never a crash)
        for rec in runrecords.events(self.run, self.report, "event files"):
            ev = self.event_pb2.Event(wall_time=rec.wall_time, step=rec.step)
            if rec.kind == "meta_graph_def":
                ev.meta_graph_def = rec.payload
            elif rec.kind == "log_message":
                ev.log_message.ParseFromString(rec.payload)
            elif rec.kind == "session_log":
                ev.session_log.ParseFromString(rec.payload)
                if ev.session_log.status == _SESSION_START:
                    skipped += 1  # the restart's effect is already in which points are written
                    continue
            payloads.append(ev.SerializeToString())
            keys.append(rec.wall_time if math.isfinite(rec.wall_time) else 0.0)
            steps.append(rec.step)
            walls.append(rec.wall_time)
            if len(payloads) == RECORDS_AT_ONCE:
                # (a run may hold millions: the sorter takes them a slice at a time, and
                # orders them as one, each by its place among the run's records)
                written = self._add_records(written, keys, steps, walls, payloads)
                payloads, keys, steps, walls = [], [], [], []
        if skipped:
            self.report.add("restart_markers_not_written",
                            f"run {self.run.name!r}: {skipped} SessionLog START marker(s) not written; "
                            f"{self._what_markers_hid()}", run=self.run.name, count=skipped,
                            lost=False)
        if payloads:
            self._add_records(written, keys, steps, walls, payloads)

    def _add_records(self, written: int, keys, steps, walls, payloads) -> int:
        n = written + len(payloads)
        self.sorter.add(Entries.from_list(keys, -1, np.arange(written, n), steps, walls, EVENT,
                                          payloads))
        return n

    def _what_markers_hid(self) -> str:
        # A run's first START is no restart (TensorBoard takes it as the start), and a restart
        # hides only earlier points at or after its step: a marker may well have hidden nothing.
        if any(st.witness is not None for st in self.tags.values()):
            return "the points they hid are left out instead"
        if self.hidden_written:
            return (f"the {self.hidden_written} point(s) they hid are written, so TensorBoard "
                    "shows them (--restarts keep-all)")
        return "they hid none of the points written, so no point is affected"

    # -- writing ------------------------------------------------------------------------------
    def start(self) -> float:
        """The wall time of the file's first event, which TensorBoard takes for the run's start
        (it orders and colours runs by it): the run's own start time, even where a point was
        logged with an earlier one (a replayed history); the earliest time written when the
        source had none."""
        self._flush()   # (min_wall)
        if self.run.start_time is not None and math.isfinite(self.run.start_time):
            return self.run.start_time
        candidates = [self.min_wall] if math.isfinite(self.min_wall) else []
        for rec in self.run.records:
            if math.isfinite(rec.wall_time):
                candidates.append(rec.wall_time)
        return min(candidates) if candidates else 0.0

    def write(self, f) -> None:
        """Write the whole file to the binary file object ``f``."""
        self._flush()
        if self.run.start_time is None and not self.tags and not self.run.records:
            return   # a run without a single event (an empty event file): an empty file again
        self._records()
        start = self.start()
        if self.run.start_time is not None and not math.isfinite(self.run.start_time):
            self.report.add("run_start_time_replaced",
                            f"{self.run.name}: start time {self.run.start_time} written as "
                            f"{start!r} (TensorBoard's fast loader stops at a NaN wall time)",
                            run=self.run.name)
        head = [self.event_pb2.Event(wall_time=start, file_version=event_files.FILE_VERSION)]
        head += self._shown_without_points(start)
        f.write(b"".join(records.frame(ev.SerializeToString()) for ev in head))
        stream = EventStream(f.write)
        for piece in self._in_order():
            for part in _columns_apart(piece):
                stream.feed(part)
        stream.finish()
        self._report_what_loaders_show()

    def _in_order(self):
        """The sorter's pieces, with the scalar tags' first points each in its place."""
        firsts = Entries.concat(self.firsts).sorted()
        self.firsts = []
        j = 0
        for piece in self.sorter.drain():
            last = (float(piece.key[-1]), int(piece.tag[-1]), int(piece.idx[-1]))
            upto = j + _place(firsts.slice(j, len(firsts)), *last) if j < len(firsts) else j
            if upto - j > _FEW_FIRSTS:
                # many first values fall in this piece: one sort puts them all in place
                yield Entries.concat([piece, firsts.slice(j, upto)]).sorted()
                j = upto
                continue
            a = 0
            while j < len(firsts) and \
                    (float(firsts.key[j]), int(firsts.tag[j]), int(firsts.idx[j])) < last:
                at = _place(piece, firsts.key[j], firsts.tag[j], firsts.idx[j])
                if at > a:
                    yield piece.slice(a, at)
                yield firsts.slice(j, j + 1)
                a, j = at, j + 1
            yield piece.slice(a, len(piece)) if a else piece
        if j < len(firsts):
            yield firsts.slice(j, len(firsts))

    def _report_what_loaders_show(self) -> None:
        for tag, st in self.tags.items():
            where = f"{self.run.name}/{tag}"
            if st.rounded:
                n = st.rounded
                beyond = "" if not st.beyond else (
                    f"; {st.beyond} of them, beyond float32's range, became infinite or 0 "
                    f"(the first at step {st.beyond_step})")
                self.report.add(
                    "scalar_rounded_to_float32",
                    f"{where}: {plural(n, 'value')} float32 cannot hold {were(n)} rounded to "
                    "float32, the only scalar type both TensorBoard loaders show (Parquet and "
                    f"HDF5 keep them exact){beyond}", run=self.run.name, tag=tag, count=n)
            if st.count and forms.legacy_kind(st.metadata, tag) == forms.HISTO:
                self.report.add(
                    "histograms_as_tensors",
                    f"{where}: {plural(st.count, 'histogram point')} written in the tensor form "
                    "both TensorBoard loaders show alike; if they came as legacy histo values "
                    "(as PyTorch and tensorboardX write them), TensorBoard's default loader "
                    "showed every bucket of those as float64 rows, and now shows the rows "
                    "--load_fast=false showed (float32, from the first to the last non-empty "
                    "bucket)", run=self.run.name, tag=tag, count=st.count, lost=False)
            if not isinstance(st.shown, DataServerSteps):
                continue     # one increasing stride: the data server shows every point
            dropped = st.shown.dropped
            if dropped:
                total = st.count
                some = f"{dropped}" if st.shown.exact else f"at least {dropped}"
                shows = f"{total - dropped}" if st.shown.exact else f"at most {total - dropped}"
                self.report.add(
                    "steps_not_increasing",
                    f"{where}: {some} of {total} points {are(dropped)} followed by a point at "
                    "the same or an earlier step (as from a run resumed without a restart marker "
                    "that TensorBoard acts on, or two writers in one run): all "
                    "are written and --load_fast=false shows them, but TensorBoard's default "
                    f"loader keeps one point per step, the latest, and shows {shows}",
                    run=self.run.name, tag=tag, count=dropped, lost=False)

    def _shown_without_points(self, start: float) -> list:
        """Events that make TensorBoard list tags all of whose points its restart rule hid.

        TensorBoard lists such a tag with no points. The tag's first hidden point (real
        data, never an invented one) followed by a restart marker that purges it does the
        same; TensorBoard ignores the first marker of a run, hence one before it too.
        Loaders that ignore restart markers show that one point, as they show all of the
        tag's points in the source. A tag that had no point at all is not listed.
        """
        shown, bare = [], 0
        for st in self.tags.values():
            if st.count == 0:
                # (a graph too: TensorBoard keeps a run's graph when a restart hides its point,
                # and so does the graph event written as the witness)
                if st.witness is not None:
                    shown.append(st)
                else:
                    bare += 1
        if bare:
            self.report.add("empty_series_not_listed",
                            f"run {self.run.name!r}: {bare} series without points written as "
                            "nothing (TensorBoard lists no tag without data)", run=self.run.name,
                            count=bare, lost=False)
        if not shown:
            return []
        lowest = min(0, min(int(st.witness.steps[0]) for st in shown))
        marker = self.event_pb2.Event(wall_time=start, step=lowest)
        marker.session_log.status = _SESSION_START
        events = [marker]
        for st in shown:
            w = st.witness
            if isinstance(w, ScalarSeries):
                w = self._float32(st, w)
            wall = float(self._clean_walls(w)[0])
            kind, blob = self._point(st, w, 0, 0, wall)
            if kind == EVENT:
                events.append(self.event_pb2.Event.FromString(blob))
                continue
            ev = self.event_pb2.Event(wall_time=wall, step=int(w.steps[0]))
            ev.summary.value.add().ParseFromString(blob)
            events.append(ev)
        events.append(marker)
        self.report.add("tags_without_points_kept",
                        f"run {self.run.name!r}: {len(shown)} tag(s) whose points are all hidden by "
                        "TensorBoard's restart rule are kept listed: the first hidden point is "
                        "written with a restart marker that hides it (TensorBoard's default "
                        "loader ignores restart markers and shows that point; --load_fast=false "
                        f"lists the tag{'s' if len(shown) > 1 else ''} without points, as the "
                        "source)", run=self.run.name,
                        count=len(shown), lost=False)
        return events


_EMPTY_MD = Metadata()


# Up to this many first values are put in a sorter piece one at a time (see _in_order).
_FEW_FIRSTS = 16


def _place(e: Entries, key, tag, idx) -> int:
    """How many of the sorted entries ``e`` sort before ``(key, tag, idx)``."""
    lo, hi = np.searchsorted(e.key, key, "left"), np.searchsorted(e.key, key, "right")
    return int(lo) + (e.slice(int(lo), int(hi)).not_after(key, tag, idx) if hi > lo else 0)


# Values of one length in a row (a scalar column) from this many on are framed on their own.
_COLUMN = 1024


def _columns_apart(e: Entries):
    """``e`` cut before and after each long run of values of one length, so that such a run
    is framed a matrix at a time (``events``) though a tag's first value, with its metadata,
    or another tag's few values sit beside it; the stream frames cut entries as uncut ones."""
    n = len(e)
    if n < _COLUMN:
        yield e
        return
    lengths = e.lengths
    same = (lengths[1:] == lengths[:-1]) & (e.kind[1:] == VALUE) & (e.kind[:-1] == VALUE)
    bounds = np.concatenate(([0], np.flatnonzero(~same) + 1, [n]))
    long = np.flatnonzero(np.diff(bounds) >= _COLUMN)
    cuts = set(bounds[long].tolist()) | set(bounds[long + 1].tolist())
    cuts.discard(0)
    cuts.discard(n)
    a = 0
    for b in sorted(cuts) + [n]:
        yield e.slice(a, b)
        a = b


def _metadata_proto(md: Metadata, summary_pb2):
    proto = summary_pb2.SummaryMetadata()
    if md.plugin_name or md.plugin_content:
        # (touched, an empty plugin_data would be written: metadata of no plugin has none)
        proto.plugin_data.plugin_name = md.plugin_name
        proto.plugin_data.content = md.plugin_content
    proto.display_name = md.display_name
    proto.summary_description = md.description
    proto.data_class = int(md.data_class)
    return proto
