"""Points as Arrow columns: the shared run/tag/step/wall-time columns, and scalar tables in
long form (one row per point) and wide form (one row per run and step).

Both the CSV writer and the table functions of :mod:`tbconvert.tables` build on these, so
they sit below both. Run and tag names become dictionary columns, numbered in order of first
appearance; nothing builds one Python object per point. The builders of the other tables
are beside this one: :mod:`~tbconvert.columns.nonscalar` (histograms, text, media, tensors)
and :mod:`~tbconvert.columns.hparams` (one row per hyperparameter trial).
"""

from __future__ import annotations

import numpy as np

from tbconvert.errors import UsageError
from tbconvert.model import ScalarSeries, Series, as_scalar_series
from tbconvert.report import Report, plural, were


class Names:
    """Strings numbered in order of first appearance (for dictionary columns)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def id(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.names)
            self.names.append(name)
        return i


def dictionary(ids: np.ndarray, names: Names):
    """A dictionary-encoded Arrow string column."""
    import pyarrow as pa
    return pa.DictionaryArray.from_arrays(pa.array(ids.astype(np.int32, copy=False)),
                                          pa.array(names.names, pa.string()))


class PointColumns:
    """The columns every table shares: run, tag, step, wall_time (and hidden).

    Rows are added one chunk at a time, ``repeat`` rows per point (e.g. one per
    histogram bucket).
    """

    def __init__(self, keep_hidden: bool, report: Report) -> None:
        self.keep_hidden = keep_hidden
        self.report = report
        self.runs = Names()
        self.tags = Names()
        # per chunk added: its run's and tag's ids and its rows (the id columns are made by
        # arrays(), in one go: a run of many short tags adds many chunks)
        self._run_ids: list[int] = []
        self._tag_ids: list[int] = []
        self._counts: list[int] = []
        self._steps: list[np.ndarray] = []
        self._walls: list[np.ndarray] = []
        self._hidden: list = []   # per chunk, its hidden mask or None (none hidden)
        self.rows = 0

    def add(self, chunk: Series, repeat: np.ndarray | None = None) -> None:
        steps, walls, hidden = chunk.steps, chunk.wall_times, chunk.hidden
        if repeat is not None:
            steps, walls = np.repeat(steps, repeat), np.repeat(walls, repeat)
            if hidden is not None:
                hidden = np.repeat(hidden, repeat)
        n = len(steps)
        self._run_ids.append(self.runs.id(chunk.run))
        self._tag_ids.append(self.tags.id(chunk.tag))
        self._counts.append(n)
        self._steps.append(steps)
        self._walls.append(walls)
        self._hidden.append(hidden)
        self.rows += n

    def clear_rows(self) -> None:
        """Forget the rows added so far (written out); the run and tag names stay known."""
        for rows in (self._run_ids, self._tag_ids, self._counts, self._steps, self._walls,
                     self._hidden):
            rows.clear()
        self.rows = 0

    @staticmethod
    def _cat(parts, dtype) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def _ids(self, ids: list[int]) -> np.ndarray:
        return np.repeat(np.array(ids, dtype=np.int32), np.array(self._counts, dtype=np.int64))

    def _hidden_column(self) -> np.ndarray:
        if all(h is None for h in self._hidden):
            return np.zeros(self.rows, np.bool_)
        return self._cat([np.zeros(n, np.bool_) if h is None else h
                          for h, n in zip(self._hidden, self._counts, strict=True)], np.bool_)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"run": self._ids(self._run_ids),
                "tag": self._ids(self._tag_ids),
                "step": self._cat(self._steps, np.int64),
                "wall_time": self._cat(self._walls, np.float64),
                "hidden": self._hidden_column()}

    def table(self, extra: dict):
        """An Arrow table: the shared columns, then ``extra`` (name -> array), then hidden."""
        import pyarrow as pa
        a = self.arrays()
        cols = {"run": dictionary(a["run"], self.runs), "tag": dictionary(a["tag"], self.tags),
                "step": pa.array(a["step"], pa.int64()),
                "wall_time": pa.array(a["wall_time"], pa.float64())}
        cols.update(extra)
        if self.keep_hidden:
            cols["hidden"] = pa.array(a["hidden"], pa.bool_())
        return pa.table(cols)


LONG_COLUMNS = ("run", "tag", "step", "wall_time", "value")


def rounded_in_float64(values: np.ndarray) -> np.ndarray:
    """True where a value is not exactly its float64 (integers of 64 bits beyond 2**53)."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" or values.dtype.itemsize < 8:
        return np.zeros(values.shape, np.bool_)
    as_float = values.astype(np.float64)
    # Converting float64 back overflows at 2**63 (2**64 unsigned), where the largest values
    # round to; the result of that is the platform's (it wraps on x86 and saturates to the
    # very value on ARM), so those are told by their float alone: none of them is exact.
    top = 2.0 ** (64 - (values.dtype.kind == "i"))
    beyond = as_float >= top
    back = np.where(beyond, 0.0, as_float).astype(values.dtype)
    return beyond | (back != values)


