"""``tbconvert sync SRC DST``: keep a Parquet directory dataset up to date with a logdir."""

from __future__ import annotations

from tbconvert.cli.common import finish

NAME = "sync"
HELP = ("bring the Parquet directory dataset DST up to date with the logdir SRC, reading "
        "only what is new")


# Rounds back to back would spin a core and print hundreds of lines a second.
SHORTEST_PAUSE = 0.1


def _seconds(text: str) -> float:
    import argparse
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= SHORTEST_PAUSE and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: give the pause in seconds, "
                                         f"{SHORTEST_PAUSE:g} or more")
    return value


def add_arguments(p) -> None:
    from tbconvert.cli.common import add_jobs, add_scheduler, add_storage
    p.add_argument("src", metavar="SRC", help="event-file logdir (growing), a path or URL")
    p.add_argument("dst", metavar="DST", help="Parquet directory dataset (created if missing), "
                   "a path or a URL such as s3://bucket/dataset")
    p.add_argument("--watch", type=_seconds, metavar="SECONDS",
                   help="keep syncing: sync, wait SECONDS, sync again... until Ctrl-C or "
                        "SIGTERM, in one process (a line per round that changed something on "
                        "stderr, -v for every round; a round whose dataset another sync "
                        "holds is skipped, one that fails is reported and the next one "
                        "tries again)")
    add_jobs(p, "read and write the runs with new data in N processes when there is much to "
                "read (0, the default: one per core, and never more; 1: no extra processes); the dataset "
                "is the same for every N")
    add_scheduler(p, "read the runs on the workers of this dask.distributed scheduler "
                     "(tcp://host:8786); they must see SRC and DST at the same paths")
    p.add_argument("--allow-pickle", action="store_true",
                   help="read the pickled string tensors of TensorBoard 2.3 exports (unpickling "
                        "can run code from the file: only for exports you trust)")
    p.add_argument("--break-lock", action="store_true",
                   help="take the dataset's lock even if the sync holding it looks alive")
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped (with --watch: after the "
                        "first round that skipped any)")
    add_storage(p)


def run(args, ui) -> int:
    from tbconvert.incremental import sync
    from tbconvert.remote.urls import parse_storage_options
    options = {"scheduler": args.scheduler, "jobs": args.jobs,
               "storage_options": parse_storage_options(args.storage_option),
               "allow_pickle": args.allow_pickle}
    if args.watch is not None:
        return _watch(args, ui, options)
    report = sync(args.src, args.dst, break_lock=args.break_lock, **options)
    for name, exc in report.failures:
        ui.error(f"experiment {name}: {exc.cli_message()}")
    ui.info(f"tbconvert: {args.dst}: {report.summary()}")
    code = finish(args, ui, report)
    if report.failures:
        ui.info(f"tbconvert: {args.dst}: synced {len(report.outputs)} of "
                f"{len(report.outputs) + len(report.failures)} experiment(s); the others "
                "were not changed")
        return max(exc.exit_code for _, exc in report.failures)
    return code


def _watch(args, ui, options) -> int:
    import time

    from tbconvert.incremental.watch import sync_watch
    # A watch runs for days: a round that finds nothing new, or fails as the one before it
    # did, is not listed again (-v lists every round); the first of such a stretch says so.
    last = [None]
    committed = [0]     # rounds that completed

    def told(r) -> None:
        if r.skipped is None and r.error is None:
            committed[0] += 1
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        head = f"{args.dst}: {stamp} round {r.number} ({r.seconds:.3f} s): "
        if r.skipped is not None:
            last[0] = None
            ui.info(f"tbconvert: {head}skipped, another sync holds the dataset; trying again "
                    f"in {args.watch:g} s")
        elif r.error is not None:
            # an error of this round only: said even with -q, and the next round goes on
            message = r.error.cli_message()
            message = message.removeprefix(f"{args.dst}: ")    # the head names it already
            if ui.verbose or last[0] != ("error", message):
                ui.error(f"{head}{message}; trying again in {args.watch:g} s" + (
                    "" if ui.verbose else " (not repeated while it lasts; -v repeats it)"))
            last[0] = ("error", message)
        elif r.report.changed_nothing and r.number > 1 and not ui.verbose:
            if last[0] != "idle":
                ui.info(f"tbconvert: {head}nothing new; rounds that find nothing new are not "
                        "listed (-v lists them)")
            last[0] = "idle"
        else:
            last[0] = None
            for name, exc in r.report.failures:
                ui.error(f"{head}experiment {name}: {exc.cli_message()}")
            ui.info(f"tbconvert: {head}{r.report.summary()}")
            finish(args, ui, r.report)

    from tbconvert.cli import Terminated
    try:
        sync_watch(args.src, args.dst, args.watch, on_round=told, break_lock=args.break_lock,
                   **options)
    except KeyboardInterrupt as exc:
        # Ctrl-C, SIGTERM or SIGHUP is how a watch is meant to end: no error. A round cut
        # short removed what it had written before this is reached.
        how, code = ((exc.signal_name, exc.code) if isinstance(exc, Terminated)
                     else ("Ctrl-C", 130))
        holds = ("the dataset holds what the last complete round committed" if committed[0]
                 else "no round had completed: the dataset is as it was before the watch")
        ui.info(f"tbconvert: {args.dst}: stopped ({how}); {holds}")
        return code
    return 0
