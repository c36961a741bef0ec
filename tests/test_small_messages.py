"""The version event and SummaryMetadata read without protobuf give what protobuf gives, and a
short reading of the real writers' files never loads protobuf."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import BENCH, edited, on_path, protobuf_only, same_float
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

import tbconvert
from tbconvert.formats.tfevents import legacy, records, small_messages, summary_templates
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.model import Metadata

_text = st.text(max_size=8)
_maybe_float = st.one_of(st.just(0.0), st.floats(allow_nan=True, allow_infinity=True, width=64))


_edits = st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete"]),
                            st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=3)


# -- the version event ----------------------------------------------------------------------

@st.composite
def _version_events(draw) -> bytes:
    ev = event_pb2.Event(wall_time=draw(_maybe_float), file_version=draw(_text),
                         step=draw(st.one_of(st.just(0), st.integers(-2**63, 2**63 - 1))))
    if draw(st.booleans()):
        ev.source_metadata.writer = draw(_text)
    return ev.SerializeToString()


def _version_as_protobuf(raw: bytes) -> bool:
    """Whether the record was taken; when it was, it is protobuf's version event."""
    got = small_messages.file_version(raw, 0, len(raw))
    if got is None:
        return False
    ev = event_pb2.Event.FromString(raw)
    assert ev.WhichOneof("what") == "file_version"
    assert same_float(got[0], ev.wall_time) and got[1] == ev.file_version
    return True


@settings(max_examples=300, deadline=None)
@given(_version_events())
def test_version_events_as_protobuf_writes_them(raw):
    assert _version_as_protobuf(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_version_events(), _edits)
def test_other_version_bytes_are_left_to_protobuf_or_read_as_it_reads_them(raw, edits):
    _left_to_protobuf_or_read_as_it_reads(edited(raw, edits), event_pb2.Event,
                                          lambda raw: small_messages.file_version(raw, 0, len(raw)),
                                          _version_as_protobuf)


def _left_to_protobuf_or_read_as_it_reads(raw: bytes, message, ours, as_protobuf) -> None:
    """Bytes changed anywhere: refused by protobuf, so by ``ours`` too; otherwise left to
    protobuf (None) or read to the values protobuf reads (``as_protobuf`` checks)."""
    try:
        message.FromString(raw)
    except Exception:  # noqa: BLE001 - protobuf refuses them: so must this reader
        assert ours(raw) is None
        return
    as_protobuf(raw)


def _version_variants() -> list[tuple[str, bytes]]:
    plain = event_pb2.Event(wall_time=1.5, file_version="brain.Event:2")
    plain.source_metadata.writer = "tensorboard.summary.writer.event_file_writer"
    raw = plain.SerializeToString()
    summary = event_pb2.Event(wall_time=1.5)
    summary.summary.value.add(tag="x", simple_value=1.0)
    return [
        ("plain", raw),
        ("unknown event field", raw + b"\x98\x01\x01"),
        ("unknown source field", raw[:-47] + bytes([0x52, 47]) + raw[-46:] + b"\x10\x01"),
        ("version twice", raw[:9] + raw[9:24] + raw[9:]),
        ("bad utf-8 version", raw.replace(b"brain", b"br\xffin")),
        ("bad utf-8 writer", raw.replace(b"tensorboard.", b"tensorboar\xff.")),
        ("a summary event", summary.SerializeToString()),
        ("truncated", raw[:-3]),
    ]


@pytest.mark.parametrize("name,raw", _version_variants())
def test_only_the_plain_version_event_is_taken(name, raw):
    if name not in ("truncated", "bad utf-8 version", "bad utf-8 writer"):
        assert _version_as_protobuf(raw) == (name == "plain")
    else:
        assert small_messages.file_version(raw, 0, len(raw)) is None


# -- SummaryMetadata -----------------------------------------------------------------------

@st.composite
def _metadata(draw) -> bytes:
    md = summary_pb2.SummaryMetadata(display_name=draw(_text), summary_description=draw(_text),
                                     data_class=draw(st.sampled_from([0, 1, 2, 3, 4, 100, 2**31 - 1,
                                                                      -1])))
    if draw(st.booleans()):
        md.plugin_data.plugin_name = draw(st.sampled_from(["", "scalars", "histograms", "ïmages"]))
        md.plugin_data.content = draw(st.binary(max_size=12))
    return md.SerializeToString()


def _metadata_as_protobuf(raw: bytes) -> bool:
    fields = small_messages.summary_metadata(raw)
    if fields is None:
        return False
    md = summary_pb2.SummaryMetadata.FromString(raw)
    assert legacy.metadata_from_fields(*fields) == legacy.metadata_from_proto(md)
    return True


@settings(max_examples=300, deadline=None)
@given(_metadata())
def test_metadata_as_protobuf_writes_it(raw):
    md = summary_pb2.SummaryMetadata.FromString(raw)
    assert _metadata_as_protobuf(raw) == (0 <= md.data_class < 128)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_metadata(), _edits)
def test_other_metadata_bytes_are_left_to_protobuf_or_read_as_it_reads_them(raw, edits):
    _left_to_protobuf_or_read_as_it_reads(edited(raw, edits), summary_pb2.SummaryMetadata,
                                          small_messages.summary_metadata, _metadata_as_protobuf)


@pytest.mark.parametrize("raw", [
    b"\x0a\x0c\x0a\x0ahistograms" + b"\x0a\x0c\x0a\x0ahistograms",   # plugin data twice
    b"\x12\x01a\x0a\x02\x0a\x00",                                      # out of field order
    b"\x20\x81\x80\x80\x80\x10",              # data class 1 in five bytes: protobuf's int32
    b"\x0a\x03\x0a\x01\xff",                   # a plugin name that is not UTF-8
    b"\x28\x01",                               # an unknown field
])
def test_what_only_protobuf_may_read_is_left_to_it(raw):
    assert small_messages.summary_metadata(raw) is None


