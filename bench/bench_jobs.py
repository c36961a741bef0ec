"""Converting with ``--jobs 1`` and ``--jobs 2``, side by side in one run.

    python bench/bench_jobs.py [--points 250000] [--dir DIR] [--sweep RUNS]

Two logdirs of four event files each. In the first, four runs: two written as
PyTorch writes scalars (``simple_value``, no metadata), two as TensorFlow 2
does (a DT_FLOAT tensor with its metadata on every value). In the second, the
same four files are one run (a training resumed three times: each file goes on
from the steps of the one before). ``--sweep RUNS`` adds a third: a hyperparameter sweep of
RUNS small runs (500 points each, half PyTorch, half TF2), which ``--jobs`` gives to its
workers in groups of runs read together.
Destinations of one part per run (``parquet-dir``: a Parquet directory dataset, and
``tfevents``) have each run read *and written* in a worker process; the others are
written by the one writer in the main process, the workers only reading.
Each conversion runs the command line in a fresh process, best of ``--repeat``
(and the median ratio of pairs: each ``--jobs 1`` run against the ``--jobs 2`` run right
after it, which the host's drift from minute to minute touches least);
its CPU time (user + system, worker processes included) is taken too, which
shows what the extra processes cost, and the load average, which shows how
much of the two cores other work left. Prints a markdown table and checks that
both outputs are byte for byte equal.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import installed
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tbconvert.formats.tfevents import records  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import writers  # noqa: E402

TAGS = ("loss", "accuracy", "lr", "grad_norm", "val_loss")


def _events(path: Path, n: int, tf2: bool, seed: int, first_step: int = 0) -> None:
    """``n`` points over :data:`TAGS`, one value per event, byte for byte as PyTorch or
    TensorFlow 2 writes them (the event forms of ``bench/writers.py``)."""
    from tensorboard.compat.proto import event_pb2
    path.parent.mkdir(parents=True, exist_ok=True)
    values = np.random.default_rng(seed).random(n).astype(np.float32)
    library = "tf2" if tf2 else "pytorch"
    first = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
    if writers.SOURCE_WRITER[library]:
        first.source_metadata.writer = writers.SOURCE_WRITER[library]
    out = [records.frame(first.SerializeToString())]
    for i in range(n):
        step, wall, tag = first_step + i // len(TAGS), 1.7e9 + i * 0.001, TAGS[i % len(TAGS)]
        if tf2:
            payload = writers.tf2_scalar_event(step, wall, tag, float(values[i]))
        else:
            payload = writers.simple_value_event(step, wall, {tag: values[i]})
        out.append(records.frame(payload))
    path.write_bytes(b"".join(out))


FILES = [("torch_a", False), ("torch_b", False), ("tf2_a", True), ("tf2_b", True)]


def make_logdir(logdir: Path, points: int) -> Path:
    if not (logdir / "done").exists():
        for k, (name, tf2) in enumerate(FILES):
            _events(logdir / name / f"events.out.tfevents.1700000000.bench.{k}", points, tf2, k)
        (logdir / "done").write_text("")
    return logdir


def make_single_run(logdir: Path, points: int) -> Path:
    """The same four files as one run, in order (file names sort by their start time)."""
    if not (logdir / "done").exists():
        per_file = points // len(TAGS)
        for k, (_, tf2) in enumerate(FILES):
            _events(logdir / "train" / f"events.out.tfevents.{1700000000 + k}.bench", points, tf2,
                    k, first_step=k * per_file)
        (logdir / "done").write_text("")
    return logdir


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for p in files:
        h.update(p.read_bytes())
    return h.hexdigest()


def _event_digest(path: Path) -> str:
    """Event files by run directory, their names aside (a name holds the writer's pid)."""
    h = hashlib.sha256()
    for p in sorted(path.rglob("*"), key=lambda p: (str(p.parent), p.name)):
        if p.is_file():
            h.update(str(p.parent.relative_to(path)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _remove(path: Path) -> None:
    import shutil
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def convert(src: Path, dst: Path, jobs: int, fmt: str) -> tuple[float, float]:
    """Wall and CPU seconds of one conversion (the CPU of every process it started)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tbconvert", "convert", str(src), str(dst), "--to",
                    fmt.replace("-dir", ""),
                    "--jobs", str(jobs), "--force", "-q"], check=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ceiling_row(work: Path, src: Path, repeat: int) -> None:
    """What two processes give on this machine as it is now: the logdir's runs as two
    logdirs of two runs, converted by two independent ``--jobs 1`` commands at once against
    one after the other. No ``--jobs 2`` conversion can beat this ratio (the machine is a
    VM whose second core gives 1.5-1.8x, varying with its host's load)."""
    halves = []
    runs = sorted(p for p in src.iterdir() if p.is_dir())
    for k, part in enumerate((runs[:len(runs) // 2], runs[len(runs) // 2:])):
        half = work / f"half{k}_{src.name}"
        if not half.exists():
            half.mkdir()
            for run in part:   # hard links: the same bytes, read the same way
                (half / run.name).mkdir()
                for f in run.iterdir():
                    os.link(f, half / run.name / f.name)
        halves.append(half)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def command(k: int) -> list:
        return [sys.executable, "-m", "tbconvert", "convert", str(halves[k]),
                str(work / f"half{k}.parquet"), "--jobs", "1", "--force", "-q"]
    serial, together = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        for k in (0, 1):
            subprocess.run(command(k), check=True, env=env)
        serial.append(time.perf_counter() - start)
        start = time.perf_counter()
        procs = [subprocess.Popen(command(k), env=env) for k in (0, 1)]
        for p in procs:
            if p.wait():
                raise SystemExit("a conversion failed")
        together.append(time.perf_counter() - start)
    one, two = min(serial), min(together)
    paired = statistics.median(a / b for a, b in zip(serial, together, strict=True))
    print(f"| 4 runs | ceiling: two independent `--jobs 1` conversions of 2 runs each to "
          f"Parquet, at once | {one:.2f} s | {two:.2f} s | {one / two:.2f}x | {paired:.2f}x | | | "
          f"{os.getloadavg()[0]:.1f} | |", flush=True)


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=250_000, help="points per run")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None, help="keep the generated logdir here")
    ap.add_argument("--four-runs-only", action="store_true", help="leave out the single run")
    ap.add_argument("--sweep", type=int, default=0, help="also a sweep of this many runs")
    ap.add_argument("--formats", default="parquet,parquet-dir,hdf5,csv,tfevents",
                    help="destinations (parquet-dir: a directory dataset, one part per run)")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-jobs-"))
    sources = [("4 runs", make_logdir(work / f"logdir_{args.points}", args.points)),
               ("1 run of 4 files", make_single_run(work / f"single_{args.points}", args.points))]
    size = sum(p.stat().st_size for p in sources[0][1].rglob("*") if p.is_file())
    print(f"4 event files x {args.points:,} points ({size / 2**20:.0f} MiB), "
          f"{os.cpu_count()} cores\n")
    sources = sources[:1 if args.four_runs_only else 2]
    if args.sweep:
        sweep = work / f"sweep_{args.sweep}"
        if not (sweep / "done").exists():
            writers.sweep_logdir(sweep, args.sweep * writers.SWEEP_RUN_POINTS)
            (sweep / "done").write_text("")
        sources.append((f"a sweep of {args.sweep:,} runs", sweep))
    print("| logdir | destination | --jobs 1 | --jobs 2 | speed-up | paired speed-up "
          "| CPU --jobs 1 | CPU --jobs 2 | load average | same bytes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    suffix = {"parquet": ".parquet", "parquet-dir": "", "hdf5": ".h5", "csv": ".csv",
              "tfevents": ""}
    for label, src in sources:
        if label == "4 runs":
            ceiling_row(work, src, args.repeat)
        for fmt in args.formats.split(","):
            times, cpus, digests = {}, {}, {}
            load = os.getloadavg()[0]
            runs = {1: [], 2: []}
            for _ in range(args.repeat):   # taken in turns, so that drift hits both alike
                for jobs in (1, 2):
                    dst = work / f"out_{fmt}_j{jobs}{suffix[fmt]}"
                    runs[jobs].append(convert(src, dst, jobs, fmt))
            for jobs in (1, 2):
                dst = work / f"out_{fmt}_j{jobs}{suffix[fmt]}"
                times[jobs], cpus[jobs] = min(runs[jobs])
                digests[jobs] = _digest(dst) if fmt != "tfevents" else _event_digest(dst)
            # each --jobs 1 time over the --jobs 2 time taken right after it: the host's speed
            # drifts from one minute to the next, and a pair sees nearly the same minute
            paired = statistics.median(a[0] / b[0] for a, b in zip(runs[1], runs[2], strict=True))
            same = "yes" if digests[1] == digests[2] else "NO"
            if fmt == "tfevents" and same == "yes":
                same = "same content (file names hold the pid)"
            for jobs in (1, 2):
                _remove(work / f"out_{fmt}_j{jobs}{suffix[fmt]}")
            load = max(load, os.getloadavg()[0])
            print(f"| {label} | {fmt} | {times[1]:.2f} s | {times[2]:.2f} s | "
                  f"{times[1] / times[2]:.2f}x | {paired:.2f}x | {cpus[1]:.2f} s | {cpus[2]:.2f} s "
                  f"| {load:.1f} "
                  f"| {same} |", flush=True)


if __name__ == "__main__":
    main()
