"""``tbconvert media SRC -o DIR``: images, audio and text written as files."""

from __future__ import annotations

from tbconvert.cli.common import (
    add_extraction,
    finish,
    holding,
    nothing_found,
    options_from,
    unmatched_selection,
)

NAME = "media"
HELP = ("write images (PNG/JPEG/GIF), audio (WAV) and text (UTF-8 .txt) as files under "
        "DIR/<run>/<tag>/<step>_<index>.<ext>")


def add_arguments(p) -> None:
    add_extraction(p, "DIR", "destination directory (must not exist or be empty, unless --force)")


def run(args, ui) -> int:
    from tbconvert.report import plural
    if str(args.output) == "-":
        from tbconvert.errors import UsageError
        raise UsageError("media writes files into a directory, which standard output (-) "
                         "cannot hold; name a directory with -o")
    from tbconvert.tables import extract_media
    report = extract_media(args.src, args.output, options=options_from(args, ui))
    files = report.files
    if files:
        ui.info(f"tbconvert: wrote {plural(files, 'file')} under {args.output}")
    code = finish(args, ui, report)
    if not files and not unmatched_selection(args):
        # (text points without text are told of above: "no text" would contradict that)
        what = ("images, audio or text that can be written" if any(
            i.kind == "unsupported_series" for i in report.issues) else "images, audio or text")
        nothing_found(args, ui, f"{holding(args)} holds no {what}; no files were written")
    return code