def test_a_metadata_that_only_protobuf_reads_still_reads():
    raw = b"\x20\x81\x80\x80\x80\x10"     # data class 1, spelt out in five bytes
    summary_templates._parse_metadata.cache_clear()
    assert summary_templates._parse_metadata(raw) == legacy.metadata_from_proto(
        summary_pb2.SummaryMetadata.FromString(raw))
    assert summary_templates._parse_metadata(b"\x0a\x03\x0a\x01\xff") is None


# -- readings ------------------------------------------------------------------------------

def test_series_keep_the_order_of_their_first_records_whichever_decoder_reads_them():
    """A tag's first record read last (a template of one record after the bulk groups):
    the tag still comes first."""
    md = Metadata("scalars", b"", "a", "")
    asm = RunAssembler("run")
    asm.point(4, 1, 1.0, "b", (1, np.float32(2.0)))
    asm.metadata(4, "b", md)
    asm.point(2, 0, 1.0, "a", (1, np.float32(1.0)))
    asm.metadata(2, "a", md)
    asm.end_block()
    assert [series.tag for series, *_ in _chunks(asm)] == ["a", "b"]


def _chunks(asm):
    _, chunks = asm.build()
    return [(chunk,) for chunk in chunks]


def _logdir(path, raws) -> None:
    path.mkdir(parents=True)
    first = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString()
    (path / "events.out.tfevents.1.host").write_bytes(
        b"".join(records.frame(r) for r in [first] + raws))


def _scalar_event(tag: str, step: int, value: float, md: bytes | None) -> bytes:
    ev = event_pb2.Event(wall_time=100.0 + step, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.dtype = 1
    v.tensor.tensor_content = np.float32(value).tobytes()
    if md is not None:
        v.metadata.ParseFromString(md)
    return ev.SerializeToString()


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 40),
                          st.one_of(st.none(), _metadata())), min_size=1, max_size=60))
def test_a_logdir_reads_the_same_with_and_without_protobuf(tmp_path_factory, events):
    """Few records or many, odd metadata, steps going back: the same series with the small
    messages read without protobuf as with protobuf alone."""
    raws = [_scalar_event(tag, step, step / 3, md) for tag, step, md in events]
    logdir = tmp_path_factory.mktemp("small") / "logs"
    _logdir(logdir, raws)
    fast = tbconvert.read(logdir, restarts="keep-all")
    with protobuf_only():
        slow = tbconvert.read(logdir, restarts="keep-all")
    assert _view(fast) == _view(slow)


def test_a_large_record_left_over_goes_to_protobuf_uncopied(tmp_path, monkeypatch):
    """A lone large record (a model's graph) is never copied to learn a template from it (a
    wide record is learnt from where it lies)."""
    from tbconvert.formats.tfevents import blob_templates, reader
    graph = event_pb2.Event(wall_time=2.0, step=0, graph_def=b"\x0a" * (reader.FEW_LEFT_BYTES + 1))
    raws = [graph.SerializeToString(), _scalar_event("a", 1, 0.5, None)]
    _logdir(tmp_path / "logs", raws)
    learnt = []
    for module in (summary_templates, blob_templates):
        monkeypatch.setattr(module, "_learn", lambda buf, real=module._learn: (
            learnt.append(len(buf) if isinstance(buf, bytes) else 0), real(buf))[1])
    fast = tbconvert.read(tmp_path / "logs", restarts="keep-all")
    assert learnt and max(learnt) < reader.FEW_LEFT_BYTES
    with protobuf_only():
        slow = tbconvert.read(tmp_path / "logs", restarts="keep-all")
    assert _view(fast) == _view(slow) and "__run_graph__" in fast.series["."]


def _view(data) -> list:
    out = []
    for run, series in data.series.items():
        for tag, s in series.items():
            if hasattr(s, "tensors"):
                payload = [(a.dtype.str, a.shape, a.tobytes()) for a in s.tensors]
            elif hasattr(s, "values"):
                payload = s.values.tobytes()
            else:
                payload = (s.offsets.tobytes(), [bytes(b) for b in s.blobs])
            out.append((run, tag, s.metadata, s.steps.tolist(), s.wall_times.tobytes(),
                        None if s.hidden is None else s.hidden.tolist(), payload))
    return out


_NO_PROTOBUF = """
import json, sys
import tbconvert
data = tbconvert.read(sys.argv[1])
print(json.dumps({"protobuf": sorted(m for m in sys.modules if m.startswith("google.protobuf")
                                     or m.endswith("_pb2")),
                  "points": sum(len(s) for run in data.series.values() for s in run.values())}))
"""


@pytest.mark.parametrize("source", ["torch_logdir/multi/losses_train", "tensorboardx_logdir/run_b/compare/x",
                                    "tf2", "histo_tf2", "images_legacy", "images_tf2"])
def test_a_reading_of_plain_series_never_loads_protobuf(fixtures_dir, tmp_path, source):
    """Real PyTorch and tensorboardX scalar runs, and the bench's TF2 scalars (metadata on every
    value), TF2 histograms and both image forms (records checked against the real writers'
    by tests/test_bench_generators.py): read without protobuf's modules (20-35 ms of a short
    command's start)."""
    if "/" in source:
        path = fixtures_dir / source
    else:
        on_path(BENCH)
        import writers
        path = tmp_path / source
        writers.write_form(source, path, 40)
    out = subprocess.run([sys.executable, "-c", _NO_PROTOBUF, str(path)],
                         capture_output=True, text=True, check=True).stdout
    found = json.loads(out)
    assert found["points"] > 0 and found["protobuf"] == []
