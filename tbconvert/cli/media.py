"""``tbconvert media SRC -o DIR``: images, audio and text written as files."""

from __future__ import annotations

from pathlib import Path

from tbconvert.cli.common import add_extraction, finish, options_from
from tbconvert.report import Report

NAME = "media"
HELP = ("write images (PNG/JPEG/GIF), audio (WAV) and text (UTF-8 .txt) as files under "
        "DIR/<run>/<tag>/<step>_<index>.<ext>")


def add_arguments(p) -> None:
    add_extraction(p, "DIR", "destination directory (must not exist or be empty, unless --force)")


def run(args, ui) -> int:
    from tbconvert.tables._media import extract
    report = Report()
    options = options_from(args, ui)
    files = extract(args.src, Path(args.output), options, report)
    ui.info(f"tbconvert: wrote {files} files under {args.output}")
    return finish(args, ui, report)
