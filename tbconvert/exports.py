"""TensorBoard.dev exports back to event files, one logdir per experiment.

An export is one experiment directory (any name), an old-layout ``scalars_<id>.json`` file,
or an export root holding several ``experiment_<id>`` directories (and other directories that
hold an experiment's files). A root becomes one
sub-logdir per experiment, ``DST/<id>/``, and an experiment that fails does not stop the
others. Either way ``DST`` is one output, replaced whole (``force``) or not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tbconvert.errors import FormatError, OutOfResourcesError, TbconvertError
from tbconvert.formats.base import Options
from tbconvert.report import Report, given


@dataclass
class ExportReport(Report):
    """The :class:`~tbconvert.report.Report` of :func:`tbdev_export`, with what happened to
    each experiment: ``outputs`` lists the logdirs written, ``failures`` the experiments
    that could not be converted (name, error), ``experiments`` how many were found, and
    ``root`` whether the source was an export root (one sub-logdir per experiment)."""

    experiments: int = 0
    root: bool = False
    failures: list[tuple[str, TbconvertError]] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["export"] = {
            "experiments": self.experiments, "root": self.root,
            "failures": [{"experiment": name, "error": type(exc).__name__, "message": str(exc)}
                         for name, exc in self.failures]}
        return out


def tbdev_export(src, dst, *, force: bool = False, runs=None, tags=None,
                 allow_pickle: bool = False, jobs: int = 1, storage_options: dict | None = None,
                 progress=None, options: Options | None = None,
                 report: ExportReport | None = None,
                 on_failure: Callable[[str, TbconvertError], None] | None = None,
                 scheduler: str | None = None, **kwargs) -> ExportReport:
    """Convert a TensorBoard.dev export at ``src`` to event files under ``dst``.

    Example::

        report = tbconvert.tbdev_export("export/", "logs/")
        for name, error in report.failures:
            print(name, error)

    ``force`` replaces an existing ``dst`` whole, once the new output is written (for an
    export root: once every experiment was tried, with the logdirs of those that could be
    converted; if none could, ``dst`` is left as it was); ``runs`` and
    ``tags`` are regexes; ``allow_pickle`` lets TensorBoard 2.3 exports be unpickled (trusted
    exports only); further keyword arguments are those of :func:`tbconvert.convert`, or pass
    a ready ``options``. ``src`` and ``dst`` may be fsspec URLs. For one experiment, an error is
    raised; for an export root, each failing experiment is recorded in ``failures`` (and
    passed to ``on_failure(name, error)`` as it happens) and the others are still written.
    A root of which no experiment could be written leaves no ``dst`` directory behind.
    ``scheduler`` (a ``dask.distributed`` address such as ``tcp://host:8786``) converts each
    experiment in a task on that cluster; ``dst`` must then be a path every worker shares.
    """
    from tbconvert import api, remote
    report = given(report, ExportReport)
    options = api.options_from(options, force=force, runs=runs, tags=tags,
                               allow_pickle=allow_pickle, jobs=jobs,
                               storage_options=storage_options, progress=progress, **kwargs)
    src, dst = remote.localize(src), remote.localize(dst)
    src, dst = remote.for_workers(src, scheduler), remote.for_workers(dst, scheduler)
    dst = dst if remote.is_remote(dst) else Path(dst)
    api.check_paths(src, dst)
    if remote.is_remote(src):
        from tbconvert.remote.source import SourceStage
        stage = SourceStage(src, options.storage_options, Report())
        remote.publish(stage.local, src)
        try:
            local = stage.fetch()
            return tbdev_export(local, dst, options=options, report=report,
                                on_failure=on_failure, scheduler=scheduler)
        finally:
            stage.cleanup()
    from tbconvert.formats.tbdev import export_dir
    src = Path(src)
    if not src.exists():
        raise FormatError(f"{src}: no such file or directory")
    sources, report.root = export_dir.find_experiments(src)
    report.experiments = len(sources)
    if not sources:
        hint = (f"; name the directory that holds it ({src.parent})" if src.is_file() and
                src.name.endswith(".json") else "")
        raise FormatError(f"{src}: no TensorBoard.dev export found (expected metadata.json, "
                          "scalars.json, experiment_<id>/ directories or scalars_<id>.json files)"
                          f"{hint}")
    if scheduler is not None and remote.is_remote(dst):
        from tbconvert.errors import UsageError
        raise UsageError("--scheduler writes to a path the workers share, not to a URL")
    if not report.root:
        if scheduler is not None:
            _on_cluster([(sources[0], dst)], options, report, scheduler)
        else:
            _convert_one(sources[0], dst, options, report)
        return report

    def failed(source, exc: TbconvertError) -> None:
        report.failures.append((source.experiment_id or source.path.name, exc))
        if on_failure is not None:
            on_failure(source.path.name, exc)

    # The experiments' logdirs are written into one output that replaces ``dst`` whole, as
    # a single experiment's logdir does: with --force, nothing of an earlier output stays
    # beside them (its runs would show twice in TensorBoard). A root of which no experiment
    # could be written leaves ``dst`` as it was, or absent.
    out, into = _root_output(dst, options, report)
    written, issues = len(report.outputs), len(report.issues)
    from tbconvert.output import removed_on_failure
    with removed_on_failure(out.abort, dst, also=BaseException):
        if scheduler is not None:
            _on_cluster(_outputs(sources, into, report), options, report, scheduler, failed)
        for source, sub in _outputs(sources, into, report) if scheduler is None else ():
            before = len(report.issues)
            try:
                options.run_prefix = _name_of(sub) + "/"
                _convert_one(source, sub, options, report)
            except TbconvertError as exc:
                if isinstance(exc, OutOfResourcesError):
                    raise     # (no memory or file handles left: every other would fail alike)
                failed(source, exc)
            finally:
                options.run_prefix = ""
                report.issues[before:] = _in_experiment(report.issues[before:], sub)
        if len(report.outputs) > written:
            out.commit()
        else:
            out.abort()
    remote.public_report(report, issues)
    return report


def _root_output(dst, options: Options, report: Report):
    """The output an export root is written into, and the local directory that holds its
    experiments' logdirs until it is committed. Messages and the report name ``dst``, not
    that directory."""
    from tbconvert import remote
    if remote.is_remote(dst):
        out = remote.staged_output(dst, options.storage_options, force=options.force,
                                   directory=True, report=report)
        return out, out.local
    from tbconvert.output import AtomicOutput
    out = AtomicOutput(dst, force=options.force, directory=True)
    remote.publish(out.tmp, str(dst))
    return out, out.tmp


def _outputs(sources, out, report) -> list[tuple[object, object]]:
    """One sub-logdir per experiment, named by its id (made safe and unique)."""
    from tbconvert import remote
    from tbconvert.formats.tbdev.export_dir import experiment_names
    return [(source, remote.join(out, name) if isinstance(out, str) else out / name)
            for source, name in zip(sources, experiment_names(sources, report), strict=True)]


def _name_of(sub) -> str:
    """The name of an experiment's sub-logdir (a path, or a URL's last part)."""
    import posixpath
    return posixpath.basename(str(sub).rstrip("/")) if isinstance(sub, str) else sub.name


def _in_experiment(issues: list, sub) -> list:
    """The issues of one experiment of a root, its runs named as TensorBoard shows them
    (``<id>/<run>``) and its messages with the experiment they concern."""
    import dataclasses
    name = _name_of(sub)
    return [dataclasses.replace(
        i, message=f"experiment {name}: {i.message}",
        run=None if i.run is None else f"{name}/{i.run}" if i.run != "." else name)
        for i in issues]


def _convert_one(source, dst, options: Options, report: Report) -> None:
    from tbconvert import api
    from tbconvert.formats.tbdev import export_dir
    from tbconvert.formats.tbdev.reader import TbdevReader
    if not source.old_layout and not export_dir.is_experiment_dir(source.path):
        # (an experiment_<id>/ of a root that holds none of an export's files: an export cut
        # short, as sync and the folder converted alone tell it; never an empty logdir)
        raise FormatError(f"{source.path}: not a TensorBoard.dev export (no metadata.json, "
                          "scalars.json, tensors.json or blob_sequences.json)")
    before = len(report.issues)
    try:
        with TbdevReader(source.path, options, report, source=source) as reader:
            with api.open_writer(dst, format="tfevents", options=options,
                                 report=report) as writer:
                api.copy(reader, writer, report)
    except TbconvertError:
        # notes about what was written (lost=False) are moot: nothing of it was kept
        report.issues[before:] = [i for i in report.issues[before:] if i.lost]
        raise
    report.outputs.append(str(dst))


def _on_cluster(jobs, options: Options, report: Report, scheduler: str, failed=None) -> None:
    """Each experiment converted by one task on the cluster, reports merged in source order.
    A single experiment's failure is raised; among several, it goes to ``failed`` and the
    others go on."""
    import dataclasses

    from tbconvert import cluster
    tasks = []
    for source, sub in jobs:
        plain = dataclasses.replace(options, progress=None, jobs=1)
        if failed is not None:     # (an experiment of a root)
            plain.run_prefix = _name_of(sub) + "/"
        tasks.append((source, sub, plain))
    results = cluster.run_tasks(_experiment_task, tasks, scheduler=scheduler)
    for (source, sub), (issues, counts, outputs, error) in zip(jobs, results, strict=True):
        report.extend(_in_experiment(issues, sub) if failed is not None else issues)
        report.runs += counts[0]
        report.series += counts[1]
        report.points.update(counts[2])
        report.outputs.extend(outputs)
        if error is not None:
            if failed is None:
                raise error
            failed(source, error)


def _experiment_task(job):
    """On a worker: one experiment to its logdir."""
    source, dst, options = job
    report = Report()
    error = None
    try:
        _convert_one(source, dst, options, report)
    except TbconvertError as exc:
        error = exc
    return report.issues, (report.runs, report.series, report.points), report.outputs, error
