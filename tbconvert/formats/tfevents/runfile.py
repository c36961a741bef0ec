"""One run's event file, built from its series chunks in bounded memory.

Chunks arrive in any interleaving of tags; each point becomes an entry (see
``entries``) that the sorter orders by time, keeping every tag's own order.
Then the file is written: the ``file_version`` event at the run's start time,
the events that keep tags whose points TensorBoard's restart rule all hides
listed, and the ordered entries, several values per event where they share
step and wall time.
"""

from __future__ import annotations

import math

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import encode, event_files, forms, legacy, records
from tbconvert.formats.tfevents.entries import EVENT, VALUE, Entries
from tbconvert.formats.tfevents.events import EventStream
from tbconvert.formats.tfevents.merge import BUFFER_BYTES, FAN_IN, Sorter
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries, Series
from tbconvert.report import plural

_GRAPH_MD = Metadata(legacy.GRAPHS_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_TRM_MD = Metadata(legacy.TAGGED_RUN_METADATA_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_SESSION_START = 1


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    return event_pb2, summary_pb2, tensor_pb2


class _Tag:
    __slots__ = ("order", "count", "key_max", "metadata", "legacy", "special", "first_legacy",
                 "tag_bytes", "witness")

    def __init__(self, order: int, tag: str, md: Metadata) -> None:
        self.order = order
        self.count = 0
        self.key_max = -math.inf
        self.metadata = md
        self.legacy = forms.legacy_kind(md)
        self.special = None
        if tag == legacy.RUN_GRAPH_TAG and md == _GRAPH_MD:
            self.special = "graph"
        elif md == _TRM_MD:
            self.special = "trm"
        self.first_legacy = False
        self.tag_bytes = tag.encode("utf-8")
        self.witness: Series | None = None   # the tag's first hidden point (see add)


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
        self.min_wall = math.inf
        self.event_pb2, self.summary_pb2, self.tensor_pb2 = _pb()

    # -- collecting ---------------------------------------------------------------------------
    def add(self, s: Series) -> None:
        st = self.tags.get(s.tag)
        if st is None:
            st = self.tags[s.tag] = _Tag(len(self.tags), s.tag, s.metadata)
        if not self.keep_all and s.hidden is not None and len(s) and s.hidden.all():
            # the copy loop's witness: written only if the tag shows no point at all
            if st.witness is None:
                st.witness = s.take([0])
            return
        self.hidden_written += s.hidden_count
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
        idx = np.arange(st.count, st.count + n, dtype=np.int64)
        slow = np.arange(n)
        if isinstance(s, ScalarSeries) and s.values.dtype in (np.float32, np.float64):
            rest = np.flatnonzero(idx > 0)
            slow = np.flatnonzero(idx == 0)
            if len(rest):
                values = s.values[rest]
                simple = np.zeros(len(rest), bool)
                if st.legacy == forms.SIMPLE and values.dtype == np.float32:
                    simple = forms.simple_ok(values)
                for form in (True, False):
                    pick = rest[simple == form]
                    if len(pick):
                        mat = encode.scalar_values(st.tag_bytes, s.values[pick], simple=form)
                        self.sorter.add(Entries.from_rows(keys[pick], st.order, idx[pick],
                                                          s.steps[pick], walls[pick], VALUE, mat))
        if len(slow):
            kinds, blobs = [], []
            for i in slow.tolist():
                kind, blob = self._point(st, s, i, int(idx[i]), float(walls[i]))
                kinds.append(kind)
                blobs.append(blob)
            self.sorter.add(Entries.from_list(keys[slow], st.order, idx[slow], s.steps[slow],
                                              walls[slow], np.array(kinds, np.uint8), blobs))
        st.count += n

    def _clean_walls(self, s: Series) -> np.ndarray:
        walls = s.wall_times
        bad = ~np.isfinite(walls)
        if bad.any():
            # A NaN wall time makes TensorBoard's fast loader drop the rest of the file.
            fixed = walls.copy()
            fixed[bad] = self.run.start_time if self.run.start_time is not None else 0.0
            self.report.add("wall_time_replaced",
                            f"{s.run}/{s.tag}: {plural(int(bad.sum()), 'non-finite wall time')} "
                            "written as the run's start time", run=s.run, tag=s.tag,
                            count=int(bad.sum()))
            return fixed
        return walls

    def _point(self, st: _Tag, s: Series, i: int, j: int, wall: float) -> tuple[int, bytes]:
        """One point as (EVENT, Event payload) or (VALUE, Summary.Value bytes)."""
        step = int(s.steps[i])
        if st.special is not None and isinstance(s, BlobSequenceSeries):
            seq = s.sequence(i)
            if len(seq) == 1 and seq[0] is not None:
                ev = self.event_pb2.Event(wall_time=wall, step=step)
                if st.special == "graph":
                    ev.graph_def = seq[0]
                else:
                    ev.tagged_run_metadata.tag = s.tag
                    ev.tagged_run_metadata.run_metadata = seq[0]
                return EVENT, ev.SerializeToString()
        value = self.summary_pb2.Summary.Value(tag=s.tag)
        used = self._legacy(st, s, i, j, value)
        if j == 0:
            st.first_legacy = used
            md = (forms.metadata_proto(st.metadata, s.tag, self.summary_pb2) if used
                  else _metadata_proto(st.metadata, self.summary_pb2))
            if md is not None:
                value.metadata.CopyFrom(md)
        if not used:
            if isinstance(s, ScalarSeries):
                code, arr = dt.tf_dtype_of(s.values.dtype), s.values[i]
            elif isinstance(s, BlobSequenceSeries):
                code, arr = dt.DT_STRING, self._blob_array(s, i)
            else:
                code, arr = int(s.dtypes[i]), s.tensors[i]
            value.tensor.CopyFrom(dt.array_to_proto(code, arr, self.tensor_pb2.TensorProto))
        return VALUE, value.SerializeToString()

    def _legacy(self, st: _Tag, s: Series, i: int, j: int, value) -> bool:
        """Put point i in its legacy form if that is exact; says whether it did."""
        kind, pb = st.legacy, self.summary_pb2
        if kind == forms.SIMPLE and isinstance(s, ScalarSeries) and s.values.dtype == np.float32:
            if forms.simple_ok(s.values[i:i + 1])[0]:
                value.simple_value = float(s.values[i])
                return True
        elif kind == forms.HISTO and not isinstance(s, (ScalarSeries, BlobSequenceSeries)):
            histo = forms.histogram(int(s.dtypes[i]), s.tensors[i], pb)
            if histo is not None:
                value.histo.CopyFrom(histo)
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
        skipped = 0
        for rec in self.run.records:
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
            else:
                continue
            payloads.append(ev.SerializeToString())
            keys.append(rec.wall_time if math.isfinite(rec.wall_time) else 0.0)
            steps.append(rec.step)
            walls.append(rec.wall_time)
        if skipped:
            self.report.add("restart_markers_not_written",
                            f"run {self.run.name!r}: {skipped} SessionLog START marker(s) not written; "
                            f"{self._what_markers_hid()}", run=self.run.name, count=skipped,
                            lost=False)
        if payloads:
            n = len(payloads)
            self.sorter.add(Entries.from_list(keys, -1, np.arange(n), steps, walls, EVENT, payloads))

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
        if self.run.start_time is not None and math.isfinite(self.run.start_time):
            return self.run.start_time
        candidates = [self.min_wall] if math.isfinite(self.min_wall) else []
        for rec in self.run.records:
            if math.isfinite(rec.wall_time):
                candidates.append(rec.wall_time)
        return min(candidates) if candidates else 0.0

    def write(self, f) -> None:
        """Write the whole file to the binary file object ``f``."""
        self._records()
        start = self.start()
        head = [self.event_pb2.Event(wall_time=start, file_version=event_files.FILE_VERSION)]
        head += self._shown_without_points(start)
        f.write(b"".join(records.frame(ev.SerializeToString()) for ev in head))
        stream = EventStream(f.write)
        for piece in self.sorter.drain():
            stream.feed(piece)
        stream.finish()

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
            if st.count == 0 and st.special is None:
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
                        "written with a restart marker that hides it", run=self.run.name,
                        count=len(shown), lost=False)
        return events


def _metadata_proto(md: Metadata, summary_pb2):
    proto = summary_pb2.SummaryMetadata()
    proto.plugin_data.plugin_name = md.plugin_name
    proto.plugin_data.content = md.plugin_content
    proto.display_name = md.display_name
    proto.summary_description = md.description
    proto.data_class = int(md.data_class)
    return proto
