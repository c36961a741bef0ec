"""Peak memory of converting one long run, for each destination and back.

    python bench/bench_memory.py [--points 4000000,20000000] [--files 1] [--dir DIR] [--api]

One run of N float32 scalar points (5 tags, written by tbconvert's event-file
writer), in ``--files`` event files. Each conversion runs in a fresh process as
``tbconvert convert SRC DST --to F -j 1`` (``--api``: ``tbconvert.convert(...)``, which
leaves pyarrow's memory pool and pandas probe as they are, see tbconvert/arrowpool.py)
and reports its peak resident memory (VmHWM). Prints a markdown table: if memory does
not grow with the run, the columns for 4M and 20M points are about equal.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import installed  # noqa: E402
from measure import peak_rss_mib  # noqa: E402

TAGS = ("loss", "accuracy", "lr", "grad_norm", "val_loss")


def make_run(logdir: Path, points: int, files: int) -> Path:
    """``points`` scalar points over :data:`TAGS` in one run, by tbconvert's own writer."""
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    if (logdir / "done").exists():
        return logdir
    run = logdir / "train"
    run.mkdir(parents=True, exist_ok=True)
    per_tag = points // len(TAGS)
    per_file = -(-per_tag // files)
    rng = np.random.default_rng(0)
    for f in range(files):
        lo, hi = f * per_file, min(per_tag, (f + 1) * per_file)

        def chunks(lo=lo, hi=hi):
            for tag in TAGS:
                md = Metadata("scalars", b"", tag, "", DataClass.SCALAR)
                for start in range(lo, hi, 1 << 20):
                    steps = np.arange(start, min(hi, start + (1 << 20)), dtype=np.int64)
                    yield ScalarSeries(run="train", tag=tag, metadata=md, steps=steps,
                                       wall_times=1.7e9 + steps * 0.01, hidden=None,
                                       values=rng.random(len(steps)).astype(np.float32))
        part = logdir / f"part{f}"
        with open_writer(part, format="tfevents") as w:
            w.write_run(Run("train", 1.7e9), chunks())
        (event_file,) = [p for p in part.rglob("*tfevents*") if p.is_file()]
        event_file.rename(run / f"events.out.tfevents.{1700000000 + f}.bench")
        subprocess.run(["rm", "-rf", str(part)], check=True)
    (logdir / "done").write_text("")
    return logdir


# The command as its console script runs it, then its peak (VmHWM, KiB on Linux).
_COMMAND = """
import sys
from tbconvert.cli import main
code = main(sys.argv[1:])
print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])
sys.exit(code)
"""


def command_peak_mib(src: Path, dst: Path, fmt: str) -> float:
    args = [sys.executable, "-c", _COMMAND, "convert", str(src), str(dst), "--to", fmt,
            "-q", "-j", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def convert(src: Path, dst: Path, fmt: str, api: bool = False) -> tuple[float, float]:
    if dst.exists():
        subprocess.run(["rm", "-rf", str(dst)], check=True)
    start = time.perf_counter()
    peak = peak_rss_mib(src, dst, fmt) if api else command_peak_mib(src, dst, fmt)
    return peak, time.perf_counter() - start


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="4000000,20000000")
    ap.add_argument("--files", type=int, default=1, help="event files the run is written in")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--api", action="store_true", help="measure tbconvert.convert, not the command")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-memory-"))
    sizes = [int(p) for p in args.points.split(",")]
    rows: dict[str, list[str]] = {}
    for n in sizes:
        src = make_run(work / f"run_{n}_{args.files}", n, args.files)
        mib = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
        print(f"{n:,} points: {mib:.0f} MiB of event files in {args.files} file(s)", flush=True)
        steps = [("event files -> Parquet", src, work / "o.parquet", "parquet"),
                 ("event files -> HDF5", src, work / "o.h5", "hdf5"),
                 ("event files -> CSV", src, work / "o.csv", "csv"),
                 ("event files -> event files", src, work / "o_events", "tfevents"),
                 ("Parquet -> event files", work / "o.parquet", work / "p_events", "tfevents"),
                 ("HDF5 -> event files", work / "o.h5", work / "h_events", "tfevents")]
        for label, s, d, fmt in steps:
            try:
                peak, secs = convert(s, d, fmt, args.api)
                cell = f"{peak:.0f} MiB ({secs:.0f} s)"
            except subprocess.CalledProcessError as exc:
                cell = f"failed ({exc.returncode})"
            rows.setdefault(label, []).append(cell)
            print(f"  {label}: {cell}", flush=True)
    print()
    print("| conversion, one run | " + " | ".join(f"{n / 1e6:g}M points" for n in sizes) + " |")
    print("| --- |" + " --- |" * len(sizes))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
