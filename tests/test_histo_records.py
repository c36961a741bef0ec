"""Legacy histogram events read without protobuf give what protobuf gives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, edited, same_float
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

import tbconvert
from tbconvert.formats.tfevents import histo_records, legacy, records

_doubles = st.floats(allow_nan=True, allow_infinity=True, width=64)
_maybe = st.one_of(st.just(0.0), _doubles)


def _histo(draw) -> summary_pb2.HistogramProto:
    n = draw(st.integers(0, 12))
    limits = draw(st.lists(_doubles, min_size=n, max_size=n))
    counts = draw(st.lists(st.one_of(st.sampled_from([0.0, 1.0, -1.0, 3.0]), _doubles),
                           min_size=n, max_size=n))
    if draw(st.integers(0, 9)) == 0:        # lengths that differ: protobuf's way only
        counts = counts + [1.0]
    return summary_pb2.HistogramProto(
        min=draw(_maybe), max=draw(_maybe), num=draw(_maybe), sum=draw(_maybe),
        sum_squares=draw(_maybe), bucket_limit=limits, bucket=counts)


@st.composite
def _histo_events(draw) -> bytes:
    """A histogram event: mostly one value (PyTorch, tensorboardX), else several (TensorFlow
    1's ``merge_all``: a histogram per layer in one event), a tag maybe given twice."""
    ev = event_pb2.Event(wall_time=draw(_maybe),
                         step=draw(st.one_of(st.just(0), st.integers(-2**63, 2**63 - 1))))
    tags = draw(st.one_of(st.lists(st.text(max_size=6), min_size=1, max_size=1),
                          st.lists(st.sampled_from(["a", "b", "", "w/x"]), min_size=2,
                                   max_size=5)))
    for tag in tags:
        other = draw(st.integers(0, 5)) if len(tags) > 1 else 5
        if other == 0:      # merged in beside them: a scalar, an image
            ev.summary.value.add(tag=tag, simple_value=draw(st.floats(width=32)))
        elif other == 1:
            ints = st.one_of(st.just(0), st.integers(-2**31, 2**31 - 1))
            ev.summary.value.add(tag=tag).image.CopyFrom(summary_pb2.Summary.Image(
                height=draw(ints), width=draw(ints), colorspace=draw(ints),
                encoded_image_string=draw(st.binary(max_size=8))))
        else:
            ev.summary.value.add(tag=tag).histo.CopyFrom(_histo(draw))
    if draw(st.integers(0, 9)) == 0:       # a signalling NaN, as only raw bytes can hold
        ev.summary.value.add(tag="nan").simple_value = 0.0
        raw = ev.SerializeToString()
        return raw[:-4] + b"\x01\x00\xa0\x7f"
    return ev.SerializeToString()


def _check_against_protobuf(raw: bytes) -> bool:
    """Whether the record was taken; when it was, its fields are protobuf's."""
    got = histo_records.parse(raw, 0, len(raw))
    if got is None:
        return False
    ev = event_pb2.Event.FromString(raw)
    assert ev.WhichOneof("what") == "summary"
    wall, step, values = got
    assert same_float(wall, ev.wall_time) and step == ev.step
    assert len(values) == len(ev.summary.value) >= 1
    for got_value, value in zip(values, ev.summary.value, strict=True):
        assert not value.HasField("metadata") and not value.node_name
        kind, tag = got_value[:2]
        assert tag == value.tag
        if kind == histo_records.SCALAR:
            assert value.WhichOneof("value") == "simple_value"
            assert np.float32(got_value[2]).tobytes() == \
                np.array(value.simple_value, dtype=np.float32).tobytes()
            continue
        if kind == histo_records.IMAGE:
            assert value.WhichOneof("value") == "image"
            img = value.image
            assert got_value[2:] == (img.width, img.height, img.encoded_image_string)
            continue
        _, _, lo, hi, limits, counts = got_value
        assert kind == histo_records.HISTOGRAM and value.WhichOneof("value") == "histo"
        assert same_float(lo, value.histo.min) and same_float(hi, value.histo.max)
        assert limits.tobytes() == np.array(value.histo.bucket_limit, dtype="<f8").tobytes()
        assert counts.tobytes() == np.array(value.histo.bucket, dtype="<f8").tobytes()
        migrated = legacy.migrated_histogram(limits, counts, lo, hi)
        assert migrated.tobytes() == legacy.migrate_histogram(value.histo).tobytes()
    return True


@settings(max_examples=300, deadline=None)
@given(_histo_events())
def test_histogram_events_as_protobuf_writes_them(raw):
    ev = event_pb2.Event.FromString(raw)
    taken = _check_against_protobuf(raw)
    histos = [v.histo for v in ev.summary.value if v.WhichOneof("value") == "histo"]
    assert taken == (bool(histos) and all(len(h.bucket_limit) == len(h.bucket)
                                          for h in histos))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_histo_events(), st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete"]),
                                           st.integers(0, 10**6), st.integers(0, 255)),
                                 min_size=1, max_size=3))
def test_any_other_bytes_are_left_to_protobuf_or_read_as_it_reads_them(raw, edits):
    """Bytes changed anywhere: the record is either left to protobuf (None) or read to the
    very values protobuf reads."""
    raw = edited(raw, edits)
    try:
        event_pb2.Event.FromString(raw)
    except Exception:  # noqa: BLE001 - protobuf refuses them: so must this reader
        assert histo_records.parse(raw, 0, len(raw)) is None
        return
    _check_against_protobuf(raw)


