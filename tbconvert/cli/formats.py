"""``tbconvert formats``: which formats this installation reads and writes."""

from __future__ import annotations

from tbconvert import registry
from tbconvert.formats.base import has_reader, has_writer

NAME = "formats"
HELP = "list the formats tbconvert reads and writes"


def add_arguments(p) -> None:
    pass


def run(args, ui) -> int:
    rows = [("format", "read", "write", "recognised by", "description")]
    for fmt in registry.all_formats():
        by = ", ".join(fmt.suffixes) if fmt.suffixes else "contents (directory)"
        rows.append((fmt.name, "yes" if has_reader(fmt) else "-", "yes" if has_writer(fmt) else "-", by,
                     fmt.description))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    return 0
