"""Benchmark the Parquet and HDF5 archives against TensorBoard's own reading and writing.

    python bench/bench_archives.py [--points 1000000] [--memory-points N] [--tmp DIR]

Prints a markdown table:

* event files -> Parquet (tbconvert, end to end) vs TensorBoard's EventAccumulator merely
  loading the same scalar points (size guidance 0: keep all); target >= 20x;
* Parquet -> event files vs TensorBoard's EventFileWriter writing the same points; target >= 10x;
* sizes of the event files, the Parquet archive (target <= 35%) and the HDF5 archive;
* peak memory (max RSS of a fresh process) converting 1 run x N points vs 4 runs x N points.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import installed
import numpy as np
from measure import peak_rss_mib


def make_logdir(logdir: Path, runs: int, points: int, seed: int = 0) -> None:
    """A scalar logdir written by tbconvert's own event-file writer (float32 like simple_value)."""
    import tbconvert
    from tbconvert.formats.base import Options
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries

    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    rng = np.random.default_rng(seed)
    block = 250_000
    with tbconvert.open_writer(logdir, format="tfevents", options=Options()) as w:
        for r in range(runs):
            name = f"run{r}"
            t0 = 1.7e9 + r

            def chunks(name=name, t0=t0):
                for start in range(0, points, block):
                    n = min(block, points - start)
                    steps = np.arange(start, start + n, dtype=np.int64)
                    yield ScalarSeries(run=name, tag="loss", metadata=md, steps=steps,
                                       wall_times=t0 + steps * 0.01 + rng.uniform(0, 1e-3, n),
                                       hidden=None,
                                       values=rng.normal(size=n).astype(np.float32))
            w.write_run(Run(name, t0), chunks())


REPEAT = 3   # tbconvert timings: best of 3; TensorBoard's (tens of seconds): one run


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def timed(fn, repeat: int = 1) -> float:
    """Best of ``repeat`` runs (the first run of a conversion also pays for imports)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def tb_load(logdir: Path) -> int:
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    n = 0
    for sub in sorted({p.parent for p in logdir.rglob("*tfevents*")}):
        acc = pea.EventAccumulator(str(sub), size_guidance={"tensors": 0, "scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["tensors"]:
            n += len(acc.Tensors(tag))
    return n


def tb_write(outdir: Path, points: int) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    rng = np.random.default_rng(0)
    values = rng.normal(size=points).astype(np.float32).tolist()
    w = EventFileWriter(str(outdir), max_queue_size=1000)
    for step, v in enumerate(values):
        ev = event_pb2.Event(wall_time=1.7e9 + step * 0.01, step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag="loss", simple_value=v)]))
        w.add_event(ev)
    w.close()


def main(argv=None) -> int:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000, help="scalar points (default 1M)")
    ap.add_argument("--memory-points", type=int, default=None,
                    help="points per run for the memory check (default: --points)")
    ap.add_argument("--tmp", type=Path, default=None, help="scratch directory")
    args = ap.parse_args(argv)
    import tbconvert

    root = Path(tempfile.mkdtemp(prefix="tbconvert-bench-", dir=args.tmp))
    rows = []
    try:
        n = args.points
        logdir = root / "logdir"
        make_logdir(logdir, 1, n)
        t_tb_load = timed(lambda: tb_load(logdir))
        pq_path = root / "logs.parquet"
        t_to_pq = timed(lambda: tbconvert.convert(logdir, pq_path, force=True), REPEAT)
        h5_path = root / "logs.h5"
        t_to_h5 = timed(lambda: tbconvert.convert(logdir, h5_path, force=True), REPEAT)
        back = root / "back"
        t_from_pq = timed(lambda: tbconvert.convert(pq_path, back, to_format="tfevents",
                                                    force=True), REPEAT)
        t_from_h5 = timed(lambda: tbconvert.convert(h5_path, root / "back_h5", to_format="tfevents",
                                                    force=True), REPEAT)
        t_tb_write = timed(lambda: tb_write(root / "tbwrite", n))
        ev, pqs, h5s = du(logdir), du(pq_path), du(h5_path)

        rows.append(("event files -> Parquet (tbconvert)", f"{t_to_pq:.2f} s",
                     f"{t_tb_load / t_to_pq:.1f}x faster than EventAccumulator load "
                     f"({t_tb_load:.2f} s); target >= 20x"))
        rows.append(("event files -> HDF5 (tbconvert)", f"{t_to_h5:.2f} s",
                     f"{t_tb_load / t_to_h5:.1f}x EventAccumulator load"))
        rows.append(("Parquet -> event files (tbconvert)", f"{t_from_pq:.2f} s",
                     f"{t_tb_write / t_from_pq:.1f}x faster than EventFileWriter "
                     f"({t_tb_write:.2f} s); target >= 10x"))
        rows.append(("HDF5 -> event files (tbconvert)", f"{t_from_h5:.2f} s",
                     f"{t_tb_write / t_from_h5:.1f}x EventFileWriter"))
        rows.append(("event files size", f"{ev / 1e6:.2f} MB", f"{ev / n:.1f} B/point"))
        rows.append(("Parquet size", f"{pqs / 1e6:.2f} MB",
                     f"{100 * pqs / ev:.1f}% of event files; target <= 35%"))
        rows.append(("HDF5 size", f"{h5s / 1e6:.2f} MB", f"{100 * h5s / ev:.1f}% of event files"))

        m = args.memory_points or n
        one, four = root / "mem1", root / "mem4"
        make_logdir(one, 1, m, seed=1)
        make_logdir(four, 4, m, seed=2)
        for label, dst in (("parquet", "x.parquet"), ("hdf5", "x.h5")):
            r1 = peak_rss_mib(one, root / f"m1-{dst}")
            r4 = peak_rss_mib(four, root / f"m4-{dst}")
            rows.append((f"peak RSS, event files -> {label}", f"1 run: {r1:.0f} MB",
                         f"4 runs: {r4:.0f} MB ({r4 / r1:.2f}x) at {m:,} points per run"))
        r1 = peak_rss_mib(root / "m1-x.parquet", root / "m1-back", "tfevents")
        r4 = peak_rss_mib(root / "m4-x.parquet", root / "m4-back", "tfevents")
        rows.append(("peak RSS, Parquet -> event files", f"1 run: {r1:.0f} MB",
                     f"4 runs: {r4:.0f} MB ({r4 / r1:.2f}x)"))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"\n{args.points:,} scalar points (one tag), Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs\n")
    print("| measure | result | comparison |")
    print("| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
