"""Peak memory of converting one long run, for each destination and back.

    python bench/bench_memory.py [--points 4000000,20000000] [--files 1] [--dir DIR] [--api]
    python bench/bench_memory.py --tags 100000 [--steps 3] [--read-hdf5] [--dir DIR]
    python bench/bench_memory.py --runs 5000 [--dir DIR]
    python bench/bench_memory.py --images 20000,80000 [--histograms 10000,40000] [--dir DIR]
    python bench/bench_memory.py --point 92 [--dir DIR]

One run of N float32 scalar points (5 tags, written by tbconvert's event-file
writer), in ``--files`` event files. Each conversion runs in a fresh process as
``tbconvert convert SRC DST --to F -j 1`` (``--api``: ``tbconvert.convert(...)``, which
leaves pyarrow's memory pool and pandas probe as they are, see tbconvert/arrowpool.py)
and reports its peak resident memory (VmHWM). Prints a markdown table: if memory does
not grow with the run, the columns for 4M and 20M points are about equal.

``--tags N``: one run of N tags x ``--steps`` points instead, written as PyTorch writes
them (one ``simple_value`` per event, tags interleaved per step, no metadata): the peak of
``tbconvert info`` and of converting it to each format, where what is kept per tag counts.
``--read-hdf5`` also measures reading its HDF5 archive back (``info``, and to Parquet): one
group of datasets per series, 10 KB of HDF5 structures each.

``--runs N``: N runs of 4 tags x 2 steps each (a sweep of short trials), written as PyTorch
writes them: the peak of converting them to each format, where what is kept per run counts.

``--images N,M``: a run of N (then M) 64x64 images as PyTorch writes them, and with
``--histograms`` a run of legacy histograms: each conversion's peak (and ``media``'s, and the
``histograms`` table's, a row per bucket), where blobs and buckets held whole would show.

``--point MB``: one run of a single point of MB megabytes, an image (TF2 image summary of
incompressible bytes) and then a float32 tensor: the peak of converting it to each archive,
each archive to the other and each back to event files, beside the same for a 1 KB point
(what the command takes anyway). Issue #11's goal is 256 MiB for any of them.
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


def make_many_runs(logdir: Path, runs: int) -> Path:
    """``runs`` runs ``trial_NNNNN`` of 4 tags x 2 steps each, in PyTorch's form."""
    import writers
    if (logdir / "done").exists():
        return logdir
    for i in range(runs):
        writers.scalar_run(logdir / f"trial_{i:05d}", "pytorch", 8, seed=i)
    (logdir / "done").write_text("")
    return logdir


def runs_table(work: Path, runs: int) -> None:
    src = make_many_runs(work / f"runs_{runs}", runs)
    mib = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
    print(f"{runs:,} runs of 8 points: {mib:.0f} MiB of event files", flush=True)
    print()
    print(f"| {runs:,} runs of 8 points | peak RSS (time) |")
    print("| --- | --- |")
    for label, dst, fmt in [("event files -> one Parquet file", work / "r.parquet", "parquet"),
                            ("event files -> Parquet dataset", work / "r_dataset", "parquet"),
                            ("event files -> HDF5", work / "r.h5", "hdf5"),
                            ("event files -> CSV", work / "r.csv", "csv"),
                            ("event files -> event files", work / "r_events", "tfevents")]:
        try:
            peak, secs = convert(src, dst, fmt)
            cell = f"{peak:.0f} MiB ({secs:.1f} s)"
        except subprocess.CalledProcessError as exc:
            cell = f"failed ({exc.returncode})"
        print(f"| {label} | {cell} |", flush=True)


def make_tags_run(logdir: Path, tags: int, steps: int) -> Path:
    """One run ``train`` of ``tags`` tags of ``steps`` points each, in PyTorch's form."""
    import writers
    if (logdir / "done").exists():
        return logdir
    names = tuple(f"layer_{i // 100}/param_{i % 100}/grad_norm" for i in range(tags))
    writers.scalar_run(logdir / "train", "pytorch", tags * steps, tags=names)
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


