"""The one copy loop, and the Python entry points built on it.

Every conversion (the command line, :func:`convert`, the tests) goes through
:func:`copy`: reader -> optional run/tag selection -> writer, one run at a
time, counting what passes and reporting what does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tbconvert import names, registry
from tbconvert.errors import FormatError, UsageError
from tbconvert.formats.base import Options, Reader, Writer
from tbconvert.report import Report, given, plural, were

if TYPE_CHECKING:  # numpy loads with the model, once data is read (not for --help or errors)
    from tbconvert.model import Run, Series


def make_options(*, runs=None, tags=None, **kw) -> Options:
    """Options from plain values, each checked with a clear error (by :class:`Options`
    itself); regex strings are compiled."""
    _check_keywords(kw)
    check_jobs(kw.get("jobs", 1))
    return Options(runs=runs, tags=tags, **kw)


def options_from(options, make=None, **given) -> Options:
    """``options`` when the caller passed a ready one, else ``make(**given)`` (default
    :func:`make_options`); a UsageError when a ready ``options`` comes with keyword arguments
    that would set what it sets (``given``: the caller's keyword arguments, as passed; one
    left at the value an ``Options`` has by default counts as not given)."""
    if options is None:
        return watched((make or make_options)(**given))
    import dataclasses
    unset = {f.name: f.default for f in dataclasses.fields(Options)}
    set_ = sorted(k for k, v in given.items() if k not in unset or v != unset[k])
    if set_:
        raise UsageError(f"pass either options= or the keyword arguments it holds, not both "
                         f"(options= came with {', '.join(f'{k}=' for k in set_)})")
    check_jobs(options.jobs)
    return watched(options)


def watched(options: Options) -> Options:
    """``options``, made to remember whether its ``runs`` / ``tags`` matched anything (a
    copy: the caller's object is left as it is); see :func:`tell_unmatched`."""
    from tbconvert.formats.base import WatchedOptions
    if isinstance(options, WatchedOptions):
        return options
    import dataclasses
    return WatchedOptions(**{f.name: getattr(options, f.name)
                             for f in dataclasses.fields(Options)})


def tell_unmatched(options: Options, report: Report, **wording) -> None:
    """A note in ``report`` for each of ``runs`` / ``tags`` that matched nothing in the
    source (the command line words its own)."""
    for line in watched(options).unmatched(**wording):
        report.add("selection_matched_nothing", line, lost=False)


def _check_keywords(kw: dict) -> None:
    """A misspelt keyword is a TypeError, as Python gives, but naming what is taken."""
    import dataclasses
    known = {f.name for f in dataclasses.fields(Options)}
    unknown = sorted(set(kw) - known)
    if unknown:
        import difflib
        taken = sorted(known | {"from_format", "to_format", "format", "report", "options",
                                "scheduler"})
        close = difflib.get_close_matches(unknown[0], taken, n=1, cutoff=0.3)
        hint = "" if not close else " (not taken by this function)" if close[0] == unknown[0] \
            else f" (did you mean {close[0]}?)"
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}{hint}; the options are "
                        f"{', '.join(sorted(known))}")


def check_jobs(jobs) -> None:
    """A UsageError for a ``jobs`` that is no number of processes, or whose workers would
    run the calling script again."""
    from tbconvert.formats.base import check_jobs_value
    check_jobs_value(jobs)
    if jobs != 1:
        from tbconvert import workers
        workers.refuse_script_rerun(jobs)


def source_format(format: str | None, from_format: str | None) -> str | None:
    """The source format a caller named: ``format=`` (as :func:`read` takes it) or
    ``from_format=`` (as :func:`convert` and the error messages say it), not both."""
    if format is not None and from_format is not None and format != from_format:
        raise UsageError(f"format={format!r} and from_format={from_format!r} disagree; pass one")
    return format if format is not None else from_format


def check_scheduler(scheduler) -> None:
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise UsageError(f"--scheduler takes the address of a Dask scheduler such as "
                         f"'tcp://host:8786', not {scheduler!r}")


