"""Converting through a Dask cluster of 1 and 2 local workers, and what that scales to.

    python bench/bench_dask.py [--points 1500000] [--runs 4] [--dir DIR]

A logdir of ``--runs`` runs, one event file each, written byte for byte as
PyTorch and TensorFlow 2 write scalars (``bench_jobs``' files). A
``LocalCluster`` of 1, then 2, worker processes (one thread each, on
127.0.0.1) converts it with ``scheduler=`` to a Parquet directory dataset and
to event files; the cluster's start is not timed (a real cluster is already
up), the client's connection is. Prints a markdown table of wall times, the
workers' CPU time (which the other work of a shared machine does not inflate
as much as the wall time) and source MiB per worker CPU second, and the scale
model: how long 1 TB of event files takes on 1, 16 and 200 worker cores at the
rate per CPU second measured with 2 workers.
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
import installed  # noqa: E402

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


def _cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _workers_cpu(client) -> float:
    return sum(client.run(_cpu).values())


def timed(src: Path, dst: Path, fmt: str, address: str, repeat: int) -> tuple[float, float]:
    """Best wall time, and the workers' CPU seconds in that conversion."""
    import distributed
    best = (float("inf"), 0.0)
    with distributed.Client(address) as client:
        for _ in range(repeat):
            if dst.exists():
                shutil.rmtree(dst)
            cpu = _workers_cpu(client)
            start = time.perf_counter()
            tbconvert.convert(src, dst, to_format=fmt, scheduler=address)
            wall = time.perf_counter() - start
            best = min(best, (wall, _workers_cpu(client) - cpu))
    shutil.rmtree(dst)
    return best


def _hours(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 600 else f"{seconds / 60:.1f} min"


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
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
                wall, cpu = timed(src, work / "out", fmt, cluster.scheduler_address, args.repeat)
            mib = size / 2**20
            rates[fmt, workers] = mib / cpu       # MiB per CPU second of a worker
            rows.append((fmt, workers, wall, mib / wall / workers, cpu, mib / cpu))
    print("| destination | workers | wall | speed-up | MiB/s per worker (wall) | workers' CPU "
          "| MiB per CPU second |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for fmt, workers, wall, per_worker, cpu, per_cpu in rows:
        one = next(w for f, n, w, *_ in rows if f == fmt and n == 1)
        print(f"| {fmt} | {workers} | {wall:.2f} s | {one / wall:.2f}x | {per_worker:.1f} "
              f"| {cpu:.2f} s | {per_cpu:.1f} |")
    print("\nScale model, 1 TB of event files at the MiB per CPU second of 2 workers (a core "
          "given to each worker; storage fast enough to keep up):\n")
    print("| destination | 1 core | 16 cores | 200 cores |")
    print("| --- | --- | --- | --- |")
    for fmt in ("parquet", "tfevents"):
        rate = rates[fmt, 2] * 2**20
        cells = [_hours(TB / (rate * cores)) for cores in (1, 16, 200)]
        print(f"| {fmt} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
