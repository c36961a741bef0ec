"""Analysis tables: every point of every run as pandas DataFrames or Arrow tables.

Each function takes a *source*: a path in any format tbconvert reads (an
event-file logdir, a TensorBoard.dev export, a Parquet or HDF5 archive), or
what :func:`read` returned. ``runs`` and ``tags`` are regular expressions
(``re.search``). Nothing is sampled. By default the tables hold what
TensorBoard shows; ``restarts="keep-all"`` also keeps the points its restart
rule hides, marked in a boolean ``hidden`` column.

The ``*_table`` variants (or ``as_arrow=True``) return a ``pyarrow.Table``
for Polars, DuckDB and friends; the others a pandas DataFrame (pandas is the
optional extra ``tbconvert[pandas]``). ``run`` and ``tag`` are dictionary
(categorical) columns; values are float64, exact for float32 sources.

Example::

    >>> import tbconvert
    >>> df = tbconvert.scalars("fixtures/torch_logdir", runs="^train$", tags="^loss$")
    >>> list(df.columns)
    ['run', 'tag', 'step', 'wall_time', 'value']
    >>> len(df)
    50
"""

from __future__ import annotations

import collections
import functools
import io
import warnings
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from tbconvert import api
from tbconvert.errors import DataLossWarning, MissingDependencyError, UsageError
from tbconvert.report import Report, given, headline
from tbconvert.restarts import Restarts
from tbconvert.tables._data import Data, read
from tbconvert.tables._source import drop_hidden_notes, feed, iter_source, table_options

__all__ = ["read", "Data", "scalars", "scalars_table", "hparams", "hparams_table", "histograms",
           "histograms_table", "tensors", "tensors_table", "text", "text_table", "images",
           "images_table", "audio", "audio_table", "open_image", "extract_media",
           "MediaReport", "save_table", "check_table_path"]


def _pandas(table):
    try:
        import pandas  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "DataFrames need pandas: pip install 'tbconvert[pandas]' "
            "(or use the *_table functions for Arrow tables)") from None
    return table.to_pandas()


def _finish(table, as_arrow: bool):
    return table if as_arrow else _pandas(table)


def _tells_losses(fn):
    """``fn`` (a table function) with what it left out told as a :class:`DataLossWarning`
    when its caller passed no ``report`` (with one, the report holds it, and nothing is
    warned): a DataFrame has no place for it, and it must not go unsaid."""
    @functools.wraps(fn)
    def told(*args, report: Report | None = None, **kw):
        if report is not None:
            return fn(*args, report=report, **kw)
        report = Report()
        result = fn(*args, report=report, **kw)
        by_kind = collections.defaultdict(list)
        for issue in report.lost:
            by_kind[issue.kind].append(issue)
        if by_kind:
            said = "; ".join(headline(kind, issues) for kind, issues in by_kind.items())
            warnings.warn(f"tbconvert.{fn.__name__}: {said} (pass report=tbconvert.Report() "
                          "to see each)", DataLossWarning, stacklevel=2)
        return result
    return told


# --------------------------------------------------------------------------- tables

def _format(reading: dict) -> str | None:
    """The source format a caller named (``format=``, as :func:`read` takes it, or
    ``from_format=``, as :func:`tbconvert.convert` and the error messages say), taken out
    of the reading keywords."""
    return api.source_format(reading.pop("format", None), reading.pop("from_format", None))


def _collect(make_columns, source, runs, tags, restarts, report, options=None, reading=None,
             add=None):
    """Read ``source`` (selected by ``options``, or by ``runs``, ``tags``, ``restarts`` and
    the reading keywords ``reading``) into the collector ``make_columns(keep_hidden, report)``
    builds. ``add``: its rows go to ``add(table)`` a part at a time instead of staying in it
    (see :mod:`tbconvert.tables._parts`)."""
    report = given(report)
    reading = dict(reading or {})
    fmt = _format(reading)
    options = api.options_from(options, table_options, runs=runs, tags=tags, restarts=restarts,
                               **reading)
    collector = make_columns(options.restarts == "keep-all", report)
    if add is None:
        feed(source, options, report, lambda _run, chunk: collector.add_chunk(chunk), fmt)
    else:
        from tbconvert.tables._parts import collect_into
        collect_into(add, collector, source, options, report, fmt)
    api.tell_unmatched(options, report)
    return collector


@_tells_losses
def scalars_table(source, runs=None, tags=None, *, wide: bool = False,
                  restarts: Restarts = "visible", report: Report | None = None, options=None,
                  **reading):
    """Scalars as a ``pyarrow.Table``; see :func:`scalars`."""
    from tbconvert.columns import ScalarColumns
    cols = _collect(ScalarColumns, source, runs, tags, restarts, report, options, reading)
    return cols.wide_table() if wide else cols.long_table()


