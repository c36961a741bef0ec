"""Tensor values whose bits are easy to lose on the way (complex parts in their typed field, a
signalling NaN, rank 0): every destination gives TensorBoard back the source's tensors."""

from __future__ import annotations

import pytest
from oracle import assert_same_view, tb_view
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

import tbconvert
from tbconvert.formats.tfevents import records


def _logdir(tmp_path, tensors: dict):
    """One run, each tag one point of the given TensorProto, a tensor-class series."""
    events = [event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")]
    for step, (tag, tp) in enumerate(tensors.items()):
        ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
        v = ev.summary.value.add(tag=tag)
        v.tensor.CopyFrom(tp)
        v.metadata.plugin_data.plugin_name = "myplugin"
        v.metadata.data_class = summary_pb2.DATA_CLASS_TENSOR
        events.append(ev)
    path = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    return tmp_path / "logs"


def _tensor(dtype, shape, **fields) -> tensor_pb2.TensorProto:
    tp = tensor_pb2.TensorProto(dtype=dtype, **fields)
    tp.tensor_shape.SetInParent()
    for size in shape:
        tp.tensor_shape.dim.add(size=size)
    return tp


TENSORS = {
    # complex parts in scomplex_val / dcomplex_val: infinite and NaN imaginary parts, -0.0
    "complex64": _tensor(8, [3], scomplex_val=[1.0, float("inf"), 2.0, -0.0, 3.0,
                                              float("nan")]),
    "complex128": _tensor(18, [2], dcomplex_val=[-0.0, float("-inf"), float("nan"), 5.0]),
    # a signalling NaN, as one element of shape [1] and as a rank-0 tensor
    "snan_1": _tensor(1, [1], tensor_content=bytes.fromhex("0100807f")),
    "snan_0": _tensor(1, [], tensor_content=bytes.fromhex("0100807f")),
    "snan_f64": _tensor(2, [], tensor_content=bytes.fromhex("010000000000f07f")),
    # rank 0 in a typed field
    "rank0": _tensor(1, [], float_val=[2.5]),
    "rank0_int": _tensor(9, [], int64_val=[-7]),
}


@pytest.mark.parametrize("dest", ["x.parquet", "x.h5", "ds/parquet", "export/tbdev",
                                  "back/tfevents"])
def test_tensor_bits_survive_every_destination(tmp_path, dest):
    src = _logdir(tmp_path, TENSORS)
    name, _, to = dest.partition("/")
    out = tmp_path / name
    tbconvert.convert(src, out, to_format=to or None)
    back = out
    if to != "tfevents":
        back = tmp_path / "again"
        tbconvert.convert(out, back, to_format="tfevents")
    # (an export keeps no start time of its own: its runs start at their first point)
    assert_same_view(tb_view(back), tb_view(src), ignore_first_event=to == "tbdev")


def test_complex_parts_in_their_typed_field_decode_as_tensorboard_does():
    from tensorboard.util import tensor_util

    from tbconvert import dtypes
    for tag in ("complex64", "complex128"):
        _, arr = dtypes.proto_to_array(TENSORS[tag])
        want = tensor_util.make_ndarray(TENSORS[tag])
        assert arr.dtype == want.dtype and arr.tobytes() == want.tobytes(), tag


def _scalar_logdir(tmp_path, points: dict, *, legacy: bool = False):
    """One run of scalar-plugin tags: ``{tag: [TensorProto or float per step]}`` (float:
    ``simple_value``); metadata on the first value of each tag only."""
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    events = [event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")]
    for tag, values in points.items():
        for step, value in enumerate(values):
            ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
            v = ev.summary.value.add(tag=tag)
            if isinstance(value, float):
                v.simple_value = value
            else:
                v.tensor.CopyFrom(value)
                if step == 0:
                    v.metadata.CopyFrom(scalar_metadata.create_summary_metadata("", ""))
            events.append(ev)
    path = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    return tmp_path / "logs"


def _snan(k: int) -> tensor_pb2.TensorProto:
    return _tensor(1, [], tensor_content=(0x7FA00000 + k).to_bytes(4, "little"))


@pytest.mark.parametrize("steps", [3, 200])   # small chunks are encoded many tags at a time
def test_signaling_nan_scalars_keep_their_bits_in_event_files(tmp_path, steps):
    """TensorBoard reads ``float_val`` through a Python float, which quiets a signaling NaN:
    every such point, first or not, is written in ``tensor_content``."""
    points = {f"t{k}": [_snan(k * 1000 + s) if s % 2 == 0 else _tensor(1, [], float_val=[s])
                        for s in range(steps)] for k in range(3)}
    src = _scalar_logdir(tmp_path, points)
    for dest in ("x.parquet", "back"):
        tbconvert.convert(src, tmp_path / dest, to_format=None if "." in dest else "tfevents")
    tbconvert.convert(tmp_path / "x.parquet", tmp_path / "again", to_format="tfevents")
    want = tb_view(src)
    assert_same_view(tb_view(tmp_path / "back"), want)
    assert_same_view(tb_view(tmp_path / "again"), want)
    # verify tells a quieted signaling NaN from the original (both are NaN as values)
    from tbconvert.verify import compare
    quiet = {tag: [_tensor(1, [], tensor_content=(int.from_bytes(t.tensor_content, "little")
                                                   | 0x400000).to_bytes(4, "little"))
                   if t.tensor_content else t for t in pts] for tag, pts in points.items()}
    quieted = _scalar_logdir(tmp_path / "q", quiet)
    assert compare(src, tmp_path / "back") == []
    assert [d.split(" at step")[0] for d in compare(src, quieted)] == \
        [f"run/t{k}: values differ" for k in range(3)]


def test_small_scalar_chunks_are_encoded_in_batches():
    """The batched encoding of small scalar chunks is checked against the one point at a time
    (a signaling NaN included); where they differ, the batch is never used."""
    import tempfile

    from tbconvert.formats.tfevents import runfile
    from tbconvert.model import DataClass, Metadata, Run
    from tbconvert.report import Report
    rf = runfile.RunFile(Run(name="r"), Report(), tempfile.mkdtemp())
    for md in (Metadata(plugin_name="scalars", data_class=DataClass.SCALAR), Metadata()):
        assert rf._same_encoding(md), md


def test_bfloat16_scalars_keep_their_type_and_show_their_values(tmp_path):
    """bfloat16 is kept as its bits: event files and archives keep the type (TensorBoard itself
    cannot decode it), tables and exports show its value."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    bits = [0x3DCC, 0xC049, 0x7F80]           # 0.099609375, -3.140625, inf
    src = _scalar_logdir(tmp_path, {"loss": [_tensor(14, [], half_val=[b]) for b in bits]})
    want = [0.099609375, -3.140625, float("inf")]
    assert list(tbconvert.read(src).scalars("run", "loss").values) == want
    assert list(tbconvert.scalars(src)["value"]) == want
    tbconvert.convert(src, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines()[1:] == [
        f"run,loss,{s},{1001.0 + s},{v}" for s, v in zip(range(3), ["0.099609375", "-3.140625",
                                                                   "inf"], strict=True)]
    tbconvert.convert(src, tmp_path / "export", to_format="tbdev")
    assert list(tbconvert.read(tmp_path / "export").scalars("run", "loss").values) == want
    from tbconvert.verify import compare
    assert compare(src, tmp_path / "export") == []
    # they are scalars: the tensors table leaves them to the scalars table unless asked
    assert len(tbconvert.tensors(src)) == 0 and len(tbconvert.tensors(src, scalars=True)) == 3

    def raw(logdir):
        mux = pem.EventMultiplexer(size_guidance={"tensors": 0})
        mux.AddRunsFromDirectory(str(logdir))
        mux.Reload()
        # (in half_val or tensor_content: TensorBoard decodes neither, the bits are the same)
        from tbconvert.dtypes import proto_to_array
        return [(code, arr.tobytes()) for code, arr in
                (proto_to_array(e.tensor_proto) for e in mux.Tensors("run", "loss"))]
    for dest in ("x.parquet", "x.h5"):
        tbconvert.convert(src, tmp_path / dest)
        tbconvert.convert(tmp_path / dest, tmp_path / f"{dest}.back", to_format="tfevents")
        assert raw(tmp_path / f"{dest}.back") == raw(src), dest


def test_a_scalar_tag_mixing_floats_and_wide_integers_tells_what_tables_round(tmp_path):
    """A tag logged as float32, then as int64 beyond 2**53: a table's float64 column rounds
    the integer, and says so (it did so silently)."""
    wide = 2**53 + 1
    src = _scalar_logdir(tmp_path, {"count": [_tensor(1, [], float_val=[0.5]),
                                              _tensor(9, [], int64_val=[wide]),
                                              _tensor(9, [], int64_val=[7])]})
    for table in (tbconvert.scalars, lambda s, report: tbconvert.scalars(s, wide=True,
                                                                          report=report)):
        report = tbconvert.Report()
        t = table(src, report=report)
        assert [float(v) for v in t.iloc[:, -1]] == [0.5, float(wide), 7.0]
        rounded = [i for i in report.issues if i.kind == "inexact_value"]
        assert sum(i.count for i in rounded) == 1 and "count" in rounded[0].message, \
            report.issues
    report = tbconvert.convert(src, tmp_path / "t.csv")
    assert sum(i.count for i in report.issues if i.kind == "inexact_value") == 1, \
        report.summary_lines()


@pytest.mark.parametrize("steps", [3, 40])   # few: protobuf decodes them; many: a template
def test_signaling_nans_in_float_fields_are_read_quieted_as_tensorboard_reads_them(tmp_path,
                                                                                 steps):
    """TensorBoard reads ``simple_value``, ``float_val`` and ``scomplex_val`` through Python
    floats, which quiet a signaling NaN (sign and payload kept); ``tensor_content`` keeps its
    bits. tbconvert reads each field as TensorBoard does, so a conversion shows the same."""
    import struct

    import numpy as np
    from tensorboard.compat.proto import summary_pb2
    snan = struct.pack("<I", 0xFF800001)              # sign set, payload 1

    def sneak(tp_or_value, fill: float) -> bytes:
        """The message with the float ``fill`` swapped for the signaling NaN's bytes."""
        raw = tp_or_value.SerializeToString()
        assert raw.count(struct.pack("<f", fill)) == 1
        return raw.replace(struct.pack("<f", fill), snan)

    events = [event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")]
    for s in range(steps):
        for tag, make in (("simple", lambda x: summary_pb2.Summary.Value(tag="simple",
                                                                          simple_value=x)),
                          ("float_val", lambda x: summary_pb2.Summary.Value(
                              tag="float_val", tensor=_tensor(1, [], float_val=[x]))),
                          ("content", lambda x: summary_pb2.Summary.Value(
                              tag="content", tensor=_tensor(1, [], tensor_content=struct.pack(
                                  "<f", x)))),
                          ("complex", lambda x: summary_pb2.Summary.Value(
                              tag="complex", tensor=_tensor(8, [1], scomplex_val=[x, 2.0])))):
            fill = 1.5 + s
            value = make(fill)
            if tag != "simple":
                value.metadata.plugin_data.plugin_name = "scalars" if tag != "complex" else "x"
            raw = sneak(value, fill) if s == 1 else value.SerializeToString()
            ev = event_pb2.Event(wall_time=1001.0 + s, step=s)
            ev.summary.value.add().MergeFromString(raw)
            events.append(ev)
    src = tmp_path / "logs"
    (src / "run").mkdir(parents=True)
    (src / "run" / "events.out.tfevents.1.host").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in events))
    want = tb_view(src)
    bits = {tag: info["points"][1][2] for tag, info in want["run"]["tags"].items()}
    assert bits["content"][2] == snan                       # kept by tensor_content only
    for tag in ("simple", "float_val", "complex"):
        assert snan not in bits[tag][2] and struct.pack("<I", 0xFFC00001) in bits[tag][2], tag
    read = tbconvert.read(src)
    for tag in ("simple", "float_val", "content"):
        got = read.scalars("run", tag).values
        assert got.dtype == np.float32 and got[1].tobytes() == bits[tag][2], tag
    for dest in ("x.parquet", "back"):
        tbconvert.convert(src, tmp_path / dest, to_format=None if "." in dest else "tfevents")
    tbconvert.convert(tmp_path / "x.parquet", tmp_path / "again", to_format="tfevents")
    assert_same_view(tb_view(tmp_path / "back"), want)
    assert_same_view(tb_view(tmp_path / "again"), want)
