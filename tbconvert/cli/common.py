"""Arguments and steps shared by several subcommands."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from tbconvert import restarts
from tbconvert.errors import DataLossError
from tbconvert.remote.urls import parse_storage_options
from tbconvert.report import Report


def format_name(text: str) -> str:
    """A format name as given to --from/--to, in the case the format is registered in."""
    from tbconvert import registry
    return registry.canonical(text)


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", metavar="REGEX", help="only runs whose name matches (re.search)")
    p.add_argument("--tags", metavar="REGEX", help="only tags that match (re.search)")
    add_storage(p)


def add_storage(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage-option", action="append", metavar="KEY=VALUE",
                   dest="storage_option",
                   help="an option for the file system of a URL source or destination "
                        "(s3://, gs://, az://, hf://...), e.g. anon=true, profile=NAME, "
                        "endpoint_url=URL; values are JSON where they parse; repeatable")


def add_reading(p: argparse.ArgumentParser, writes: bool = True) -> None:
    p.add_argument("--strict", action="store_true",
                   help="exit with code 8 if any data was skipped (corrupt records, lost blobs...) "
                        "or nothing matched"
                        + ("; the output is still written, with everything that could be read"
                           if writes else ""))
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow unpickling input (TensorBoard 2.3 exports); only for trusted files")
    add_jobs(p, "read runs, and the files of a large run, in N processes (0, the default: one per "
                "core, and never more; 1: no extra processes); the output is the same for every N")
    p.add_argument("--ignore-checksum", action="store_true",
                   help="read a Parquet or HDF5 archive whose checksum is missing or does not "
                        "match, as far as it can be read (the damage is reported; HDF5 may "
                        "hang or crash on damaged files)")


def add_jobs(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-j", "--jobs", type=int, default=0, metavar="N", help=what)


def add_scheduler(p: argparse.ArgumentParser,
                  what: str = "convert on a Dask cluster (a dask.distributed scheduler such as "
                              "tcp://host:8786), one run per task; the destination must be on a "
                              "path every worker shares") -> None:
    p.add_argument("--scheduler", metavar="ADDRESS", help=f"{what}; needs tbconvert[dask]")


def add_writing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace an existing destination (once the new output is complete)")
    p.add_argument("--restarts", choices=restarts.CHOICES, default="visible",
                   help="visible (default): write what TensorBoard shows; keep-all: also points "
                        "TensorBoard's restart rule hides (archives always keep them, marked)")


def options_from(args, ui):
    from tbconvert.api import make_options, watched
    options = watched(make_options(
        runs=getattr(args, "runs", None), tags=getattr(args, "tags", None),
        allow_pickle=getattr(args, "allow_pickle", False), force=getattr(args, "force", False),
        restarts=getattr(args, "restarts", "visible"), wide=getattr(args, "wide", False),
        ignore_checksum=getattr(args, "ignore_checksum", False), progress=ui.progress(),
        jobs=getattr(args, "jobs", 0),
        storage_options=parse_storage_options(getattr(args, "storage_option", None))))
    args._options = options
    return options


def unmatched_selection(args, tags_are: str = "tag(s) in the source",
                        no_tags: str = "the result holds no data",
                        runs_are: str = "run(s) in the source") -> list[str]:
    """One line for each of ``--runs`` / ``--tags`` that matched nothing in the source, with
    what that leaves out. ``tags_are`` / ``runs_are``: what ``--tags`` / ``--runs`` choose
    among; ``no_tags``: what is left when ``--tags`` chooses nothing."""
    options = getattr(args, "_options", None)
    if options is None:
        return []
    return options.unmatched(tags_are, no_tags, runs_are)


def output_name(args) -> str:
    """The output as messages name it (``-`` is standard output)."""
    return "standard output" if str(args.output) == "-" else str(args.output)


def holding(args) -> str:
    """The source, and the selection that narrowed it, as the subject of "holds no ..."."""
    chosen = [f"--{k} {getattr(args, k)!r}" for k in ("runs", "tags") if getattr(args, k, None)]
    return f"{args.src}" + (f" (the runs and tags {' and '.join(chosen)} select)" if chosen else "")


def nothing_found(args, ui, message: str) -> None:
    """An empty result said in one line; with --strict an error (exit 8)."""
    if getattr(args, "strict", False):
        raise DataLossError(f"--strict: {message}")
    ui.info(f"tbconvert: warning: {message}")


def finish(args, ui, report: Report, unmatched: list[str] | None = None) -> int:
    """Print the summary; with --strict, turn lost data (or a selection that matched
    nothing: ``unmatched``, by default :func:`unmatched_selection`) into exit code 8."""
    # (the lines below say it in the command's own words)
    report.issues = [i for i in report.issues if i.kind != "selection_matched_nothing"]
    ui.summary(report)
    strict = getattr(args, "strict", False)
    if unmatched is None:
        unmatched = unmatched_selection(args)
    if strict and report.lost:
        where = "run without -q to see which" if getattr(args, "quiet", False) else \
            "see the warnings above"
        # (an issue that could not count what it cost is at least one)
        raise DataLossError(f"--strict: {sum(max(i.count, 1) for i in report.lost)} item(s) "
                            "were skipped "
                            f"or could not be written ({where})")
    for line in unmatched:
        nothing_found(args, ui, line)
    return 0


def add_extraction(p: argparse.ArgumentParser, metavar: str, output_help: str) -> None:
    """Arguments of the commands that extract one kind of data: SRC, -o, selection, options."""
    p.add_argument("src", metavar="SRC", help="event-file logdir, export, archive...")
    p.add_argument("-o", "--output", required=True, metavar=metavar, help=output_help)
    add_selection(p)
    add_reading(p)
    add_writing(p)


# How a command stopped while it prints a table ends (told by the CLI after the signal's word)
CUT_SHORT = "; the table on standard output was cut short (what was printed is incomplete)"


@contextlib.contextmanager
def printing_table():
    """A stop while a table is printed is told as cutting it short: no output file to remove."""
    try:
        yield
    except KeyboardInterrupt as exc:
        exc.aftermath = CUT_SHORT
        raise


@contextlib.contextmanager
def stdout_table(report: Report):
    """A temporary file to write a CSV table to, copied to standard output a slice at a time
    once the block ends without an error: nothing is printed unless it all succeeds.
    Messages (and ``report``) name "standard output", not the file on its way there."""
    import os
    import sys

    from tbconvert import remote, scratch
    with scratch.directory(scratch.STDOUT) as tmp:
        table = os.path.join(tmp, "out.csv")
        remote.publish(Path(table), "standard output")
        yield table
        remote.public_report(report)
        with open(table, encoding="utf-8", newline="") as fh, printing_table():
            while chunk := fh.read(1 << 20):
                sys.stdout.write(chunk)
            sys.stdout.flush()


def write_table_in_parts(args, ui, write) -> tuple[int, Report]:
    """:func:`write_table` for a table written a part at a time by ``write(src, path,
    report=, options=, force=, storage_options=)``, which answers the rows it wrote: memory
    stays bounded (``-``: through :func:`stdout_table`)."""
    from tbconvert import api, tables
    report = Report()
    options = options_from(args, ui)
    if args.output == "-":
        with stdout_table(report) as table:
            rows = write(args.src, table, report=report, options=options)
        return rows, report
    api.check_paths(args.src, args.output)
    tables.check_table_path(args.output, force=args.force,
                            storage_options=options.storage_options)
    rows = write(args.src, args.output, report=report, options=options, force=args.force,
                 storage_options=options.storage_options)
    report.outputs.append(args.output)
    return rows, report


def write_table(args, ui, build):
    """Build a table with ``build(src, report=, options=)`` and save it to ``args.output``
    (``-``: CSV on stdout)."""
    from tbconvert import tables
    report = Report()
    options = options_from(args, ui)
    to_stdout = args.output == "-"
    if not to_stdout:
        from tbconvert import api
        api.check_paths(args.src, args.output)
        tables.check_table_path(args.output, force=args.force,
                                storage_options=options.storage_options)
    table = build(args.src, report=report, options=options)
    if to_stdout:
        import io
        import sys

        from tbconvert.formats.csv import encode
        buffer = io.BytesIO()
        encode.write(table, buffer)
        with printing_table():
            sys.stdout.write(buffer.getvalue().decode("utf-8"))
            sys.stdout.flush()
        return table, report
    tables.save_table(table, args.output, force=args.force,
                      storage_options=options.storage_options)
    report.outputs.append(args.output)
    return table, report
