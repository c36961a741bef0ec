"""Event files laid out byte for byte as the real logging libraries write them.

Benchmarks of a reader are only honest on the bytes users actually have, so
each form here follows one library's record layout, field for field and in
the same order (``tests/test_bench_generators.py`` compares them with the
files in ``fixtures/`` that the libraries themselves wrote):

- ``pytorch`` / ``tensorboardx``: ``Summary.Value{tag, simple_value}``, no metadata;
- ``tf2`` / ``keras``: a rank-0 float tensor in ``tensor_content`` with the
  ``scalars`` metadata on every value (Keras: ``epoch_*`` tags, runs
  ``train`` and ``validation``);
- ``tf1``: ``tf.summary.merge_all``, several ``simple_value`` values per event;
- ``histo_legacy``: ``HistogramProto`` (PyTorch, tensorboardX, TF1);
  ``histo_tf2``: TensorFlow 2's ``[k, 3]`` float64 tensor;
- ``images_legacy``: ``Summary.Image``; ``images_tf2``: TF2's string tensor
  ``[width, height, png...]``.

Events are built with TensorBoard's protobuf classes, which serialize fields
in field-number order exactly as the libraries' own protobuf runtimes do.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

from tbconvert.formats.tfevents import records

# What each library writes as the file_version event's source_metadata.writer (None: nothing).
SOURCE_WRITER = {
    "pytorch": "tensorboard.summary.writer.event_file_writer",
    "tensorboardx": None,
    "tf2": "tensorflow.core.util.events_writer",
    "tf1": "tensorflow.core.util.events_writer",
}
FILE_SUFFIX = {"pytorch": ".bench.1.0", "tensorboardx": "", "tf2": ".bench.1.0.v2", "tf1": ""}
WALL0 = 1_795_299_000.0
TF2_BUCKETS = 30


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return event_pb2, summary_pb2


class EventFile:
    """One event file: the library's file_version record, then framed events."""

    def __init__(self, run_dir: Path, library: str, wall0: float = WALL0,
                 file_version: str = "brain.Event:2") -> None:
        event_pb2, _ = _pb()
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / f"events.out.tfevents.{int(wall0)}{FILE_SUFFIX[library] or '.bench'}"
        self._f = open(self.path, "wb")
        self._chunk: list[bytes] = []
        first = event_pb2.Event(wall_time=wall0, file_version=file_version)
        if SOURCE_WRITER[library]:
            first.source_metadata.writer = SOURCE_WRITER[library]
        self.add(first.SerializeToString())

    def add(self, payload: bytes) -> None:
        self._chunk.append(records.frame(payload))
        if len(self._chunk) >= 65536:
            self._flush()

    def _flush(self) -> None:
        self._f.write(b"".join(self._chunk))
        self._chunk = []

    def close(self) -> None:
        self._flush()
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- one event of each form (serialized Event bytes) ------------------------------------------

def simple_value_event(step: int, wall: float, values: dict) -> bytes:
    """PyTorch / tensorboardX ``add_scalar``; several values: TF1 ``merge_all``."""
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    for tag, v in values.items():
        ev.summary.value.add(tag=tag, simple_value=float(v))
    return ev.SerializeToString()


def tf2_scalar_event(step: int, wall: float, tag: str, value: float) -> bytes:
    """TF2 ``tf.summary.scalar`` (and Keras): float32 in ``tensor_content``, metadata every time."""
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.dtype = 1
    v.tensor.tensor_shape.SetInParent()
    v.tensor.tensor_content = struct.pack("<f", value)
    v.metadata.plugin_data.plugin_name = "scalars"
    return ev.SerializeToString()


def legacy_histogram(sample: np.ndarray, edges: np.ndarray):
    """A ``HistogramProto`` binned on ``edges`` with empty outer buckets trimmed."""
    _, summary_pb2 = _pb()
    counts, limits = np.histogram(sample, bins=edges)
    nz = np.flatnonzero(counts)
    lo, hi = max(int(nz[0]) - 1, 0), int(nz[-1]) + 1
    return summary_pb2.HistogramProto(
        min=float(sample.min()), max=float(sample.max()), num=float(len(sample)),
        sum=float(sample.sum()), sum_squares=float(sample @ sample),
        bucket_limit=limits[lo + 1:hi + 1].tolist(), bucket=counts[lo:hi].astype(float).tolist())


def histo_legacy_event(step: int, wall: float, tag: str, histo) -> bytes:
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    ev.summary.value.add(tag=tag).histo.CopyFrom(histo)
    return ev.SerializeToString()


def tf2_histogram_tensor(sample: np.ndarray, buckets: int = TF2_BUCKETS) -> np.ndarray:
    """TF2's ``[buckets, 3]`` (left, right, count) float64 histogram of ``sample``."""
    counts, edges = np.histogram(sample, bins=buckets)
    return np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)