def peak_of(*command) -> tuple[float, float]:
    """Peak resident MiB and seconds of ``tbconvert COMMAND -q``, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _COMMAND, *map(str, command), "-q"], check=True,
                         capture_output=True, text=True, env=env).stdout
    return int(out.strip().splitlines()[-1]) / 1024, time.perf_counter() - start


def blobs_table(work: Path, images: list[int], histograms: list[int]) -> None:
    """One run of N 64x64 images (legacy form, as PyTorch writes them), and one of N legacy
    histograms (two tags, TensorFlow's default buckets): each conversion's peak, and the
    histogram table's (a row per bucket)."""
    import shutil

    import writers
    rows: dict[str, list[str]] = {}
    heads = []
    for kind, sizes in (("images", images), ("histograms", histograms)):
        for n in sizes:
            src = work / f"{kind}_{n}"
            if not (src / "done").exists():
                shutil.rmtree(src, ignore_errors=True)
                if kind == "images":
                    writers.image_run(src / "train", "legacy", n, size=64)
                else:
                    writers.histogram_run(src / "train", "legacy", n)
                (src / "done").write_text("")
            mib = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
            heads.append(f"{n:,} {kind} ({mib:.0f} MiB)")
            steps = [("-> Parquet", ["convert", src, work / "o.parquet", "--force", "-j", "1"]),
                     ("-> HDF5", ["convert", src, work / "o.h5", "--force", "-j", "1"]),
                     ("-> event files", ["convert", src, work / "o_ev", "--to", "tfevents",
                                         "--force", "-j", "1"])]
            if kind == "images":
                steps.append(("media", ["media", src, "-o", work / "o_media", "--force"]))
            else:
                steps += [("the histogram table -> CSV", ["histograms", src, "-o",
                                                          work / "h.csv", "--force"]),
                          ("the histogram table -> Parquet", ["histograms", src, "-o",
                                                              work / "h.parquet", "--force"])]
            for label, command in steps:
                try:
                    peak, secs = peak_of(*command)
                    cell = f"{peak:.0f} MiB ({secs:.1f} s)"
                except subprocess.CalledProcessError as exc:
                    cell = f"failed ({exc.returncode})"
                rows.setdefault(f"{kind}: {label}", {})[heads[-1]] = cell
                print(f"  {heads[-1]} {label}: {cell}", flush=True)
    print()
    print("| conversion | " + " | ".join(heads) + " |")
    print("| --- |" + " --- |" * len(heads))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells.get(h, "") for h in heads) + " |")


