"""Wide scalar rows (one per run and step, one column per tag) in bounded memory.

:meth:`ScalarColumns.wide_table <tbconvert.columns.ScalarColumns.wide_table>` sorts every
point at once, which a run of tens of millions of points cannot afford. Here a run's points
are sorted by (step, tag, arrival) in segments of at most :data:`SEGMENT_POINTS`, spilled
to a temporary file, and merged a window at a time (a step is complete once every segment
has gone past it) into the run's rows. The rows wait in a second temporary file until every
run is in: only then are all the tags, the header's columns, known. The rows and the report
are those of ``wide_table``: the last point of a tag at a step is kept (the others reported
as ``duplicate_step_in_wide``), and a row's wall time is the earliest of the points it keeps.
"""

from __future__ import annotations

import numpy as np

from tbconvert.arrayfile import ArrayFile
from tbconvert.columns import Names, as_float64, report_duplicates, row_wall_times, tag_column
from tbconvert.model import Series, as_scalar_series
from tbconvert.report import Report

# Points sorted in memory at a time (36 bytes each, and the sort's copies).
SEGMENT_POINTS = 1 << 18
# Points of all segments held at a time while they are merged.
WINDOW_POINTS = 1 << 18
# Rows written out (and turned into CSV) at a time.
ROW_BATCH = 1 << 16

_POINT = np.dtype([("step", "<i8"), ("tag", "<i4"), ("seq", "<i8"), ("wall", "<f8"),
                   ("value", "<f8")])
# as rows wait for the header: each row's step and wall time, and the points it keeps
_ROW = np.dtype([("step", "<i8"), ("wall", "<f8")])
_KEPT = np.dtype([("row", "<i8"), ("tag", "<i4"), ("value", "<f8")])


def _sorted(points: np.ndarray) -> np.ndarray:
    return points[np.lexsort((points["seq"], points["tag"], points["step"]))]


