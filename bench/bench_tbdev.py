"""Benchmark: TensorBoard.dev export -> event files, tbconvert vs the official converter's method.

Generates an export (default: 1M scalar points in 10 runs x 10 tags, plus
histogram tensors and image blob sequences) in a temporary directory with
tbconvert's tbdev writer, then times, side by side in one process:

* **official method**: what ``tensorboard/tools/convert_tbdev_export.py``
  does, reimplemented minimally here: per run and data class one
  ``EventFileWriter``; one ``Event`` per point (``simple_value`` scalars with
  the metadata on the first point, ``make_tensor_proto`` tensors and DT_STRING
  blob tensors with the metadata on every point);
* **tbconvert**: ``tbconvert.convert(export, out, from_format="tbdev",
  to_format="tfevents")``.

Prints a Markdown table. Usage::

    python bench/bench_tbdev.py [--scalars 1000000] [--runs 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import installed
import numpy as np


def generate(root: Path, *, scalars: int, runs: int, tags: int = 10, seed: int = 0) -> dict:
    """Write an export with ``scalars`` scalar points (plus tensors and blobs) under ``root``."""
    from tbconvert.api import copy, open_writer
    from tbconvert.formats.base import Options
    from tbconvert.model import (
        BlobSequenceSeries,
        DataClass,
        Experiment,
        Metadata,
        Run,
        RunData,
        ScalarSeries,
        TensorSeries,
    )
    from tbconvert.report import Report

    rng = np.random.default_rng(seed)
    per_tag = scalars // (runs * tags)
    t0 = 1.7e9
    counts = {"scalar": 0, "tensor": 0, "blob_sequence": 0, "blobs": 0, "blob_bytes": 0}

    def run_chunks(r: int):
        for t in range(tags):
            md = Metadata("scalars", b"", f"metric_{t}", "", DataClass.SCALAR)
            steps = np.arange(per_tag, dtype=np.int64)
            counts["scalar"] += per_tag
            yield ScalarSeries(run=f"run_{r:02d}", tag=f"metric_{t}", metadata=md, steps=steps,
                               wall_times=t0 + r + steps * 0.01, hidden=None,
                               values=rng.standard_normal(per_tag).astype(np.float32))
        for h in range(2):
            n = 100
            md = Metadata("histograms", b"", "", "", DataClass.TENSOR)
            tensors = tuple(rng.standard_normal((30, 3)).astype(np.float32) for _ in range(n))
            counts["tensor"] += n
            yield TensorSeries(run=f"run_{r:02d}", tag=f"hist_{h}", metadata=md,
                               steps=np.arange(n) * 10, wall_times=t0 + r + np.arange(n) * 0.1,
                               hidden=None, dtypes=np.full(n, 1, np.int32), tensors=tensors)
        n = 20
        md = Metadata("images", b"\x10\x01", "", "", DataClass.BLOB_SEQUENCE)
        seqs = [[b"64", b"64", rng.bytes(4096), rng.bytes(4096)] for _ in range(n)]
        counts["blob_sequence"] += n
        counts["blobs"] += 4 * n
        counts["blob_bytes"] += sum(len(b) for s in seqs for b in s)
        yield BlobSequenceSeries.from_sequences(
            run=f"run_{r:02d}", tag="images", metadata=md, steps=np.arange(n) * 50,
            wall_times=t0 + r + np.arange(n) * 0.5, hidden=None, sequences=seqs)

    class Gen:
        options = Options()

        def experiment(self):
            return Experiment(experiment_id="B" * 22, name="bench", description="",
                              create_time="2024-01-01T00:00:00Z",
                              update_time="2024-01-01T00:00:00Z")

        def iter_runs(self):
            for r in range(runs):
                yield RunData(Run(f"run_{r:02d}"), run_chunks(r))

    report = Report()
    with open_writer(root, format="tbdev", report=report) as writer:
        copy(Gen(), writer, report)
    return counts


def official_method(exp_dir: Path, out: Path) -> None:
    """The official converter's method (one Event per point via EventFileWriter), minimal."""
    import base64

    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    def grouped(name):
        by_run: dict[str, list[dict]] = {}
        path = exp_dir / name
        if path.exists():
            with open(path) as f:
                for line in f:
                    d = json.loads(line)
                    by_run.setdefault(d["run"], []).append(d)
        return by_run

    def run_dir(run):
        return str(out if run == "." else out / run)

    def scalar_values(d, md):
        p = d["points"]
        for i, (step, wall, value) in enumerate(zip(p["steps"], p["wall_times"], p["values"], strict=True)):
            v = summary_pb2.Summary.Value(tag=d["tag"], simple_value=value)
            if i == 0:
                v.metadata.CopyFrom(md)
            yield step, wall, v

    def tensor_values(d, md):
        p = d["points"]
        with np.load(exp_dir / p["tensors_file_path"]) as npz:
            for step, wall, name in zip(p["steps"], p["wall_times"], npz.files, strict=True):
                yield step, wall, summary_pb2.Summary.Value(
                    tag=d["tag"], metadata=md, tensor=tensor_util.make_tensor_proto(npz[name]))

    def blob_values(d, md):
        p = d["points"]
        for step, wall, paths in zip(p["steps"], p["wall_times"], p["blob_file_paths"], strict=True):
            blobs = [(exp_dir / x).read_bytes() for x in paths]
            yield step, wall, summary_pb2.Summary.Value(
                tag=d["tag"], metadata=md,
                tensor=tensor_util.make_tensor_proto(blobs, shape=[len(blobs)]))

    # One event file per run and export file, one Event per point, as the converter does.
    for name, suffix, values in (("scalars.json", "scalars", scalar_values),
                                 ("tensors.json", "tensors", tensor_values),
                                 ("blob_sequences.json", "blobs", blob_values)):
        for run, lines in grouped(name).items():
            w = EventFileWriter(run_dir(run), max_queue_size=1000,
                                filename_suffix=f".tbdev-converter-{suffix}")
            for d in lines:
                md = summary_pb2.SummaryMetadata.FromString(
                    base64.b64decode(d["summary_metadata"]))
                for step, wall, v in values(d, md):
                    w.add_event(event_pb2.Event(step=step, wall_time=wall,
                                                summary=summary_pb2.Summary(value=[v])))
            w.close()


