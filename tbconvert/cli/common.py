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
                   help="exit with code 8 if any data was skipped (corrupt records, lost blobs...)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow unpickling input (TensorBoard 2.3 exports); only for trusted files")


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
        progress=ui.progress)


def finish(args, ui, report: Report) -> int:
    """Print the summary; with --strict, turn lost data into exit code 8."""
    ui.summary(report)
    if getattr(args, "strict", False) and report.lost:
        raise DataLossError(f"--strict: {sum(i.count for i in report.lost)} item(s) were skipped "
                            "or could not be written (see the warnings above)")
    return 0