def rounded_in_float32(values: np.ndarray) -> np.ndarray:
    """True where float32 does not hold a value exactly; a NaN stays a NaN, so it counts as
    held (its payload bits are not data)."""
    values = np.asarray(values)
    kind, size = values.dtype.kind, values.dtype.itemsize
    if kind == "b" or (kind == "f" and size <= 4) or (kind in "iu" and size <= 2):
        return np.zeros(values.shape, np.bool_)
    with np.errstate(over="ignore", invalid="ignore"):
        single = values.astype(np.float32)
    if kind == "f":
        back = single.astype(values.dtype)
        return ~((back == values) | (np.isnan(back) & np.isnan(values)))
    # float64 holds every float32 exactly, and these integers too unless they are too wide
    return rounded_in_float64(values) | (single.astype(np.float64) != values.astype(np.float64))


def as_float64(chunk: ScalarSeries, report: Report) -> np.ndarray:
    """The values as float64 (exact for float and int32 sources); inexact ints are reported."""
    values = chunk.values
    out = values.astype(np.float64)
    if values.dtype.kind in "iu":
        report_inexact(report, chunk, int(np.count_nonzero(rounded_in_float64(values))))
    return out


def report_inexact(report: Report, chunk, inexact: int) -> None:
    """Say that ``inexact`` integers of ``chunk`` were rounded to a table's float64 values."""
    if inexact:
        report.add("inexact_value",
                   f"{chunk.run}/{chunk.tag}: {plural(inexact, 'integer value')} beyond "
                   f"2**53 {were(inexact)} rounded to the nearest float64 in the table",
                   run=chunk.run, tag=chunk.tag, count=inexact)


def tag_column(name: str, taken, report: Report) -> str:
    """The wide table's column of tag ``name``: `` (tag)`` added where the name is taken
    already (by a key column), and reported."""
    if name not in taken:
        return name
    renamed = f"{name} (tag)"
    report.add("column_renamed", f"tag {name!r} is named like a key column; its column is "
               f"{renamed!r}", tag=name, lost=False)
    return renamed


def report_duplicates(report: Report, run: str, tag: str, count: int) -> None:
    """Say that ``count`` points of ``run``/``tag`` share a step with a later point, which
    the wide table keeps instead."""
    report.add("duplicate_step_in_wide",
               f"{run}/{tag}: {plural(count, 'point')} "
               f"{'shares' if count == 1 else 'share'} a step with a later point; the wide "
               "table keeps the last one (the long form keeps all)",
               run=run, tag=tag, count=count)


