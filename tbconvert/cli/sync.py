"""``tbconvert sync SRC DST``: keep a Parquet directory dataset up to date with a logdir."""

from __future__ import annotations

from tbconvert.cli.common import finish

NAME = "sync"
HELP = ("bring the Parquet directory dataset DST up to date with the logdir SRC, reading "
        "only what is new")


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="event-file logdir (growing)")
    p.add_argument("dst", metavar="DST", help="Parquet directory dataset (created if missing)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="read the runs on the workers of this dask.distributed scheduler "
                        "(tcp://host:8786); they must see SRC and DST at the same paths")
    p.add_argument("--break-lock", action="store_true",
                   help="take the dataset's lock even if the sync holding it looks alive")
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped")


def run(args, ui) -> int:
    from tbconvert.incremental import sync
    report = sync(args.src, args.dst, scheduler=args.scheduler, break_lock=args.break_lock)
    ui.info(f"tbconvert: {args.dst}: {report.summary()}")
    return finish(args, ui, report)