def ours(exp_dir: Path, out: Path) -> None:
    import tbconvert
    tbconvert.convert(exp_dir, out, from_format="tbdev", to_format="tfevents")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv=None) -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scalars", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of tbconvert; the best time is reported (default 3)")
    ap.add_argument("--official-repeat", type=int, default=1,
                    help="runs of the official method; the best time is reported (default 1)")
    ap.add_argument("--keep", type=Path, help="keep the generated export and outputs here")
    args = ap.parse_args(argv)

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_tbdev_"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        exp_dir = tmp / ("experiment_" + "B" * 22)
        t = time.perf_counter()
        counts = generate(exp_dir, scalars=args.scalars, runs=args.runs)
        gen_s = time.perf_counter() - t
        results = []
        for name, fn, repeat in (
                ("official converter's method (EventFileWriter, one Event per point)",
                 official_method, args.official_repeat),
                ("tbconvert tbdev -> tfevents", ours, args.repeat)):
            out = tmp / ("out_official" if fn is official_method else "out_tbconvert")
            best = float("inf")
            for _ in range(max(1, repeat)):
                if out.exists():
                    shutil.rmtree(out)
                t = time.perf_counter()
                fn(exp_dir, out)
                best = min(best, time.perf_counter() - t)
            results.append((f"{name} (best of {max(1, repeat)})", best, dir_bytes(out)))
        # sanity: tbconvert's output holds every point
        import tbconvert
        loaded = tbconvert.read(tmp / "out_tbconvert", format="tfevents", restarts="keep-all")
        got = sum(len(s) for tags in loaded.series.values() for s in tags.values())
        want = counts["scalar"] + counts["tensor"] + counts["blob_sequence"]
        assert got == want, (got, want)

        points = counts["scalar"] + counts["tensor"] + counts["blob_sequence"]
        print(f"export: {counts['scalar']:,} scalar points, {counts['tensor']:,} tensor points, "
              f"{counts['blob_sequence']:,} blob sequences ({counts['blobs']:,} blobs, "
              f"{counts['blob_bytes'] / 1e6:.1f} MB); {args.runs} runs; "
              f"{dir_bytes(exp_dir) / 1e6:.1f} MB on disk; generated in {gen_s:.1f} s\n")
        base = results[0][1]
        print("| method | time (s) | points/s | output (MB) | speed-up |")
        print("|---|---:|---:|---:|---:|")
        for name, secs, size in results:
            print(f"| {name} | {secs:.2f} | {points / secs:,.0f} | {size / 1e6:.1f} | "
                  f"{base / secs:.1f}x |")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
