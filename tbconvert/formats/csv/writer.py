"""The CSV writer: scalars in long form, or wide with ``Options.wide``.

Long form is written as the chunks arrive, a batch of at most
:data:`FLUSH_ROWS` rows at a time (memory bounded whatever the run's size);
wide form needs every run's columns before the header is known, so its rows wait
in a temporary file (:mod:`tbconvert.columns.wide`, memory bounded too) and are
written at :meth:`CsvWriter.close`.
Everything that is not a scalar series is counted and reported, per run and
tag. With ``restarts="keep-all"`` a ``hidden`` column marks the points
TensorBoard's restart rule hides.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from tbconvert import arrowpool
from tbconvert.columns import LONG_COLUMNS, ScalarColumns
from tbconvert.columns.wide import WideRows
from tbconvert.errors import UsageError
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.csv import encode
from tbconvert.model import Run, Series
from tbconvert.output import AtomicOutput
from tbconvert.report import Report, are, plural

FLUSH_ROWS = 1 << 16   # about 6 MiB of CSV text and its Arrow intermediates at a time

_OTHER_TOOLS = {"histograms": "tbconvert histograms", "images": "tbconvert media",
                "audio": "tbconvert media", "text": "tbconvert media or tbconvert.text()",
                "hparams": "tbconvert hparams"}


class CsvWriter(Writer):
    keeps_hidden = False  # hidden points arrive only with restarts="keep-all", then marked
    writes_wide = True

    def __init__(self, path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        arrowpool.choose()
        self._mark_hidden = options.restarts == "keep-all"
        if options.wide and self._mark_hidden:
            raise UsageError("--wide cannot mark the points TensorBoard's restart rule hides; "
                             "use the long form with --restarts keep-all")
        self._out = AtomicOutput(self.path, force=options.force, directory=False)
        self._wide = WideRows(report) if options.wide else None
        self._file = None
        self._group: Path | None = None     # the staged group being added
        # long-form rows depend on their run only, so runs can be written apart and joined
        self.run_parts = None if options.wide else "staged"
        self.guard(self._open)

    def _open(self) -> None:
        self._file = open(self._out.tmp, "wb")
        if self._wide is None:
            names = LONG_COLUMNS + (("hidden",) if self._mark_hidden else ())
            self._file.write(encode.header(names))

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        if self._wide is None:
            _write_long(self._file, run, series, self.report, self._mark_hidden, self.guard)
            return
        others: dict = {}
        for chunk in series:
            if not self._wide.add(chunk):
                _count_other(others, chunk)
        self._wide.end_run()
        _report_others(run, others, self.report)

    @staticmethod
    def group_stage(path: Path, tmp: Path) -> GroupFile:
        """Where :meth:`stage_run` puts the rows of a group of runs converted together (see
        :class:`~tbconvert.runtasks.RunGroup`)."""
        return GroupFile(path, tmp)

    @staticmethod
    def stage_run(path: Path, run: Run, series: Iterable[Series], report: Report,
                  options: Options, group: GroupFile | None = None) -> dict | None:
        """One run's rows, written on its own into the new file ``path`` (maybe in another
        process), for :meth:`append_staged` to add: long-form rows depend on their run only.
        With ``group`` (its group's :meth:`group_stage`) they go there instead, after the
        group's runs before it, and ``path`` is not made (a file cost a sweep's small run more
        than its rows)."""
        arrowpool.choose()
        keep_all = options.restarts == "keep-all"
        if group is not None:
            return group.add(lambda fh: _write_long(fh, run, series, report, keep_all))
        with open(path, "xb") as fh:
            _write_long(fh, run, series, report, keep_all)
        return None

    def append_staged(self, path: Path, info, run_name: str) -> None:
        if isinstance(info, dict) and "group" in info:
            source = path.with_name(info["group"])
            if self._group is not None and self._group != source:
                self._group.unlink(missing_ok=True)     # (its runs are all in)
            self._group = source
            self.guard(lambda: _append_file(self._file, source, info["start"], info["end"]))
            return
        self.guard(lambda: _append_file(self._file, path))

    def close(self) -> None:
        def finish():
            if self._wide is not None:
                names = self._wide.column_names()
                self._file.write(encode.header(names))
                for table in self._wide.tables(names):
                    encode.write(table, self._file, with_header=False)
                    arrowpool.release()
                self._wide.close()
            self._file.close()
            self._out.commit()
        self.guard(finish)

    def abort(self) -> None:
        if self._wide is not None:
            self._wide.close()
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._out.abort()


def _count_other(others: dict, chunk: Series) -> None:
    entry = others.setdefault(chunk.tag, [chunk, 0])
    entry[1] += len(chunk)


def _report_others(run: Run, others: dict, report: Report) -> None:
    """Every series that is not scalars is counted and reported."""
    for tag, (chunk, n) in others.items():
        what = chunk.metadata.plugin_name or chunk.data_class.name.lower()
        hint = _OTHER_TOOLS.get(chunk.metadata.plugin_name)
        report.add("not_in_table",
                   f"{run.name}/{tag}: {plural(n, 'point')} ({what}) "
                   f"{are(n)} not scalar and not in the CSV"
                   + (f" (see {hint})" if hint else ""),
                   run=run.name, tag=tag, count=n)


def _write_long(fh, run: Run, series: Iterable[Series], report: Report, mark_hidden: bool,
                guard=lambda fn: fn()) -> None:
    """A run's rows in long form, :data:`FLUSH_ROWS` at a time (``guard`` runs each write)."""
    def flush(cols: ScalarColumns) -> None:
        if cols.rows:
            guard(lambda: encode.write(cols.long_table(), fh, with_header=False))
            arrowpool.release()

    cols = ScalarColumns(mark_hidden, report)
    others: dict = {}
    for chunk in series:
        if not cols.add_chunk(chunk):
            _count_other(others, chunk)
        elif cols.rows >= FLUSH_ROWS:
            flush(cols)
            cols = ScalarColumns(mark_hidden, report)
    flush(cols)
    _report_others(run, others, report)


