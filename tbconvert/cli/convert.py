"""``tbconvert convert SRC DST``: any format to any other."""

from __future__ import annotations

from tbconvert import registry
from tbconvert.cli.common import add_reading, add_scheduler, add_selection, add_writing, finish, options_from
from tbconvert.errors import UsageError
from tbconvert.report import Report

NAME = "convert"
HELP = "convert SRC to DST (formats from suffix or content; a directory DST needs --to)"


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("dst", metavar="DST", help="destination file or directory")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", help="source format")
    p.add_argument("--to", dest="to_format", metavar="FORMAT", help="destination format")
    p.add_argument("--wide", action="store_true",
                   help="CSV only: one row per (run, step), one column per tag")
    add_selection(p)
    add_reading(p)
    add_writing(p)
    add_scheduler(p)


def check_suffix(dst: str, to_format: str | None) -> None:
    """``--to csv x.parquet`` would write a CSV file under a Parquet name: refuse it."""
    named = registry.suffix_format(dst)
    if to_format not in registry.names() or named is None or named == to_format:
        return
    wanted = registry.suffixes(to_format)
    fix = (f"name it {' or '.join(wanted)}" if wanted
           else f"{to_format} writes a directory: choose a name without that suffix")
    raise UsageError(f"{dst}: the name says {named} but --to is {to_format}; {fix}, "
                     "or leave out --to")


def run(args, ui) -> int:
    check_suffix(args.dst, args.to_format)
    from tbconvert import api
    report = Report()
    api.convert(args.src, args.dst, from_format=args.from_format, to_format=args.to_format,
                report=report, options=options_from(args, ui), scheduler=args.scheduler)
    return finish(args, ui, report)