def open_reader(path, *, format: str | None = None, options: Options | None = None,
                report: Report | None = None) -> Reader:
    """A reader for ``path`` (a local path or an fsspec URL such as ``s3://bucket/logs``);
    the format is told from the suffix or content unless given."""
    from tbconvert import remote
    path = remote.localize(path)
    options = options or Options()
    report = given(report)
    if remote.is_remote(path):
        return remote.open_reader(path, format, options, report, lambda local: open_reader(
            local, format=format, options=options, report=report))
    path = Path(path)
    fmt = registry.get(format) if format else registry.detect_source(path)
    if fmt.reader is None:
        raise UsageError(f"the {fmt.name} format can be written but not read")
    if not path.exists():
        raise FormatError(f"{path}: no such file or directory")
    return fmt.reader(path, options or Options(), given(report))


def open_writer(path, *, format: str | None = None, options: Options | None = None,
                report: Report | None = None) -> Writer:
    """A writer for ``path`` (a local path or an fsspec URL); directories need ``format``.
    Refuses existing output without force."""
    from tbconvert import remote
    path = remote.localize(path)
    options = options or Options()
    report = given(report)
    registry.check_suffix(path, registry.canonical(format) if format else None)
    if format:
        fmt = registry.get(format)
    elif remote.is_remote(path):
        try:
            fmt = registry.detect_destination(Path(remote.basename(path)))
        except UsageError as exc:
            raise UsageError(f"{path}: {exc.cli_message().split(': ', 1)[-1]}") from None
    else:
        fmt = registry.detect_destination(Path(path))
    if fmt.writer is None:
        raise UsageError(f"the {fmt.name} format can be read but not written")
    if remote.is_remote(path):
        return remote.open_writer(path, fmt, options, report, lambda local: open_writer(
            local, format=fmt.name, options=options, report=report))
    path = Path(path)
    return fmt.writer(path, options or Options(), given(report))


def check_paths(src, dst) -> None:
    """Refuse (before anything is written) a destination that is, holds or lies in the source."""
    from tbconvert import remote
    from tbconvert.output import check_destination
    src, dst = remote.localize(src), remote.localize(dst)
    if not remote.check_overlap(src, dst):
        check_destination(src, dst)


def select(series: Iterable[Series], options: Options, report: Report,
           keeps_hidden: bool = False, witness: bool = False) -> Iterator[Series]:
    """Chunks of one run filtered by tag; hidden points dropped (and counted) unless kept.

    With ``witness``, a tag's first hidden point also goes on, alone and still marked
    hidden, while the tag has shown nothing else: a writer that leaves hidden points out
    can still make TensorBoard list a tag all of whose points its restart rule hides.
    """
    seen: set[str] = set()
    witnessed: set[str] = set()
    for chunk in series:
        if not options.wants_tag(chunk.tag):
            continue
        if chunk.hidden is not None and not keeps_hidden and options.restarts != "keep-all":
            report.add("hidden_points_left_out",
                       f"{chunk.run}/{chunk.tag}: {plural(chunk.hidden_count, 'point')} "
                       f"TensorBoard's restart rule hides {were(chunk.hidden_count)} left out "
                       "(--restarts keep-all writes them)",
                       run=chunk.run, tag=chunk.tag, count=chunk.hidden_count, lost=False)
            if witness and chunk.tag not in witnessed and chunk.hidden_count:
                witnessed.add(chunk.tag)
                import numpy as np
                yield chunk.take(np.flatnonzero(chunk.hidden)[:1])
            chunk = chunk.visible()
        if chunk.tag not in seen:
            seen.add(chunk.tag)
            report.series += 1
        report.points[chunk.data_class.name.lower()] += len(chunk)
        yield chunk