def _append_file(fh, path: Path, start: int = 0, end: int | None = None) -> None:
    """The bytes of ``path`` (from ``start`` to ``end``: the end of the file when None) at
    the end of the open file ``fh``."""
    fh.flush()
    with open(path, "rb") as src:
        size = os.fstat(src.fileno()).st_size if end is None else end
        if size > os.fstat(src.fileno()).st_size:
            raise OSError(errno.EIO, f"{path}: the staged rows ended early")
        sent, out = start, fh.fileno()
        try:
            while sent < size:
                n = os.sendfile(out, src.fileno(), sent, size - sent)
                if n == 0:
                    raise OSError(errno.EIO, f"{path}: the staged rows ended early")
                sent += n
        except (AttributeError, OSError) as exc:
            if sent > start or getattr(exc, "errno", None) not in (errno.EINVAL, errno.ENOSYS,
                                                                   None):
                raise
            src.seek(start)
            left = size - start
            while left > 0:
                block = src.read(min(left, 1 << 20))
                if not block:
                    raise OSError(errno.EIO, f"{path}: the staged rows ended early") from None
                fh.write(block)
                left -= len(block)


class GroupFile:
    """The rows of the runs of a group converted by one task, one run after another in one
    file; it appears under its name once all are in (:meth:`finish`)."""

    def __init__(self, path: Path, tmp: Path) -> None:
        """``tmp``: where it is written until then."""
        self.path, self._tmp = Path(path), Path(tmp)
        self._fh = None

    def add(self, write) -> dict:
        """``write(fh)`` of a run's rows; where they lie, for :meth:`CsvWriter.append_staged`."""
        if self._fh is None:
            self._fh = open(self._tmp, "xb")
        start = self._fh.tell()
        write(self._fh)
        return {"group": self.path.name, "start": start, "end": self._fh.tell()}

    def finish(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
            os.replace(self._tmp, self.path)

    def discard(self) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
                self._fh = None
        finally:
            self._tmp.unlink(missing_ok=True)
