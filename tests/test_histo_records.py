"""Legacy histogram events read without protobuf give what protobuf gives."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import edited, same_float
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

import tbconvert
from tbconvert.formats.tfevents import histo_records, legacy, records

_doubles = st.floats(allow_nan=True, allow_infinity=True, width=64)
_maybe = st.one_of(st.just(0.0), _doubles)


@st.composite
def _histo_events(draw) -> bytes:
    n = draw(st.integers(0, 12))
    limits = draw(st.lists(_doubles, min_size=n, max_size=n))
    counts = draw(st.lists(st.one_of(st.sampled_from([0.0, 1.0, -1.0, 3.0]), _doubles),
                           min_size=n, max_size=n))
    if draw(st.integers(0, 9)) == 0:        # lengths that differ: protobuf's way only
        counts = counts + [1.0]
    histo = summary_pb2.HistogramProto(
        min=draw(_maybe), max=draw(_maybe), num=draw(_maybe), sum=draw(_maybe),
        sum_squares=draw(_maybe), bucket_limit=limits, bucket=counts)
    ev = event_pb2.Event(wall_time=draw(_maybe),
                         step=draw(st.one_of(st.just(0), st.integers(-2**63, 2**63 - 1))))
    ev.summary.value.add(tag=draw(st.text(max_size=6))).histo.CopyFrom(histo)
    return ev.SerializeToString()


def _check_against_protobuf(raw: bytes) -> bool:
    """Whether the record was taken; when it was, its fields are protobuf's."""
    got = histo_records.parse(raw, 0, len(raw))
    if got is None:
        return False
    ev = event_pb2.Event.FromString(raw)
    assert ev.WhichOneof("what") == "summary" and len(ev.summary.value) == 1
    value = ev.summary.value[0]
    assert value.WhichOneof("value") == "histo" and not value.HasField("metadata")
    assert not value.node_name
    wall, step, tag, lo, hi, limits, counts = got
    assert same_float(wall, ev.wall_time) and step == ev.step and tag == value.tag
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
    histo = ev.summary.value[0].histo
    taken = _check_against_protobuf(raw)
    assert taken == (len(histo.bucket_limit) == len(histo.bucket))


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
    unpacked = bytearray(plain)
    return [
        ("plain", plain),
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
    assert taken == (name == "plain")


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
                        [(a.dtype.str, a.shape, a.tobytes()) for a in s.tensors]
                        if hasattr(s, "tensors") else s.values.tobytes()))
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(_histo_events(), min_size=1, max_size=30))
def test_a_logdir_reads_the_same_with_and_without_protobuf(tmp_path_factory, raws):
    """Restarts (steps going back), tags repeated, odd values: the same series either way."""
    raws = raws + [raw for _, raw in _variants()[:4]]
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
