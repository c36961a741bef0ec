"""Event files holding records no real writer produces: absurd shapes, impossible values,
values named only by the old ``node_name``. Each costs only itself and is reported."""

import tracemalloc

import numpy as np
import pytest

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError, TbconvertError
from tbconvert.formats.tfevents import legacy, records


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    return event_pb2, summary_pb2, tensor_pb2


def _write(path, events):
    event_pb2, _, _ = _pb()
    head = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in [head, *events]))
    return path


def _scalar_event(step, tag="loss"):
    event_pb2, _, _ = _pb()
    ev = event_pb2.Event(wall_time=2.0 + step, step=step)
    ev.summary.value.add(tag=tag, simple_value=float(step))
    return ev


def _tensor_event(step, tag, shape, plugin="", **fields):
    event_pb2, _, tensor_pb2 = _pb()
    ev = event_pb2.Event(wall_time=2.0 + step, step=step)
    v = ev.summary.value.add(tag=tag)
    if plugin:
        v.metadata.plugin_data.plugin_name = plugin
    tp = tensor_pb2.TensorProto(**fields)
    for size in shape:
        tp.tensor_shape.dim.add(size=size)
    v.tensor.CopyFrom(tp)
    return ev


ABSURD = {
    "float_2^40": dict(shape=[1 << 40], dtype=dt.DT_FLOAT, float_val=[1.0]),
    "float_2^31x2^31": dict(shape=[1 << 31, 1 << 31], dtype=dt.DT_FLOAT, float_val=[1.0]),
    "string_2^34": dict(shape=[1 << 34], dtype=dt.DT_STRING, string_val=[b"x"]),
    "200_dims": dict(shape=[1] * 200, dtype=dt.DT_FLOAT, float_val=[1.0]),
    "double_content_2^40": dict(shape=[1 << 40], dtype=dt.DT_DOUBLE, tensor_content=b"\0" * 8),
    "audio_2x0": dict(shape=[2, 0], dtype=dt.DT_STRING, plugin="audio"),
}


@pytest.mark.parametrize("case", sorted(ABSURD))
def test_absurd_tensor_is_a_reported_skip(case, tmp_path):
    spec = dict(ABSURD[case])
    shape, plugin = spec.pop("shape"), spec.pop("plugin", "")
    events = [_scalar_event(0), _tensor_event(1, "bad", shape, plugin, **spec), _scalar_event(2)]
    path = _write(tmp_path / "logs" / "run" / "events.out.tfevents.1.host", events)
    tracemalloc.start()
    try:
        loaded = tbconvert.read(path.parent.parent, restarts="keep-all")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20
    assert len(loaded.series["run"]["loss"]) == 2
    assert "bad" not in loaded.series["run"]
    issues = [i for i in loaded.report.issues if i.kind == "corrupt_record"]
    assert issues and "bad" in issues[0].message and str(path) in issues[0].message


def test_a_vector_of_many_empty_strings_is_a_reported_skip(tmp_path, monkeypatch):
    """Two bytes of input per empty string, but a Python object and the writers' work for
    each: such a vector is held to the expansion budget too (with a small budget here)."""
    from tbconvert import budget
    monkeypatch.setattr(budget, "EXPANSION_BASE", 1 << 20)
    n = 100_000
    events = [_scalar_event(0),
              _tensor_event(1, "bad", [n], "text", dtype=dt.DT_STRING, string_val=[b""] * n),
              _tensor_event(2, "fine", [3], "text", dtype=dt.DT_STRING, string_val=[b"a"] * 3),
              _scalar_event(3)]
    path = _write(tmp_path / "logs" / "run" / "events.out.tfevents.1.host", events)
    loaded = tbconvert.read(path.parent.parent, restarts="keep-all")
    assert len(loaded.series["run"]["loss"]) == 2 and len(loaded.series["run"]["fine"]) == 1
    assert "bad" not in loaded.series["run"]
    issues = [i for i in loaded.report.issues if i.kind == "corrupt_record"]
    assert len(issues) == 1 and f"of shape [{n}]" in issues[0].message


