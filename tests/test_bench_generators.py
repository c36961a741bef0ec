"""The benchmark generators write records exactly as the real libraries do.

Each generated record is compared, field for field and in wire order, with a
record that the library itself wrote into ``fixtures/``: the sequence of
(field number, wire type) at every level of the Event, and the exact bytes of
the parts that carry no data (summary metadata, the writer's source metadata).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import BENCH, FIXTURES, on_path

from tbconvert.formats.tfevents import records
from tbconvert.formats.tfevents.encode import read_varint

on_path(BENCH)
import writers  # noqa: E402

# Which length-delimited fields are messages, per message kind (the rest are bytes/strings
# or packed numbers).
_MESSAGES = {
    "Event": {5: "Summary", 10: "SourceMetadata"},
    "Summary": {1: "Value"},
    "Value": {4: "Image", 5: "Histogram", 8: "Tensor", 9: "Metadata"},
    "Tensor": {2: "Shape"},
    "Shape": {2: "Dim"},
    "Metadata": {1: "PluginData"},
}
_EXACT = {("Value", 9), ("Event", 10)}  # compared byte for byte


def _varint(buf: bytes, pos: int):
    return read_varint(buf, pos, len(buf))


def skeleton(buf: bytes, kind: str = "Event") -> list:
    """(field, wire type[, nested skeleton or exact bytes]) of every field, in wire order."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
            out.append((field, wire))
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            out.append((field, wire))
        else:
            n, pos = _varint(buf, pos)
            body = buf[pos:pos + n]
            pos += n
            if (kind, field) in _EXACT:
                out.append((field, wire, body))
            elif field in _MESSAGES.get(kind, {}):
                out.append((field, wire, skeleton(body, _MESSAGES[kind][field])))
            else:
                out.append((field, wire))
    return out


