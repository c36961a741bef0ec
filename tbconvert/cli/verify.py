"""``tbconvert verify A B``: do two sources hold the same data?"""

from __future__ import annotations

import contextlib

from tbconvert import restarts
from tbconvert.cli.common import add_reading, add_selection, finish, format_name, options_from
from tbconvert.cli.text import shown
from tbconvert.errors import DataLossError, TbconvertError
from tbconvert.report import Report, plural

NAME = "verify"
HELP = ("compare two sources (any formats) point for point: steps, wall times, values "
        "(integers exactly), tensor and blob bytes, metadata, each run's start time and "
        "run-level events (meta graphs, session logs), and the experiment's facts; between "
        "two event-file logdirs, also the files of TensorBoard's plugins beside the event "
        "files, byte for byte; exit 10 if they differ")


# Differences listed without -v (a whole other logdir would list one per series).
LISTED = 200


class SourcesDiffer(TbconvertError):
    exit_code = 10


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A", help="first source")
    p.add_argument("b", metavar="B", help="second source")
    p.add_argument("--from-a", metavar="FORMAT", type=format_name, help="format of A")
    p.add_argument("--from-b", metavar="FORMAT", type=format_name, help="format of B")
    p.add_argument("--wall-time-tolerance", type=float, default=0.0, metavar="SECONDS",
                   help="allow wall times to differ this much (TensorBoard.dev exports keep "
                        "about a microsecond; try 1e-6)")
    p.add_argument("--restarts", choices=restarts.CHOICES, default="visible",
                   help="visible (default): compare what TensorBoard shows; keep-all: also the "
                        "points its restart rule hides")
    p.add_argument("--no-plugin-files", dest="plugin_files", action="store_false",
                   help="between two event-file logdirs, compare the event data only, not the "
                        "files of TensorBoard's plugins beside it (a logdir rebuilt from an "
                        "archive has none: archives hold event data)")
    add_selection(p)
    add_reading(p, writes=False)


def run(args, ui) -> int:
    report = Report()
    from tbconvert import verify
    diffs = verify.compare(args.a, args.b, from_a=args.from_a, from_b=args.from_b,
                           options=options_from(args, ui),
                           wall_time_tolerance=args.wall_time_tolerance, report=report,
                           plugin_files=args.plugin_files)
    if diffs:
        limit = len(diffs) if args.verbose else LISTED
        for line in diffs[:limit]:
            print(shown(line))
        if len(diffs) > limit:
            print(f"... and {len(diffs) - limit} more differences")
        # the differences are the answer (exit 10), also where --strict finds lost data
        with contextlib.suppress(DataLossError):
            finish(args, ui, report)
        listed = " listed above" if len(diffs) <= limit else \
            f"; the first {limit} are listed above, -v lists them all"
        raise SourcesDiffer(f"{args.a} and {args.b} differ ({plural(len(diffs), 'difference')}"
                            f"{listed})")
    finish(args, ui, report)
    if report.lost:
        # what could not be read was compared on neither side: no claim about it
        print(shown(f"same data as far as it could be read: {args.a} and {args.b} "
                    f"({plural(len(report.lost), 'item')} could not be read; see the warnings "
                    "above, and --strict to make this an error)"))
        return 0
    print(shown(f"same data: {args.a} and {args.b}"))
    return 0
