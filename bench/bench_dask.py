"""Converting through a Dask cluster of 1 and 2 local workers, and what that scales to.

    python bench/bench_dask.py [--points 1500000] [--runs 4] [--dir DIR]

A logdir of ``--runs`` runs, one event file each, written byte for byte as
PyTorch and TensorFlow 2 write scalars (``bench_jobs``' files). A
``LocalCluster`` of 1, then 2, worker processes (one thread each, on
127.0.0.1) converts it with ``scheduler=`` to a Parquet directory dataset and
to event files; the cluster's start is not timed (a real cluster is already
up), the client's connection is. Prints a markdown table of wall times,
throughput per worker core (source MiB/s), and the scale model: how long 1 TB
of event files takes on 1, 16 and 200 worker cores at the measured rate per
core, the 2-worker efficiency applied from 16 cores on.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs  # noqa: E402

import tbconvert  # noqa: E402

TB = 1e12


def make_logdir(logdir: Path, runs: int, points: int) -> Path:
    if not (logdir / "done").exists():
        for k in range(runs):
            name, tf2 = bench_jobs.FILES[k % len(bench_jobs.FILES)]
            bench_jobs._events(logdir / f"{name}_{k}" / f"events.out.tfevents.1700000000.bench.{k}",
                               points, tf2, k)
        (logdir / "done").write_text("")
    return logdir


def timed(src: Path, dst: Path, fmt: str, address: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        if dst.exists():
            shutil.rmtree(dst)
        start = time.perf_counter()
        tbconvert.convert(src, dst, to_format=fmt, scheduler=address)
        best = min(best, time.perf_counter() - start)
    shutil.rmtree(dst)
    return best


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def main() -> None:
    import distributed
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_500_000, help="points per run")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None, help="keep the generated logdir here")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-dask-"))
    src = make_logdir(work / f"logdir_{args.runs}x{args.points}", args.runs, args.points)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    print(f"{args.runs} runs x {args.points:,} points ({size / 2**20:.0f} MiB of event files), "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n")
    rates: dict = {}
    rows = []
    for fmt in ("parquet", "tfevents"):
        for workers in (1, 2):
            with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                          host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                          silence_logs=50) as cluster:
                wall = timed(src, work / "out", fmt, cluster.scheduler_address, args.repeat)
            per_core = size / 2**20 / wall / workers
            rates[fmt, workers] = per_core
            rows.append((fmt, workers, wall, per_core))
    print("| destination | workers | wall | source MiB/s per worker core | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    for fmt, workers, wall, per_core in rows:
        one = next(w for f, n, w, _ in rows if f == fmt and n == 1)
        print(f"| {fmt} | {workers} | {wall:.2f} s | {per_core:.1f} | {one / wall:.2f}x |")
    print("\nScale model, 1 TB of event files (rate per core from 1 worker; from 16 cores on, "
          "times the 2-worker efficiency):\n")
    print("| destination | 1 core | 16 cores | 200 cores |")
    print("| --- | --- | --- | --- |")
    for fmt in ("parquet", "tfevents"):
        rate = rates[fmt, 1] * 2**20
        efficiency = min(1.0, rates[fmt, 2] / rates[fmt, 1])
        cells = [_hours(TB / rate)] + [_hours(TB / (rate * cores * efficiency))
                                       for cores in (16, 200)]
        print(f"| {fmt} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
