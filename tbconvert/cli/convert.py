"""``tbconvert convert SRC DST``: any format to any other."""

from __future__ import annotations

from tbconvert import registry
from tbconvert.cli.common import (
    add_reading,
    add_scheduler,
    add_selection,
    add_writing,
    finish,
    format_name,
    nothing_found,
    options_from,
    stdout_table,
    unmatched_selection,
)
from tbconvert.errors import UsageError
from tbconvert.report import Report

NAME = "convert"
HELP = "convert SRC to DST (formats from suffix or content; a directory DST needs --to)"


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("dst", metavar="DST", help="destination file or directory (-: CSV on stdout)")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", type=format_name, help="source format")
    p.add_argument("--to", dest="to_format", metavar="FORMAT", type=format_name, help="destination format")
    p.add_argument("--wide", action="store_true",
                   help="CSV only: one row per (run, step), one column per tag")
    add_selection(p)
    add_reading(p)
    add_writing(p)
    add_scheduler(p)


def run(args, ui) -> int:
    if args.dst == "-":
        return _to_stdout(args, ui)
    registry.check_suffix(args.dst, args.to_format)  # before the source is read
    from tbconvert import api
    report = Report()
    api.convert(args.src, args.dst, from_format=args.from_format, to_format=args.to_format,
                report=report, options=options_from(args, ui), scheduler=args.scheduler)
    return _finish(args, ui, report)


def _finish(args, ui, report: Report) -> int:
    """:func:`finish`, and a source without a run said as an empty result is (an archive
    with no run converts to an empty output; an event-file logdir without one is refused)."""
    code = finish(args, ui, report)
    if not report.runs and not unmatched_selection(args):
        out = "standard output" if args.dst == "-" else args.dst
        nothing_found(args, ui, f"{args.src} holds no runs; {out} holds no data")
    return code


def _to_stdout(args, ui) -> int:
    """``DST`` ``-``: CSV on standard output, as ``hparams -o -`` gives. The table is written
    to a temporary file first, so nothing is printed unless the whole conversion succeeds,
    and then copied out a slice at a time."""
    if args.to_format not in (None, "csv"):
        raise UsageError(f"only CSV can go to standard output (-), not {args.to_format}; "
                         "name a file or directory instead")
    from tbconvert import api
    report = Report()
    with stdout_table(report) as table:
        api.convert(args.src, table, from_format=args.from_format, report=report,
                    options=options_from(args, ui), scheduler=args.scheduler)
        report.outputs[-1:] = ["-"]
    return _finish(args, ui, report)
