"""``tbconvert sync SRC DST``: keep a Parquet directory dataset up to date with a logdir."""

from __future__ import annotations

from tbconvert.cli.common import finish

NAME = "sync"
HELP = ("bring the Parquet directory dataset DST up to date with the logdir SRC, reading "
        "only what is new")


def add_arguments(p) -> None:
    from tbconvert.cli.common import add_storage
    p.add_argument("src", metavar="SRC", help="event-file logdir (growing), a path or URL")
    p.add_argument("dst", metavar="DST", help="Parquet directory dataset (created if missing), "
                   "a path or a URL such as s3://bucket/dataset")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="read the runs on the workers of this dask.distributed scheduler "
                        "(tcp://host:8786); they must see SRC and DST at the same paths")
    p.add_argument("--break-lock", action="store_true",
                   help="take the dataset's lock even if the sync holding it looks alive")
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped")
    add_storage(p)


def run(args, ui) -> int:
    from tbconvert.incremental import sync
    from tbconvert.remote.urls import parse_storage_options
    report = sync(args.src, args.dst, scheduler=args.scheduler, break_lock=args.break_lock,
                  storage_options=parse_storage_options(args.storage_option))
    ui.info(f"tbconvert: {args.dst}: {report.summary()}")
    return finish(args, ui, report)
