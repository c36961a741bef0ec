"""Benchmark: scalar tables on 1M points.

1. ``tbconvert.scalars(logdir)`` vs tbparse's ``SummaryReader(logdir).scalars``
   (goal: at least 10x faster), side by side, same logdir.
2. Long CSV (``tbconvert convert logdir out.csv``) vs Parquet
   (``... out.parquet``): goal CSV under 3x the Parquet time.

Usage::

    python bench/bench_tables.py [--points 1000000] [--runs 4] [--tags 5] [--skip-tbparse]

The logdir is written once, as PyTorch writes scalars (legacy ``simple_value``,
one event per point), into a temporary directory. tbparse is optional: install it
into the environment to compare (it is never a dependency of tbconvert).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import installed
import numpy as np

import tbconvert


def make_logdir(root: Path, points: int, runs: int, tags: int) -> Path:
    """Event files as PyTorch's SummaryWriter writes them (``simple_value`` scalars)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = root / "logs"
    per_series = points // (runs * tags)
    rng = np.random.default_rng(0)
    for r in range(runs):
        writer = EventFileWriter(str(logdir / f"run_{r}"), max_queue_size=1000)
        values = rng.standard_normal((per_series, tags)).astype(np.float32).tolist()
        for step in range(per_series):
            wall = 1.7e9 + step * 0.01
            for t in range(tags):
                summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                    tag=f"metric/{t}", simple_value=values[step][t])])
                writer.add_event(event_pb2.Event(wall_time=wall + t * 1e-4, step=step,
                                                 summary=summary))
        writer.close()
    return logdir


def timed(fn, repeat: int = 1):
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--tags", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-tbparse", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="tbconvert-bench-"))
    try:
        t0 = time.perf_counter()
        logdir = make_logdir(tmp, args.points, args.runs, args.tags)
        size = sum(p.stat().st_size for p in logdir.rglob("*") if p.is_file())
        print(f"logdir: {args.points:,} scalar points ({args.runs} runs x {args.tags} tags), "
              f"{size / 1e6:.1f} MB, written in {time.perf_counter() - t0:.1f} s")

        t_ours, df = timed(lambda: tbconvert.scalars(logdir), args.repeat)
        print(f"tbconvert.scalars()             {t_ours:8.2f} s   rows={len(df):,}")
        if not args.skip_tbparse:
            try:
                from tbparse import SummaryReader
            except ImportError:
                print("tbparse not installed: pip install tbparse to compare")
            else:
                t_tbp, tdf = timed(lambda: SummaryReader(str(logdir), pivot=False,
                                                         extra_columns={"dir_name"}).scalars)
                print(f"tbparse SummaryReader.scalars   {t_tbp:8.2f} s   rows={len(tdf):,}")
                print(f"speed-up                        {t_tbp / t_ours:8.1f} x  (goal >= 10x)")

        def convert(name):
            dst = tmp / name
            return lambda: tbconvert.convert(logdir, dst, force=True)
        t_parquet, _ = timed(convert("out.parquet"), args.repeat)
        t_csv, _ = timed(convert("out.csv"), args.repeat)
        print(f"convert -> Parquet              {t_parquet:8.2f} s")
        print(f"convert -> long CSV             {t_csv:8.2f} s   "
              f"({t_csv / t_parquet:.2f}x Parquet; goal < 3x), "
              f"{(tmp / 'out.csv').stat().st_size / 1e6:.1f} MB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