def _one_point_run(logdir: Path, kind: str, size: int) -> None:
    """One event of one ``size``-byte point: an image (three strings: width, height, the
    image's bytes) or a float32 tensor."""
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents.records import frame
    ev = event_pb2.Event(wall_time=1.7e9, step=1)
    v = ev.summary.value.add(tag="big")
    data = np.random.default_rng(1).bytes(size)
    if kind == "image":
        v.metadata.plugin_data.plugin_name = "images"
        v.tensor.dtype = 7                                 # DT_STRING
        v.tensor.tensor_shape.dim.add(size=3)
        v.tensor.string_val.extend([b"8", b"8", data])
    else:
        v.metadata.plugin_data.plugin_name = "tensors"
        v.tensor.dtype = 1                                 # DT_FLOAT
        v.tensor.tensor_shape.dim.add(size=size // 4)
        v.tensor.tensor_content = data[:size // 4 * 4]
    logdir.mkdir(parents=True, exist_ok=True)
    (logdir / "events.out.tfevents.1.host").write_bytes(frame(ev.SerializeToString()))


def point_table(work: Path, megabytes: float) -> None:
    """Each conversion's peak for one large point (an image, a tensor), and for a 1 KB one."""
    size = int(megabytes * 1e6)
    steps = [("event files -> Parquet", "logs", "o.parquet", "parquet"),
             ("event files -> HDF5", "logs", "o.h5", "hdf5"),
             ("Parquet -> HDF5", "o.parquet", "p.h5", "hdf5"),
             ("HDF5 -> Parquet", "o.h5", "h.parquet", "parquet"),
             ("Parquet -> event files", "o.parquet", "p_events", "tfevents"),
             ("HDF5 -> event files", "o.h5", "h_events", "tfevents")]
    heads = [f"{megabytes:g} MB image", f"{megabytes:g} MB tensor", "1 KB image"]
    rows: dict[str, list[str]] = {}
    for head, kind, n in zip(heads, ("image", "tensor", "image"), (size, size, 1000),
                             strict=True):
        where = work / f"point_{kind}_{n}"
        if not (where / "logs").exists():
            _one_point_run(where / "logs" / "train", kind, n)
        for label, src, dst, fmt in steps:
            cell = _cell(where / src, where / dst, fmt, digits=1)
            rows.setdefault(label, []).append(cell)
            print(f"  {head} {label}: {cell}", flush=True)
    print()
    print("| one point | " + " | ".join(heads) + " |")
    print("| --- |" + " --- |" * len(heads))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


def command_peak_mib(src: Path, dst: Path | None, fmt: str) -> float:
    """Peak of ``tbconvert convert SRC DST --to FMT`` (``dst`` None: ``tbconvert info SRC``)."""
    wide = ["--wide"] if fmt == "csv-wide" else []
    fmt = "csv" if fmt == "csv-wide" else fmt
    command = ["convert", str(src), str(dst), "--to", fmt, *wide] if dst is not None else \
        ["info", str(src)]
    args = [sys.executable, "-c", _COMMAND, *command, "-q", "-j", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def _cell(src: Path, dst: Path | None, fmt: str, api: bool = False, digits: int = 0) -> str:
    """A table cell: the conversion's peak and time, or how it failed."""
    try:
        peak, secs = convert(src, dst, fmt, api)
    except subprocess.CalledProcessError as exc:
        return f"failed ({exc.returncode})"
    return f"{peak:.0f} MiB ({secs:.{digits}f} s)"


def convert(src: Path, dst: Path | None, fmt: str, api: bool = False) -> tuple[float, float]:
    if dst is not None and dst.exists():
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
    ap.add_argument("--tags", type=int, default=None,
                    help="measure one run of this many tags instead (see --steps)")
    ap.add_argument("--steps", type=int, default=3, help="points per tag, with --tags")
    ap.add_argument("--runs", type=int, default=None,
                    help="N runs of 8 points each instead of one long run")
    ap.add_argument("--read-hdf5", action="store_true",
                    help="with --tags: also read the HDF5 archive back (info, -> Parquet)")
    ap.add_argument("--images", default=None,
                    help="sizes of a run of 64x64 images to measure instead, e.g. 20000,80000")
    ap.add_argument("--histograms", default="",
                    help="with --images: sizes of a run of legacy histograms, e.g. 10000,40000")
    ap.add_argument("--point", type=float, default=None, metavar="MB",
                    help="measure one point of this many MB (an image, a tensor) instead")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-memory-"))
    if args.point is not None:
        point_table(work, args.point)
        return
    if args.images is not None:
        blobs_table(work, [int(n) for n in args.images.split(",") if n],
                    [int(n) for n in args.histograms.split(",") if n])
        return
    if args.tags is not None:
        tags_table(work, args.tags, args.steps, args.api, args.read_hdf5)
        return
    if args.runs is not None:
        runs_table(work, args.runs)
        return
    sizes = [int(p) for p in args.points.split(",")]
    rows: dict[str, list[str]] = {}
    for n in sizes:
        src = make_run(work / f"run_{n}_{args.files}", n, args.files)
        mib = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
        print(f"{n:,} points: {mib:.0f} MiB of event files in {args.files} file(s)", flush=True)
        steps = [("event files -> Parquet", src, work / "o.parquet", "parquet"),
                 ("event files -> HDF5", src, work / "o.h5", "hdf5"),
                 ("event files -> CSV", src, work / "o.csv", "csv"),
                 ("event files -> wide CSV", src, work / "w.csv", "csv-wide"),
                 ("event files -> event files", src, work / "o_events", "tfevents"),
                 ("Parquet -> event files", work / "o.parquet", work / "p_events", "tfevents"),
                 ("HDF5 -> event files", work / "o.h5", work / "h_events", "tfevents")]
        for label, s, d, fmt in steps:
            if args.api and fmt == "csv-wide":
                continue    # (the command's option)
            cell = _cell(s, d, fmt, args.api)
            rows.setdefault(label, []).append(cell)
            print(f"  {label}: {cell}", flush=True)
    print()
    print("| conversion, one run | " + " | ".join(f"{n / 1e6:g}M points" for n in sizes) + " |")
    print("| --- |" + " --- |" * len(sizes))
    for label, cells in rows.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


def tags_table(work: Path, tags: int, steps: int, api: bool, read_hdf5: bool = False) -> None:
    src = make_tags_run(work / f"tags_{tags}_{steps}", tags, steps)
    mib = sum(p.stat().st_size for p in src.rglob("*") if p.is_file()) / 2**20
    print(f"{tags:,} tags x {steps} steps: {mib:.0f} MiB of event files", flush=True)
    steps_ = [("info", None, "info"),
              ("event files -> Parquet", work / "t.parquet", "parquet"),
              ("event files -> HDF5", work / "t.h5", "hdf5"),
              ("event files -> CSV", work / "t.csv", "csv"),
              ("event files -> event files", work / "t_events", "tfevents")]
    steps_ = [(label, src, dst, fmt) for label, dst, fmt in steps_]
    if read_hdf5:   # (the archive written by the step before them)
        steps_ += [("HDF5 archive: info", work / "t.h5", None, "info"),
                   ("HDF5 archive -> Parquet", work / "t.h5", work / "h.parquet", "parquet")]
    print()
    print(f"| one run, {tags:,} tags x {steps} steps | peak RSS (time) |")
    print("| --- | --- |")
    for label, source, dst, fmt in steps_:
        if api and dst is None:
            continue    # (the API's peak is measured for conversions only)
        try:
            peak, secs = convert(source, dst, fmt, api)
            cell = f"{peak:.0f} MiB ({secs:.1f} s)"
        except subprocess.CalledProcessError as exc:
            cell = f"failed ({exc.returncode})"
        print(f"| {label} | {cell} |", flush=True)


if __name__ == "__main__":
    main()