@_tells_losses
def scalars(source, runs=None, tags=None, *, wide: bool = False, restarts: Restarts = "visible",
            as_arrow: bool = False, report: Report | None = None,
            **reading):
    """Every scalar point: columns ``run, tag, step, wall_time, value`` (+ ``hidden``).

    ``wide=True``: one row per (run, step), one column per tag (sorted),
    missing where a tag has no point at that step (null in Arrow, NaN in
    pandas); ``wall_time`` is the earliest of the points the row keeps. Pass a
    :class:`~tbconvert.report.Report` to see what was left out.

    Example::

        >>> df = tbconvert.scalars("fixtures/torch_logdir", runs="^train$", tags="^loss")
        >>> sorted(df.tag.unique())
        ['loss', 'loss_hi', 'loss_lo']
        >>> w = tbconvert.scalars("fixtures/torch_logdir", runs="^train$", tags="^l", wide=True)
        >>> list(w.columns)
        ['run', 'step', 'wall_time', 'loss', 'loss_hi', 'loss_lo', 'lr']
    """
    return _finish(scalars_table(source, runs, tags, wide=wide, restarts=restarts, report=report,
                                 **reading),
                   as_arrow)


@_tells_losses
def histograms_table(source, runs=None, tags=None, *, restarts: Restarts = "visible",
                     report: Report | None = None, options=None,
                     **reading):
    """Histograms as a ``pyarrow.Table``; see :func:`histograms`."""
    from tbconvert.columns.nonscalar import HistogramColumns
    return _collect(HistogramColumns, source, runs, tags, restarts, report, options, reading).arrow()


def write_histograms(source, path, runs=None, tags=None, *, restarts: Restarts = "visible",
                     report: Report | None = None, options=None, force: bool = False,
                     storage_options=None, **reading) -> int:
    """:func:`histograms_table` written to ``path`` (``.csv`` or ``.parquet``) a part at a
    time, in bounded memory whatever the number of buckets; the rows written."""
    from tbconvert.columns.nonscalar import HistogramColumns
    from tbconvert.tables._parts import table_file
    rows = 0
    with table_file(path, force=force, storage_options=storage_options) as add:
        def counted(table) -> None:
            nonlocal rows
            rows += table.num_rows
            add(table)
        _collect(HistogramColumns, source, runs, tags, restarts, report, options, reading,
                 add=counted)
    return rows


@_tells_losses
def histograms(source, runs=None, tags=None, *, restarts: Restarts = "visible",
               as_arrow: bool = False, report: Report | None = None,
               **reading):
    """One row per histogram bucket: ``run, tag, step, wall_time, left, right, count``.

    Buckets are as TensorBoard stores them (legacy histograms trimmed of empty
    end buckets). Example::

        >>> h = tbconvert.histograms("fixtures/tensorboardx_logdir", tags="hand_made")
        >>> h[["left", "right", "count"]].shape[1], list(h["count"])
        (3, [1.0, 2.0, 3.0])
    """
    return _finish(histograms_table(source, runs, tags, restarts=restarts, report=report,
                                    **reading),
                   as_arrow)


@_tells_losses
def tensors_table(source, runs=None, tags=None, *, scalars: bool = False,
                  restarts: Restarts = "visible", report: Report | None = None, options=None,
                  **reading):
    """Numeric tensors as a ``pyarrow.Table``; see :func:`tensors`."""
    from tbconvert.columns.nonscalar import TensorColumns
    return _collect(partial(TensorColumns, scalars=scalars), source, runs, tags, restarts,
                    report, options, reading).arrow()


@_tells_losses
def tensors(source, runs=None, tags=None, *, scalars: bool = False, restarts: Restarts = "visible",
            as_arrow: bool = False, report: Report | None = None,
            **reading):
    """One row per numeric tensor point (PR curves, histograms, meshes, third-party plugins):
    ``run, tag, step, wall_time, plugin, dtype, shape, values``.

    ``values`` is the tensor flattened in row-major order as float64 (exact for
    float32 and for integers up to 2**53; wider ones are rounded and counted in the
    report), ``shape`` its dimensions as ``"2x11"``,
    ``dtype`` its TensorFlow type (``float32``, ``bfloat16``...). Text, hparams,
    images and audio have tables of their own; string and complex tensors are
    counted in the report. ``scalars=True`` also gives every scalar point as a
    one-value tensor (``shape`` ``""``). Example::

        >>> t = tbconvert.tensors("fixtures/torch_logdir", tags="^pr/")
        >>> t.loc[0, "shape"], t.loc[0, "values"].reshape(6, 11).shape
        ('6x11', (6, 11))
    """
    return _finish(tensors_table(source, runs, tags, scalars=scalars, restarts=restarts,
                                 report=report, **reading), as_arrow)


