"""Hdf5Reader: reads a tbconvert HDF5 archive slice by slice, one run at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from tbconvert import budget, sourcefiles
from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError, FormatError, TbconvertError, raise_if_exhausted
from tbconvert.formats.base import Options, Reader, checksum_failed
from tbconvert.formats.hdf5 import heaps, schema, staged
from tbconvert.formats.hdf5.audit import audit, check_dataset, check_dataset_id, check_regular_file
from tbconvert.formats.hdf5.seal import SealBroken, check_seal
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    RunData,
    RunRecord,
    ScalarSeries,
    TensorSeries,
    empty_series,
)
from tbconvert.report import Report, plural


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _str(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        return _str(value.item())
    if not isinstance(value, str):
        raise TypeError(f"expected a string attribute, got {type(value).__name__}")
    return value


def _offsets(s, name: str, n: int, total: int) -> np.ndarray:
    """An index of ``n + 1`` offsets that cut ``total`` items in order."""
    ds = s[name]
    check_dataset(ds, "iu", name)
    if ds.shape != (n + 1,):
        raise ValueError(f"{name} has shape {ds.shape}, expected ({n + 1},)")
    if int(ds[0]) != 0 or int(ds[n]) != total:
        raise ValueError(f"{name} does not index the {total} items in order")
    return _Window(ds, name, total)


class _Window:
    """Offsets read a window at a time (a series may hold millions of points); each window
    is checked to run in order within ``0..total``, and windows share their end points."""

    def __init__(self, ds, name: str, total: int) -> None:
        self.ds, self.name, self.total = ds, name, total

    def __call__(self, a: int, b: int) -> np.ndarray:
        """Offsets ``a..b`` (inclusive)."""
        off = self.ds[a:b + 1].astype(np.int64)
        if len(off) != b + 1 - a or (off < 0).any() or (off > self.total).any() \
                or (np.diff(off) < 0).any():
            raise ValueError(f"{self.name} does not index the {self.total} items in order")
        return off


# What h5py and the checks below raise on a damaged archive.
_DAMAGE = (OSError, KeyError, TypeError, ValueError, IndexError, RuntimeError)


def check_root(f: h5py.File, path: Path) -> None:
    fmt = f.attrs.get(schema.ATTR_FORMAT)
    if fmt is None or _str(fmt) != schema.FORMAT_NAME:
        raise CorruptDataError(f"{path}: not a tbconvert HDF5 archive (no {schema.ATTR_FORMAT} attribute)")
    version = f.attrs.get(schema.ATTR_VERSION)
    try:
        version = int(version)
    except (TypeError, ValueError):
        raise CorruptDataError(f"{path}: damaged archive (bad schema_version {version!r})") from None
    if version > schema.SCHEMA_VERSION:
        raise FormatError(
            f"{path}: written by a newer tbconvert (archive schema version {version}; this "
            f"version reads up to {schema.SCHEMA_VERSION}); upgrade tbconvert to read it")
    if version < 1:
        raise CorruptDataError(f"{path}: damaged archive (bad schema_version {version})")


_SERIES = schema.SERIES.encode()
_ALL = h5py.h5s.ALL
_mtypes: dict = {}


def _mtype(dtype: np.dtype):
    """h5py's memory type for ``dtype`` (made once per dtype)."""
    try:
        return _mtypes[dtype]
    except KeyError:
        return _mtypes.setdefault(dtype, h5py.h5t.py_create(dtype))


def _attr(oid, name: bytes):
    """``h5py.AttributeManager[name]``, the same value, without the high-level layer."""
    attr = h5py.h5a.open(oid, name)
    shape = attr.shape
    if shape is None:
        return h5py.Empty(attr.dtype)
    dtype = attr.dtype
    htype = _mtype(dtype)
    if dtype.subdtype is not None:
        subdtype, subshape = dtype.subdtype
        shape = attr.shape + subshape
        dtype = subdtype
    arr = np.zeros(shape, dtype=dtype, order="C")
    attr.read(arr, mtype=htype)
    string_info = h5py.h5t.check_string_dtype(dtype)
    if string_info and string_info.length is None:
        arr = np.array([b.decode("utf-8", "surrogateescape") for b in arr.flat],
                       dtype=dtype).reshape(arr.shape)
    if arr.ndim == 0:
        return arr[()]
    return arr


