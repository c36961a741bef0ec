"""Event-file speed and memory, tbconvert beside TensorBoard's own classes, in one run.

    python bench/bench_tfevents.py [--points 1000000]

Prints a markdown table (copy it into bench/RESULTS.md). Reading is compared
with TensorBoard's EventAccumulator with every size guidance 0 (keep all);
writing with TensorBoard's EventFileWriter; memory with peak RSS of a
subprocess converting 1 run versus 4 runs of the same size.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import installed
import numpy as np
import writers
from measure import peak_rss_mib

from tbconvert import read
from tbconvert.api import open_writer
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries
from tbconvert.report import Report


def scalar_series(n: int, run: str = ".", tag: str = "loss") -> ScalarSeries:
    steps = np.arange(n, dtype=np.int64)
    return ScalarSeries(run=run, tag=tag, metadata=Metadata("scalars", b"", tag, "", DataClass.SCALAR),
                        steps=steps, wall_times=1.7e9 + steps * 0.01, hidden=None,
                        values=np.random.default_rng(0).random(n).astype(np.float32))


def write_tensor_form(logdir: Path, n: int, runs=(".",)) -> None:
    with open_writer(logdir, format="tfevents", report=Report()) as w:
        for run in runs:
            w.write_run(Run(run), [scalar_series(n, run)])


def write_simple_value_form(logdir: Path, n: int) -> None:
    """Events as PyTorch writes them: one simple_value per event (bench/writers.py)."""
    writers.scalar_run(logdir, "pytorch", n, tags=("loss",))


def write_tf2_form(logdir: Path, n: int) -> None:
    """Events as TensorFlow 2 writes them: a tensor with metadata on every value."""
    writers.scalar_run(logdir, "tf2", n, tags=("loss",))


def tb_read(logdir: Path) -> int:
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    acc = pea.EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return sum(len(acc.Tensors(t)) for t in acc.Tags()["tensors"])


def our_read(logdir: Path) -> int:
    data = read(logdir, restarts="keep-all")
    return sum(len(s) for tags in data.series.values() for s in tags.values())


def tb_write(logdir: Path, n: int) -> None:
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    vals = np.random.default_rng(0).random(n).astype(np.float32)
    w = EventFileWriter(str(logdir), max_queue_size=1000)
    for i in range(n):
        ev = event_pb2.Event(step=i, wall_time=1.7e9 + i * 0.01)
        ev.summary.value.add(tag="loss", simple_value=float(vals[i]))
        w.add_event(ev)
    w.close()


# Large images: few records of several MiB each (a run logging full-size samples).
IMAGES, IMAGE_BYTES = 32, 4 << 20


def _image_blobs(k: int) -> bytes:
    return np.random.default_rng(k).integers(0, 256, IMAGE_BYTES, dtype=np.uint8).tobytes()


def write_images(logdir: Path) -> None:
    steps = np.arange(IMAGES, dtype=np.int64)
    blobs = tuple(b for k in range(IMAGES) for b in (b"1024", b"1024", _image_blobs(k)))
    series = BlobSequenceSeries(
        run=".", tag="sample", metadata=Metadata("images", b"", "sample", "",
                                                 DataClass.BLOB_SEQUENCE),
        steps=steps, wall_times=1.7e9 + steps, hidden=None,
        offsets=np.arange(0, 3 * IMAGES + 1, 3, dtype=np.int64), blobs=blobs)
    with open_writer(logdir, format="tfevents", report=Report()) as w:
        w.write_run(Run("."), [series])


def tb_write_images(logdir: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    w = EventFileWriter(str(logdir), max_queue_size=10)
    for k in range(IMAGES):
        ev = event_pb2.Event(step=k, wall_time=1.7e9 + k)
        ev.summary.value.add(tag="sample", image=summary_pb2.Summary.Image(
            height=1024, width=1024, colorspace=3, encoded_image_string=_image_blobs(k)))
        w.add_event(ev)
    w.close()


def timed(fn, *args):
    t = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t, result


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--skip-tensorboard", action="store_true", help="only time tbconvert")
    n = ap.parse_args().points
    skip_tb = ap.parse_args().skip_tensorboard
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        simple, tensor = tmp / "simple", tmp / "tensor"
        write_simple_value_form(simple, n)
        write_tf2_form(tensor, n)
        for label, logdir in (("PyTorch simple_value form", simple),
                              ("TF2 form, metadata on every value", tensor)):
            ours, count = timed(our_read, logdir)
            assert count == n, count
            theirs = timed(tb_read, logdir)[0] if not skip_tb else float("nan")
            rows.append((f"read {n:,} scalars ({label})", theirs, ours))
        ours = timed(write_tensor_form, tmp / "w_ours", n)[0]
        theirs = timed(tb_write, tmp / "w_tb", n)[0] if not skip_tb else float("nan")
        rows.append((f"write {n:,} scalars", theirs, ours))
        ours = timed(write_images, tmp / "img_ours")[0]
        theirs = timed(tb_write_images, tmp / "img_tb")[0] if not skip_tb else float("nan")
        rows.append((f"write {IMAGES} images of {IMAGE_BYTES >> 20} MiB", theirs, ours))
        one, four = tmp / "one", tmp / "four"
        write_tensor_form(one, n, runs=("r0",))
        write_tensor_form(four, n, runs=("r0", "r1", "r2", "r3"))
        rss1 = peak_rss_mib(one, tmp / "one_out", "tfevents")
        rss4 = peak_rss_mib(four, tmp / "four_out", "tfevents")
    print("| task | TensorBoard (s) | tbconvert (s) | speed-up |")
    print("| --- | ---: | ---: | ---: |")
    for label, theirs, ours in rows:
        print(f"| {label} | {theirs:.2f} | {ours:.2f} | {theirs / ours:.1f}x |")
    print()
    print(f"Peak RSS converting event files to event files: 1 run x {n:,} points: {rss1:.0f} MiB; "
          f"4 runs x {n:,} points: {rss4:.0f} MiB.")


if __name__ == "__main__":
    main()
