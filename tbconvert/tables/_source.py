"""Where table rows come from: any source the registry reads, streamed run by run.

Everything here works on the reader stream (``Reader.iter_runs``): one run at a
time, series in chunks, points as numpy columns. Nothing builds one Python
object per point. The column builders the rows go into are in
:mod:`tbconvert.columns`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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


def iter_source(source, options: Options, report: Report,
                fmt: str | None = None) -> Iterator[tuple[Run, Iterator[Series]]]:
    """Yield ``(run, chunks)`` for each selected run of ``source``.

    ``source`` is a path (any format the registry can read), an open
    :class:`~tbconvert.formats.base.Reader` or a :class:`tbconvert.tables.Data`.
    Chunks are filtered by tag and, unless ``options.restarts == "keep-all"``,
    stripped of the points TensorBoard's restart rule hides (counted in the
    report). The caller must consume each
    run's chunks before asking for the next run (unconsumed ones are drained). ``fmt``
    names the format of a path whose format cannot be told.
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
    start = len(report.issues)
    try:
        with api.open_reader(source, format=fmt, options=options, report=report) as reader:
            yield from api.selected_runs(reader, options, report)
    finally:
        # A table takes a few kinds of data from the event files: that the files of other
        # plugins beside them were not read is no news to it (what a report passed in held
        # before stays).
        report.issues[start:] = [i for i in report.issues[start:]
                                 if i.kind != "plugin_files_not_read"]


def feed(source, options: Options, report: Report, take, fmt: str | None = None) -> None:
    """Each chunk of each selected run of ``source`` (as :func:`iter_source` yields them) to
    ``take(run, chunk)``, which answers whether the output holds that chunk's data.

    A chunk stripped of the points TensorBoard's restart rule hides comes with a note that
    says so; only the chunks taken keep it. Left out of data the output never holds (the
    scalars of a media extraction), the hidden points are no loss, and a note on them would
    only mislead.
    """
    for run, chunks in iter_source(source, options, report, fmt):
        mark = len(report.issues)
        for chunk in chunks:
            if not take(run, chunk):
                drop_hidden_notes(report, mark)
            mark = len(report.issues)


def drop_hidden_notes(report: Report, since: int, keep=lambda issue: False) -> None:
    """Take back the notes on points left out by the restart rule added since issue
    ``since``, but those ``keep(issue)`` holds to."""
    report.issues[since:] = [i for i in report.issues[since:]
                             if i.kind != "hidden_points_left_out" or keep(i)]