def _read_all(did, shape: tuple) -> np.ndarray:
    """A 1-D dataset's whole content, as ``ds[0:n]`` reads it (``shape``: ``did.shape``)."""
    dtype = did.dtype
    arr = np.empty(shape, dtype)
    if arr.size:
        did.read(_ALL, _ALL, arr, _mtype(dtype))
    return arr


_SCALAR_NAMES = (b"steps", b"wall_times", b"hidden", b"values")


def _fast_scalar(group, name: bytes, run: str) -> ScalarSeries | None:
    """Series ``name`` of the run's ``series`` group read whole, when it is a scalar series
    of at most READ_POINTS points that passes every check _open_series and _scalar_chunks
    make; None for anything else (read by the general path)."""
    s = h5py.h5g.open(group, name)
    if _str(_attr(s, b"kind")) != schema.KIND_SCALAR:
        return None
    tag = _str(_attr(s, b"tag"))
    md = Metadata(plugin_name=_str(_attr(s, b"plugin_name")),
                  plugin_content=np.asarray(_attr(s, b"plugin_content"), np.uint8).tobytes(),
                  display_name=_str(_attr(s, b"display_name")),
                  description=_str(_attr(s, b"description")),
                  data_class=DataClass(int(_attr(s, b"data_class"))))
    steps, walls, hidden, values = (h5py.h5d.open(s, k) for k in _SCALAR_NAMES)
    shape = steps.shape
    if type(shape) is not tuple or len(shape) != 1:
        return None
    n = shape[0]
    if not 0 < n <= schema.READ_POINTS:  # an empty series yields no chunk at all
        return None
    sd = steps.dtype
    if sd.kind not in "iu" or (sd.kind == "u" and sd.itemsize == 8):
        return None
    # (any series this path does not take, or takes with an error, is read again by the
    # general path, so the order of these checks does not change what is reported)
    if walls.shape != shape or hidden.shape != shape or values.shape != shape:
        return None
    check_dataset_id(steps, "iu", "steps", shape)
    check_dataset_id(walls, "f", "wall_times", shape)
    check_dataset_id(hidden, "b", "hidden", shape)
    check_dataset_id(values, "fiub", "values", shape)
    return ScalarSeries(run=run, tag=tag, metadata=md, steps=_read_all(steps, shape),
                        wall_times=_read_all(walls, shape), hidden=_read_all(hidden, shape),
                        values=_read_all(values, shape))