def _variants() -> list[tuple[str, bytes]]:
    """One histogram event, then the same with what only protobuf's way may read."""
    def event(**value_fields):
        ev = event_pb2.Event(wall_time=1.5, step=7)
        v = ev.summary.value.add(tag="w", **value_fields)
        v.histo.CopyFrom(summary_pb2.HistogramProto(min=-1, max=2, num=3, sum=1, sum_squares=5,
                                                    bucket_limit=[0, 1, 2], bucket=[1, 0, 2]))
        return ev
    plain = event().SerializeToString()
    with_md = event(metadata=summary_pb2.SummaryMetadata(display_name="shown"))
    two = event()
    two.summary.value.add(tag="x", simple_value=1.0)
    merged = event()
    merged.summary.value.add(tag="x").histo.CopyFrom(merged.summary.value[0].histo)
    merged.summary.value.add(tag="w").histo.min = 3.0
    tf1 = event()        # as TensorFlow 1's merge_all wrote fixtures/tf2_logdir/tf1_graph_mode
    tf1.summary.value.insert(0, summary_pb2.Summary.Value(tag="v1/loss", simple_value=0.5))
    tf1.summary.value.add(tag="v1/x/image/0").image.CopyFrom(summary_pb2.Summary.Image(
        height=4, width=4, colorspace=1, encoded_image_string=b"\x89PNG"))
    later_md = event()
    later_md.summary.value.add(tag="x", metadata=summary_pb2.SummaryMetadata(
        display_name="shown")).histo.CopyFrom(later_md.summary.value[0].histo)
    unpacked = bytearray(plain)
    return [
        ("plain", plain),
        ("merged", merged.SerializeToString()),
        ("merge_all", tf1.SerializeToString()),
        ("merged, metadata on a later value", later_md.SerializeToString()),
        ("empty summary", event_pb2.Event(step=1, summary=summary_pb2.Summary())
         .SerializeToString()),
        ("scalars only", event_pb2.Event(step=1, summary=summary_pb2.Summary(value=[
            summary_pb2.Summary.Value(tag="x", simple_value=1.0)])).SerializeToString()),
        ("metadata", with_md.SerializeToString()),
        ("node_name", event(node_name="n").SerializeToString()),
        ("two values", two.SerializeToString()),
        ("unknown event field", plain + b"\x98\x01\x01"),
        ("step before wall time", plain[9:11] + plain[:9] + plain[11:]),
        ("bad utf-8 tag", plain.replace(b"\x0a\x01w", b"\x0a\x01\xff")),
        ("not a histogram", event_pb2.Event(step=1, file_version="brain.Event:2")
         .SerializeToString()),
        ("truncated", bytes(unpacked[:-3])),
    ]


@pytest.mark.parametrize("name,raw", _variants())
def test_only_the_plain_form_is_taken(name, raw):
    taken = _check_against_protobuf(raw) if name != "truncated" else \
        histo_records.parse(raw, 0, len(raw)) is not None
    assert taken == (name in ("plain", "merged", "merge_all", "two values"))


def _logdir(path, raws) -> None:
    path.mkdir()
    first = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()
    (path / "events.out.tfevents.1.host").write_bytes(
        b"".join(records.frame(r) for r in [first] + raws))


def _view(data) -> list:
    out = []
    for run, series in sorted(data.series.items()):
        for tag, s in sorted(series.items()):
            out.append((run, tag, s.metadata, s.steps.tolist(), s.wall_times.tobytes(),
                        None if s.hidden is None else s.hidden.tolist(),
                        [(a.dtype.str, a.shape, a.tolist() if a.dtype == object else a.tobytes())
                         for a in s.tensors]
                        if hasattr(s, "tensors") else
                        (list(s.blobs), s.offsets.tolist()) if hasattr(s, "blobs")
                        else s.values.tobytes()))
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_histo_events(), min_size=1, max_size=30))
def test_a_logdir_reads_the_same_with_and_without_protobuf(tmp_path_factory, raws):
    """Restarts (steps going back), tags repeated, odd values: the same series either way."""
    raws = raws + [raw for _, raw in _variants()[:8]]
    logdir = tmp_path_factory.mktemp("histos") / "logs"
    _logdir(logdir, raws)
    fast = tbconvert.read(logdir, restarts="keep-all")
    mp = pytest.MonkeyPatch()
    mp.setattr(histo_records, "parse", lambda *a: None)
    try:
        slow = tbconvert.read(logdir, restarts="keep-all")
    finally:
        mp.undo()
    assert _view(fast) == _view(slow)
    assert [i.kind for i in fast.report.issues] == [i.kind for i in slow.report.issues]


def test_tensorflow_1_merge_all_events_are_read_without_protobuf():
    """Every summary event TensorFlow 1's merge_all wrote (a scalar, a histogram and an
    image in each) is taken, with protobuf's values."""
    path = next((FIXTURES / "tf2_logdir" / "tf1_graph_mode").glob("*tfevents*"))
    buf = path.read_bytes()
    starts, lengths, _ = records.scan(buf)
    taken = [_check_against_protobuf(buf[s:s + n])
             for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
             if event_pb2.Event.FromString(buf[s:s + n]).HasField("summary")]
    assert len(taken) >= 10 and all(taken)