def _records(path: Path):
    buf = path.read_bytes()
    starts, lengths, _ = records.scan(buf)
    return [buf[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def _fixture_event(run_dir: str, tag: str, min_step: int = 1) -> bytes:
    """The first record of ``tag`` at a step >= min_step (step 0 is left out by every writer)."""
    from tensorboard.compat.proto import event_pb2
    for path in sorted((FIXTURES / run_dir).glob("events.out.tfevents.*")):
        for raw in _records(path):
            ev = event_pb2.Event.FromString(raw)
            if ev.step >= min_step and any(v.tag == tag for v in ev.summary.value):
                return raw
    raise AssertionError(f"no {tag} in {run_dir}")


def _first_record(run_dir: str) -> bytes:
    return _records(sorted((FIXTURES / run_dir).glob("events.out.tfevents.*"))[0])[0]


@pytest.mark.parametrize("library,run_dir", [("pytorch", "torch_logdir/train"),
                                             ("tensorboardx", "tensorboardx_logdir/run_b"),
                                             ("tf2", "tf2_logdir/eager"),
                                             ("tf1", "tf2_logdir/tf1_graph_mode")])
def test_file_version_record(library, run_dir, tmp_path):
    with writers.EventFile(tmp_path, library) as f:
        path = f.path
    assert skeleton(_records(path)[0]) == skeleton(_first_record(run_dir))


@pytest.mark.parametrize("run_dir,tag", [("torch_logdir/train", "loss"),
                                         ("tensorboardx_logdir/run_b", "loss")])
def test_simple_value_scalars(run_dir, tag):
    ours = writers.simple_value_event(7, 1.5, {tag: 0.25})
    assert skeleton(ours) == skeleton(_fixture_event(run_dir, tag))


@pytest.mark.parametrize("tag", ["loss", "epoch_loss"])
def test_tf2_and_keras_scalars_carry_metadata_on_every_value(tag):
    """Keras' callback logs through tf.summary.scalar, so its records are TF2's."""
    real = _fixture_event("tf2_logdir/eager", "loss")
    ours = writers.tf2_scalar_event(7, 1.5, "loss", 0.25)
    assert skeleton(ours) == skeleton(real)
    assert ours[-13:] == real[-13:]  # the metadata, the same bytes every time
    keras = writers.tf2_scalar_event(7, 1.5, tag, 0.25)
    assert skeleton(keras)[:2] == skeleton(real)[:2]


def test_tf1_merge_all_values():
    """merge_all puts every summary op's value into one event, in one Summary."""
    real = skeleton(_fixture_event("tf2_logdir/tf1_graph_mode", "v1/loss"))
    ours = skeleton(writers.simple_value_event(7, 1.5, {"v1/loss": 0.5, "v1/acc": 0.25}))
    assert [f[:2] for f in ours] == [f[:2] for f in real]
    real_values = real[2][2]
    assert len(real_values) > 1
    simple = next(v for v in real_values if any(f[:2] == (2, 5) for f in v[2]))
    assert ours[2][2] == [simple, simple]


@pytest.mark.parametrize("run_dir,tag", [("torch_logdir/train", "weights/fc1"),
                                         ("tensorboardx_logdir/run_a", "weights/layer1")])
def test_legacy_histograms(run_dir, tag):
    sample = np.random.default_rng(0).standard_normal(1000)
    histo = writers.legacy_histogram(sample, writers._tf_default_edges())
    ours = writers.histo_legacy_event(7, 1.5, tag, histo)
    assert skeleton(ours) == skeleton(_fixture_event(run_dir, tag))


def test_tf1_histogram_value_is_the_legacy_form():
    real = skeleton(_fixture_event("tf2_logdir/tf1_graph_mode", "v1/w"))[2][2]
    histo_value = next(v for v in real if any(f[:2] == (5, 2) for f in v[2]))
    sample = np.random.default_rng(0).standard_normal(100)
    ours = skeleton(writers.histo_legacy_event(7, 1.5, "v1/w",
                                               writers.legacy_histogram(sample, writers._tf_default_edges())))
    assert ours[2][2] == [histo_value]


def test_tf1_merge_all_of_scalars_and_histograms():
    """merge_all's event of scalar and histogram ops: their values side by side, each as
    TensorFlow 1 wrote it (the fixture's graph also has an image op, left out here)."""
    real = skeleton(_fixture_event("tf2_logdir/tf1_graph_mode", "v1/w"))
    values = real[2][2]
    simple = next(v for v in values if any(f[:2] == (2, 5) for f in v[2]))
    histo = next(v for v in values if any(f[:2] == (5, 2) for f in v[2]))
    sample = np.random.default_rng(0).standard_normal(100)
    ours = skeleton(writers.merge_all_event(
        7, 1.5, {"v1/loss": 0.5},
        {"v1/w": writers.legacy_histogram(sample, writers._tf_default_edges())}))
    assert [f[:2] for f in ours] == [f[:2] for f in real]
    assert ours[2][2] == [simple, histo]


def test_tf2_histograms():
    real = _fixture_event("tf2_logdir/eager", "weights")
    sample = np.random.default_rng(0).standard_normal(1000)
    ours = writers.histo_tf2_event(7, 1.5, "weights", writers.tf2_histogram_tensor(sample, 20))
    assert skeleton(ours) == skeleton(real)
    assert len(ours) == len(real)


def test_legacy_images():
    real = _fixture_event("torch_logdir/train", "samples/image", min_step=0)
    from tensorboard.compat.proto import event_pb2
    step = event_pb2.Event.FromString(real).step
    ours = writers.image_legacy_event(step, 1.5, "samples/image", writers.png(16, 16), 16, 16)
    assert skeleton(ours) == skeleton(real)


def test_tf2_images():
    real = _fixture_event("tf2_logdir/eager", "digits")
    ours = writers.image_tf2_event(7, 1.5, "digits", [writers.png(8, 8), writers.png(8, 8, 1)], 8, 8)
    assert skeleton(ours) == skeleton(real)


def test_generated_pngs_decode():
    import io

    from PIL import Image
    img = Image.open(io.BytesIO(writers.png(12, 7)))
    assert img.size == (12, 7) and img.mode == "RGB"
