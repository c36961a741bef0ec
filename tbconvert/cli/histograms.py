"""``tbconvert histograms SRC -o hist.csv``: every histogram bucket as a table row."""

from __future__ import annotations

from tbconvert.cli.common import add_reading, add_selection, add_writing, finish, options_from
from tbconvert.report import Report

NAME = "histograms"
HELP = ("write every histogram bucket (run, tag, step, wall_time, left, right, count) to a "
        ".csv or .parquet file")


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="destination: .csv or .parquet")
    add_selection(p)
    add_reading(p)
    add_writing(p)


def run(args, ui) -> int:
    from tbconvert import tables
    report = Report()
    options = options_from(args, ui)
    tables.check_table_path(args.output, force=args.force)
    table = tables.histograms_table(args.src, report=report, options=options)
    tables.save_table(table, args.output, force=args.force)
    report.outputs.append(args.output)
    return finish(args, ui, report)