def row_wall_times(wall: np.ndarray, kept: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each wide row's wall time, the rows' points starting at ``starts``: the earliest of the
    points the row keeps (``kept``; one dropped for a later point at its step has no say),
    NaN only when none of them has a time (fmin: a NaN time is no time)."""
    return np.fmin.reduceat(np.where(kept, wall, np.nan), starts)


class ScalarColumns(PointColumns):
    """Collects scalar chunks into columns; other chunks go to :meth:`skip`."""

    def __init__(self, keep_hidden: bool, report: Report) -> None:
        super().__init__(keep_hidden, report)
        self._values: list[np.ndarray] = []

    def add_chunk(self, chunk: Series) -> bool:
        """Add ``chunk`` if it holds scalars (see :func:`~tbconvert.model.as_scalar_series`);
        False (nothing added) otherwise."""
        chunk = as_scalar_series(chunk, self.report)
        if chunk is None:
            return False
        self.add(chunk)
        values = chunk.values
        if values.dtype.kind in "iu":
            self._values.append(as_float64(chunk, self.report))
        else:
            self._values.append(values)   # made float64 (exactly) in values()
        return True

    def values(self) -> np.ndarray:
        if not self._values:
            return np.zeros(0, np.float64)
        with np.errstate(invalid="ignore"):   # (a NaN's payload kept as it is)
            return np.concatenate(self._values, dtype=np.float64)

    def long_table(self):
        import pyarrow as pa
        return self.table({"value": pa.array(self.values(), pa.float64())})

    def wide_table(self):
        """One row per (run, step), one column per tag (sorted by name); null = no point.

        Where a tag has several points at one step (e.g. a logger that
        resumed without a restart marker), the last one read is kept and the
        others are reported. Row ``wall_time`` is the earliest wall time of
        the points the row keeps.
        """
        import pyarrow as pa
        if self.keep_hidden:
            raise UsageError("wide tables cannot mark the points TensorBoard's restart rule "
                             "hides; use the long form with --restarts keep-all")
        a = self.arrays()
        values = self.values()
        run, tag, step, wall = a["run"], a["tag"], a["step"], a["wall_time"]
        n = len(step)
        order = np.lexsort((np.arange(n), tag, step, run))
        run, tag, step, wall, values = run[order], tag[order], step[order], wall[order], \
            values[order]
        if n:
            last = np.ones(n, np.bool_)  # last of each (run, step, tag) group
            last[:-1] = (run[1:] != run[:-1]) | (step[1:] != step[:-1]) | (tag[1:] != tag[:-1])
        else:
            last = np.zeros(0, np.bool_)
        dropped = n - int(last.sum())
        if dropped:
            dup = ~last
            pairs = sorted({(self.runs.names[r], self.tags.names[t])
                            for r, t in zip(run[dup].tolist(), tag[dup].tolist(), strict=True)})
            for r, t in pairs:
                count = int(np.count_nonzero(dup & (run == self.runs.index[r])
                                             & (tag == self.tags.index[t])))
                report_duplicates(self.report, r, t, count)
        # rows: (run, step) groups of the sorted arrays
        if n:
            new_row = np.ones(n, np.bool_)
            new_row[1:] = (run[1:] != run[:-1]) | (step[1:] != step[:-1])
            starts = np.flatnonzero(new_row)
            row_of = np.cumsum(new_row) - 1
            row_wall = row_wall_times(wall, last, starts)
        else:
            starts = np.zeros(0, np.int64)
            row_of = np.zeros(0, np.int64)
            row_wall = np.zeros(0, np.float64)
        nrows = len(starts)
        cols = {"run": dictionary(run[starts], self.runs), "step": pa.array(step[starts]),
                "wall_time": pa.array(row_wall, pa.float64())}
        keep_rows, keep_tags, keep_values = row_of[last], tag[last], values[last]
        for t in sorted(range(len(self.tags.names)), key=lambda i: self.tags.names[i]):
            sel = keep_tags == t
            col = np.zeros(nrows, np.float64)
            missing = np.ones(nrows, np.bool_)
            col[keep_rows[sel]] = keep_values[sel]
            missing[keep_rows[sel]] = False
            cols[tag_column(self.tags.names[t], cols, self.report)] = \
                pa.array(col, pa.float64(), mask=missing)
        return pa.table(cols)