class Hdf5Reader(Reader):
    def __init__(self, path: Path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        self._file = self._fh = None
        check_regular_file(self.path)
        self._check_seal()
        try:
            self._fh = sourcefiles.open_binary(self.path)
            self._file = h5py.File(self._fh, "r")
            # each object is read once: a large metadata cache only holds memory (per series)
            staged.cap_metadata_cache(self._file)
        except (OSError, ValueError, RuntimeError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            self.close()
            raise CorruptDataError(
                f"{self.path}: not a readable HDF5 file (damaged or not HDF5: {_one_line(exc)})") from None
        try:
            check_root(self._file, self.path)
            audit(self._file, self.path)
            attrs = self._file.attrs
            get = lambda k: _str(attrs.get(k, ""))  # noqa: E731
            extra = budget.loads_json(get(schema.ATTR_EXPERIMENT_EXTRA) or "{}",
                                      f"{self.path}: damaged attribute {schema.ATTR_EXPERIMENT_EXTRA}")
            if not isinstance(extra, dict):
                raise CorruptDataError(f"{self.path}: damaged attribute "
                                       f"{schema.ATTR_EXPERIMENT_EXTRA} (not a JSON object)")
            self._experiment = Experiment(
                experiment_id=get("experiment_id"), name=get("experiment_name"),
                description=get("experiment_description"), create_time=get("experiment_create_time"),
                update_time=get("experiment_update_time"), extra=dict(extra))
            self._run_count = len(self._file[schema.RUNS])
        except TbconvertError:
            self.close()
            raise
        except _DAMAGE as exc:
            self.close()
            raise CorruptDataError(f"{self.path}: damaged archive ({_one_line(exc)})") from None

    def _check_seal(self) -> None:
        try:
            check_seal(self.path)
        except OSError as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            raise CorruptDataError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        except SealBroken as exc:
            checksum_failed(f"{self.path}: the archive is damaged ({exc})", self.options,
                            self.report, path=self.path, refused_because="; it was not opened, "
                            "because HDF5 can hang or crash on damaged files")
        try:
            endless = heaps.endless_collection(self.path)
        except OSError as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            raise CorruptDataError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        if endless is not None:
            raise CorruptDataError(f"{self.path}: damaged archive (the HDF5 heap at byte {endless} "
                                   "would make HDF5 loop forever); it was not opened")

    def experiment(self) -> Experiment:
        return self._experiment

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()

    def iter_runs(self) -> Iterator[RunData]:
        # A damaged run or series costs itself (reported), not the rest of the archive.
        for i in range(self._run_count):
            where = "/" + schema.run_path(i)
            try:
                g = self._file[schema.run_path(i)]
                run = self._run(g)
                count = len(g[schema.SERIES])
            except TbconvertError:
                raise
            except _DAMAGE as exc:
                self.report.add("damaged_run", f"{self.path}: damaged archive at {where} "
                                f"({_one_line(exc)}); the run was skipped", path=self.path)
                continue
            yield RunData(run=run, series=self._series_of(g, run.name, count, where))

    @staticmethod
    def _run(g: h5py.Group) -> Run:
        start = g.attrs.get("start_time")
        records = ()
        if schema.RECORDS in g:
            r = g[schema.RECORDS]
            for name, kinds_ in (("kind", "O"), ("step", "i"), ("wall_time", "f"), ("payload", "O")):
                check_dataset(r[name], kinds_, f"records/{name}")
                if r[name].ndim != 1 or r[name].shape != r["kind"].shape:
                    raise ValueError("the records' datasets differ in length")
            kinds = r["kind"].asstr()[()]
            steps, walls, payloads = r["step"][()], r["wall_time"][()], r["payload"][()]
            records = tuple(RunRecord(kind=str(k), step=int(s), wall_time=float(w),
                                      payload=np.asarray(p, np.uint8).tobytes())
                            for k, s, w, p in zip(kinds, steps, walls, payloads, strict=True))
        if start is not None and (np.shape(start) != () or np.asarray(start).dtype.kind not in "fiu"):
            raise ValueError("start_time is not a number")
        return Run(name=_str(g.attrs["name"]), start_time=None if start is None else float(start),
                   records=records)

    def _series_of(self, g: h5py.Group, run: str, count: int, where: str):
        group = None
        for j in range(count):
            spath = f"{where}/{schema.SERIES}/{j}"
            tag, n, done = None, None, 0
            # Small scalar series (most series of a sweep or a run of many tags) are read through
            # h5py's low-level API, all checks included; anything else, or anything the fast path
            # does not take as it is (damage included), is read by the path below, which reports
            # it exactly as it always did.
            try:
                if group is None:
                    group = h5py.h5g.open(g.id, _SERIES)
                fast = _fast_scalar(group, str(j).encode(), run)
            except _DAMAGE:
                fast = None
            if fast is not None:
                yield fast
                continue
            try:
                s = g[schema.SERIES][str(j)]
                tag = _str(s.attrs["tag"])
                n, gen = self._open_series(s, run, tag)
                for chunk in gen:
                    done += len(chunk)
                    yield chunk
            except TbconvertError:
                raise
            except _DAMAGE as exc:
                lost = "" if n is None else f"; {n - done} of its {plural(n, 'point')} skipped"
                self.report.add("damaged_series", f"{self.path}: damaged archive at {spath} "
                                f"({_one_line(exc)}){lost}", path=self.path, run=run, tag=tag,
                                count=1 if n is None else max(n - done, 1))

    def _open_series(self, s: h5py.Group, run: str, tag: str):
        """The series' point count and a generator of its chunks."""
        a = s.attrs
        kind = _str(a["kind"])
        if kind not in schema.KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        md = Metadata(plugin_name=_str(a["plugin_name"]),
                      plugin_content=np.asarray(a["plugin_content"], np.uint8).tobytes(),
                      display_name=_str(a["display_name"]),
                      description=_str(a["description"]),
                      data_class=DataClass(int(a["data_class"])))
        steps = s["steps"]
        if steps.ndim != 1:
            raise ValueError(f"steps has shape {steps.shape}")
        n = steps.shape[0]
        # steps are int64 when written; any other type would wrap or be truncated when read
        if steps.dtype.kind not in "iu" or (steps.dtype.kind == "u" and steps.dtype.itemsize == 8):
            raise ValueError(f"steps are {steps.dtype}, not integers that fit int64")
        check_dataset(steps, "iu", "steps")
        check_dataset(s["wall_times"], "f", "wall_times")
        check_dataset(s["hidden"], "b", "hidden")
        for k in ("wall_times", "hidden"):
            if s[k].shape != (n,):
                raise ValueError(f"{k} has shape {s[k].shape}, steps {n} entries")
        if kind == schema.KIND_SCALAR:
            gen = self._scalar_chunks(s, run, tag, md, n)
        elif kind == schema.KIND_BLOB_SEQUENCE:
            gen = self._blob_chunks(s, run, tag, md, n)
        elif _str(a["layout"]) == schema.LAYOUT_DENSE:
            gen = self._dense_chunks(s, run, tag, md, n)
        else:
            gen = self._ragged_chunks(s, run, tag, md, n)
        return n, gen

    @staticmethod
    def _common(s, run, tag, md, a, b) -> dict:
        return dict(run=run, tag=tag, metadata=md, steps=s["steps"][a:b],
                    wall_times=s["wall_times"][a:b], hidden=s["hidden"][a:b])

    def _scalar_chunks(self, s, run, tag, md, n):
        values = s["values"]
        check_dataset(values, "fiub", "values")
        if values.shape != (n,):
            raise ValueError(f"values has shape {values.shape}, expected ({n},)")
        if not n:   # a series kept without points (its tag and metadata)
            yield empty_series(ScalarSeries, run, tag, md, values.dtype)
        for a in range(0, n, schema.READ_POINTS):
            b = min(n, a + schema.READ_POINTS)
            yield ScalarSeries(**self._common(s, run, tag, md, a, b), values=values[a:b])

    def _dense_chunks(self, s, run, tag, md, n):
        values = s["values"]
        code = int(s.attrs["tensor_dtype"])
        storage = dt.numpy_dtype(code)
        check_dataset(values, storage.kind, "values")
        if values.dtype.itemsize != storage.itemsize or storage.kind == "O":
            raise ValueError(f"values are {values.dtype}, not {storage} of tensor_dtype {code}")
        if values.ndim < 1 or values.shape[0] != n:
            raise ValueError(f"values has {values.shape[0]} rows, expected {n}")
        row_bytes = max(1, storage.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
        step = max(1, schema.READ_BYTES // row_bytes)
        if not n:
            yield TensorSeries.of_block(**self._common(s, run, tag, md, 0, 0), code=code,
                                        block=values[0:0].astype(storage, copy=False))
        for a in range(0, n, step):
            b = min(n, a + step)
            block = values[a:b].astype(storage, copy=False)
            yield TensorSeries.of_block(**self._common(s, run, tag, md, a, b), code=code,
                                        block=block)

    def _ragged_chunks(self, s, run, tag, md, n):
        codes_ds, shapes_ds, data_ds = s["dtypes"], s["shapes"], s["data"]
        check_dataset(codes_ds, "i", "dtypes")
        check_dataset(shapes_ds, "O", "shapes")
        check_dataset(data_ds, "u", "data")
        check_dataset(s["strings"], "O", "strings")
        if codes_ds.shape != (n,) or shapes_ds.shape != (n,) or data_ds.ndim != 1:
            raise ValueError("ragged index lengths do not match the steps")
        data_off = _offsets(s, "data_offsets", n, data_ds.shape[0])
        str_off = _offsets(s, "string_offsets", n, s["strings"].shape[0])
        if not n:
            yield empty_series(TensorSeries, run, tag, md)
        a = 0
        while a < n:
            # as many points as fit in READ_BYTES (at least one)
            window = data_off(a, min(n, a + 65536))
            b = a + int(np.searchsorted(window, window[0] + schema.READ_BYTES, side="right"))
            b = max(a + 1, min(n, b - 1, a + 65536))
            d_off, s_off = window[:b - a + 1], str_off(a, b)
            codes = codes_ds[a:b]
            shapes = shapes_ds[a:b]
            data = data_ds[d_off[0]:d_off[-1]].tobytes()
            strings = s["strings"][s_off[0]:s_off[-1]] if s_off[-1] > s_off[0] else []
            tensors = []
            for i in range(b - a):
                code = int(codes[i])
                shape = tuple(int(d) for d in shapes[i])
                if len(shape) > budget.MAX_DIMS or any(d < 0 for d in shape):
                    # (reshape would take a -1 for "the rest", and make another tensor)
                    raise ValueError(f"a tensor shape {list(shape)} (negative, or more than "
                                     f"{budget.MAX_DIMS} dimensions)")
                if code == dt.DT_STRING:
                    elems = strings[s_off[i] - s_off[0]:s_off[i + 1] - s_off[0]]
                    tensors.append(dt.string_array(
                        (np.asarray(e, np.uint8).tobytes() for e in elems), shape))
                else:
                    lo, hi = d_off[i] - d_off[0], d_off[i + 1] - d_off[0]
                    arr = np.frombuffer(data[lo:hi], dtype=dt.numpy_dtype(code))
                    tensors.append(arr.reshape(shape))
            yield TensorSeries(**self._common(s, run, tag, md, a, b), dtypes=codes,
                               tensors=tuple(tensors))
            a = b

    def _blob_chunks(self, s, run, tag, md, n):
        blobs_ds, missing_ds = s["blobs"], s["blob_missing"]
        check_dataset(blobs_ds, "O", "blobs")
        check_dataset(missing_ds, "b", "blob_missing")
        if blobs_ds.ndim != 1 or missing_ds.shape != blobs_ds.shape:
            raise ValueError("blobs and blob_missing do not match")
        offsets = _offsets(s, "blob_offsets", n, blobs_ds.shape[0])
        if not n:
            yield empty_series(BlobSequenceSeries, run, tag, md)
        a = 0
        while a < n:
            b = min(n, a + 256)
            window = offsets(a, b)
            lo, hi = int(window[0]), int(window[-1])
            raw = blobs_ds[lo:hi] if hi > lo else []
            missing = missing_ds[lo:hi] if hi > lo else []
            blobs = tuple(None if m else np.asarray(r, np.uint8).tobytes()
                          for r, m in zip(raw, missing, strict=True))
            yield BlobSequenceSeries(**self._common(s, run, tag, md, a, b),
                                     offsets=window - lo, blobs=blobs)
            a = b
