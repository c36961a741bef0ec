"""``tbconvert histograms SRC -o hist.csv``: every histogram bucket as a table row."""

from __future__ import annotations

from tbconvert.cli.common import add_extraction, finish, write_table

NAME = "histograms"
HELP = ("write every histogram bucket (run, tag, step, wall_time, left, right, count) to a "
        ".csv or .parquet file")


def add_arguments(p) -> None:
    add_extraction(p, "FILE", "destination: .csv or .parquet")


def run(args, ui) -> int:
    from tbconvert import tables
    table, report = write_table(args, ui, tables.histograms_table)
    return finish(args, ui, report)
