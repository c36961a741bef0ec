"""A full conversion against ``sync`` after 1% new data, side by side.

    python bench/bench_sync.py [--points 1000000] [--runs 10] [--new 0.01] [--repeat 3] [--dir DIR]

The logdir holds ``--runs`` runs of scalars, half written as PyTorch writes them
(``simple_value``), half as TensorFlow 2 does (a DT_FLOAT tensor with its metadata),
byte for byte (``bench/writers.py``). Timed, each in a fresh process as a user runs it:

* ``convert logs/ full/ --to parquet``;
* the first ``sync logs/ archive/`` (everything is new);
* ``sync`` again after ``--new`` of the points were appended, spread over every run's
  event file (training went on), and once more with nothing new.

The sync is also timed inside one Python process (``tbconvert.sync``), which leaves out
the interpreter's start-up. After the timings the dataset is checked to hold exactly the
rows of the full conversion. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import writers  # noqa: E402

from tbconvert.formats.tfevents import records  # noqa: E402

TAGS = writers.SCALAR_TAGS


def _library(i: int) -> str:
    return "pytorch" if i % 2 == 0 else "tf2"


def build(logdir: Path, runs: int, points: int) -> None:
    for i in range(runs):
        writers.scalar_run(logdir / f"run{i:02d}", _library(i), points // runs, seed=i)


def append(logdir: Path, runs: int, points: int, new: int) -> None:
    """``new`` points more, spread over the runs, steps going on where each run stopped."""
    first = points // runs // len(TAGS)
    steps = max(1, new // runs // len(TAGS))
    for i in range(runs):
        path = next((logdir / f"run{i:02d}").glob("*tfevents*"))
        vals = np.random.default_rng(100 + i).random(steps * len(TAGS)).astype(np.float32)
        out = []
        for s in range(first, first + steps):
            wall = writers.WALL0 + 1 + s * 0.01
            for j, tag in enumerate(TAGS):
                v = vals[(s - first) * len(TAGS) + j]
                if _library(i) == "pytorch":
                    out.append(records.frame(writers.simple_value_event(s, wall, {tag: v})))
                else:
                    out.append(records.frame(writers.tf2_scalar_event(s, wall, tag, float(v))))
        with open(path, "ab") as fh:
            fh.write(b"".join(out))


def cli(*args) -> float:
    env = {"PYTHONPATH": str(ROOT)}
    import os
    env = {**os.environ, **env}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tbconvert", *map(str, args), "-q"], check=True,
                   env=env, cwd=str(ROOT))
    return time.perf_counter() - t0


def best(fn, repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def rows(path: Path) -> list:
    import json

    import pyarrow.dataset as pads
    cols = ["run", "tag", "step", "wall_time", "value", "hidden"]
    parts = json.loads((path / "_tbconvert.json").read_text())["parts"]
    table = pads.dataset([str(path / p["file"]) for p in parts], format="parquet").to_table(
        columns=cols)
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--new", type=float, default=0.01)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(dir=a.dir, prefix="bench-sync-"))
    try:
        logs = base / "logs"
        build(logs, a.runs, a.points)
        size = sum(f.stat().st_size for f in logs.rglob("*tfevents*"))

        def full():
            shutil.rmtree(base / "full", ignore_errors=True)
            return cli("convert", logs, base / "full", "--to", "parquet")
        t_full = best(full, a.repeat)

        def first_sync():
            shutil.rmtree(base / "archive", ignore_errors=True)
            return cli("sync", logs, base / "archive")
        t_first = best(first_sync, a.repeat)
        new = int(a.points * a.new)
        rows_new = []
        for k in range(a.repeat):
            append(logs, a.runs, a.points + k * new, new)
            grown = sum(f.stat().st_size for f in logs.rglob("*tfevents*"))
            rows_new.append(cli("sync", logs, base / "archive"))
        t_sync = min(rows_new)
        t_same = best(lambda: cli("sync", logs, base / "archive"), a.repeat)

        import tbconvert

        def full_inproc():
            shutil.rmtree(base / "full", ignore_errors=True)
            t0 = time.perf_counter()
            tbconvert.convert(logs, base / "full", to_format="parquet", jobs=0)
            return time.perf_counter() - t0
        full_inproc()       # the imports, once
        t_full_inproc = best(full_inproc, a.repeat)
        inproc = []
        for k in range(a.repeat):
            append(logs, a.runs, a.points + (a.repeat + k) * new, new)
            t0 = time.perf_counter()
            report = tbconvert.sync(logs, base / "archive")
            inproc.append(time.perf_counter() - t0)
            assert report.runs_extended == a.runs and report.runs_rearchived == 0, \
                report.summary()
        t_inproc = min(inproc)
        t0 = time.perf_counter()
        tbconvert.sync(logs, base / "archive")
        t_inproc_same = time.perf_counter() - t0
        full()
        assert rows(base / "archive") == rows(base / "full"), "the dataset differs from convert"
        mib = size / 2**20
        import os
        print("load average (1, 5, 15 min) at the end: "
              + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + f"; {os.cpu_count()} cores\n")
        print(f"{a.points:,} points, {a.runs} runs ({mib:.1f} MiB); then {new:,} points "
              f"({100 * a.new:g}%, {(grown - size) / a.repeat / 2**10:.0f} KiB) appended over "
              f"every run; best of {a.repeat}, fresh process each\n")
        print("| what | seconds | vs. full convert |")
        print("| --- | ---: | ---: |")
        for what, t, ref in (
                ("`convert logs/ full/ --to parquet`", t_full, t_full),
                ("first `sync` (everything new)", t_first, t_full),
                (f"`sync` after {100 * a.new:g}% new", t_sync, t_full),
                ("`sync` with nothing new", t_same, t_full),
                ("in one process (imports done): `tbconvert.convert()`", t_full_inproc,
                 t_full_inproc),
                (f"in one process: `tbconvert.sync()` after {100 * a.new:g}% new", t_inproc,
                 t_full_inproc),
                ("in one process: `tbconvert.sync()` with nothing new", t_inproc_same,
                 t_full_inproc)):
            print(f"| {what} | {t:.2f} | {100 * t / ref:.1f}% |")
        print("\nthe synced dataset holds the same rows as the full conversion: yes")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
