"""``tbconvert histograms SRC -o hist.csv``: every histogram bucket as a table row."""

from __future__ import annotations

from tbconvert.cli.common import (
    add_extraction,
    finish,
    holding,
    nothing_found,
    output_name,
    unmatched_selection,
    write_table_in_parts,
)

NAME = "histograms"
HELP = ("write every histogram bucket (run, tag, step, wall_time, left, right, count) to a "
        ".csv or .parquet file")


def add_arguments(p) -> None:
    add_extraction(p, "FILE", "destination: .csv or .parquet, or - for CSV on stdout")


def run(args, ui) -> int:
    from tbconvert import tables
    rows, report = write_table_in_parts(args, ui, tables.write_histograms)
    code = finish(args, ui, report)
    if rows == 0 and not unmatched_selection(args):
        nothing_found(args, ui, f"{holding(args)} holds no histograms; {output_name(args)} has no rows")
    return code
