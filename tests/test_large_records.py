"""An event record holding one large payload, read with one copy of it
(tbconvert/formats/tfevents/large_records.py): what it gives is what protobuf gives for the
whole record, whatever the layout, and damage is reported as before."""

from pathlib import Path

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2

from tbconvert.formats.base import Options
from tbconvert.formats.tfevents import large_records, records
from tbconvert.formats.tfevents.encode import varint
from tbconvert.formats.tfevents.reader import TfeventsReader
from tbconvert.model import BlobSequenceSeries, ScalarSeries, TensorSeries
from tbconvert.report import Report

SIZE = large_records.PAYLOAD_BYTES + 1000


def _bytes(size=SIZE, seed=1) -> bytes:
    return np.random.default_rng(seed).bytes(size)


def _image(v):
    v.metadata.plugin_data.plugin_name = "images"
    v.tensor.dtype = 7                                     # DT_STRING
    v.tensor.tensor_shape.dim.add(size=3)
    v.tensor.string_val.extend([b"8", b"8", _bytes()])


def _floats(v):
    v.metadata.plugin_data.plugin_name = "tensors"
    v.tensor.dtype = 1                                     # DT_FLOAT
    v.tensor.tensor_shape.dim.add(size=SIZE // 8)
    v.tensor.tensor_shape.dim.add(size=2)
    v.tensor.tensor_content = _bytes(SIZE // 8 * 8)


def _legacy_image(v):
    v.image.CopyFrom(summary_pb2.Summary.Image(height=4, width=5, colorspace=3,
                                               encoded_image_string=_bytes()))


def _legacy_audio(v):
    v.audio.CopyFrom(summary_pb2.Summary.Audio(sample_rate=8000.0, num_channels=1,
                                               encoded_audio_string=_bytes()))


def _one_string(v):
    v.metadata.plugin_data.plugin_name = "text"
    v.tensor.dtype = 7
    v.tensor.string_val.append(_bytes())                   # a scalar string tensor


def _strings_2d(v):
    v.metadata.plugin_data.plugin_name = "text"
    v.tensor.dtype = 7
    v.tensor.tensor_shape.dim.add(size=2)
    v.tensor.tensor_shape.dim.add(size=2)
    v.tensor.string_val.extend([b"a", _bytes(), b"", b"d"])


def _event(*fills, step=3) -> event_pb2.Event:
    ev = event_pb2.Event(wall_time=1.7e9 + step, step=step)
    for k, fill in enumerate(fills):
        fill(ev.summary.value.add(tag=f"t{k}"))
    return ev


def _scalar(v):
    v.simple_value = 0.25


LAYOUTS = {
    "image": _event(_image),
    "float tensor": _event(_floats),
    "legacy image": _event(_legacy_image),
    "legacy audio": _event(_legacy_audio),
    "scalar string": _event(_one_string),
    "string matrix": _event(_strings_2d),
    "among other values": _event(_scalar, _image, _scalar),
}


def _write(root: Path, payloads: list[bytes]) -> Path:
    run = root / "logs" / "train"
    run.mkdir(parents=True)
    head = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()
    (run / "events.out.tfevents.1.host").write_bytes(
        b"".join(records.frame(p) for p in [head, *payloads]))
    return root / "logs"


def _view(chunk) -> tuple:
    """A chunk as plain values, to compare two readings of it."""
    out = [type(chunk).__name__, chunk.run, chunk.tag, chunk.metadata,
           chunk.steps.tolist(), chunk.wall_times.tolist()]
    if isinstance(chunk, BlobSequenceSeries):
        out += [chunk.offsets.tolist(), [None if b is None else bytes(b) for b in chunk.blobs]]
    elif isinstance(chunk, TensorSeries):
        tensors = chunk.tensors if chunk.block is None else list(chunk.block)
        out += [chunk.dtypes.tolist(), [(np.asarray(a).dtype.str, np.shape(a),
                                         [bytes(x) for x in np.asarray(a).reshape(-1)]
                                         if np.asarray(a).dtype == object
                                         else np.asarray(a).tobytes()) for a in tensors]]
    elif isinstance(chunk, ScalarSeries):
        out += [chunk.values.tobytes()]
    return tuple(out)


def _read(logdir: Path) -> tuple[list, list]:
    report = Report()
    reader = TfeventsReader(logdir, Options(), report)
    got = [_view(c) for run in reader.iter_runs() for c in run.series]
    return got, [(i.kind, i.message) for i in report.issues]


def _both(logdir: Path, monkeypatch) -> tuple:
    """The reading of ``logdir``, and protobuf's of the whole record (no payload taken apart)."""
    fast = _read(logdir)
    with monkeypatch.context() as m:
        m.setattr(large_records, "PAYLOAD_BYTES", 1 << 62)
        whole = _read(logdir)
    return fast, whole


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_large_payload_reads_as_protobuf_reads_the_record(tmp_path, monkeypatch, layout):
    raw = LAYOUTS[layout].SerializeToString()
    buf = b"\0" * 7 + raw + b"\0" * 4
    assert large_records.prepare(buf, 7, len(raw), event_pb2.Event) is not None
    fast, whole = _both(_write(tmp_path, [raw]), monkeypatch)
    assert fast == whole
    assert fast[0] and not fast[1]


def _tensor_bytes(v) -> bytes:
    return v.tensor.SerializeToString()


def _key(number: int, length: int) -> bytes:
    return varint(number << 3 | 2) + varint(length)


def _odd_layouts() -> dict:
    """Records protobuf reads otherwise than their fields one by one (merges, a oneof set
    twice), or not at all: taken as protobuf takes them."""
    image = _event(_image)
    value = image.summary.value[0]
    tag_and_md = summary_pb2.Summary.Value(tag="t0", metadata=value.metadata).SerializeToString()
    tensor = _tensor_bytes(value)
    head = b"\x09" + np.float64(1.7e9).tobytes() + b"\x10\x03"

    def event(*values: bytes, summaries=1) -> bytes:
        summary = b"".join(_key(1, len(v)) + v for v in values)
        return head + (_key(5, len(summary)) + summary) * summaries

    floats = _event(_floats).summary.value[0]
    content = floats.tensor.tensor_content
    shape = floats.tensor.tensor_shape.SerializeToString()
    float_head = b"\x08\x01" + _key(2, len(shape)) + shape
    half = float_head + _key(4, len(content)) + content[:len(content) // 2]
    return {
        "summary twice": event(tag_and_md + _key(8, len(tensor)) + tensor, summaries=2),
        "tensor twice": event(tag_and_md + (_key(8, len(tensor)) + tensor) * 2),
        "tensor then a scalar": event(tag_and_md + _key(8, len(tensor)) + tensor
                                      + b"\x15" + np.float32(0.5).tobytes()),
        "content twice": event(tag_and_md + _key(8, 2 * len(half) - len(float_head))
                               + half + half[len(float_head):]),
        "content of a string tensor": event(
            tag_and_md + _key(8, len(content) + 8) + b"\x08\x07" + _key(4, len(content))
            + content),
        "content not of its shape": event(tag_and_md + _key(8, len(half)) + half),
        "a string that is not UTF-8 as the tag": event(
            b"\x3a\x02\xff\xfe" + _key(8, len(tensor)) + tensor),
    }


@pytest.mark.parametrize("layout", list(_odd_layouts()))
def test_odd_layouts_read_as_protobuf_reads_them(tmp_path, monkeypatch, layout):
    raw = _odd_layouts()[layout]
    fast, whole = _both(_write(tmp_path, [raw]), monkeypatch)
    assert fast == whole


def test_a_damaged_large_record_costs_itself_reported(tmp_path, monkeypatch):
    raw = _event(_image).SerializeToString()
    logdir = _write(tmp_path, [raw, _event(_scalar, step=4).SerializeToString()])
    path = next(logdir.rglob("*tfevents*"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    fast, whole = _both(logdir, monkeypatch)
    assert fast == whole
    assert [v[2] for v in fast[0]] == ["t0"] and [v[4] for v in fast[0]] == [[4]]
    assert [k for k, _ in fast[1]] == ["corrupt_record"]


def test_a_payload_changed_after_its_record_was_checked_is_not_taken(tmp_path):
    """The payload is read from the file again: bytes that no longer match the record's
    checksum are refused (and the record read again whole, refused too)."""
    raw = _event(_floats).SerializeToString()
    framed = records.frame(raw)
    large = large_records.prepare(framed, records.HEADER, len(raw), event_pb2.Event)
    assert large is not None
    changed = bytearray(framed)
    changed[len(changed) // 2] ^= 1

    def read_from(data):
        return lambda offset, size: bytes(data[offset:offset + size])

    assert large.point(read_from(changed), 0) is None
    assert large.record(read_from(changed), 0) is None
    assert large.record(read_from(framed), 0) == raw
    md, (code, arr) = large.point(read_from(framed), 0)
    assert code == 1 and arr.tobytes() == _event(_floats).summary.value[0].tensor.tensor_content


def test_large_values_written_from_their_pieces_give_protobufs_bytes(tmp_path, monkeypatch):
    """A large value goes to the writer's sorter as its pieces, a sorted run of its own; the
    event file is the one written with every value made by protobuf and sorted in memory."""
    import tbconvert
    events = [_event(_scalar, step=s) for s in range(40)]
    events[10] = _event(_image, step=10)
    events[20] = _event(_scalar, _floats, step=20)
    events.insert(30, _event(_legacy_image, step=29))
    logdir = _write(tmp_path / "src", [e.SerializeToString() for e in events])
    from tbconvert.formats.tfevents.runfile import RunFile
    # (values that fill the sorter's buffer alone go in pieces: a buffer below SIZE)
    monkeypatch.setitem(RunFile.__init__.__kwdefaults__, "buffer_bytes", SIZE // 2)
    tbconvert.convert(logdir, tmp_path / "fast", to_format="tfevents", jobs=1)
    from tbconvert.formats.tfevents import large_values
    with monkeypatch.context() as m:
        m.setattr(large_values, "LARGE_PAYLOAD_BYTES", 1 << 62)
        tbconvert.convert(logdir, tmp_path / "whole", to_format="tfevents", jobs=1)
    (fast,), (whole,) = [list((tmp_path / d).rglob("*tfevents*")) for d in ("fast", "whole")]
    assert fast.read_bytes() == whole.read_bytes()
    assert len(fast.read_bytes()) > 3 * SIZE
