"""``tbconvert tbdev-export EXPORT -o OUTDIR``: TensorBoard.dev exports back to event files.

EXPORT is one experiment directory (any name), an old-layout
``scalars_<id>.json`` file, or an export root holding several
``experiment_<id>`` directories (then OUTDIR gets one logdir per experiment,
``OUTDIR/<id>/``, and a broken experiment does not stop the others).
"""

from __future__ import annotations

from pathlib import Path

from tbconvert.cli.common import add_scheduler, add_selection, finish, options_from
from tbconvert.errors import FormatError, OutputExistsError, TbconvertError
from tbconvert.names import safe_part
from tbconvert.report import Report

NAME = "tbdev-export"
HELP = ("convert a TensorBoard.dev export (one experiment or a whole export root) "
        "to event files for open-source TensorBoard")


def add_arguments(p) -> None:
    p.add_argument("src", metavar="EXPORT",
                   help="an experiment directory, or the export root holding experiment_<id>/ "
                        "directories (or old scalars_<id>.json files)")
    p.add_argument("-o", "--output", required=True, metavar="OUTDIR",
                   help="logdir to write (one sub-logdir OUTDIR/<id>/ per experiment for a root)")
    add_selection(p)
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped (null blobs, bad lines...); "
                        "the logdir is still written, with everything that could be read")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow unpickling string tensors of TensorBoard 2.3 exports; "
                        "only for exports you trust")
    p.add_argument("--force", action="store_true",
                   help="replace existing output (each logdir only once its conversion is done)")
    add_scheduler(p)


def _outputs(sources, out: Path) -> list[tuple[object, Path]]:
    """One sub-logdir per experiment, named by its id (made safe and unique)."""
    from tbconvert import remote
    taken: set[str] = set()
    result = []
    for n, source in enumerate(sources):
        name = safe_part(source.experiment_id or source.path.name or f"experiment{n}")
        base, k = name, 1
        while name.lower() in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name.lower())
        result.append((source, remote.join(out, name) if isinstance(out, str) else out / name))
    return result


def run(args, ui) -> int:
    from tbconvert import api, remote
    from tbconvert.formats.tbdev import layout
    from tbconvert.formats.tbdev.reader import TbdevReader

    src, out = remote.localize(args.src), remote.localize(args.output)
    out = out if remote.is_remote(out) else Path(out)
    options = options_from(args, ui)
    api.check_paths(src, out)
    if remote.is_remote(src):
        from tbconvert.remote.source import SourceStage
        stage = SourceStage(src, options.storage_options, Report())
        remote.publish(stage.local, src)
        try:
            args.src = stage.fetch()
            return run(args, ui)
        finally:
            stage.cleanup()
    src = Path(src)
    if not src.exists():
        raise FormatError(f"{src}: no such file or directory")
    sources, is_root = layout.find_experiments(src)
    if not sources:
        raise FormatError(f"{src}: no TensorBoard.dev export found (expected metadata.json, "
                          "scalars.json, experiment_<id>/ directories or scalars_<id>.json files)")
    report = Report()
    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None and remote.is_remote(out):
        from tbconvert.errors import UsageError
        raise UsageError("--scheduler writes to a path the workers share, not to a URL")
    if not is_root:
        if scheduler is not None:
            _on_cluster([(sources[0], out)], options, report, scheduler, lambda *a: None)
        else:
            _convert_one(TbdevReader, sources[0], out, options, report)
        ui.summary(report)
        ui.info(f"wrote {out}; view it with: tensorboard --logdir {out}")
        return finish_quiet(args, ui, report)

    if remote.is_remote(out):
        if not args.force and remote.exists(out, options.storage_options):
            raise OutputExistsError(f"{out} already exists; pass --force to replace the "
                                    "experiments' logdirs in it")
    elif out.exists() and not args.force and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"{out} already exists and is not empty; pass --force to replace "
                                "the experiments' logdirs in it")
    failures: list[tuple[str, TbconvertError]] = []
    done = 0
    created = not remote.is_remote(out) and not out.exists()
    def failed(source, exc: TbconvertError) -> None:
        failures.append((source.experiment_id or source.path.name, exc))
        ui.error(f"experiment {source.path.name}: {exc.cli_message()}")

    if scheduler is not None:
        done = _on_cluster(_outputs(sources, out), options, report, scheduler, failed)
    for source, dst in _outputs(sources, out) if scheduler is None else ():
        try:
            _convert_one(TbdevReader, source, dst, options, report)
            done += 1
        except TbconvertError as exc:
            failed(source, exc)
    ui.summary(report)
    if done:
        ui.info(f"wrote {done} of {len(sources)} experiment(s) to {out}/<id>/; "
                f"view them with: tensorboard --logdir {out}")
    else:
        ui.info(f"wrote none of the {len(sources)} experiment(s)")
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()   # nothing of ours in it: leave no trace
    code = finish_quiet(args, ui, report)
    if failures:
        return max(exc.exit_code for _, exc in failures)
    return code


def finish_quiet(args, ui, report: Report) -> int:
    """``--strict`` handling of :func:`finish` without printing the summary twice."""
    class _Silent:
        info = ui.info

        def summary(self, report):
            pass
    return finish(args, _Silent(), report)


def _convert_one(reader_cls, source, dst: Path, options, report: Report) -> None:
    before = len(report.issues)
    try:
        reader = reader_cls(source.path, options, report, source=source)
        with reader:
            from tbconvert import api
            writer = api.open_writer(dst, format="tfevents", options=options, report=report)
            with writer:
                api.copy(reader, writer, report)
    except TbconvertError:
        # notes about what was written (lost=False) are moot: nothing of it was kept
        report.issues[before:] = [i for i in report.issues[before:] if i.lost]
        raise
    report.outputs.append(str(dst))


def _on_cluster(jobs, options, report: Report, scheduler: str, failed) -> int:
    """Each experiment converted by one task on the cluster; reports merged in order. A
    single experiment's failure is raised; among several, it is told and the others go on."""
    import dataclasses

    from tbconvert import cluster
    plain = dataclasses.replace(options, progress=None, jobs=1)
    results = cluster.run_tasks(_experiment_task, [(s, d, plain) for s, d in jobs],
                                scheduler=scheduler)
    done = 0
    for (source, _), (issues, counts, outputs, error) in zip(jobs, results):
        report.extend(issues)
        report.runs += counts[0]
        report.series += counts[1]
        report.points.update(counts[2])
        report.outputs.extend(outputs)
        if error is None:
            done += 1
        elif len(jobs) == 1:
            raise error
        else:
            failed(source, error)
    return done


def _experiment_task(job):
    """On a worker: one experiment to its logdir."""
    from tbconvert.formats.tbdev.reader import TbdevReader
    source, dst, options = job
    report = Report()
    error = None
    try:
        _convert_one(TbdevReader, source, dst, options, report)
    except TbconvertError as exc:
        error = exc
    return report.issues, (report.runs, report.series, report.points), report.outputs, error
