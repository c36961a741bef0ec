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