def test_tiny_file_never_becomes_a_huge_tensor(tmp_path):
    """A file of under a hundred bytes may not expand to a GiB: the expansion is bounded
    relative to the size of the record."""
    event_pb2, _, tensor_pb2 = _pb()
    ev = _tensor_event(0, "t", [1 << 28], dtype=dt.DT_FLOAT, float_val=[1.0])
    path = tmp_path / "logs" / "events.out.tfevents.1.tiny"
    path.parent.mkdir(parents=True)
    path.write_bytes(records.frame(ev.SerializeToString()))
    assert path.stat().st_size < 100
    tracemalloc.start()
    try:
        loaded = tbconvert.read(path.parent, restarts="keep-all")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20
    assert any(i.kind == "corrupt_record" for i in loaded.report.issues)


def test_histogram_with_more_buckets_than_limits_is_a_reported_skip(tmp_path):
    event_pb2, _, _ = _pb()
    ev = event_pb2.Event(wall_time=3.0, step=1)
    v = ev.summary.value.add(tag="h")
    v.histo.min, v.histo.max = 0.0, 1.0
    v.histo.bucket.extend([0, 2, 3, 1])
    v.histo.bucket_limit.extend([0.5])
    ok = ev.summary.value.add(tag="fine", simple_value=1.0)
    path = _write(tmp_path / "logs" / "events.out.tfevents.1.h", [ev])
    loaded = tbconvert.read(path.parent, restarts="keep-all")
    assert "h" not in loaded.series["."] and len(loaded.series["."]["fine"]) == 1
    assert any("bucket limits" in i.message for i in loaded.report.issues)
    assert ok.simple_value == 1.0


def test_legacy_histogram_shapes_still_migrate():
    _, summary_pb2, _ = _pb()
    h = summary_pb2.HistogramProto(min=0.5, max=2.5, bucket_limit=[0, 1, 2, 3, 1e308],
                                   bucket=[0, 2, 3, 1, 0])
    assert legacy.migrate_histogram(h).tolist() == [[0.5, 1, 2], [1, 2, 3], [2, 2.5, 1]]
    h = summary_pb2.HistogramProto(min=0, max=1, bucket_limit=[], bucket=[5])
    assert legacy.migrate_histogram(h).tolist() == [[0, 1, 5]]


def test_audio_fix_up_of_an_empty_trailing_axis_does_not_raise():
    arr = np.empty((2, 0), dtype=object)
    code, out = legacy.fix_point("audio", (dt.DT_STRING, arr))
    assert out.shape == (0,)


def _loose_view(logdir):
    """TensorBoard's reading of a logdir, tolerating tags with data but no metadata (which
    the strict oracle cannot show: TensorBoard itself raises KeyError for them)."""
    import logging

    from oracle import canonical
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.util import tensor_util
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    mux = pem.EventMultiplexer(size_guidance={"tensors": 0}, tensor_size_guidance={})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    view = {}
    for run, info in mux.Runs().items():
        tags = {}
        for tag in info["tensors"]:
            try:
                md = mux.SummaryMetadata(run, tag)
                md = (md.plugin_data.plugin_name, int(md.data_class))
            except KeyError:
                # data without metadata: no plugin, so no dashboard shows it; written out
                # again it carries empty metadata, which reads the same
                md = ("", 0)
            tags[tag] = (md, [(e.step, canonical(tensor_util.make_ndarray(e.tensor_proto)))
                              for e in mux.Tensors(run, tag)])
        view[run] = tags
    return view


def _node_name_events():
    event_pb2, _, tensor_pb2 = _pb()
    events = []
    for step in range(3):
        ev = event_pb2.Event(wall_time=10.0 + step, step=step)
        v = ev.summary.value.add(node_name="nn")
        v.tensor.CopyFrom(tensor_pb2.TensorProto(dtype=dt.DT_FLOAT, float_val=[step + 0.5]))
        v.tensor.tensor_shape.SetInParent()
        if step == 0:
            v.metadata.plugin_data.plugin_name = "scalars"
        ev.summary.value.add(tag="loss", simple_value=float(step))
        ev.summary.value.add(node_name="old", simple_value=float(step))
        events.append(ev)
    return events


