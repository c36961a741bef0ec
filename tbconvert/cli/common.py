"""Arguments and steps shared by several subcommands."""

from __future__ import annotations

import argparse

from tbconvert.api import make_options
from tbconvert.errors import DataLossError
from tbconvert.report import Report


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", metavar="REGEX", help="only runs whose name matches (re.search)")
    p.add_argument("--tags", metavar="REGEX", help="only tags that match (re.search)")


def add_reading(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped (corrupt records, lost blobs...); "
                        "the output is still written, with everything that could be read")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow unpickling input (TensorBoard 2.3 exports); only for trusted files")
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N",
                   help="read runs in N processes (default: one per core; 1: no extra "
                        "processes); the output is the same for every N")
    p.add_argument("--ignore-checksum", action="store_true",
                   help="read a Parquet or HDF5 archive whose checksum is missing or does not "
                        "match, as far as it can be read (the damage is reported; HDF5 may "
                        "hang or crash on damaged files)")


def add_writing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace an existing destination (once the new output is complete)")
    p.add_argument("--restarts", choices=("visible", "keep-all"), default="visible",
                   help="visible (default): write what TensorBoard shows; keep-all: also points "
                        "TensorBoard's restart rule hides (archives always keep them, marked)")


def options_from(args, ui):
    return make_options(
        runs=getattr(args, "runs", None), tags=getattr(args, "tags", None),
        allow_pickle=getattr(args, "allow_pickle", False), force=getattr(args, "force", False),
        restarts=getattr(args, "restarts", "visible"), wide=getattr(args, "wide", False),
        ignore_checksum=getattr(args, "ignore_checksum", False), progress=ui.progress(),
        jobs=getattr(args, "jobs", 0))


def finish(args, ui, report: Report) -> int:
    """Print the summary; with --strict, turn lost data into exit code 8."""
    ui.summary(report)
    if getattr(args, "strict", False) and report.lost:
        raise DataLossError(f"--strict: {sum(i.count for i in report.lost)} item(s) were skipped "
                            "or could not be written (see the warnings above)")
    return 0


def add_extraction(p: argparse.ArgumentParser, metavar: str, output_help: str) -> None:
    """Arguments of the commands that extract one kind of data: SRC, -o, selection, options."""
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("-o", "--output", required=True, metavar=metavar, help=output_help)
    add_selection(p)
    add_reading(p)
    add_writing(p)


def write_table(args, ui, build):
    """Build a table with ``build(src, report=, options=)`` and save it to ``args.output``."""
    from tbconvert import api, tables
    report = Report()
    options = options_from(args, ui)
    api.check_paths(args.src, args.output)
    tables.check_table_path(args.output, force=args.force)
    table = build(args.src, report=report, options=options)
    tables.save_table(table, args.output, force=args.force)
    report.outputs.append(args.output)
    return table, report
