"""One run written into an HDF5 group (``/runs/<i>``'s layout, see schema): attributes,
records and series, as resizable chunked datasets appended chunk by chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import h5py
import numpy as np

from tbconvert import budget
from tbconvert import dtypes as dt
from tbconvert.errors import UnsupportedError
from tbconvert.formats.hdf5 import schema
from tbconvert.interrupts import deferred
from tbconvert.model import BlobSequenceSeries, DataClass, Run, ScalarSeries, Series, TensorSeries

VLEN_BYTES = h5py.vlen_dtype(np.dtype("u1"))
VLEN_INT64 = h5py.vlen_dtype(np.dtype("<i8"))
STR = h5py.string_dtype("utf-8")

# HDF5 datasets have at most 32 dimensions, and a dense series uses one for the points.
MAX_DENSE_DIMS = 32


def check_run_name(name: str) -> None:
    """HDF5 strings cannot hold NUL: refuse clearly instead of failing inside h5py."""
    if "\x00" in name:
        raise UnsupportedError(f"run {name!r}: the name holds a NUL character, which HDF5 "
                               "strings cannot store; convert to Parquet instead")


def check_names(chunk: Series) -> Series:
    """As :func:`check_run_name`, for every name a chunk carries."""
    md = chunk.metadata
    for what, text in (("run", chunk.run), ("tag", chunk.tag), ("plugin name", md.plugin_name),
                       ("display name", md.display_name), ("description", md.description)):
        if "\x00" in text:
            raise UnsupportedError(
                f"{chunk.run!r}/{chunk.tag!r}: the {what} holds a NUL character, which HDF5 "
                "strings cannot store; convert to Parquet instead (it keeps every name as is)")
    return chunk


def write_run_group(parent: h5py.Group, name: str, run: Run, series: Iterable[Series],
                    writing: Callable) -> None:
    """Write ``run`` and its chunks as the group ``parent[name]``.

    HDF5 work is done inside ``writing()`` (interrupts held back: an exception inside
    HDF5's callbacks breaks it); reading the source between chunks stays interruptible.
    """
    with writing():
        g = _start_run(parent, name, run)
        sg = g.create_group(schema.SERIES)
    states: dict = {}
    tags: list[str] = []
    try:
        for chunk in series:
            check_names(chunk)
            if not len(chunk):
                continue
            with writing():
                _add_chunk(sg, states, tags, chunk)
        with writing():
            g.create_dataset(schema.TAGS, data=np.array(tags, dtype=object), dtype=STR)
    finally:
        with deferred():  # h5py objects released here, not wherever the collector runs
            states.clear()
            del g, sg


def _vlen(items) -> list:
    """Items for a variable-length dataset. A list, not an object array: h5py mis-reads
    object arrays whose items all have one length as a 2-D array."""
    return [np.frombuffer(b, dtype=np.uint8) if isinstance(b, (bytes, bytearray, memoryview))
            else np.asarray(b) for b in items]


def _create(group: h5py.Group, name: str, dtype, tail=(), rows_hint: int = 0) -> h5py.Dataset:
    dtype = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    vlen = h5py.check_vlen_dtype(dtype) is not None or h5py.check_string_dtype(dtype) is not None
    if vlen:
        rows = schema.VLEN_CHUNK_ROWS
    else:
        row_bytes = max(1, dtype.itemsize * int(np.prod(tail, dtype=np.int64)))
        rows = max(1, min(schema.CHUNK_BYTES // row_bytes, 65536))
        rows = min(rows, max(1024, rows_hint)) if rows >= 1024 else rows
    kwargs = dict(compression=schema.COMPRESSION, compression_opts=schema.COMPRESSION_LEVEL)
    if not vlen and dtype.kind in "iufc" and dtype.itemsize > 1:
        kwargs["shuffle"] = True
    return group.create_dataset(name, shape=(0, *tail), maxshape=(None, *tail), dtype=dtype,
                                chunks=(rows, *tail), **kwargs)


def _append(group: h5py.Group, name: str, data, dtype=None) -> None:
    if name not in group:
        arr = data if dtype is not None else np.asarray(data)
        _create(group, name, dtype if dtype is not None else arr.dtype,
                tail=() if dtype is not None else arr.shape[1:], rows_hint=len(data))
    ds = group[name]
    n = len(data)
    if n == 0:
        return
    old = ds.shape[0]
    ds.resize(old + n, axis=0)
    ds[old:old + n] = data


def _is_uniform(chunk: TensorSeries):
    """(code, shape) when every point has one numeric dtype and shape, else None."""
    codes = chunk.dtypes
    code = int(codes[0])
    if code in (dt.DT_STRING, dt.DT_RAW_PROTO) or (codes != code).any():
        return None
    shape = np.shape(chunk.tensors[0])
    if 0 in shape or len(shape) >= MAX_DENSE_DIMS or any(np.shape(t) != shape for t in chunk.tensors):
        return None  # (HDF5 chunks cannot have a zero dimension, nor datasets 33 of them)
    return code, shape


class _SeriesState:
    def __init__(self, group: h5py.Group, kind: str) -> None:
        self.group = group
        self.kind = kind
        self.layout: str | None = None
        self.dense_key = None
        self.data_bytes = 0
        self.string_count = 0
        self.blob_count = 0


def _start_run(parent: h5py.Group, name: str, run: Run) -> h5py.Group:
    g = parent.create_group(name)
    g.attrs["name"] = run.name
    if run.start_time is not None:
        g.attrs["start_time"] = np.float64(run.start_time)
    if run.records:
        rec = g.create_group(schema.RECORDS)
        rec.create_dataset("kind", data=np.array([r.kind for r in run.records], dtype=object),
                           dtype=STR)
        rec.create_dataset("step", data=np.array([r.step for r in run.records], np.int64))
        rec.create_dataset("wall_time",
                           data=np.array([r.wall_time for r in run.records], np.float64))
        _append(rec, "payload", _vlen([r.payload for r in run.records]), VLEN_BYTES)
    return g


def _add_chunk(sg: h5py.Group, states: dict, tags: list, chunk: Series) -> None:
    if isinstance(chunk, ScalarSeries):
        kind, extra = schema.KIND_SCALAR, chunk.values.dtype.name
    elif isinstance(chunk, BlobSequenceSeries):
        kind, extra = schema.KIND_BLOB_SEQUENCE, None
    else:
        kind, extra = schema.KIND_TENSOR, None
    key = (chunk.tag, kind, chunk.metadata, extra)
    state = states.get(key)
    if state is None:
        state = states[key] = _SeriesState(_new_series(sg, len(tags), chunk, kind), kind)
        tags.append(chunk.tag)
    _append_chunk(state, chunk)


def _new_series(sg: h5py.Group, j: int, chunk: Series, kind: str) -> h5py.Group:
    s = sg.create_group(str(j))
    md = chunk.metadata
    s.attrs["tag"] = chunk.tag
    s.attrs["kind"] = kind
    s.attrs["plugin_name"] = md.plugin_name
    s.attrs["plugin_content"] = np.frombuffer(md.plugin_content, dtype=np.uint8)
    s.attrs["display_name"] = md.display_name
    s.attrs["description"] = md.description
    s.attrs["data_class"] = np.int32(int(md.data_class))
    s.attrs["data_class_name"] = DataClass(md.data_class).name.lower()
    return s


def _append_chunk(state: _SeriesState, chunk: Series) -> None:
    s = state.group
    n = len(chunk)
    _append(s, "steps", chunk.steps)
    _append(s, "wall_times", chunk.wall_times)
    _append(s, "hidden", np.zeros(n, bool) if chunk.hidden is None else chunk.hidden)
    if state.kind == schema.KIND_SCALAR:
        values = chunk.values
        if values.dtype.kind != "b":
            values = values.astype(values.dtype.newbyteorder("<"), copy=False)
        _append(s, "values", values)
    elif state.kind == schema.KIND_BLOB_SEQUENCE:
        _append_blobs(state, chunk)
    else:
        _append_tensors(state, chunk)


def _append_blobs(state: _SeriesState, chunk: BlobSequenceSeries) -> None:
    s = state.group
    if "blob_offsets" not in s:
        _append(s, "blob_offsets", np.zeros(1, np.int64))
    _append(s, "blobs", _vlen([b"" if b is None else b for b in chunk.blobs]), VLEN_BYTES)
    _append(s, "blob_missing", np.array([b is None for b in chunk.blobs], dtype=bool))
    _append(s, "blob_offsets", chunk.offsets[1:] + state.blob_count)
    state.blob_count += len(chunk.blobs)


def _append_tensors(state: _SeriesState, chunk: TensorSeries) -> None:
    s = state.group
    for t in chunk.tensors:
        if np.ndim(t) > budget.MAX_DIMS:
            raise UnsupportedError(
                f"{chunk.run!r}/{chunk.tag!r}: a tensor of {np.ndim(t)} dimensions (at most "
                f"{budget.MAX_DIMS} can be written or read back)")
    uniform = _is_uniform(chunk)
    if state.layout is None:
        state.layout = schema.LAYOUT_DENSE if uniform is not None else schema.LAYOUT_RAGGED
        s.attrs["layout"] = state.layout
        if uniform is not None:
            state.dense_key = uniform
            s.attrs["tensor_dtype"] = np.int32(uniform[0])
            s.attrs["tensor_dtype_name"] = dt.NAMES[uniform[0]]
    if state.layout == schema.LAYOUT_DENSE and uniform != state.dense_key:
        _to_ragged(state)
    if state.layout == schema.LAYOUT_DENSE:
        code = state.dense_key[0]
        stacked = np.stack([np.asarray(t) for t in chunk.tensors]).astype(
            dt.numpy_dtype(code), copy=False)
        _append(s, "values", stacked)
    else:
        _append_ragged(state, chunk.dtypes, chunk.tensors)


def _append_ragged(state: _SeriesState, codes, tensors) -> None:
    s = state.group
    if "data_offsets" not in s:
        _append(s, "data_offsets", np.zeros(1, np.int64))
        _append(s, "string_offsets", np.zeros(1, np.int64))
    shapes, data, strings = [], [], []
    data_off = np.empty(len(tensors), np.int64)
    str_off = np.empty(len(tensors), np.int64)
    for i, (code, arr) in enumerate(zip(np.asarray(codes).tolist(), tensors, strict=True)):
        arr = np.asarray(arr)
        shapes.append(np.asarray(arr.shape, dtype=np.int64))
        if code == dt.DT_STRING:
            strings.extend(bytes(x) for x in arr.reshape(-1))
        else:
            raw = np.ascontiguousarray(arr, dtype=dt.numpy_dtype(code)).tobytes()
            data.append(raw)
            state.data_bytes += len(raw)
        data_off[i] = state.data_bytes
        str_off[i] = state.string_count + len(strings)
    state.string_count += len(strings)
    _append(s, "dtypes", np.asarray(codes, dtype=np.int32))
    _append(s, "shapes", _vlen(shapes), VLEN_INT64)
    _append(s, "data", np.frombuffer(b"".join(data), dtype=np.uint8))
    _append(s, "data_offsets", data_off)
    _append(s, "strings", _vlen(strings), VLEN_BYTES)
    _append(s, "string_offsets", str_off)


def _to_ragged(state: _SeriesState) -> None:
    """A later chunk broke the uniform layout: move what was written to the ragged one."""
    s = state.group
    values = s["values"]
    code = state.dense_key[0]
    state.layout = schema.LAYOUT_RAGGED
    s.attrs["layout"] = schema.LAYOUT_RAGGED
    del s.attrs["tensor_dtype"]
    del s.attrs["tensor_dtype_name"]
    row_bytes = max(1, values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
    step = max(1, schema.READ_BYTES // row_bytes)
    for start in range(0, values.shape[0], step):
        block = values[start:start + step]
        _append_ragged(state, np.full(len(block), code, np.int32), list(block))
    del s["values"]
