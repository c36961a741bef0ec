"""``tbconvert hparams SRC -o trials.csv``: one row per hyperparameter trial."""

from __future__ import annotations

from tbconvert.cli.common import add_extraction, finish, write_table

NAME = "hparams"
HELP = ("write one row per hparams trial (each hyperparameter, each metric's last value, "
        "status) to a .csv or .parquet file")


def add_arguments(p) -> None:
    add_extraction(p, "FILE", "destination: .csv or .parquet")  # --runs selects trial runs, --tags metric columns


def run(args, ui) -> int:
    from tbconvert import tables
    table, report = write_table(args, ui, tables.hparams_table)
    if table.num_rows == 0:
        ui.info(f"tbconvert: note: {args.src} holds no hparams trials "
                "(no run has the tag _hparams_/session_start_info)")
    return finish(args, ui, report)
