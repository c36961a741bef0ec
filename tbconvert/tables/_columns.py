"""Column builders for the tables, and the stream of runs they are filled from.

Rows come from any source the registry reads, streamed run by run. Everything
here works on the reader stream (``Reader.iter_runs``): one run at a time,
series in chunks, points as numpy columns. Nothing builds one Python object
per point.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from tbconvert import api
from tbconvert.errors import UsageError
from tbconvert.formats.base import Options, Reader
from tbconvert.model import Run, Series
from tbconvert.report import Report
from tbconvert.restarts import Restarts
from tbconvert.restarts import check as check_restarts
from tbconvert.tables._data import Data


def table_options(runs=None, tags=None, restarts: Restarts = "visible", **kw) -> Options:
    """Options for a table: run/tag regexes (strings or compiled) and the restart rule."""
    check_restarts(restarts)
    return api.make_options(runs=runs, tags=tags, restarts=restarts, **kw)


def iter_source(source, options: Options, report: Report) -> Iterator[tuple[Run, Iterator[Series]]]:
    """Yield ``(run, chunks)`` for each selected run of ``source``.

    ``source`` is a path (any format the registry can read), an open
    :class:`~tbconvert.formats.base.Reader` or a :class:`tbconvert.tables.Data`.
    Chunks are filtered by tag and, unless ``options.restarts == "keep-all"``,
    stripped of the points TensorBoard's restart rule hides (counted in the
    report). The caller must consume each
    run's chunks before asking for the next run (unconsumed ones are drained).
    """
    if isinstance(source, Data):
        for name, run in source.runs.items():
            if not options.wants_run(name):
                continue
            report.runs += 1
            yield run, api.select(source.every_point.get(name, {}).values(), options, report)
        return
    if isinstance(source, Reader):
        yield from api.selected_runs(source, options, report)
        return
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(f"expected a path, a reader or data from tbconvert.read(), "
                         f"got {type(source).__name__}")
    with api.open_reader(source, options=options, report=report) as reader:
        yield from api.selected_runs(reader, options, report)


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
        self._run_ids: list[np.ndarray] = []
        self._tag_ids: list[np.ndarray] = []
        self._steps: list[np.ndarray] = []
        self._walls: list[np.ndarray] = []
        self._hidden: list[np.ndarray] = []
        self.rows = 0

    def add(self, chunk: Series, repeat: np.ndarray | None = None) -> None:
        steps, walls = chunk.steps, chunk.wall_times
        hidden = chunk.hidden if chunk.hidden is not None else np.zeros(len(chunk), np.bool_)
        if repeat is not None:
            steps, walls, hidden = (np.repeat(a, repeat) for a in (steps, walls, hidden))
        n = len(steps)
        self._run_ids.append(np.full(n, self.runs.id(chunk.run), np.int32))
        self._tag_ids.append(np.full(n, self.tags.id(chunk.tag), np.int32))
        self._steps.append(steps)
        self._walls.append(walls)
        self._hidden.append(hidden)
        self.rows += n

    @staticmethod
    def _cat(parts, dtype) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"run": self._cat(self._run_ids, np.int32),
                "tag": self._cat(self._tag_ids, np.int32),
                "step": self._cat(self._steps, np.int64),
                "wall_time": self._cat(self._walls, np.float64),
                "hidden": self._cat(self._hidden, np.bool_)}

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
