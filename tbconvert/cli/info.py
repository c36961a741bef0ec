"""``tbconvert info SRC``: what a source holds, one line per series (streams the source)."""

from __future__ import annotations

import json
import sys

from tbconvert.cli.common import add_reading, add_selection, finish, format_name, options_from
from tbconvert.cli.text import shown
from tbconvert.report import Report, plural

NAME = "info"
HELP = "list runs and tags: plugin, data class, points, step range, wall-time span"


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="any readable source")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", type=format_name, help="source format")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_selection(p)
    add_reading(p, writes=False)


def _time(t) -> str:
    if t is None or t != t:
        return "-"
    from datetime import datetime, timezone  # the table only, not --json
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return repr(t)


def _finite(value):
    """``value`` with every infinite or NaN float as None: JSON has no such numbers, and
    strict parsers (JavaScript's, Go's, Python's with parse_constant) refuse Infinity."""
    if isinstance(value, float):
        return value if value - value == 0 else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def run(args, ui) -> int:
    from tbconvert.describe import info
    report = Report()
    found = info(args.src, format=args.from_format, options=options_from(args, ui), report=report)
    out = found.to_dict()
    if args.json:
        json.dump(_finite(out), sys.stdout, indent=1, allow_nan=False)
        print()
    else:
        _print_table(out)
    return finish(args, ui, report)


def _print_table(out) -> None:
    exp = out["experiment"]
    if exp:
        print(shown(f"experiment {exp['id'] or '-'}: {exp['name'] or '(no name)'}"))
    rows = [("run", "tag", "plugin", "class", "points", "steps", "wall time span (UTC)")]
    total = 0
    for r in out["runs"]:
        if not r["tags"]:
            n = r["tags_left_out"]
            what = f"({n} tag{'' if n == 1 else 's'} left out by --tags)" if n else "(no data)"
            rows.append((r["run"], what, "", "", "0", "", _time(r["start_time"])))
        for tag, st in r["tags"].items():
            total += st["points"]
            points = str(st["points"])
            if st["hidden"]:
                points += f" ({st['hidden']} hidden)"
            if st["missing"]:
                points += f" ({plural(st['missing'], 'blob')} lost)"
            steps = "" if st["step_min"] is None else f"{st['step_min']}..{st['step_max']}"
            span = f"{_time(st['wall_min'])} .. {_time(st['wall_max'])}"
            rows.append((r["run"], tag, st["plugin"], st["data_class"].lower(), points, steps, span))
    rows = [tuple(shown(cell) for cell in row) for row in rows]
    widths = [min(max(_columns(row[i]) for row in rows), 48) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell + " " * (w - _columns(cell))
                        for cell, w in zip(row, widths, strict=True)).rstrip())
    n_tags = sum(len(r["tags"]) for r in out["runs"])
    print(f"{plural(len(out['runs']), 'run')}, {plural(n_tags, 'series')}, "
          f"{plural(total, 'point')}")


def _columns(text: str) -> int:
    """How many terminal columns ``text`` takes: wide (CJK, emoji) characters two, combining
    marks none."""
    import unicodedata
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
