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
import shutil
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
    def stage_run(path: Path, run: Run, series: Iterable[Series], report: Report,
                  options: Options) -> None:
        """One run's rows, written on its own into the new file ``path`` (maybe in another
        process), for :meth:`append_staged` to add: long-form rows depend on their run only."""
        arrowpool.choose()
        with open(path, "xb") as fh:
            _write_long(fh, run, series, report, options.restarts == "keep-all")

    def append_staged(self, path: Path, info, run_name: str) -> None:
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


def _append_file(fh, path: Path) -> None:
    """The bytes of ``path`` at the end of the open file ``fh``."""
    fh.flush()
    with open(path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        sent, out = 0, fh.fileno()
        try:
            while sent < size:
                n = os.sendfile(out, src.fileno(), sent, size - sent)
                if n == 0:
                    raise OSError(errno.EIO, f"{path}: the staged rows ended early")
                sent += n
        except (AttributeError, OSError) as exc:
            if sent or getattr(exc, "errno", None) not in (errno.EINVAL, errno.ENOSYS, None):
                raise
            shutil.copyfileobj(src, fh, 1 << 20)