@_tells_losses
def text_table(source, runs=None, tags=None, *, restarts: Restarts = "visible",
               report: Report | None = None, options=None,
               **reading):
    """Text as a ``pyarrow.Table``; see :func:`text`."""
    from tbconvert.columns.nonscalar import TextColumns
    return _collect(TextColumns, source, runs, tags, restarts, report, options, reading).arrow()


@_tells_losses
def text(source, runs=None, tags=None, *, restarts: Restarts = "visible", as_arrow: bool = False,
         report: Report | None = None, **reading):
    """Text summaries: ``run, tag, step, wall_time, index, dims, text``.

    A scalar string is one row; a vector or matrix of strings (rendered as a
    table by TensorBoard) is one row per element in row-major order, with
    ``index`` its flat position and ``dims`` e.g. ``"2x2"``. Text is decoded
    as UTF-8 (invalid bytes become U+FFFD and are reported). A number logged as
    text is its text in its own dtype (float32 0.1 is ``"0.1"``); a point with no
    text (a tensor kept as raw bytes, or one value filling more than 16,384 cells)
    is reported, not listed. Example::

        >>> t = tbconvert.text("fixtures/torch_logdir")
        >>> list(t.columns)
        ['run', 'tag', 'step', 'wall_time', 'index', 'dims', 'text']
    """
    return _finish(text_table(source, runs, tags, restarts=restarts, report=report, **reading), as_arrow)


@_tells_losses
def images_table(source, runs=None, tags=None, *, details: bool = False,
                 restarts: Restarts = "visible", report: Report | None = None, options=None,
                 **reading):
    """Images as a ``pyarrow.Table``; see :func:`images`."""
    from tbconvert.columns.nonscalar import MediaColumns
    return _collect(partial(MediaColumns, "images", details=details), source, runs, tags,
                    restarts, report, options, reading).arrow()


@_tells_losses
def images(source, runs=None, tags=None, *, details: bool = False, restarts: Restarts = "visible",
           as_arrow: bool = False, report: Report | None = None,
           **reading):
    """Images: ``run, tag, step, wall_time, index, width, height, format, data``.

    ``data`` is the encoded file (PNG, JPEG...; ``format`` from its first
    bytes); open one with :func:`open_image`. ``details=True`` adds
    ``content_type`` (``image/png``...) before ``data``. Example::

        >>> im = tbconvert.images("fixtures/torch_logdir", tags="samples/image")
        >>> tbconvert.open_image(im.data[0]).size
        (16, 16)
    """
    return _finish(images_table(source, runs, tags, details=details, restarts=restarts,
                                report=report, **reading), as_arrow)


@_tells_losses
def audio_table(source, runs=None, tags=None, *, details: bool = False,
                restarts: Restarts = "visible", report: Report | None = None, options=None,
                **reading):
    """Audio clips as a ``pyarrow.Table``; see :func:`audio`."""
    from tbconvert.columns.nonscalar import MediaColumns
    return _collect(partial(MediaColumns, "audio", details=details), source, runs, tags,
                    restarts, report, options, reading).arrow()


@_tells_losses
def audio(source, runs=None, tags=None, *, details: bool = False, restarts: Restarts = "visible",
          as_arrow: bool = False, report: Report | None = None,
          **reading):
    """Audio clips: ``run, tag, step, wall_time, index, format, data`` (usually WAV bytes).

    ``details=True`` adds ``content_type``, ``sample_rate``, ``channels`` and
    ``length_frames`` (from the WAV header; missing for other formats) before ``data``.
    """
    return _finish(audio_table(source, runs, tags, details=details, restarts=restarts,
                               report=report, **reading), as_arrow)


def open_image(data: bytes):
    """A ``PIL.Image`` for encoded image bytes (needs Pillow)."""
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependencyError("opening images needs Pillow: pip install pillow") from None
    return Image.open(io.BytesIO(bytes(data)))


@_tells_losses
def hparams_table(source, runs=None, tags=None, *, restarts: Restarts = "visible",
                  report: Report | None = None, options=None,
                  **reading):
    """Hyperparameter trials as a ``pyarrow.Table``; see :func:`hparams`."""
    from tbconvert.columns.hparams import Collected, trials_table
    report = given(report)
    # Metric values live in sub-runs of the session runs: read every run, then
    # apply ``runs`` to the sessions and ``tags`` to the metric columns.
    fmt = _format(reading)
    sel = api.options_from(options, table_options, runs=runs, tags=tags, restarts=restarts,
                           **reading)
    read_options = replace(sel, runs=None, tags=None)
    collected = Collected()
    start = len(report.issues)
    for run, chunks in iter_source(source, read_options, report, fmt):
        collected.add(run.name, chunks, report)
    table = trials_table(collected, report, session_filter=sel.wants_run if sel.runs else None,
                         tag_filter=sel.wants_tag_of if sel.tags else None)
    # Of all that was read, only the series that give a metric its value are in the table:
    # points the restart rule hides elsewhere are no concern of it.
    drop_hidden_notes(report, start, lambda i: (i.run, i.tag) in collected.in_table)
    api.tell_unmatched(sel, report, tags_are="metric tag(s) of the trials",
                       no_tags="the table has no metric columns",
                       runs_are="trial run(s) in the source")
    return table


