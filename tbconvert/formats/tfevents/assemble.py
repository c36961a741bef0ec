"""Collect one run's decoded events and turn them into series, as TensorBoard would.

Points of a tag keep read order (duplicates included). The first metadata seen
for a tag wins, as in TensorBoard's accumulator. TensorBoard's restart rule
(spec section 4.4) is reproduced exactly, but what it would hide is marked in
the series' ``hidden`` mask instead of being thrown away.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import fastscalars, legacy
from tbconvert.formats.tfevents.fastscalars import ScalarColumns
from tbconvert.model import (BlobSequenceSeries, DataClass, Metadata, Run, RunRecord,
                             ScalarSeries, TensorSeries)


class _TagPoints:
    __slots__ = ("seq", "steps", "walls", "points", "fast")

    def __init__(self) -> None:
        self.seq: list[int] = []
        self.steps: list[int] = []
        self.walls: list[float] = []
        self.points: list = []           # (code, ndarray) per slow point
        self.fast: list[tuple[np.ndarray, ScalarColumns]] = []  # (seq array, columns)


class RunAssembler:
    """Receives a run's events in read order (``seq`` increases) and builds its series."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.start_time: float | None = None
        self.tags: dict[str, _TagPoints] = {}
        self.first_metadata: dict[str, tuple[int, Metadata]] = {}
        self.records: list[tuple[int, RunRecord]] = []
        self.versions: list[tuple[int, float]] = []
        self.session_starts: list[tuple[int, int]] = []
        # summary events: (seq, step, tag) rows, several rows for a multi-value event
        self._summary_rows: list[tuple[int, int, str]] = []
        self._fast_rows: list[tuple[np.ndarray, np.ndarray, str]] = []

    # -- receiving ---------------------------------------------------------------------------
    def first_wall_time(self, wall: float) -> None:
        if self.start_time is None:
            self.start_time = wall

    def file_version(self, seq: int, version: str) -> None:
        try:
            parsed = float(version.split("brain.Event:")[-1])
        except ValueError:
            parsed = -1.0
        self.versions.append((seq, parsed))

    def session_start(self, seq: int, step: int) -> None:
        self.session_starts.append((seq, step))

    def record(self, seq: int, rec: RunRecord) -> None:
        self.records.append((seq, rec))

    def _tag(self, tag: str) -> _TagPoints:
        points = self.tags.get(tag)
        if points is None:
            points = self.tags[tag] = _TagPoints()
        return points

    def metadata(self, seq: int, tag: str, md: Metadata) -> None:
        if tag not in self.first_metadata or self.first_metadata[tag][0] > seq:
            self.first_metadata[tag] = (seq, md)

    def point(self, seq: int, step: int, wall: float, tag: str, point) -> None:
        tp = self._tag(tag)
        tp.seq.append(seq)
        tp.steps.append(step)
        tp.walls.append(wall)
        tp.points.append(point)

    def summary_event(self, seq: int, step: int, tags) -> None:
        for tag in tags:
            self._summary_rows.append((seq, step, tag))

    def fast(self, seqs: np.ndarray, cols: ScalarColumns) -> None:
        self._tag(cols.tag).fast.append((seqs, cols))
        self._fast_rows.append((seqs, cols.steps, cols.tag))
        md = fastscalars.column_metadata(cols) if len(seqs) else None
        if md is not None:
            self.metadata(int(seqs[0]), cols.tag, md)

    def fast_blobs(self, seqs: np.ndarray, cols) -> None:
        """Points decoded in bulk by ``fastblobs``: each is ``cols.head + (blob,)``."""
        n = len(seqs)
        if not n:
            return
        tp = self._tag(cols.tag)
        seq_list, step_list = seqs.tolist(), cols.steps.tolist()
        tp.seq.extend(seq_list)
        tp.steps.extend(step_list)
        tp.walls.extend(cols.wall_times.tolist())
        # one (n, k) object array; its rows are the points (views, no array built per point)
        table = np.empty((n, len(cols.head) + 1), dtype=object)
        for j, s in enumerate(cols.head):
            table[:, j] = s
        table[:, -1] = cols.blobs
        tp.points.extend(zip([dt.DT_STRING] * n, table))
        self._summary_rows.extend(zip(seq_list, step_list, [cols.tag] * n))
        self.metadata(seq_list[0], cols.tag, cols.metadata)

    # -- building ----------------------------------------------------------------------------
    def build(self):
        """The run and its series (one chunk per tag, in order of first appearance)."""
        run = Run(self.name, self.start_time, tuple(r for _, r in sorted(self.records, key=lambda x: x[0])))
        purges = self._purges()
        order = sorted(self.tags, key=self._first_seq)
        series = [self._series(tag, purges) for tag in order]
        return run, [s for s in series if s is not None]

    def _first_seq(self, tag: str) -> int:
        tp = self.tags[tag]
        firsts = ([tp.seq[0]] if tp.seq else []) + [int(s[0]) for s, _ in tp.fast if len(s)]
        return min(firsts) if firsts else 0

    def _version_at(self, seqs: np.ndarray) -> np.ndarray:
        """File version in force when each event was read (0 = none seen)."""
        if not self.versions:
            return np.zeros(len(seqs))
        vseq = np.array([s for s, _ in self.versions])
        vval = np.array([v for _, v in self.versions])
        idx = np.searchsorted(vseq, seqs, side="left") - 1
        return np.where(idx >= 0, vval[np.maximum(idx, 0)], 0.0)

    def _purges(self) -> list[tuple[int, int, frozenset | None]]:
        """(seq, step, tags or None for all) of every purge TensorBoard would do."""
        purges = []
        if self.session_starts:
            seqs = np.array([s for s, _ in self.session_starts])
            modern = self._version_at(seqs) >= 2
            seen = False
            for (seq, step), is_modern in zip(self.session_starts, modern):
                if not is_modern:
                    continue
                if seen:
                    purges.append((seq, step, None))
                seen = True
        purges.extend(self._out_of_order_purges())
        return purges

    def _out_of_order_purges(self):
        seq_parts = [np.array([r[0] for r in self._summary_rows], dtype=np.int64)]
        step_parts = [np.array([r[1] for r in self._summary_rows], dtype=np.int64)]
        for seqs, steps, _ in self._fast_rows:
            seq_parts.append(seqs)
            step_parts.append(steps)
        seqs = np.concatenate(seq_parts)
        if not len(seqs):
            return []
        steps = np.concatenate(step_parts)
        order = np.argsort(seqs, kind="stable")
        seqs, steps = seqs[order], steps[order]
        if (self._version_at(seqs) >= 2).all():
            return []
        first_of_event = np.concatenate(([True], seqs[1:] != seqs[:-1]))
        ev_seq, ev_step = seqs[first_of_event], steps[first_of_event]
        prev = np.concatenate(([-1], ev_step[:-1]))
        legacy_mode = self._version_at(ev_seq) < 2
        hits = np.flatnonzero((ev_step < prev) & legacy_mode)
        if not len(hits):
            return []
        tags_by_seq = defaultdict(set)
        wanted = set(ev_seq[hits].tolist())
        for seq, _, tag in self._summary_rows:
            if seq in wanted:
                tags_by_seq[seq].add(tag)
        for fseqs, _, tag in self._fast_rows:
            for seq in np.intersect1d(fseqs, ev_seq[hits]).tolist():
                tags_by_seq[seq].add(tag)
        return [(int(ev_seq[h]), int(ev_step[h]), frozenset(tags_by_seq[int(ev_seq[h])]))
                for h in hits]

    def _series(self, tag: str, purges):
        tp = self.tags[tag]
        raw_md = self.first_metadata.get(tag, (0, Metadata()))[1]
        md = legacy.with_data_class(raw_md)
        fixups = raw_md.data_class == DataClass.UNKNOWN
        slow_points = [legacy.fix_point(md.plugin_name, p) if fixups else p for p in tp.points]
        keep = [i for i, p in enumerate(slow_points) if p is not None]
        seq = np.concatenate([np.array([tp.seq[i] for i in keep], dtype=np.int64)]
                             + [s for s, _ in tp.fast])
        if not len(seq):
            return None
        steps = np.concatenate([np.array([tp.steps[i] for i in keep], dtype=np.int64)]
                               + [c.steps for _, c in tp.fast])
        walls = np.concatenate([np.array([tp.walls[i] for i in keep], dtype=np.float64)]
                               + [c.wall_times for _, c in tp.fast])
        order = np.argsort(seq, kind="stable")
        seq, steps, walls = seq[order], steps[order], walls[order]
        hidden = np.zeros(len(seq), dtype=bool)
        for p_seq, p_step, p_tags in purges:
            if p_tags is None or tag in p_tags:
                hidden |= (seq < p_seq) & (steps >= p_step)
        common = dict(run=self.name, tag=tag, metadata=md, steps=steps, wall_times=walls,
                      hidden=hidden)
        slow = [slow_points[i] for i in keep]
        n_slow = len(slow)
        if md.data_class == DataClass.SCALAR:
            values = self._scalar_values(slow, [c for _, c in tp.fast])
            if values is not None:
                return ScalarSeries(**common, values=values[order])
        points = slow + [(c.code, v) for _, c in tp.fast for v in c.values]
        points = [points[i] if i < n_slow else (points[i][0], np.asarray(points[i][1]))
                  for i in order]
        if md.data_class == DataClass.BLOB_SEQUENCE and all(
                code == dt.DT_STRING and arr.ndim == 1 for code, arr in points):
            return BlobSequenceSeries.from_sequences(
                **common, sequences=[list(arr) for _, arr in points])
        return TensorSeries(**common, dtypes=np.array([c for c, _ in points], dtype=np.int32),
                            tensors=tuple(a for _, a in points))

    @staticmethod
    def _scalar_values(slow, fast):
        codes = {code for code, _ in slow} | {c.code for c in fast}
        if len(codes) != 1:
            return None
        code = codes.pop()
        if code in (dt.DT_STRING, dt.DT_RAW_PROTO) or any(arr.ndim != 0 for _, arr in slow) \
                or any(c.values.ndim != 1 for c in fast):
            return None
        dtype = dt.numpy_dtype(code)
        if dtype.kind not in "fiub":
            return None
        parts = [np.array([arr for _, arr in slow], dtype=dtype)] + [c.values for c in fast]
        return np.concatenate(parts).astype(dtype, copy=False)
