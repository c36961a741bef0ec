"""Reading what real writers write: every form beside TensorBoard's EventMultiplexer, in one run.

    python bench/bench_forms.py [--points 250000] [--mixed-points 1000000] [--histograms 20000]
                                [--images 20000]
                                [--forms pytorch,tf2,...] [--skip-tensorboard]

Each form is written by ``bench/writers.py`` with the record layout of the
library named (checked against ``fixtures/`` by tests/test_bench_generators.py).
For each form, TensorBoard's plugin EventMultiplexer (every size guidance 0,
purging on, as the dashboards load) reads the logdir in this process (once, or
best of three when a read takes under 5 s); then tbconvert, in the same
process, reads it as ``tbconvert info`` does and converts it to Parquet (after
one untimed call, best of two, or of five when a call takes under 0.5 s: a few
milliseconds lost to another process are much of a 0.1 s conversion). Then both run as whole commands,
interpreter start and imports included: ``tbconvert info`` (best of three)
and ``tbconvert convert DIR out.parquet`` (best of three: every core, as the
command's ``--jobs`` default), beside TensorBoard's same read in a Python process of its
own (once), so that command is compared with command. Besides wall times, the CPU time of this
process (every thread) is taken for TensorBoard's read and for the
conversion to Parquet: on a machine shared with other work, wall times swing
with the load, CPU times much less. Prints a markdown table for
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import installed

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import writers  # noqa: E402

SCALAR_FORMS = ("mixed", "pytorch", "tensorboardx", "tf2", "keras", "tf1_merge_all",
                "pytorch_layers", "tf2_layers", "sweep")
HISTOGRAM_FORMS = ("histo_legacy", "histo_tf2", "histo_legacy_layers", "histo_tf2_layers",
                   "histo_tf1_merge_all")
IMAGE_FORMS = ("images_legacy", "images_tf2")
LABELS = {
    "pytorch": "PyTorch scalars (`simple_value`)",
    "tensorboardx": "tensorboardX scalars (`simple_value`)",
    "tf2": "TF2 scalars (tensor + metadata on every value)",
    "keras": "Keras `epoch_*` scalars (train + validation runs)",
    "tf1_merge_all": "TF1 `merge_all` (8 `simple_value`s per event)",
    "mixed": "mixed logdir: 2 PyTorch runs + 2 TF2 runs",
    "sweep": "a sweep: runs of 500 points (4 tags × 125 steps), half PyTorch, half TF2",
    "histo_legacy": "histograms, legacy `HistogramProto` (PyTorch)",
    "histo_tf2": "histograms, TF2 `[30, 3]` tensor",
    "pytorch_layers": "PyTorch scalars, a metric per layer (1,024 tags)",
    "tf2_layers": "TF2 scalars, a metric per layer (1,024 tags)",
    "histo_legacy_layers": "histograms, legacy, one per parameter (256 tags)",
    "histo_tf2_layers": "histograms, TF2 tensor, one per parameter (256 tags)",
    "histo_tf1_merge_all": "histograms, TF1 `merge_all`: a histogram per parameter (256) and "
                           "2 scalars in every event",
    "images_legacy": "images, legacy `Summary.Image` (PyTorch), 16×16 PNG",
    "images_tf2": "images, TF2 string tensor, 16×16 PNG",
}


def tensorboard_read(logdir: Path) -> tuple[float, int]:
    """Seconds for EventMultiplexer to load every point, and the number of points."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    t = time.perf_counter()
    mux = pem.EventMultiplexer(size_guidance={"tensors": 0}, tensor_size_guidance={},
                               purge_orphaned_data=True)
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    points = sum(len(mux.Tensors(run, tag)) for run, info in mux.Runs().items()
                 for tag in info["tensors"])
    return time.perf_counter() - t, points


# TensorBoard's read of tensorboard_read, as a program of its own
_TENSORBOARD_PROGRAM = """
import logging, sys
from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
logging.getLogger("tensorboard").setLevel(logging.ERROR)
mux = pem.EventMultiplexer(size_guidance={"tensors": 0}, tensor_size_guidance={},
                           purge_orphaned_data=True)
mux.AddRunsFromDirectory(sys.argv[1])
mux.Reload()
print(sum(len(mux.Tensors(run, tag)) for run, info in mux.Runs().items() for tag in info["tensors"]))
"""


def tbconvert_cmd(*args: str) -> float:
    """Seconds of one whole ``tbconvert`` command (interpreter start and imports included)."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tbconvert", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def tensorboard_cmd(logdir: Path) -> float:
    """Seconds of TensorBoard's read as a whole process (interpreter start and imports included)."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", _TENSORBOARD_PROGRAM, str(logdir)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


# A measurement this short is taken more often: a few milliseconds lost to another process
# on a shared machine are a large part of it (both sides, see tensorboard_best).
SHORT = 0.5       # seconds: best of 5 below, of 2 above
TB_SHORT = 5.0    # seconds: TensorBoard's read is repeated below (best of 3), once above


