"""``tbconvert tbdev-export EXPORT -o OUTDIR``: TensorBoard.dev exports back to event files.

EXPORT is one experiment directory (any name), an old-layout
``scalars_<id>.json`` file, or an export root holding several
``experiment_<id>`` directories (then OUTDIR gets one logdir per experiment,
``OUTDIR/<id>/``, and a broken experiment does not stop the others).
"""

from __future__ import annotations

from tbconvert.cli.common import add_scheduler, add_selection, finish, options_from
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
                   help="replace an existing OUTDIR whole, once the new output is written")
    add_scheduler(p)


def run(args, ui) -> int:
    from pathlib import Path

    from tbconvert import remote
    from tbconvert.exports import tbdev_export

    def failed(name, exc):
        ui.error(f"experiment {name}: {exc.cli_message()}")

    report = tbdev_export(args.src, args.output, options=options_from(args, ui),
                          on_failure=failed, scheduler=args.scheduler)
    out = remote.localize(args.output)
    out = out if remote.is_remote(out) else Path(out)   # printed as the user would write it
    ui.summary(report)
    if not report.root:
        ui.info(f"wrote {out}; view it with: tensorboard --logdir {out}")
        return finish_quiet(args, ui, report)
    done = len(report.outputs)
    if done:
        ui.info(f"wrote {done} of {report.experiments} experiment(s) to {out}/<id>/; "
                f"view them with: tensorboard --logdir {out}")
    elif report.experiments > 1 or not report.failures:
        # (one experiment that failed: its error line says it all, in one line)
        ui.info(f"wrote none of the {report.experiments} experiment(s)")
    code = finish_quiet(args, ui, report)
    if report.failures:
        return max(exc.exit_code for _, exc in report.failures)
    return code


def finish_quiet(args, ui, report: Report) -> int:
    """``--strict`` handling of :func:`finish` without printing the summary twice."""
    class _Silent:
        info = ui.info

        def summary(self, report):
            pass
    return finish(args, _Silent(), report)
