"""Hdf5Reader: reads a tbconvert HDF5 archive slice by slice, one run at a time."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from tbconvert import budget, sourcefiles
from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError, FormatError, TbconvertError, raise_if_exhausted
from tbconvert.formats import packed, runrecords
from tbconvert.formats.base import Options, Reader, checksum_failed
from tbconvert.formats.hdf5 import heaps, large, schema, staged
from tbconvert.formats.hdf5.audit import (
    audit,
    check_dataset,
    check_dataset_id,
    check_regular_file,
)
from tbconvert.formats.hdf5.fields import (
    _DAMAGE,
    _attr_getter,
    _check,
    _Damaged,
    _dataset,
    _dtype_words,
    _expect_len,
    _int,
    _kind,
    _loss,
    _metadata,
    _point_count,
    _read,
    _reason,
    _shape_words,
    _show,
    _str,
    _vlen_bytes,
    _vlen_ints,
)
from tbconvert.formats.hdf5.seal import OpenForWriting, SealBroken, check_seal
from tbconvert.formats.recordlog import RecordLog
from tbconvert.model import (
    BlobSequenceSeries,
    Experiment,
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


def _offsets(s, name: str, n: int, total: int, items: str) -> _Window:
    """An index of ``n + 1`` offsets that cut ``total`` items in order (``items``: what
    they are, in words: "bytes of its data")."""
    ds = _dataset(s, name)
    _check(ds, name, "iu", "int64")
    _expect_len(ds, name, n + 1, f"(one more than its {plural(n, 'point')})")
    window = _Window(ds, name, total, items)
    ends = window.read(0, 1), window.read(n, n + 1)
    if int(ends[0][0]) != 0 or int(ends[1][0]) != total:
        raise window.out_of_order()
    return window


class _Window:
    """Offsets read a window at a time (a series may hold millions of points); each window
    is checked to run in order within ``0..total``, and windows share their end points."""

    def __init__(self, ds, name: str, total: int, items: str) -> None:
        self.ds, self.name, self.total, self.items = ds, name, total, items

    def read(self, a: int, b: int) -> np.ndarray:
        return _read(self.ds, self.name, a, b).astype(np.int64)

    def out_of_order(self) -> _Damaged:
        return _Damaged(f"its {self.name} does not index the {self.total} {self.items} in "
                        f"order (offsets should rise from 0 to {self.total})")

    def __call__(self, a: int, b: int) -> np.ndarray:
        """Offsets ``a..b`` (inclusive)."""
        off = self.read(a, b + 1)
        if len(off) != b + 1 - a or (off < 0).any() or (off > self.total).any() \
                or (np.diff(off) < 0).any():
            raise self.out_of_order()
        return off




def check_root(f: h5py.File, path: Path) -> None:
    fmt = f.attrs.get(schema.ATTR_FORMAT)
    if fmt is None or _str(fmt) != schema.FORMAT_NAME:
        raise CorruptDataError(f"{path}: not a tbconvert HDF5 archive (no {schema.ATTR_FORMAT} attribute)")
    version = f.attrs.get(schema.ATTR_VERSION)
    try:
        version = int(version)
    except (TypeError, ValueError):
        raise CorruptDataError(f"{path}: damaged archive (bad schema_version {version!r})") from None
    if version > schema.LATEST_VERSION:
        raise FormatError(
            f"{path}: written by a newer tbconvert (archive schema version {version}; this "
            f"version reads up to {schema.LATEST_VERSION}); upgrade tbconvert to read it")
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
    if _kind(_attr(s, b"kind")) != schema.KIND_SCALAR:
        return None
    tag = _str(_attr(s, b"tag"), "tag")
    md = _metadata(lambda k: _attr(s, k.encode()))   # (the checks of the general path)
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
        except OpenForWriting as exc:
            # not "damaged; restore it from a copy": the archive is likely whole once closed
            if not self.options.ignore_checksum:
                raise CorruptDataError(f"{self.path}: {exc}{exc.advice}") from None
            checksum_failed(f"{self.path}: {exc}", self.options, self.report, path=self.path)
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
                run = runrecords.checked(self._run(g), self.report, f"{self.path}: {where}")
                count = _series_count(g)
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
            # a slice at a time into a RecordLog: a run may hold millions of records
            records = RecordLog()
            for a in range(0, len(r["kind"]), schema.RECORD_ROWS):
                b = a + schema.RECORD_ROWS
                kinds = r["kind"].asstr()[a:b]
                steps, walls, payloads = r["step"][a:b], r["wall_time"][a:b], r["payload"][a:b]
                records.extend(RunRecord(kind=str(k), step=int(s), wall_time=float(w),
                                         payload=np.asarray(p, np.uint8).tobytes())
                               for k, s, w, p in zip(kinds, steps, walls, payloads, strict=True))
        if start is not None and (np.shape(start) != () or np.asarray(start).dtype.kind not in "fiu"):
            raise ValueError("start_time is not a number")
        return Run(name=_str(g.attrs["name"]), start_time=None if start is None else float(start),
                   records=records)

    def _series_of(self, g: h5py.Group, run: str, count: int, where: str):
        group = None
        # A tag is one series to TensorBoard, of one data class: a later series under an
        # earlier one's tag in another data class (an edited file) would be merged into it.
        classes: dict = {}

        def conflicts(chunk) -> bool:
            return classes.setdefault(chunk.tag, chunk.data_class) != chunk.data_class

        def told(chunk, spath, skipped: int) -> None:
            self.report.add("damaged_series", f"{self.path}: damaged archive at {spath} (its "
                            f"{chunk.data_class.name.lower()} points are under the tag of an "
                            f"earlier {classes[chunk.tag].name.lower()} series of the run); "
                            f"{plural(skipped, 'point')} skipped", path=self.path, run=run,
                            tag=chunk.tag, count=skipped)

        for j in range(count):
            spath = f"{where}/{schema.SERIES}/{j}"
            tag, n, done = None, None, 0
            # Small scalar series (most series of a sweep or a run of many tags) are read through
            # h5py's low-level API, all checks included; anything else, or anything the fast path
            # does not take as it is (damage included), is read by the path below, which reports
            # damage in words that name the part that is wrong.
            try:
                if group is None:
                    group = h5py.h5g.open(g.id, _SERIES)
                fast = _fast_scalar(group, str(j).encode(), run)
            except _DAMAGE:
                fast = None
            if fast is not None:
                if conflicts(fast):
                    told(fast, spath, len(fast))
                else:
                    yield fast
                continue
            s = None
            try:
                s = _series_group(g, j)
                tag = _str(_attr_getter(s.attrs)("tag"), "tag")
                n, gen = self._open_series(s, run, tag)
                skipped, last = 0, None
                for chunk in gen:
                    done += len(chunk)
                    if conflicts(chunk):
                        skipped, last = skipped + len(chunk), chunk
                    else:
                        yield chunk
                if last is not None:
                    told(last, spath, skipped)
            except TbconvertError:
                raise
            except _DAMAGE as exc:
                raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
                # What the series loses: its points (as many as what is left of it tells, when
                # the damage came before they were counted), under the tag the run lists for it
                # when its own is damaged.
                if n is None and s is not None:
                    n = _point_count(s)
                if tag is None:
                    tag = _listed_tag(g, j)
                self.report.add("damaged_series", f"{self.path}: damaged archive at {spath} "
                                f"({_reason(exc)}); {_loss(n, done)}", path=self.path, run=run,
                                tag=tag, count=0 if n is None else n - done)

    def _open_series(self, s: h5py.Group, run: str, tag: str):
        """The series' point count and a generator of its chunks. Each check names the part
        of the series that fails it and what it should be (:class:`_Damaged`)."""
        get = _attr_getter(s.attrs)
        kind = _kind(get("kind"))
        md = _metadata(get)
        steps = _dataset(s, "steps")
        if steps.ndim != 1:
            raise _Damaged(f"its steps hold {_shape_words(steps.shape)}, not one entry per point")
        n = steps.shape[0]
        # steps are int64 when written; any other type would wrap or be truncated when read
        if steps.dtype.kind == "u" and steps.dtype.itemsize == 8:
            raise _Damaged("its steps are uint64, not int64 (steps past 2**63 would wrap)")
        _check(steps, "steps", "iu", "int64")
        walls, hidden = _dataset(s, "wall_times"), _dataset(s, "hidden")
        _check(walls, "wall_times", "f", "float64")
        _check(hidden, "hidden", "b", "bool")
        _expect_len(walls, "wall_times", n)
        _expect_len(hidden, "hidden", n)
        base = (steps, walls, hidden)
        if kind == schema.KIND_SCALAR:
            gen = self._scalar_chunks(s, base, run, tag, md, n)
        elif kind == schema.KIND_BLOB_SEQUENCE:
            gen = self._blob_chunks(s, base, run, tag, md, n)
        else:
            layout = _str(get("layout"), "layout")
            if layout == schema.LAYOUT_DENSE:
                gen = self._dense_chunks(s, base, run, tag, md, n, get)
            elif layout == schema.LAYOUT_RAGGED:
                gen = self._ragged_chunks(s, base, run, tag, md, n)
            else:
                raise _Damaged(f"its layout attribute is {_show(layout)}, not "
                               f"{schema.LAYOUT_DENSE} or {schema.LAYOUT_RAGGED}")
        return n, gen

    @staticmethod
    def _common(base, run, tag, md, a, b) -> dict:
        steps, walls, hidden = base
        return dict(run=run, tag=tag, metadata=md, steps=_read(steps, "steps", a, b),
                    wall_times=_read(walls, "wall_times", a, b),
                    hidden=_read(hidden, "hidden", a, b))

    def _scalar_chunks(self, s, base, run, tag, md, n):
        values = _dataset(s, "values")
        _check(values, "values", "fiub", "numbers (float, integer or bool)")
        _expect_len(values, "values", n)
        if not n:   # a series kept without points (its tag and metadata)
            yield empty_series(ScalarSeries, run, tag, md, values.dtype)
        for a in range(0, n, schema.READ_POINTS):
            b = min(n, a + schema.READ_POINTS)
            yield ScalarSeries(**self._common(base, run, tag, md, a, b),
                               values=_read(values, "values", a, b))

    def _dense_chunks(self, s, base, run, tag, md, n, get):
        code = _int(get("tensor_dtype"), "tensor_dtype")
        try:
            storage = dt.numpy_dtype(code)
        except KeyError:
            raise _Damaged(f"its tensor_dtype attribute is {code}, not a TensorFlow dtype code "
                           "tbconvert knows") from None
        if storage.kind == "O":
            raise _Damaged(f"its layout is {schema.LAYOUT_DENSE}, but its tensor_dtype {code} "
                           f"({dt.NAMES.get(code, code)}) is only stored "
                           f"{schema.LAYOUT_RAGGED}")
        values = _dataset(s, "values")
        if values.dtype.kind != storage.kind or values.dtype.itemsize != storage.itemsize:
            raise _Damaged(f"its values are {_dtype_words(values.dtype)}, not {storage.name} "
                           f"(its tensor_dtype {code}, {dt.NAMES.get(code, code)})")
        _check(values, "values", storage.kind, storage.name)
        if values.ndim < 1 or values.shape[0] != n:
            raise _Damaged(f"its values hold {_shape_words(values.shape)}, not {n} rows like "
                           "its steps")
        row_bytes = max(1, storage.itemsize * math.prod(int(d) for d in values.shape[1:]))
        step = max(1, schema.READ_BYTES // row_bytes)
        if not n:
            yield TensorSeries.of_block(**self._common(base, run, tag, md, 0, 0), code=code,
                                        block=values[0:0].astype(storage, copy=False))
        for a in range(0, n, step):
            b = min(n, a + step)
            block = _read(values, "values", a, b).astype(storage, copy=False)
            yield TensorSeries.of_block(**self._common(base, run, tag, md, a, b), code=code,
                                        block=block)

    def _ragged_chunks(self, s, base, run, tag, md, n):
        codes_ds, shapes_ds = _dataset(s, "dtypes"), _dataset(s, "shapes")
        data_ds, strings_ds = _dataset(s, "data"), _dataset(s, "strings")
        _check(codes_ds, "dtypes", "i", "int32 (TensorFlow dtype codes)")
        _check(shapes_ds, "shapes", "O", "variable-length int64", vlen=_vlen_ints)
        _check(data_ds, "data", "u", "uint8")
        _check(strings_ds, "strings", "O", "variable-length uint8 (bytes)", vlen=_vlen_bytes)
        _expect_len(codes_ds, "dtypes", n)
        _expect_len(shapes_ds, "shapes", n)
        if data_ds.ndim != 1:
            raise _Damaged(f"its data hold {_shape_words(data_ds.shape)}, not one dimension of bytes")
        if strings_ds.ndim != 1:
            raise _Damaged(f"its strings hold {_shape_words(strings_ds.shape)}, not one "
                           "dimension of strings")
        data_off = _offsets(s, "data_offsets", n, data_ds.shape[0], "bytes of its data")
        str_off = _offsets(s, "string_offsets", n, strings_ds.shape[0], "entries of its strings")
        if not n:
            yield empty_series(TensorSeries, run, tag, md)
        a = 0
        while a < n:
            # as many points as fit in a chunk (at least one)
            window = data_off(a, min(n, a + 65536))
            b = a + next(packed.spans(window, schema.READ_BYTES))[1]
            d_off, s_off = window[:b - a + 1], str_off(a, b)
            codes = _read(codes_ds, "dtypes", a, b)
            shapes = _read(shapes_ds, "shapes", a, b)
            data = _read(data_ds, "data", d_off[0], d_off[-1]).view(np.uint8)
            data.flags.writeable = False   # (each point a view of it, as read-only as bytes)
            strings = (_read(strings_ds, "strings", s_off[0], s_off[-1])
                       if s_off[-1] > s_off[0] else [])
            tensors, point_shapes = [], []
            for i in range(b - a):
                code = int(codes[i])
                shape = tuple(int(d) for d in shapes[i])
                point_shapes.append(shape)
                if len(shape) > budget.MAX_DIMS or any(d < 0 for d in shape):
                    # (reshape would take a -1 for "the rest", and make another tensor)
                    raise _Damaged(f"its shapes give point {a + i} the tensor shape {list(shape)}, "
                                   f"not one of at most {budget.MAX_DIMS} dimensions of 0 or more")
                size = math.prod(shape)
                if code == dt.DT_STRING:
                    elems = strings[s_off[i] - s_off[0]:s_off[i + 1] - s_off[0]]
                    if len(elems) != size:
                        raise _Damaged(f"its string_offsets give point {a + i} "
                                       f"{plural(len(elems), 'string')}, not the {size} of its "
                                       f"tensor shape {list(shape)}")
                    tensors.append(dt.string_array(
                        (np.asarray(e, np.uint8).tobytes() for e in elems), shape))
                    continue
                try:
                    dtype = dt.numpy_dtype(code)
                except KeyError:
                    raise _Damaged(f"its dtypes give point {a + i} the code {code}, not a "
                                   "TensorFlow dtype code tbconvert knows") from None
                lo, hi = d_off[i] - d_off[0], d_off[i + 1] - d_off[0]
                if hi - lo != size * dtype.itemsize:
                    raise _Damaged(f"its data_offsets give point {a + i} "
                                   f"{plural(int(hi - lo), 'byte')}, not the "
                                   f"{size * dtype.itemsize} of its tensor shape {list(shape)} "
                                   f"of {dt.NAMES.get(code, code)}")
                tensors.append(packed.point(data, lo, hi, dtype, shape))
            common = self._common(base, run, tag, md, a, b)
            block = packed.block_of(data, codes, point_shapes)
            if block is not None:
                yield TensorSeries.of_block(**common, code=int(codes[0]), block=block)
            else:
                yield TensorSeries(**common, dtypes=codes, tensors=tuple(tensors))
            a = b

    def _blob_chunks(self, s, base, run, tag, md, n):
        blobs_ds, missing_ds = _dataset(s, "blobs"), _dataset(s, "blob_missing")
        _check(blobs_ds, "blobs", "O", "variable-length uint8 (bytes)", vlen=_vlen_bytes)
        _check(missing_ds, "blob_missing", "b", "bool")
        if blobs_ds.ndim != 1:
            raise _Damaged(f"its blobs hold {_shape_words(blobs_ds.shape)}, not one dimension "
                           "of blobs")
        _expect_len(missing_ds, "blob_missing", blobs_ds.shape[0], "like its blobs")
        offsets = _offsets(s, "blob_offsets", n, blobs_ds.shape[0], "entries of its blobs")
        if not n:
            yield empty_series(BlobSequenceSeries, run, tag, md)
        try:
            apart = large.indices(s)
        except _DAMAGE as exc:
            raise_if_exhausted(exc)
            raise _Damaged(str(exc) if isinstance(exc, ValueError) else
                           f"its {large.GROUP} cannot be read") from None
        a = 0
        while a < n:
            window = offsets(a, min(n, a + 256))
            lo = int(window[0])
            # blobs read a few at a time, up to the point where those read hold a chunk's
            # worth (a series of large images would otherwise be 256 of them at once)
            blobs: list = []
            size, b = 0, a
            while b < a + len(window) - 1 and (size < schema.READ_BYTES or b == a):
                start = lo + len(blobs)
                stop = min(int(window[-1]), start + _BLOBS_READ)
                if stop > start:
                    raw = _read(blobs_ds, "blobs", start, stop)
                    missing = _read(missing_ds, "blob_missing", start, stop)
                    blobs.extend(_blob_bytes(raw, missing))
                    raw = missing = None   # (while the chunk is used, a large blob is held once)
                    for k in range(start, stop) if apart else ():
                        if k in apart and blobs[k - lo] is not None:
                            blobs[k - lo] = self._large_blob(s, apart[k])
                    size += sum(len(x) for x in blobs[start - lo:] if x is not None)
                b = a + int(np.searchsorted(window, lo + len(blobs), side="right")) - 1
            cut = window[:b - a + 1] - lo
            yield BlobSequenceSeries(**self._common(base, run, tag, md, a, b),
                                     offsets=cut, blobs=blobs[:cut[-1]])
            a = b


    def _large_blob(self, s, name: str) -> bytes:
        try:
            return large.read(s, name, self._fh)
        except _DAMAGE as exc:
            raise_if_exhausted(exc)
            raise _Damaged(str(exc) if isinstance(exc, ValueError) else
                           f"its {large.GROUP}/{name} cannot be read") from None


# Blobs read from HDF5 at a time.
_BLOBS_READ = 64


def _blob_bytes(raw, missing) -> tuple:
    """The blobs of ``raw`` (h5py's arrays) as bytes, None where missing; each array let go
    once copied, so that a large blob is not held twice."""
    out = []
    for i, m in zip(range(len(raw)), missing, strict=True):
        out.append(None if m else np.asarray(raw[i], np.uint8).tobytes())
        raw[i] = None
    return tuple(out)


def _series_count(g: h5py.Group) -> int:
    """How many series run group ``g`` holds: as many as its series group has entries, or
    as its tags list where they list more (so a series group lost is told as damaged, not
    the run's last series left unread). Tags the file does not store are not counted."""
    count = len(g[schema.SERIES])
    try:
        tags = g.get(schema.TAGS)
        if isinstance(tags, h5py.Dataset) and tags.ndim == 1 and tags.shape[0] > count:
            check_dataset(tags, tags.dtype.kind, "tags")
            count = int(tags.shape[0])
    except _DAMAGE as exc:
        raise_if_exhausted(exc)
    return count


def _series_group(g: h5py.Group, j: int) -> h5py.Group:
    try:
        s = g[schema.SERIES].get(str(j))
    except _DAMAGE as exc:
        raise_if_exhausted(exc)
        raise _Damaged("its group cannot be opened (its HDF5 header is damaged)") from None
    if s is None:
        raise _Damaged(f"its group is missing from the run's {schema.SERIES} group")
    if not isinstance(s, h5py.Group):
        raise _Damaged("it is a dataset, not a group")
    return s


def _listed_tag(g: h5py.Group, j: int) -> str | None:
    """Series ``j``'s tag as the run's ``tags`` dataset lists it; None if it cannot tell."""
    try:
        tags = g.get(schema.TAGS)
        if (isinstance(tags, h5py.Dataset) and h5py.check_string_dtype(tags.dtype) is not None
                and tags.ndim == 1 and j < tags.shape[0]):
            return _str(tags.asstr()[j])
    except _DAMAGE as exc:
        raise_if_exhausted(exc)
    return None