def selected_runs(reader: Reader, options: Options, report: Report,
                  keeps_hidden: bool = False, keeps_byte_names: bool = False,
                  witness: bool = False) -> Iterator[tuple[Run, Iterator[Series]]]:
    """``(run, chunks)`` for each run the options select, counted in ``report``.

    The caller consumes each run's chunks before asking for the next run;
    whatever it leaves is drained here so the reader can move on.
    ``options.progress`` hears the total source bytes first and the end last.
    """
    progress = options.progress
    if progress is not None:
        progress.start(reader.source_size())
    for run_data in reader.iter_runs():
        if not options.wants_run(run_data.run.name):
            for _ in run_data.series:
                pass
            continue
        report.runs += 1
        chunks = select(run_data.series, options, report, keeps_hidden, witness)
        yield names.storable(run_data.run, chunks, report, keep_bytes=keeps_byte_names)
        for _ in chunks:
            pass
    if progress is not None:
        progress.finish()


def copy(reader: Reader, writer: Writer, report: Report) -> None:
    """Stream everything ``reader`` yields into ``writer``, one run at a time."""
    writer.write_experiment(reader.experiment())
    for run, chunks in selected_runs(reader, reader.options, report, writer.keeps_hidden,
                                     writer.keeps_byte_names, writer.takes_hidden_witness):
        writer.write_run(run, chunks)


def carry_plugin_files(reader: Reader, writer: Writer, report: Report) -> None:
    """Files of TensorBoard's plugins beside the runs go along into an event-file output."""
    if getattr(writer, "carries_plugin_files", False):
        from tbconvert.formats.tfevents import plugin_copy
        plugin_copy.carry(reader, writer, report)


def convert(src, dst, *, from_format: str | None = None, to_format: str | None = None,
            report: Report | None = None, options: Options | None = None,
            scheduler: str | None = None, **kwargs) -> Report:
    """Convert ``src`` to ``dst``; returns the :class:`Report` of what happened.

    Example::

        report = tbconvert.convert("logs/", "logs.parquet")
        assert not report.lost

    Keyword arguments are those of :class:`~tbconvert.formats.base.Options`
    (``runs``, ``tags``, ``force``, ``restarts``, ``allow_pickle``, ``ignore_checksum``,
    ``jobs``, ``storage_options``, and ``wide`` for CSV), or pass a ready ``options``
    object instead (not both: that is a UsageError). ``to_format`` must agree with ``dst``'s
    suffix, if it has one. ``src`` and ``dst`` may be fsspec URLs (``s3://bucket/logs``,
    ``gs://...``; see ``docs/cloud.md``). ``jobs=N`` reads event-file runs in N processes
    (``0``: one per core; the default ``1`` starts none, so a script needs no
    ``if __name__ == "__main__"`` guard, which other values need: a call outside it is
    refused with a UsageError naming the line); the output is the same for every N. An event-file
    logdir going to a Parquet dataset (a directory) or to event files is converted one run
    per process, each run read and written there; ``scheduler`` (``tcp://host:8786``) does
    that on a Dask cluster instead (``docs/dask.md``).
    """
    report = given(report)
    opts = options_from(options, **kwargs)
    check_scheduler(scheduler)
    from tbconvert import remote
    src, dst = remote.localize(src), remote.localize(dst)
    if scheduler is not None and (remote.is_remote(src) or remote.is_remote(dst)):
        raise UsageError("--scheduler works with local (or mounted) SRC and DST only; convert "
                         "from or to a URL without it")
    src, dst = remote.for_workers(src, scheduler), remote.for_workers(dst, scheduler)
    check_paths(src, dst)
    start = len(report.issues)
    try:
        reader = open_reader(src, format=from_format, options=opts, report=report)
        with reader:
            writer = open_writer(dst, format=to_format, options=opts, report=report)
            with writer:
                from tbconvert import runtasks
                if scheduler is not None or runtasks.worth_splitting(reader, writer, opts.jobs):
                    runtasks.copy_in_tasks(reader, writer, report, scheduler=scheduler)
                else:
                    copy(reader, writer, report)
                carry_plugin_files(reader, writer, report)
        report.outputs.append(str(dst))
        tell_unmatched(opts, report)
    finally:
        if scheduler is not None:
            remote.public_report(report, start)
    return report


