"""``tbconvert formats``: which formats this installation reads and writes."""

from __future__ import annotations

from tbconvert import registry
from tbconvert.formats.base import has_reader, has_writer, missing_packages

NAME = "formats"
HELP = "list the formats tbconvert reads and writes"


def add_arguments(p) -> None:
    pass


def run(args, ui) -> int:
    rows = [("format", "read", "write", "recognised by", "description")]
    needed: set[str] = set()
    for fmt in registry.all_formats():
        # a format that is only written and has no suffix of its own is chosen by --to alone
        by = ", ".join(fmt.suffixes) if fmt.suffixes else \
            "contents (directory)" if has_reader(fmt) else f"--to {fmt.name}"
        cells = []
        for can, writing in ((has_reader(fmt), False), (has_writer(fmt), True)):
            missing = missing_packages(fmt, writing) if can else []
            needed.update(missing)
            cells.append("-" if not can else f"needs {', '.join(missing)}" if missing else "yes")
        rows.append((fmt.name, *cells, by, fmt.description))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    if needed:
        import sys
        print(f"(not installed for {sys.executable}: {', '.join(sorted(needed))}; "
              f"{sys.executable} -m pip install {' '.join(sorted(needed))})")
    return 0