class WideRows:
    """The wide rows of the scalar chunks given run by run (:meth:`add`, :meth:`end_run`),
    as Arrow tables of at most :data:`ROW_BATCH` rows (:meth:`tables`)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.tags = Names()
        self._segments = ArrayFile("tbconvert-wide-")       # a run's sorted segments, while it is merged
        self._rows = ArrayFile("tbconvert-wide-")           # every run's rows, until the header is known
        self._runs: list = []           # (run name, [(rows' place, rows, points' place, points)])
        self._run: str | None = None
        self._pending: list = []        # the current run's points not yet in a segment
        self._held = 0
        self._seq = 0
        self._spilled: list = []        # the current run's segments: (place, points)
        self._dropped: dict = {}        # (run, tag) -> points a later one at its step replaced

    def add(self, chunk: Series) -> bool:
        """Add ``chunk`` if it holds scalars (see :func:`~tbconvert.model.as_scalar_series`);
        False (nothing added) otherwise."""
        chunk = as_scalar_series(chunk, self.report)
        if chunk is None:
            return False
        if self._run != chunk.run:
            self.end_run()
            self._run = chunk.run
        n = len(chunk)
        values = chunk.values
        with np.errstate(invalid="ignore"):      # (a signaling NaN widened: still a NaN)
            values = as_float64(chunk, self.report) if values.dtype.kind in "iu" else \
                values.astype(np.float64)
        points = np.empty(n, _POINT)
        points["step"], points["wall"], points["value"] = chunk.steps, chunk.wall_times, values
        points["tag"] = self.tags.id(chunk.tag)
        points["seq"] = np.arange(self._seq, self._seq + n)
        self._seq += n
        self._pending.append(points)
        self._held += n
        if self._held >= SEGMENT_POINTS:
            self._spill_segment()
        return True

    def _take_pending(self) -> np.ndarray:
        """The current run's points not yet in a segment, sorted."""
        points = _sorted(np.concatenate(self._pending)) if self._pending else \
            np.zeros(0, _POINT)
        self._pending, self._held = [], 0
        return points

    def _spill_segment(self) -> None:
        points = self._take_pending()
        self._spilled.append((self._segments.put(points), len(points)))

    def end_run(self) -> None:
        """The current run's rows, made and put aside (called by :meth:`add` when the next
        run begins, and before :meth:`tables`)."""
        if self._run is None:
            return
        batches: list = []
        self._runs.append((self._run, batches))
        if not self._spilled:     # a run that fits in one segment: no merging
            self._put_rows(self._take_pending(), batches)
        else:
            if self._pending:
                self._spill_segment()
            self._merge(batches)
        self._segments.close()
        self._spilled = []
        self._run = None

    def _merge(self, batches: list) -> None:
        """The run's segments merged into complete steps, a window at a time."""
        segments = self._spilled
        width = max(1, WINDOW_POINTS // len(segments))
        read = [0] * len(segments)               # points of each segment read so far
        windows = [np.zeros(0, _POINT)] * len(segments)

        def refill(k: int, want: int) -> None:
            place, count = segments[k]
            more = min(want - len(windows[k]), count - read[k])
            if more > 0:
                got = self._segments.get(place + read[k] * _POINT.itemsize, _POINT, more)
                windows[k] = np.concatenate((windows[k], got))
                read[k] += more

        for k in range(len(segments)):
            refill(k, width)
        while any(len(w) for w in windows):
            # a step is complete below the last step every unfinished window reached
            open_ends = [windows[k]["step"][-1] for k in range(len(segments))
                         if read[k] < segments[k][1]]
            bound = min(open_ends) if open_ends else None
            taken = []
            for k, w in enumerate(windows):
                cut = len(w) if bound is None else int(np.searchsorted(w["step"], bound))
                taken.append(w[:cut])
                windows[k] = w[cut:]
            if not any(len(t) for t in taken):
                # one step holds more points than a window of some segment: widen those
                for k in range(len(segments)):
                    if read[k] < segments[k][1] and windows[k]["step"][-1] == bound:
                        refill(k, 2 * len(windows[k]))
                continue
            self._put_rows(_sorted(np.concatenate(taken)), batches)
            for k in range(len(segments)):
                if len(windows[k]) < width // 2:
                    refill(k, width)

    def _put_rows(self, points: np.ndarray, batches: list) -> None:
        """Rows of ``points`` (sorted, holding whole steps) put aside, ROW_BATCH at a time."""
        n = len(points)
        if not n:
            return
        step, tag = points["step"], points["tag"]
        last = np.ones(n, np.bool_)
        last[:-1] = (step[1:] != step[:-1]) | (tag[1:] != tag[:-1])
        if not last.all():
            dup_tags, counts = np.unique(tag[~last], return_counts=True)
            for t, c in zip(dup_tags.tolist(), counts.tolist(), strict=True):
                key = (self._run, self.tags.names[t])
                self._dropped[key] = self._dropped.get(key, 0) + c
        new_row = np.ones(n, np.bool_)
        new_row[1:] = step[1:] != step[:-1]
        starts = np.flatnonzero(new_row)
        row_of = np.cumsum(new_row) - 1
        rows = np.empty(len(starts), _ROW)
        rows["step"], rows["wall"] = step[starts], row_wall_times(points["wall"], last, starts)
        kept = np.empty(int(last.sum()), _KEPT)
        kept["row"], kept["tag"], kept["value"] = row_of[last], tag[last], points["value"][last]
        # batches of whole rows
        for a in range(0, len(rows), ROW_BATCH):
            b = min(a + ROW_BATCH, len(rows))
            lo, hi = np.searchsorted(kept["row"], [a, b])
            part = kept[lo:hi].copy()
            part["row"] -= a
            batches.append((self._rows.put(rows[a:b]), b - a, self._rows.put(part), len(part)))

    def _report_dropped(self) -> None:
        for r, t in sorted(self._dropped):
            report_duplicates(self.report, r, t, self._dropped[(r, t)])

    def column_names(self) -> list[str]:
        """The header: run, step, wall_time, then a column per tag (by name); a tag named
        like one of the first three gets `` (tag)`` added (reported)."""
        self.end_run()
        self._report_dropped()
        names = ["run", "step", "wall_time"]
        for t in self._tag_order():
            names.append(tag_column(self.tags.names[t], names, self.report))
        return names

    def _tag_order(self) -> list[int]:
        return sorted(range(len(self.tags.names)), key=lambda i: self.tags.names[i])

    def tables(self, names: list[str]):
        """The rows, as Arrow tables with the columns ``names`` (:meth:`column_names`)."""
        import pyarrow as pa
        order = self._tag_order()
        column_of = np.empty(len(order), np.int64)
        column_of[np.array(order, np.int64)] = np.arange(len(order))
        for run, batches in self._runs:
            words = pa.array([run], pa.string())
            for rows_at, rows, kept_at, count in batches:
                row_cols = self._rows.get(rows_at, _ROW, rows)
                kept = self._rows.get(kept_at, _KEPT, count)
                cols = [pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)),
                                                       words),
                        pa.array(row_cols["step"]), pa.array(row_cols["wall"], pa.float64())]
                nulls = pa.nulls(rows, pa.float64())
                by_column = column_of[kept["tag"]]
                sort = np.argsort(by_column, kind="stable")
                by_column, row, value = by_column[sort], kept["row"][sort], kept["value"][sort]
                bounds = np.searchsorted(by_column, np.arange(len(order) + 1))
                for c in range(len(order)):
                    lo, hi = bounds[c], bounds[c + 1]
                    if lo == hi:
                        cols.append(nulls)
                        continue
                    col = np.zeros(rows, np.float64)
                    missing = np.ones(rows, np.bool_)
                    col[row[lo:hi]] = value[lo:hi]
                    missing[row[lo:hi]] = False
                    cols.append(pa.array(col, pa.float64(), mask=missing))
                yield pa.Table.from_arrays(cols, names=names)

    def close(self) -> None:
        self._segments.close()
        self._rows.close()
