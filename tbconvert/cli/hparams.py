"""``tbconvert hparams SRC -o trials.csv``: one row per hyperparameter trial."""

from __future__ import annotations

from tbconvert.cli.common import (
    add_extraction,
    finish,
    nothing_found,
    output_name,
    unmatched_selection,
    write_table,
)

NAME = "hparams"
HELP = ("write one row per hparams trial (each hyperparameter, each metric's last value, "
        "status) to a .csv or .parquet file")


def add_arguments(p) -> None:
    # --runs selects trial runs, --tags metric columns
    add_extraction(p, "FILE", "destination: .csv or .parquet, or - for CSV on stdout")


def run(args, ui) -> int:
    from tbconvert import tables
    table, report = write_table(args, ui, tables.hparams_table)
    # --tags chooses the metric columns only: the trials stay
    unmatched = unmatched_selection(args, "metric tag(s) of the trials", "the table has no "
                                    "metric columns", runs_are="trial run(s) in the source")
    code = finish(args, ui, report, unmatched)
    if table.num_rows == 0 and not unmatched:
        nothing_found(args, ui, f"{args.src} holds no hparams trials (no run has the tag "
                      f"_hparams_/session_start_info); {output_name(args)} has no rows")
    return code
