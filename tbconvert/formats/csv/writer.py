"""The CSV writer: scalars in long form, or wide with ``Options.wide``.

Long form is written as the chunks arrive, a batch of at most
:data:`FLUSH_ROWS` rows at a time (memory bounded whatever the run's size);
wide form needs every run's columns before the header is known, so it buffers
the scalar columns (only scalars) and writes at :meth:`CsvWriter.close`.
Everything that is not a scalar series is counted and reported, per run and
tag. With ``restarts="keep-all"`` a ``hidden`` column marks the points
TensorBoard's restart rule hides.
"""

from __future__ import annotations

from collections.abc import Iterable

from tbconvert import arrowpool
from tbconvert.columns import LONG_COLUMNS, ScalarColumns
from tbconvert.errors import UsageError
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.csv import encode
from tbconvert.model import Run, Series
from tbconvert.output import AtomicOutput
from tbconvert.report import Report

FLUSH_ROWS = 1 << 16   # about 6 MiB of CSV text and its Arrow intermediates at a time

_OTHER_TOOLS = {"histograms": "tbconvert histograms", "images": "tbconvert media",
                "audio": "tbconvert media", "text": "tbconvert media or tbconvert.text()",
                "hparams": "tbconvert hparams"}


class CsvWriter(Writer):
    keeps_hidden = False  # hidden points arrive only with restarts="keep-all", then marked

    def __init__(self, path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        arrowpool.choose()
        self._mark_hidden = options.restarts == "keep-all"
        if options.wide and self._mark_hidden:
            raise UsageError("--wide cannot mark the points TensorBoard's restart rule hides; "
                             "use the long form with --restarts keep-all")
        self._out = AtomicOutput(self.path, force=options.force, directory=False)
        self._wide = ScalarColumns(False, report) if options.wide else None
        self._file = None
        self.guard(self._open)

    def _open(self) -> None:
        self._file = open(self._out.tmp, "wb")
        if self._wide is None:
            names = LONG_COLUMNS + (("hidden",) if self._mark_hidden else ())
            self._file.write(encode.header(names))

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        cols = self._wide if self._wide is not None else ScalarColumns(self._mark_hidden,
                                                                       self.report)
        others: dict[str, list] = {}
        for chunk in series:
            if not cols.add_chunk(chunk):
                entry = others.setdefault(chunk.tag, [chunk, 0])
                entry[1] += len(chunk)
            elif self._wide is None and cols.rows >= FLUSH_ROWS:
                self._write_long(cols)
                cols = ScalarColumns(self._mark_hidden, self.report)
        for tag, (chunk, n) in others.items():
            what = chunk.metadata.plugin_name or chunk.data_class.name.lower()
            hint = _OTHER_TOOLS.get(chunk.metadata.plugin_name)
            self.report.add("not_in_table",
                            f"{run.name}/{tag}: {n} {what} points are not scalars and are not in "
                            f"the CSV" + (f" (see {hint})" if hint else ""),
                            run=run.name, tag=tag, count=n)
        if self._wide is None:
            self._write_long(cols)

    def _write_long(self, cols: ScalarColumns) -> None:
        if cols.rows:
            self.guard(lambda: encode.write(cols.long_table(), self._file, with_header=False))
            arrowpool.release()

    def close(self) -> None:
        def finish():
            if self._wide is not None:
                encode.write(self._wide.wide_table(), self._file)
            self._file.close()
            self._out.commit()
        self.guard(finish)

    def abort(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
        self._out.abort()
