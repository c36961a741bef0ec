"""``tbconvert info SRC``: what a source holds, one line per series (streams the source)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

from tbconvert.cli.common import add_reading, add_selection, finish, options_from
from tbconvert.cli.text import shown
from tbconvert.report import Report

NAME = "info"
HELP = "list runs and tags: plugin, data class, points, step range, wall-time span"


def add_arguments(p) -> None:
    p.add_argument("src", metavar="SRC", help="any readable source")
    p.add_argument("--from", dest="from_format", metavar="FORMAT", help="source format")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_selection(p)
    add_reading(p, writes=False)


def _time(t) -> str:
    if t is None or t != t:
        return "-"
    try:
        return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return repr(t)


class _Stats:
    def __init__(self, series) -> None:
        self.plugin = series.metadata.plugin_name
        self.data_class = series.data_class.name
        self.points = self.hidden = self.missing = 0
        self.step_min = self.step_max = None
        self.wall_min = self.wall_max = None

    def add(self, s) -> None:
        self.points += len(s)
        self.hidden += s.hidden_count
        self.missing += getattr(s, "missing_count", 0)
        if len(s):
            lo, hi = int(s.steps.min()), int(s.steps.max())
            self.step_min = lo if self.step_min is None else min(lo, self.step_min)
            self.step_max = hi if self.step_max is None else max(hi, self.step_max)
            w = s.wall_times[s.wall_times == s.wall_times]
            if len(w):
                lo_w, hi_w = float(w.min()), float(w.max())
                self.wall_min = lo_w if self.wall_min is None else min(lo_w, self.wall_min)
                self.wall_max = hi_w if self.wall_max is None else max(hi_w, self.wall_max)


def run(args, ui) -> int:
    from tbconvert import api
    report = Report()
    opts = options_from(args, ui)
    out = {"experiment": None, "runs": []}
    with api.open_reader(args.src, format=args.from_format, options=opts, report=report) as reader:
        exp = reader.experiment()
        if not exp.is_empty():
            out["experiment"] = {"id": exp.experiment_id, "name": exp.name,
                                 "description": exp.description}
        for run_data in reader.iter_runs():
            stats: dict[str, _Stats] = {}
            for s in run_data.series:
                if not opts.wants_tag(s.tag):
                    continue
                stats.setdefault(s.tag, _Stats(s)).add(s)
            if not opts.wants_run(run_data.run.name):
                continue
            out["runs"].append({"run": run_data.run.name, "start_time": run_data.run.start_time,
                                "tags": {t: vars(st) for t, st in stats.items()}})
    if args.json:
        json.dump(out, sys.stdout, indent=1)
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
            rows.append((r["run"], "(no data)", "", "", "0", "", _time(r["start_time"])))
        for tag, st in r["tags"].items():
            total += st["points"]
            points = str(st["points"])
            if st["hidden"]:
                points += f" ({st['hidden']} hidden)"
            if st["missing"]:
                points += f" ({st['missing']} blobs lost)"
            steps = "" if st["step_min"] is None else f"{st['step_min']}..{st['step_max']}"
            span = f"{_time(st['wall_min'])} .. {_time(st['wall_max'])}"
            rows.append((r["run"], tag, st["plugin"], st["data_class"].lower(), points, steps, span))
    rows = [tuple(shown(cell) for cell in row) for row in rows]
    widths = [min(max(len(row[i]) for row in rows), 48) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    n_tags = sum(len(r["tags"]) for r in out["runs"])
    print(f"{len(out['runs'])} runs, {n_tags} series, {total} points")
