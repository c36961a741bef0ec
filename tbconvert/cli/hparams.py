"""``tbconvert hparams SRC -o trials.csv``: one row per hyperparameter trial."""

from __future__ import annotations

from tbconvert.cli.common import add_reading, add_selection, add_writing, finish, options_from
from tbconvert.report import Report

NAME = "hparams"
HELP = ("write one row per hparams trial (each hyperparameter, each metric's last value, "
        "status) to a .csv or .parquet file")


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="destination: .csv or .parquet")
    add_selection(p)  # --runs selects trial runs, --tags metric columns
    add_reading(p)
    add_writing(p)


def run(args, ui) -> int:
    from tbconvert import tables
    report = Report()
    options = options_from(args, ui)
    tables.check_table_path(args.output, force=args.force)
    table = tables.hparams_table(args.src, report=report, options=options)
    tables.save_table(table, args.output, force=args.force)
    report.outputs.append(args.output)
    if table.num_rows == 0:
        ui.info(f"tbconvert: note: {args.src} holds no hparams trials "
                "(no run has the tag _hparams_/session_start_info)")
    return finish(args, ui, report)