def tries(fn, *args) -> tuple[int, object]:
    """How many timed calls ``fn(*args)`` gets, and what it returned: one untimed call first,
    which also tells how long it takes."""
    t = time.perf_counter()
    out = fn(*args)
    return (5 if time.perf_counter() - t < SHORT else 2), out


def tensorboard_best(logdir: Path) -> tuple[float, float, int]:
    """TensorBoard's read: best wall time, best CPU time (this process) and the points; best
    of 3 when a read takes under ``TB_SHORT`` seconds."""
    best_wall = best_cpu = float("inf")
    for _ in range(3):
        cpu0 = time.process_time()
        wall, count = tensorboard_read(logdir)
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, time.process_time() - cpu0)
        if wall >= TB_SHORT:
            break
    return best_wall, best_cpu, count


def best_of(times: int, fn, *args) -> float:
    return best_of_both(times, fn, *args)[0]


def best_of_both(times: int, fn, *args) -> tuple[float, float]:
    """Best wall time and best CPU time (of this process) over ``times`` calls."""
    wall = cpu = float("inf")
    for _ in range(times):
        t, c = time.perf_counter(), time.process_time()
        fn(*args)
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


def read_all(logdir: Path) -> int:
    """What ``tbconvert info`` does: stream every run and look at every series."""
    from tbconvert import api
    from tbconvert.report import Report
    points = 0
    with api.open_reader(logdir, report=Report()) as reader:
        for run_data in reader.iter_runs():
            points += sum(len(s) for s in run_data.series)
    return points


def to_parquet(logdir: Path, out: Path) -> None:
    import tbconvert
    if out.exists():
        out.unlink()
    tbconvert.convert(logdir, out)


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=250_000, help="scalar points per scalar form")
    ap.add_argument("--mixed-points", type=int, default=1_000_000)
    ap.add_argument("--histograms", type=int, default=20_000)
    ap.add_argument("--images", type=int, default=20_000)
    ap.add_argument("--forms", default=",".join(SCALAR_FORMS + HISTOGRAM_FORMS + IMAGE_FORMS))
    ap.add_argument("--skip-tensorboard", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for form in args.forms.split(","):
            n = args.histograms if form in HISTOGRAM_FORMS else \
                args.images if form in IMAGE_FORMS else \
                args.mixed_points if form == "mixed" else args.points
            logdir = tmp / form
            writers.write_form(form, logdir, n)
            size = sum(p.stat().st_size for p in logdir.rglob("*") if p.is_file())
            tb, tb_cpu, count = (float("nan"), float("nan"), 0) if args.skip_tensorboard \
                else tensorboard_best(logdir)
            reads, points = tries(read_all, logdir)
            assert points == (count or read_all(logdir))
            info = best_of(reads, read_all, logdir)
            out = tmp / f"{form}.parquet"
            parquet, parquet_cpu = best_of_both(tries(to_parquet, logdir, out)[0], to_parquet,
                                                logdir, out)
            command = min(tbconvert_cmd("info", str(logdir)) for _ in range(3))
            converted = min(tbconvert_cmd("convert", str(logdir), str(out), "--force", "-q")
                            for _ in range(3))
            tb_command = float("nan") if args.skip_tensorboard else tensorboard_cmd(logdir)
            rows.append((form, count or n, size, tb, info, parquet, command, tb_command, tb_cpu,
                         parquet_cpu, converted))
            print(f"{form}: {count or n} points, {size / 1e6:.1f} MB, TensorBoard {tb:.2f} s "
                  f"(CPU {tb_cpu:.2f} s), read {info:.2f} s, parquet {parquet:.2f} s "
                  f"(CPU {parquet_cpu:.2f} s), info command {command:.2f} s, convert command "
                  f"{converted:.2f} s, TensorBoard command {tb_command:.2f} s", file=sys.stderr,
                  flush=True)
            shutil.rmtree(logdir)
    print("| form | points | event files (MB) | EventMultiplexer (s) | tbconvert read (s) | ratio "
          "| → Parquet (s) | ratio | `tbconvert info` command (s) | ratio | TensorBoard as a "
          "command (s) | command ratio | `tbconvert convert` → Parquet command (s) | command "
          "ratio | CPU: EventMultiplexer (s) | CPU: → Parquet (s) | CPU ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: |")
    for (form, n, size, tb, info, parquet, command, tb_command, tb_cpu, parquet_cpu,
         converted) in rows:
        print(f"| {LABELS[form]} | {n:,} | {size / 1e6:.1f} | {tb:.2f} | {info:.2f} | {tb / info:.1f}× "
              f"| {parquet:.2f} | {tb / parquet:.1f}× | {command:.2f} | {tb / command:.1f}× "
              f"| {tb_command:.2f} | {tb_command / command:.1f}× "
              f"| {converted:.2f} | {tb_command / converted:.1f}× "
              f"| {tb_cpu:.2f} | {parquet_cpu:.2f} | {tb_cpu / parquet_cpu:.1f}× |")


if __name__ == "__main__":
    main()