def test_node_name_only_values_read_as_tensorboard_reads_them(tmp_path):
    """A value naming itself only by ``node_name``: TensorBoard files a tensor value's data
    under it (its metadata under the empty tag), and migrates legacy values under the empty
    tag, losing the name. tbconvert reads the same series, and a round trip through event
    files shows exactly what TensorBoard shows of the original."""
    src = tmp_path / "src"
    _write(src / "run" / "events.out.tfevents.1.host", _node_name_events())
    expected = _loose_view(src)
    assert sorted(expected["run"]) == ["", "loss", "nn"]
    loaded = tbconvert.read(src, restarts="keep-all")
    assert sorted(loaded.series["run"]) == ["", "loss", "nn"]
    assert len(loaded.series["run"]["nn"]) == 3
    out = tmp_path / "out"
    tbconvert.convert(src, out, to_format="tfevents")
    assert _loose_view(out) == expected


# --- fuzzing TensorProto decoding and legacy migration directly ----------------------------

def _random_value(rng, summary_pb2, tensor_pb2):
    v = summary_pb2.Summary.Value(tag="t")
    kind = rng.integers(0, 5)
    if kind == 0:
        tp = tensor_pb2.TensorProto(dtype=int(rng.choice(list(dt.NAMES)[:-1] + [20, 21, 30, 0])))
        for size in rng.integers(-2, 6, int(rng.integers(0, 4))).tolist():
            tp.tensor_shape.dim.add(size=int(size) if rng.random() > 0.05 else 1 << 50)
        field = rng.choice(["float_val", "double_val", "int_val", "int64_val", "string_val",
                            "half_val", "scomplex_val", "dcomplex_val", "bool_val",
                            "uint32_val", "uint64_val", "tensor_content"])
        k = int(rng.integers(0, 7))
        if field == "string_val":
            tp.string_val.extend([rng.bytes(3)] * k)
        elif field == "tensor_content":
            tp.tensor_content = rng.bytes(k * 4)
        elif field == "bool_val":
            getattr(tp, field).extend([bool(x) for x in rng.integers(0, 2, k)])
        elif field in ("float_val", "double_val", "scomplex_val", "dcomplex_val"):
            getattr(tp, field).extend(rng.normal(size=k).tolist())
        elif field in ("uint32_val", "uint64_val"):
            getattr(tp, field).extend(rng.integers(0, 1 << 31, k).tolist())
        else:
            getattr(tp, field).extend(rng.integers(-(1 << 31), 1 << 31, k).tolist())
        v.tensor.CopyFrom(tp)
        if rng.random() < 0.3:
            v.metadata.plugin_data.plugin_name = str(rng.choice(["audio", "images", "scalars"]))
    elif kind == 1:
        v.histo.bucket.extend(rng.integers(-2, 3, int(rng.integers(0, 6))).tolist())
        v.histo.bucket_limit.extend(rng.normal(size=int(rng.integers(0, 6))).tolist())
    elif kind == 2:
        v.simple_value = float(rng.normal())
    elif kind == 3:
        v.image.width, v.image.height = int(rng.integers(-5, 5)), int(rng.integers(0, 5))
        v.image.encoded_image_string = rng.bytes(5)
    else:
        v.audio.encoded_audio_string = rng.bytes(5)
    return v


def test_random_values_decode_or_fail_cleanly():
    _, summary_pb2, tensor_pb2 = _pb()
    rng = np.random.default_rng(2024)
    outcomes = {"ok": 0, "decode": 0, "corrupt": 0}
    for _ in range(3000):
        v = _random_value(rng, summary_pb2, tensor_pb2)
        try:
            md, point = legacy.migrate_value(v, "value")
            if point is not None and md is not None:
                legacy.fix_point(md.plugin_name, point)
            outcomes["ok"] += 1
        except dt.TensorDecodeError:
            outcomes["decode"] += 1
        except CorruptDataError as exc:
            assert isinstance(exc, TbconvertError) and str(exc).startswith("value")
            outcomes["corrupt"] += 1
    assert all(outcomes.values()), outcomes
