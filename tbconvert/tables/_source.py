"""Where table rows come from: any source the registry reads, streamed run by run.

Everything here works on the reader stream (``Reader.iter_runs``): one run at a
time, series in chunks, points as numpy columns. Nothing builds one Python
object per point.
"""

from __future__ import annotations

import os
from typing import Iterator

from tbconvert import api
from tbconvert.errors import UsageError
from tbconvert.formats.base import Options, Reader
from tbconvert.model import Run, Series
from tbconvert.report import Report

RESTART_CHOICES = ("visible", "keep-all")


def make_options(runs=None, tags=None, restarts: str = "visible", **kw) -> Options:
    """Options for a table: run/tag regexes (strings or compiled) and the restart rule."""
    if restarts not in RESTART_CHOICES:
        raise UsageError(f"restarts must be one of {', '.join(RESTART_CHOICES)}, not {restarts!r}")
    return api.make_options(runs=runs, tags=tags, restarts=restarts, **kw)


def iter_source(source, options: Options, report: Report) -> Iterator[tuple[Run, Iterator[Series]]]:
    """Yield ``(run, chunks)`` for each selected run of ``source``.

    ``source`` is a path (any format the registry can read), an open
    :class:`~tbconvert.formats.base.Reader`, a :class:`tbconvert.api.Loaded`
    or a :class:`tbconvert.tables.Data`. Chunks are filtered by tag and, unless
    ``options.restarts == "keep-all"``, stripped of the points TensorBoard's
    restart rule hides (counted in the report). The caller must consume each
    run's chunks before asking for the next run (unconsumed ones are drained).
    """
    loaded = getattr(source, "loaded", source)
    if isinstance(loaded, api.Loaded):
        for name, run in loaded.runs.items():
            if not options.wants_run(name):
                continue
            report.runs += 1
            yield run, api.select(loaded.series.get(name, {}).values(), options, report)
        return
    if isinstance(source, Reader):
        yield from api.selected_runs(source, options, report)
        return
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(f"expected a path, a reader or data from tbconvert.read(), "
                         f"got {type(source).__name__}")
    with api.open_reader(source, options=options, report=report) as reader:
        yield from api.selected_runs(reader, options, report)
