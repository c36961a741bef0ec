"""One run written into an HDF5 group (``/runs/<i>``'s layout, see schema): attributes,
records and series, as resizable chunked datasets appended chunk by chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import h5py
import numpy as np
from h5py import h5a, h5d, h5g, h5p, h5s, h5t

from tbconvert import budget
from tbconvert import dtypes as dt
from tbconvert.errors import UnsupportedError
from tbconvert.formats.hdf5 import large, schema
from tbconvert.formats.recordlog import in_slices
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
                    writing: Callable) -> int:
    """Write ``run`` and its chunks as the group ``parent[name]``; how many of its blobs
    were stored apart (:mod:`large`).

    HDF5 work is done inside ``writing()`` (interrupts held back: an exception inside
    HDF5's callbacks breaks it); reading the source between chunks stays interruptible.
    """
    with writing():
        g = _start_run(parent, name, run)
        sg = g.create_group(schema.SERIES)
        out = _Out(sg)
    states: dict = {}
    tags: list[str] = []
    # Series without points wait for the end of the run: a tag that gets points under other
    # metadata or another dtype meanwhile is that series, not two.
    empty: dict = {}
    try:
        for chunk in series:
            check_names(chunk)
            if not len(chunk):
                empty.setdefault(chunk.tag, chunk)
                continue
            with writing():
                _add_chunk(sg, states, tags, chunk, out)
        with writing():
            with_points = set(tags)
            for tag, chunk in empty.items():     # (in order: the same bytes every time)
                if tag not in with_points:
                    _add_chunk(sg, states, tags, chunk, out)
            for state in states.values():
                if state.kind == schema.KIND_TENSOR and state.layout is None:
                    _no_tensors(out, state)
            out.switch(None)
            g.create_dataset(schema.TAGS, data=np.array(tags, dtype=object), dtype=STR)
        return out.large_blobs
    finally:
        with deferred():  # h5py objects released here, not wherever the collector runs
            out.switch(None)
            states.clear()
            del g, sg, out


def _vlen(items) -> list:
    """Items for a variable-length dataset. A list, not an object array: h5py mis-reads
    object arrays whose items all have one length as a 2-D array."""
    return [np.frombuffer(b, dtype=np.uint8) if isinstance(b, (bytes, bytearray, memoryview))
            else np.asarray(b) for b in items]


def _is_vlen(dtype: np.dtype) -> bool:
    return h5py.check_vlen_dtype(dtype) is not None or h5py.check_string_dtype(dtype) is not None


def _chunk_rows(dtype: np.dtype, tail: tuple, rows_hint: int) -> int:
    if _is_vlen(dtype):
        return schema.VLEN_CHUNK_ROWS
    row_bytes = max(1, dtype.itemsize * int(np.prod(tail, dtype=np.int64)))
    rows = max(1, min(schema.CHUNK_BYTES // row_bytes, 65536))
    return min(rows, max(1024, rows_hint)) if rows >= 1024 else rows


def _chunk_tail(dtype: np.dtype, tail: tuple) -> tuple:
    """The chunk's extent in a row's dimensions: the whole row, unless a row is a large
    point (over large.LARGE_BLOB_BYTES), whose one chunk HDF5 would hold and compress whole
    (twice the point at once): then chunks of about schema.CHUNK_BYTES, the last dimensions
    kept whole where they fit."""
    if dtype.itemsize * int(np.prod(tail, dtype=np.int64)) <= large.LARGE_BLOB_BYTES:
        return tail
    room = max(1, schema.CHUNK_BYTES // dtype.itemsize)
    out = []
    for d in reversed(tail):
        take = max(1, min(d, room))
        out.append(take)
        room //= take
    return tuple(reversed(out))


class _Out:
    """What every group, dataset and attribute of a run shares, made once per run with
    h5py's low-level API: property lists, HDF5 types, dataspaces. A run of many small series
    costs a few HDF5 calls per object, made as h5py's high-level calls make them (the same
    groups, datasets and attributes: types, shapes, chunks, filters), without their per-call
    overhead; each dataset is created at the size of its first data (no resize).

    Only the series being written is open (its group and datasets): when another series'
    chunk comes, they are closed (HDF5 flushes their chunks), so a run of any number of
    series holds one series open."""

    _MAX_RECIPES = 4096

    def __init__(self, series_group: h5py.Group) -> None:
        self._sg = series_group.id
        self._dcpls: dict = {}
        self._types: dict = {}
        self._recipes: dict = {}
        self._scalar = h5s.create(h5s.SCALAR)
        # what h5py's create_group sets: no times, an ASCII link name (the names are numbers)
        self._gcpl = h5p.create(h5p.GROUP_CREATE)
        self._gcpl.set_obj_track_times(False)
        self._lcpl = h5p.create(h5p.LINK_CREATE)
        self._lcpl.set_create_intermediate_group(True)
        self._lcpl.set_char_encoding(h5t.CSET_ASCII)
        self.current: _SeriesState | None = None
        self.large_blobs = 0    # how many went to datasets of their own (see large.py)

    def new_group(self, name: str):
        return h5g.create(self._sg, name.encode(), lcpl=self._lcpl, gcpl=self._gcpl)

    def switch(self, state: _SeriesState | None) -> None:
        """Make ``state`` the open series (None: none), closing the one open before."""
        current = self.current
        if current is state:
            return
        if current is not None:
            current.ids.clear()   # closed: HDF5 flushes their chunks
            current.gid = None
        if state is not None and state.gid is None:
            state.gid = h5g.open(self._sg, state.name)
        self.current = state

    def types(self, dtype: np.dtype):
        """(file type, memory type) of ``dtype``, as h5py makes them for a new object."""
        key = (dtype, str(dtype.metadata))  # (object dtypes differ only in their metadata)
        got = self._types.get(key)
        if got is None:
            got = self._types[key] = (h5t.py_create(dtype, logical=True), h5t.py_create(dtype))
        return got

    def dcpl(self, chunks: tuple, shuffle: bool):
        key = (chunks, shuffle)
        plist = self._dcpls.get(key)
        if plist is None:
            # what h5py's create_dataset(chunks=..., compression="gzip", shuffle=...) sets
            plist = h5p.create(h5p.DATASET_CREATE)
            plist.set_chunk(chunks)
            if shuffle:
                plist.set_shuffle()
            assert schema.COMPRESSION == "gzip"
            plist.set_deflate(schema.COMPRESSION_LEVEL)
            plist.set_obj_track_times(False)
            self._dcpls[key] = plist
        return plist

    def recipe(self, dtype: np.dtype, tail: tuple, n: int):
        """(file type, memory type, dataspace, dcpl, vlen) of a new dataset of ``n`` rows."""
        key = (dtype, str(dtype.metadata), tail, n)
        got = self._recipes.get(key)
        if got is None:
            if len(self._recipes) >= self._MAX_RECIPES:
                self._recipes.clear()
            vlen = _is_vlen(dtype)
            rows = _chunk_rows(dtype, tail, n)
            shuffle = not vlen and dtype.kind in "iufc" and dtype.itemsize > 1
            ftype, mtype = self.types(dtype)
            space = h5s.create_simple((n, *tail), (h5s.UNLIMITED, *tail))
            chunks = (rows, *(tail if vlen else _chunk_tail(dtype, tail)))
            got = self._recipes[key] = (ftype, mtype, space, self.dcpl(chunks, shuffle), vlen)
        return got

    def attrs(self, oid, items) -> None:
        """New attributes on the new object ``oid``, as h5py's ``attrs[name] = value``
        writes them (strings: scalar variable-length UTF-8; numbers: scalar; arrays: 1-D)."""
        for name, value in items:
            if isinstance(value, str):
                data, dtype = np.array(value, dtype=STR), STR
            else:
                data = np.asarray(value, order="C")
                dtype = data.dtype
            ftype, mtype = self.types(dtype)
            space = self._scalar if data.ndim == 0 else h5s.create_simple(data.shape)
            attr = h5a.create(oid, name.encode(), ftype, space)
            attr.write(data, mtype=mtype)


def _create(out: _Out, state: _SeriesState, name: str, data, dtype: np.dtype,
            tail: tuple) -> None:
    """A new chunked, resizable, compressed dataset holding ``data`` (its first rows)."""
    n = len(data)
    ftype, mtype, space, dcpl, vlen = out.recipe(dtype, tail, n)
    dsid = h5d.create(state.gid, name.encode(), ftype, space, dcpl=dcpl)
    if n:
        if vlen:
            _write_vlen(dsid, dsid.get_space(), data, dtype)
        else:
            dsid.write(h5s.ALL, h5s.ALL, data, mtype=mtype)
    state.ids[name] = dsid
    state.lengths[name] = n


def _write_vlen(dsid, fspace, items: list, dtype: np.dtype) -> None:
    """Variable-length ``items`` (arrays of the base type) into the rows ``fspace`` selects:
    what h5py's ``dataset[a:b] = items`` writes, without the copy of every item it makes
    first (an image is then held once, not twice, besides HDF5's own copy)."""
    rows = np.empty(len(items), dtype=dtype)
    for i, item in enumerate(items):
        rows[i] = item
    dsid.write(h5s.create_simple((len(items),)), fspace, rows)


def _append(out: _Out, state: _SeriesState, name: str, data, dtype=None) -> None:
    if name not in state.lengths:
        if dtype is None:
            data = np.ascontiguousarray(data)
            _create(out, state, name, data, data.dtype, data.shape[1:])
        else:
            _create(out, state, name, data, np.dtype(dtype), ())
        return
    n = len(data)
    if n == 0:
        return
    dsid = state.ids.get(name)
    if dsid is None:
        dsid = state.ids[name] = h5d.open(state.gid, name.encode())
    old = state.lengths[name]
    if dtype is not None:   # variable-length: h5py converts the items
        dsid.set_extent((old + n,))
        fspace = dsid.get_space()
        fspace.select_hyperslab((old,), (n,))
        _write_vlen(dsid, fspace, data, dtype)
    else:
        data = np.ascontiguousarray(data)
        tail = data.shape[1:]
        dsid.set_extent((old + n, *tail))
        fspace = dsid.get_space()
        fspace.select_hyperslab((old, *(0 for _ in tail)), (n, *tail))
        dsid.write(h5s.create_simple((n, *tail)), fspace, data, mtype=out.types(data.dtype)[1])
    state.lengths[name] = old + n


def _is_uniform(chunk: TensorSeries):
    """(code, shape) when every point has one numeric dtype and shape, else None."""
    codes = chunk.dtypes
    code = int(codes[0])
    if code in (dt.DT_STRING, dt.DT_RAW_PROTO) or (codes != code).any():
        return None
    block = chunk.block
    shape = np.shape(chunk.tensors[0]) if block is None else block.shape[1:]
    if 0 in shape or len(shape) >= MAX_DENSE_DIMS or (
            block is None and any(np.shape(t) != shape for t in chunk.tensors)):
        return None  # (HDF5 chunks cannot have a zero dimension, nor datasets 33 of them)
    return code, shape


class _SeriesState:
    def __init__(self, name: str, gid, kind: str) -> None:
        self.name = name.encode()
        self.gid = gid                      # while open (see _Out.switch)
        self.kind = kind
        self.layout: str | None = None
        self.dense_key = None
        self.data_bytes = 0
        self.string_count = 0
        self.blob_count = 0
        self.lengths: dict[str, int] = {}   # every dataset of the series: its rows
        self.ids: dict = {}                 # those open now (see _Out)


def _start_run(parent: h5py.Group, name: str, run: Run) -> h5py.Group:
    g = parent.create_group(name)
    g.attrs["name"] = run.name
    if run.start_time is not None:
        g.attrs["start_time"] = np.float64(run.start_time)
    if run.records:
        _write_records(g.create_group(schema.RECORDS), run.records)
    return g


def _write_records(rec: h5py.Group, records) -> None:
    """The run's records, a slice at a time: a run may hold millions, kept out of memory
    (:class:`~tbconvert.formats.recordlog.RecordLog`) until here."""
    n = len(records)
    kind = rec.create_dataset("kind", shape=(n,), dtype=STR)
    step = rec.create_dataset("step", shape=(n,), dtype=np.int64)
    wall = rec.create_dataset("wall_time", shape=(n,), dtype=np.float64)
    payload = rec.create_dataset("payload", shape=(0,), maxshape=(None,), dtype=VLEN_BYTES,
                                 chunks=(schema.VLEN_CHUNK_ROWS,),
                                 compression=schema.COMPRESSION,
                                 compression_opts=schema.COMPRESSION_LEVEL)
    payload.resize(n, axis=0)
    at = 0
    for part in in_slices(records, schema.RECORD_ROWS):
        end = at + len(part)
        kind[at:end] = np.array([r.kind for r in part], dtype=object)
        step[at:end] = np.array([r.step for r in part], np.int64)
        wall[at:end] = np.array([r.wall_time for r in part], np.float64)
        payload[at:end] = _vlen([r.payload for r in part])
        at = end


def _add_chunk(sg: h5py.Group, states: dict, tags: list, chunk: Series, out: _Out) -> None:
    if isinstance(chunk, ScalarSeries):
        kind, extra = schema.KIND_SCALAR, chunk.values.dtype.name
    elif isinstance(chunk, BlobSequenceSeries):
        kind, extra = schema.KIND_BLOB_SEQUENCE, None
    else:
        kind, extra = schema.KIND_TENSOR, None
    key = (chunk.tag, kind, chunk.metadata, extra)
    state = states.get(key)
    if state is None:
        out.switch(None)
        j = str(len(tags))
        state = states[key] = _SeriesState(j, _new_series(out, j, chunk, kind), kind)
        tags.append(chunk.tag)
    out.switch(state)
    _append_chunk(out, state, chunk)


def _new_series(out: _Out, j: str, chunk: Series, kind: str):
    gid = out.new_group(j)
    md = chunk.metadata
    out.attrs(gid, (
        ("tag", chunk.tag),
        ("kind", kind),
        ("plugin_name", md.plugin_name),
        ("plugin_content", np.frombuffer(md.plugin_content, dtype=np.uint8)),
        ("display_name", md.display_name),
        ("description", md.description),
        ("data_class", np.int32(int(md.data_class))),
        ("data_class_name", DataClass(md.data_class).name.lower()),
    ))
    return gid


def _append_chunk(out: _Out, state: _SeriesState, chunk: Series) -> None:
    n = len(chunk)
    _append(out, state, "steps", chunk.steps)
    _append(out, state, "wall_times", chunk.wall_times)
    _append(out, state, "hidden", np.zeros(n, bool) if chunk.hidden is None else chunk.hidden)
    if state.kind == schema.KIND_SCALAR:
        values = chunk.values
        if values.dtype.kind != "b":
            values = values.astype(values.dtype.newbyteorder("<"), copy=False)
        _append(out, state, "values", values)
    elif state.kind == schema.KIND_BLOB_SEQUENCE:
        _append_blobs(out, state, chunk)
    else:
        _append_tensors(out, state, chunk)


def _append_blobs(out: _Out, state: _SeriesState, chunk: BlobSequenceSeries) -> None:
    if "blob_offsets" not in state.lengths:
        _append(out, state, "blob_offsets", np.zeros(1, np.int64))
    kept = []
    for k, b in enumerate(chunk.blobs):
        if b is not None and len(b) > large.LARGE_BLOB_BYTES:
            large.write(h5py.Group(state.gid), state.blob_count + k, b)
            out.large_blobs += 1
            b = b""
        kept.append(b"" if b is None else b)
    _append(out, state, "blobs", _vlen(kept), VLEN_BYTES)
    del kept
    _append(out, state, "blob_missing", np.array([b is None for b in chunk.blobs], dtype=bool))
    _append(out, state, "blob_offsets", chunk.offsets[1:] + state.blob_count)
    state.blob_count += len(chunk.blobs)


def _append_tensors(out: _Out, state: _SeriesState, chunk: TensorSeries) -> None:
    for t in chunk.tensors if chunk.block is None else chunk.tensors[:1]:
        if np.ndim(t) > budget.MAX_DIMS:
            raise UnsupportedError(
                f"{chunk.run!r}/{chunk.tag!r}: a tensor of {np.ndim(t)} dimensions (at most "
                f"{budget.MAX_DIMS} can be written or read back)")
    if not len(chunk):
        return   # (a series without points takes its layout at the end of the run)
    uniform = _is_uniform(chunk)
    if state.layout is None:
        state.layout = schema.LAYOUT_DENSE if uniform is not None else schema.LAYOUT_RAGGED
        if uniform is not None:
            state.dense_key = uniform
            out.attrs(state.gid, (("layout", state.layout),
                                  ("tensor_dtype", np.int32(uniform[0])),
                                  ("tensor_dtype_name", dt.NAMES[uniform[0]])))
        else:
            out.attrs(state.gid, (("layout", state.layout),))
    if state.layout == schema.LAYOUT_DENSE and uniform != state.dense_key:
        _to_ragged(out, state)
    if state.layout == schema.LAYOUT_DENSE:
        code = state.dense_key[0]
        if chunk.block is not None:
            stacked = chunk.block
        elif len(chunk.tensors) == 1:   # (a view: one large tensor is not copied)
            stacked = np.asarray(chunk.tensors[0])[np.newaxis]
        else:
            stacked = np.stack([np.asarray(t) for t in chunk.tensors])
        stacked = stacked.astype(dt.numpy_dtype(code), copy=False)
        _append(out, state, "values", stacked)
    else:
        _append_ragged(out, state, chunk.dtypes, chunk.tensors)


def _no_tensors(out: _Out, state: _SeriesState) -> None:
    """The tensors of a series that got no point: the ragged layout, empty."""
    out.switch(state)
    state.layout = schema.LAYOUT_RAGGED
    out.attrs(state.gid, (("layout", state.layout),))
    _append_ragged(out, state, np.zeros(0, np.int32), [])


def _append_ragged(out: _Out, state: _SeriesState, codes, tensors) -> None:
    if "data_offsets" not in state.lengths:
        _append(out, state, "data_offsets", np.zeros(1, np.int64))
        _append(out, state, "string_offsets", np.zeros(1, np.int64))
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
    _append(out, state, "dtypes", np.asarray(codes, dtype=np.int32))
    _append(out, state, "shapes", _vlen(shapes), VLEN_INT64)
    _append(out, state, "data", np.frombuffer(b"".join(data), dtype=np.uint8))
    _append(out, state, "data_offsets", data_off)
    _append(out, state, "strings", _vlen(strings), VLEN_BYTES)
    _append(out, state, "string_offsets", str_off)


def _to_ragged(out: _Out, state: _SeriesState) -> None:
    """A later chunk broke the uniform layout: move what was written to the ragged one."""
    s = h5py.Group(state.gid)
    state.ids.pop("values", None)
    del state.lengths["values"]
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
        _append_ragged(out, state, np.full(len(block), code, np.int32), list(block))
    del values
    del s["values"]
    del s