def merge_all_event(step: int, wall: float, scalars: dict, histograms: dict) -> bytes:
    """TF1 ``merge_all`` of scalar and histogram ops: one event, a value per op (as in
    ``fixtures/tf2_logdir/tf1_graph_mode``, whose graph also has an image op)."""
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    for tag, v in scalars.items():
        ev.summary.value.add(tag=tag, simple_value=float(v))
    for tag, histo in histograms.items():
        ev.summary.value.add(tag=tag).histo.CopyFrom(histo)
    return ev.SerializeToString()


def histo_tf2_event(step: int, wall: float, tag: str, tensor: np.ndarray) -> bytes:
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.dtype = 2
    for size in tensor.shape:
        v.tensor.tensor_shape.dim.add(size=size)
    v.tensor.tensor_content = np.ascontiguousarray(tensor, "<f8").tobytes()
    v.metadata.plugin_data.plugin_name = "histograms"
    return ev.SerializeToString()


def png(width: int, height: int, seed: int = 0) -> bytes:
    """A real RGB PNG of noise (stored, so its size is predictable)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))


def image_legacy_event(step: int, wall: float, tag: str, encoded: bytes, width: int, height: int) -> bytes:
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    img = ev.summary.value.add(tag=tag).image
    img.height, img.width, img.colorspace = height, width, 3
    img.encoded_image_string = encoded
    return ev.SerializeToString()


def image_tf2_event(step: int, wall: float, tag: str, encoded: list, width: int, height: int) -> bytes:
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=wall, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.dtype = 7
    v.tensor.tensor_shape.dim.add(size=len(encoded) + 2)
    v.tensor.string_val.extend([str(width).encode(), str(height).encode()] + list(encoded))
    v.metadata.plugin_data.plugin_name = "images"
    return ev.SerializeToString()


# -- whole logdirs -----------------------------------------------------------------------------

SCALAR_TAGS = ("loss", "accuracy", "lr", "grad_norm")
KERAS_TAGS = ("epoch_loss", "epoch_accuracy", "epoch_learning_rate")
TF1_TAGS = tuple(f"v1/metric_{i}" for i in range(8))


def _values(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random(n).astype(np.float32)


def scalar_run(run_dir: Path, library: str, points: int, tags=SCALAR_TAGS, seed: int = 0) -> None:
    """``points`` scalar points, tags interleaved per step as a training loop logs them."""
    steps = points // len(tags)
    vals = _values(steps * len(tags), seed).reshape(steps, len(tags))
    with EventFile(run_dir, library) as f:
        for s in range(steps):
            wall = WALL0 + 1 + s * 0.01
            for j, tag in enumerate(tags):
                if library in ("pytorch", "tensorboardx"):
                    f.add(simple_value_event(s, wall, {tag: vals[s, j]}))
                else:
                    f.add(tf2_scalar_event(s, wall, tag, float(vals[s, j])))


def keras_run(logdir: Path, points: int, seed: int = 0) -> None:
    """Keras' TensorBoard callback: ``train`` and ``validation`` runs of ``epoch_*`` scalars."""
    scalar_run(logdir / "train", "tf2", points // 2, KERAS_TAGS, seed)
    scalar_run(logdir / "validation", "tf2", points - points // 2, KERAS_TAGS[:2], seed + 1)


def merge_all_run(run_dir: Path, points: int, tags=TF1_TAGS, seed: int = 0) -> None:
    """TF1 ``merge_all``: every step one event holding a ``simple_value`` per tag."""
    steps = points // len(tags)
    vals = _values(steps * len(tags), seed).reshape(steps, len(tags))
    with EventFile(run_dir, "tf1") as f:
        for s in range(steps):
            f.add(simple_value_event(s, WALL0 + 1 + s * 0.01, dict(zip(tags, vals[s], strict=True))))


def histogram_run(run_dir: Path, form: str, points: int, tags=("weights", "grads"), seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    edges = _tf_default_edges()
    library = "pytorch" if form == "legacy" else "tf2"
    steps = points // len(tags)
    with EventFile(run_dir, library) as f:
        for s in range(steps):
            for tag in tags:
                sample = rng.standard_normal(256) * (1 + s * 1e-3)
                wall = WALL0 + 1 + s * 0.01
                if form == "legacy":
                    f.add(histo_legacy_event(s, wall, tag, legacy_histogram(sample, edges)))
                else:
                    f.add(histo_tf2_event(s, wall, tag, tf2_histogram_tensor(sample)))


def merge_all_histogram_run(run_dir: Path, points: int, tags=("v1/w", "v1/b"),
                            scalars=TF1_TAGS[:2], seed: int = 0) -> None:
    """TF1 ``merge_all`` of a model's summaries: every step one event holding its scalars
    and a legacy histogram per parameter."""
    rng = np.random.default_rng(seed)
    edges = _tf_default_edges()
    steps = points // (len(tags) + len(scalars))
    vals = _values(steps * len(scalars), seed).reshape(steps, len(scalars))
    with EventFile(run_dir, "tf1") as f:
        for s in range(steps):
            histos = {tag: legacy_histogram(rng.standard_normal(256) * (1 + s * 1e-3), edges)
                      for tag in tags}
            f.add(merge_all_event(s, WALL0 + 1 + s * 0.01,
                                  dict(zip(scalars, vals[s], strict=True)), histos))


def image_run(run_dir: Path, form: str, points: int, size: int = 16, seed: int = 0) -> None:
    pngs = [png(size, size, seed + i) for i in range(8)]
    library = "pytorch" if form == "legacy" else "tf2"
    with EventFile(run_dir, library) as f:
        for s in range(points):
            wall = WALL0 + 1 + s * 0.01
            if form == "legacy":
                f.add(image_legacy_event(s, wall, "samples", pngs[s % 8], size, size))
            else:
                f.add(image_tf2_event(s, wall, "samples", [pngs[s % 8]], size, size))


def _tf_default_edges() -> np.ndarray:
    """TensorFlow's default histogram bucket limits (1e-12 growing by 10%, mirrored)."""
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos = np.array(pos)
    return np.concatenate([-pos[::-1], [0.0], pos])


def mixed_logdir(logdir: Path, points: int) -> None:
    """4 runs, 2 written as PyTorch writes, 2 as TensorFlow 2 writes."""
    each = points // 4
    scalar_run(logdir / "torch_a", "pytorch", each, seed=1)
    scalar_run(logdir / "torch_b", "pytorch", each, seed=2)
    scalar_run(logdir / "tf2_a", "tf2", each, seed=3)
    scalar_run(logdir / "tf2_b", "tf2", each, seed=4)


# A hyperparameter sweep: many runs of a short training each (trials of Ray Tune, Optuna or a
# grid of scripts), half written as PyTorch writes, half as TensorFlow 2 does.
SWEEP_RUN_POINTS = 500


def sweep_logdir(logdir: Path, points: int) -> None:
    """Runs of SWEEP_RUN_POINTS points (4 tags x 125 steps) making ``points`` in all."""
    for i in range(max(1, points // SWEEP_RUN_POINTS)):
        library = "pytorch" if i % 2 == 0 else "tf2"
        scalar_run(logdir / f"trial_{i:05d}", library, SWEEP_RUN_POINTS, seed=i)


# A metric per parameter of a 32-layer transformer (1,024 tags of 33-55 characters), as
# training scripts log gradient and weight norms per layer; and a histogram per parameter.
LAYER_PARAMS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                "input_layernorm.weight", "post_attention_layernorm.weight")
LAYER_TAGS = tuple(f"{metric}/model.layers.{i}.{param}"
                   for metric in ("grad_norm", "weight_norm", "update_ratio", "act_mean")
                   for i in range(32) for param in LAYER_PARAMS)
LAYER_HISTOGRAM_TAGS = tuple(f"model.layers.{i}.{param}" for i in range(32) for param in LAYER_PARAMS)

FORMS = {
    "pytorch": lambda d, n: scalar_run(d / "run", "pytorch", n),
    "tensorboardx": lambda d, n: scalar_run(d / "run", "tensorboardx", n),
    "tf2": lambda d, n: scalar_run(d / "run", "tf2", n),
    "keras": keras_run,
    "tf1_merge_all": lambda d, n: merge_all_run(d / "run", n),
    "histo_legacy": lambda d, n: histogram_run(d / "run", "legacy", n),
    "histo_tf2": lambda d, n: histogram_run(d / "run", "tf2", n),
    "images_legacy": lambda d, n: image_run(d / "run", "legacy", n),
    "images_tf2": lambda d, n: image_run(d / "run", "tf2", n),
    "mixed": mixed_logdir,
    "sweep": sweep_logdir,
    "pytorch_layers": lambda d, n: scalar_run(d / "run", "pytorch", n, tags=LAYER_TAGS),
    "tf2_layers": lambda d, n: scalar_run(d / "run", "tf2", n, tags=LAYER_TAGS),
    "histo_legacy_layers": lambda d, n: histogram_run(d / "run", "legacy", n, tags=LAYER_HISTOGRAM_TAGS),
    "histo_tf2_layers": lambda d, n: histogram_run(d / "run", "tf2", n, tags=LAYER_HISTOGRAM_TAGS),
    "histo_tf1_merge_all": lambda d, n: merge_all_histogram_run(d / "run", n,
                                                                tags=LAYER_HISTOGRAM_TAGS),
}


def write_form(form: str, logdir: Path, points: int) -> None:
    FORMS[form](Path(logdir), points)