@_tells_losses
def hparams(source, runs=None, tags=None, *, restarts: Restarts = "visible", as_arrow: bool = False,
            report: Report | None = None, **reading):
    """One row per trial: ``run``, each hyperparameter (sorted), each metric's last value,
    ``status`` (success/failure/running/unknown), ``start_time``, ``end_time``.

    Works for PyTorch/tensorboardX ``add_hparams`` (a timestamped sub-run per
    call) and TensorFlow's hparams API. ``runs`` selects trials, ``tags``
    metric columns. Example::

        >>> hp = tbconvert.hparams("fixtures/tf2_logdir")
        >>> list(hp.run)
        ['hparams/trial_0', 'hparams/trial_1']
    """
    return _finish(hparams_table(source, runs, tags, restarts=restarts, report=report, **reading), as_arrow)


# --------------------------------------------------------------------------- files

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def check_table_path(path, *, force: bool = False, storage_options=None) -> Path:
    """Fail early (before reading anything) on a bad table name or an existing file."""
    from tbconvert import remote
    from tbconvert.errors import OutputExistsError
    path = remote.localize(path)
    if remote.is_remote(path):
        if not path.lower().endswith(TABLE_SUFFIXES):
            raise UsageError(f"{path}: name the output .csv or .parquet")
        if not force and remote.exists(path, storage_options):
            raise OutputExistsError(f"{path} already exists; pass --force to replace it "
                                    "(it is only replaced once the new output is complete)")
        return path
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise UsageError(f"{path}: name the output .csv or .parquet")
    if (path.exists() or path.is_symlink()) and not force:
        raise OutputExistsError(f"{path} already exists; pass --force to replace it "
                                "(it is only replaced once the new output is complete)")
    return path


def save_table(table, path, *, force: bool = False, storage_options=None):
    """Write an Arrow table as ``.csv`` or ``.parquet`` (by suffix), atomically; ``path`` may
    be an fsspec URL (``s3://bucket/t.parquet``)."""
    from tbconvert import remote
    from tbconvert.tables._parts import table_file
    with table_file(path, force=force, storage_options=storage_options) as add:
        add(table)
    path = remote.localize(path)
    return path if remote.is_remote(path) else Path(path)


@dataclass
class MediaReport(Report):
    """The report of :func:`extract_media`, with the number of ``files`` written."""

    files: int = 0

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["media"] = {"files": self.files}
        return out


def extract_media(source, out_dir, runs=None, tags=None, *, restarts: Restarts = "visible",
                  force: bool = False, report: Report | None = None, options=None,
                  **reading) -> Report:
    """Write images, audio and text as files: ``out_dir/<run>/<tag>/<step>_<index>.<ext>``.

    PNG/JPEG/GIF by their first bytes, audio as ``.wav``, text as UTF-8
    ``.txt``; run and tag parts are made safe (the root run ``.`` is ``%2E``).
    ``out_dir`` must not exist or be empty unless ``force=True``; it appears
    only once complete. Returns the report (lost blobs, renamed paths); unless a plain
    :class:`~tbconvert.report.Report` was passed in, a :class:`MediaReport` that also
    counts the files. Other keywords are the reading ones of :func:`scalars`
    (``ignore_checksum=``, ``allow_pickle=``, ``format=``...).

    Example::

        >>> import os, tempfile
        >>> from pathlib import Path
        >>> out = os.path.join(tempfile.mkdtemp(), "media")
        >>> report = tbconvert.extract_media("fixtures/torch_logdir", out, tags="samples/image")
        >>> sorted(p.name for p in Path(out, "train", "samples", "image").iterdir())
        ['0_0.png', '49_0.png']
    """
    from tbconvert.tables._media import extract
    report = given(report, MediaReport)
    reading = dict(reading)
    fmt = _format(reading)
    options = api.options_from(options, table_options, runs=runs, tags=tags,
                               restarts=restarts, force=force, **reading)
    files = extract(source, out_dir, options, report, fmt)
    api.tell_unmatched(options, report)
    if isinstance(report, MediaReport):
        report.files += files
    return report
