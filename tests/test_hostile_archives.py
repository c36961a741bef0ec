"""Hand-made and damaged Parquet and HDF5 archives: each is a clear one-line error naming the
file, or a reported skip costing only what is damaged; never a traceback, never silently
different data, never bytes of another file."""

from __future__ import annotations

import errno
import json
import os
import random
import struct
import time

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES
from test_archives_roundtrip import write_sample

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError, OutputError, TbconvertError, UnsupportedError
from tbconvert.formats.hdf5 import seal
from tbconvert.formats.hdf5 import sink as hdf5_sink
from tbconvert.formats.parquet import MARKER_FILE
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.digest import RowGroupDigest
from tbconvert.formats.parquet.writer import parquet_writer
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    ScalarSeries,
    TensorSeries,
)

SCAL = Metadata("scalars", b"", "", "", DataClass.SCALAR)
HIST = Metadata("histograms", b"\x08\x01", "", "", DataClass.TENSOR)
IMG = Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE)


def small_runs():
    """Two runs with each kind of series, small enough to flip every byte of."""
    out = []
    for r, name in enumerate(("train", "eval")):
        steps = np.arange(40)
        out.append((Run(name, 5.0 + r), [
            ScalarSeries(run=name, tag="loss", metadata=SCAL, steps=steps, wall_times=steps + 0.5,
                         hidden=(steps % 7 == 3), values=np.sin(steps).astype(np.float32)),
            ScalarSeries(run=name, tag="big", metadata=SCAL, steps=[0, 1], wall_times=[0, 1],
                         hidden=None, values=np.array([2**62 + 1, -5], np.int64)),
            TensorSeries(run=name, tag="hist", metadata=HIST, steps=[0, 1, 2], wall_times=[0, 1, 2],
                         hidden=None, dtypes=[dt.DT_DOUBLE, dt.DT_DOUBLE, dt.DT_STRING],
                         tensors=(np.arange(6.0).reshape(2, 3), np.ones((1, 2)),
                                  dt.string_array([b"a", b"bc"], (2,)))),
            BlobSequenceSeries.from_sequences(run=name, tag="img", metadata=IMG, steps=[0, 1],
                                              wall_times=[0, 1], hidden=None,
                                              sequences=[[b"png1", None], [b"x" * 30]]),
        ]))
    return out


def snapshot(path, **kw):
    """("error", message) / ("reported", kinds) / ("ok", every value read, as bytes)."""
    try:
        loaded = tbconvert.read(path, restarts="keep-all", **kw)
    except TbconvertError as exc:
        assert "\n" not in str(exc) and str(path.name) in str(exc), str(exc)
        return "error", str(exc)
    lost = [i for i in loaded.report.issues if i.lost]
    if lost:
        for i in lost:
            assert path.name in i.message, i.message
        return "reported", sorted({i.kind for i in lost})
    out = [repr(loaded.experiment)]
    for name, run in loaded.runs.items():
        out.append(repr(run))
        for tag, c in loaded.series[name].items():
            out.append((name, tag, repr(c.metadata), c.steps.tobytes(), c.wall_times.tobytes(),
                        None if c.hidden is None else c.hidden.tobytes(), type(c).__name__))
            if isinstance(c, ScalarSeries):
                out.append((c.values.dtype.str, c.values.tobytes()))
            elif isinstance(c, TensorSeries):
                out.append((c.dtypes.tobytes(), [(t.dtype.str, t.shape, t.tolist()) for t in c.tensors]))
            else:
                out.append((c.offsets.tobytes(), c.blobs))
    return "ok", out


def _flip_check(src, positions, tmp_path):
    data = src.read_bytes()
    base = snapshot(src)
    assert base[0] == "ok"
    dst = tmp_path / ("flipped" + src.suffix)
    outcomes = {"ok": 0, "error": 0, "reported": 0}
    for pos in positions:
        damaged = bytearray(data)
        damaged[pos] ^= 1 << (pos % 8)
        dst.write_bytes(bytes(damaged))
        got = snapshot(dst)
        if got[0] == "ok":
            assert got == base, f"byte {pos} flipped: different data read without a word"
        outcomes[got[0]] += 1
    return outcomes


# ------------------------------------------------------------------ Parquet: bit flips


def _chunk_range(path, column, group=0):
    rg = pq.ParquetFile(path).metadata.row_group(group)
    col = next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == column)
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    return start, col.total_compressed_size


def test_flips_in_the_page_header_of_the_hidden_column_are_caught(tmp_path):
    """Page checksums do not cover page headers: before, one flipped bit there read every
    point as gone (0 points, exit 0)."""
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    start, _ = _chunk_range(path, "hidden")
    outcomes = _flip_check(path, range(start, start + 24), tmp_path)
    assert outcomes["reported"] + outcomes["error"] > 0


def test_seeded_byte_flips_are_harmless_or_reported(tmp_path):
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    size = path.stat().st_size
    footer = size - 8 - struct.unpack("<I", path.read_bytes()[-8:-4])[0]
    rng = random.Random(1234)
    # every page header and page of the body; a sample of the footer
    positions = list(range(4, footer, 3)) + rng.sample(range(footer, size), 150)
    outcomes = _flip_check(path, positions, tmp_path)
    assert outcomes["reported"] + outcomes["error"] > len(positions) // 2


def test_a_damaged_footer_schema_is_refused_not_a_crash(tmp_path):
    """A flipped repetition type made Arrow abort the whole process while reading."""
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    data = bytearray(path.read_bytes())
    at = data.rindex(b"\x06hidden\x00\x15\x0c%\x00")
    data[at + len(b"\x06hidden\x00\x15\x0c%")] = 0x02   # REQUIRED -> OPTIONAL
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match="x.parquet: damaged archive: its Parquet schema"):
        tbconvert.read(path)


# ------------------------------------------------------------------ Parquet: hand-made


def _rewrite(path, *, meta_fn=None, table_fn=None, schema=None):
    """Rewrite an archive with tbconvert's writer settings, its JSON changed by ``meta_fn`` and
    its rows by ``table_fn``; every checksum recomputed, as a careful forger would."""
    pf = pq.ParquetFile(path)
    meta = json.loads(pf.metadata.metadata[S.METADATA_KEY])
    tables = [pf.read_row_group(i) for i in range(pf.metadata.num_row_groups)]
    pf.close()
    if table_fn:
        tables = [table_fn(t) for t in tables]
    groups = []
    for t in tables:
        d = RowGroupDigest(S.COLUMNS)
        d.update(t)
        groups.append(d.to_json())
    meta[S.ROW_GROUPS_KEY] = groups
    if meta_fn:
        meta = meta_fn(meta)
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    import hashlib
    if schema is None:
        w = parquet_writer(str(path))
        for t in tables:
            w.write_table(t.cast(S.SCHEMA), row_group_size=max(t.num_rows, 1))
    else:
        w = pq.ParquetWriter(str(path), schema, store_schema=False)
        for t in tables:
            w.write_table(t.cast(schema))
    w.add_key_value_metadata({S.METADATA_KEY: raw,
                              S.DIGEST_KEY: hashlib.sha256(raw).hexdigest().encode()})
    w.close()
    return path


def _one_line_error(path, match):
    with pytest.raises(TbconvertError, match=match) as info:
        tbconvert.read(path)
    msg = str(info.value)
    assert "\n" not in msg and path.name in msg, msg
    return msg


@pytest.mark.parametrize("edit,match", [
    (lambda m: {**m, "runs": [[1]]}, r"runs\[0\] is not an object"),
    (lambda m: {**m, "series": "x"}, "must be lists"),
    (lambda m: {**m, "series": [{**m["series"][0], "run": float("inf")}] + m["series"][1:]},
     r"series\[0\]\.run is not an int"),
    (lambda m: {**m, "series": [{**m["series"][0], "run": True}] + m["series"][1:]},
     r"series\[0\]\.run is not an int"),
    (lambda m: {**m, "series": [{**m["series"][0], "value_dtype": "V7"}] + m["series"][1:]},
     "value_dtype is 'V7', not a scalar dtype"),
    (lambda m: {**m, "series": [{**m["series"][0], "plugin_content": "%%"}] + m["series"][1:]},
     "not base64"),
    (lambda m: {**m, "experiment": {"name": 5}}, r"experiment\.name is not a str"),
    (lambda m: {**m, "runs": [{**m["runs"][0], "records": [{"kind": "x", "step": 1e3,
                                                            "wall_time": 1, "payload": ""}]}]
                + m["runs"][1:]}, r"step is not an int"),
    (lambda m: {**m, "runs": [{**m["runs"][0], "records": [{"kind": "x", "step": 2**70,
                                                            "wall_time": 1, "payload": ""}]}]
                + m["runs"][1:]}, r"step is 1180591620717411303424, outside int64"),
    (lambda m: {**m, S.ROW_GROUPS_KEY: [{"rows": -1, "crc32c": {}}]}, "row_groups"),
    (lambda m: b'{"format": "tbconvert-parquet", "schema_version": 1, "x": '
     + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
])
def test_wrong_types_in_the_json_metadata(tmp_path, edit, match):
    path = _rewrite(write_sample(tmp_path / "x.parquet", runs=small_runs()), meta_fn=edit)
    _one_line_error(path, match)


def _set_column(table, name, values, type_=None):
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(name).name,
                            pa.array(values, type_ or table.schema.field(name).type))


def _damage_rows(tmp_path, column, fn, series_tag, type_=None):
    """Change ``column`` in the rows of the series ``series_tag`` of run "train"; reading then
    costs exactly those rows (reported), every other series is read."""
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    whole = tbconvert.read(path, restarts="keep-all")

    def table_fn(t):
        rows = t.to_pylist()
        values = [fn(r[column]) if (r["run"], r["tag"]) == ("train", series_tag) else r[column]
                  for r in rows]
        return _set_column(t, column, values, type_)
    _rewrite(path, table_fn=table_fn)
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_points" and (issue.run, issue.tag) == ("train", series_tag)
    assert "x.parquet" in issue.message
    assert series_tag not in loaded.series["train"]
    for run, tags in whole.series.items():
        for tag in tags:
            if (run, tag) != ("train", series_tag):
                np.testing.assert_array_equal(loaded.series[run][tag].steps, tags[tag].steps)
    return issue


def test_empty_tensor_content_on_a_scalar(tmp_path):
    issue = _damage_rows(tmp_path, "tensor_content", lambda v: b"" if v is not None else v, "big")
    assert "exact value of 0 bytes" in issue.message


def test_unknown_tensor_dtype(tmp_path):
    issue = _damage_rows(tmp_path, "tensor_dtype", lambda v: "float128", "hist",
                         type_=pa.string())
    assert "unknown tensor_dtype 'float128'" in issue.message


def test_a_row_2_to_the_40_wide(tmp_path):
    issue = _damage_rows(tmp_path, "tensor_shape", lambda v: [2**40] if v is not None else v, "hist")
    assert "holds" in issue.message


def test_a_string_tensor_with_too_few_elements(tmp_path):
    issue = _damage_rows(tmp_path, "tensor_strings", lambda v: [b"a"] if v is not None else v,
                         "hist")
    assert "a string tensor of shape [2] holds 1 elements" in issue.message


@pytest.mark.parametrize("column,type_", [("series", pa.string()), ("blobs", pa.string()),
                                          ("step", pa.float64())])
def test_a_column_of_the_wrong_type(tmp_path, column, type_):
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    schema = pa.schema([pa.field(f.name, type_ if f.name == column else f.type, f.nullable)
                        for f in S.SCHEMA])

    def table_fn(t):
        return _set_column(t, column, [None if v is None else str(v) if type_ == pa.string()
                                       else float(v) for v in t.column(column).to_pylist()],
                           type_).cast(schema)
    _rewrite(path, table_fn=table_fn, schema=schema)
    _one_line_error(path, "damaged archive")


def test_a_point_larger_than_a_row_group(tmp_path, monkeypatch):
    """A point over the row-group cap used to make the writer recurse for ever."""
    monkeypatch.setattr(S, "ROW_GROUP_BYTES", 1 << 20)
    big = np.arange(3 << 18, dtype=np.float32)          # 3 MiB
    runs = [(Run("r"), [TensorSeries(run="r", tag="t", metadata=HIST, steps=[0, 1, 2],
                                     wall_times=[0, 1, 2], hidden=None, dtypes=[dt.DT_FLOAT] * 3,
                                     tensors=(np.ones(3, np.float32), big, big[:10]))])]
    path = write_sample(tmp_path / "x.parquet", runs=runs)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 2
    got = tbconvert.read(path, restarts="keep-all").series["r"]["t"]
    np.testing.assert_array_equal(got.tensors[1], big)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["x.parquet", "x.h5"])
def test_a_72_mib_tensor_round_trips(tmp_path, name):
    big = np.arange(18 << 20, dtype=np.float32)          # 72 MiB
    runs = [(Run("r"), [TensorSeries(run="r", tag="graph", metadata=HIST, steps=[0, 1],
                                     wall_times=[0, 1], hidden=None, dtypes=[dt.DT_FLOAT] * 2,
                                     tensors=(big, big[:5]))])]
    path = write_sample(tmp_path / name, runs=runs)
    got = tbconvert.read(path, restarts="keep-all")
    assert not got.report.issues
    np.testing.assert_array_equal(got.series["r"]["graph"].tensors[0], big)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    for name in ("x.parquet", "x.h5"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        t0 = time.monotonic()
        with pytest.raises(TbconvertError, match="not a regular file"):
            tbconvert.read(fifo, format="parquet" if name.endswith("parquet") else "hdf5")
        assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------ HDF5: hand-made


def _reseal(path):
    fd = os.open(path, os.O_RDWR)
    try:
        seal.write_seal(fd)
    finally:
        os.close(fd)


def _edit_h5(tmp_path, fn, name="x.h5"):
    path = write_sample(tmp_path / name, runs=small_runs())
    with h5py.File(path, "a") as f:
        fn(f)
    _reseal(path)
    return path


def _replace(f, where, **kw):
    del f[where]
    f.create_dataset(where, **kw)


def test_external_storage_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"root:x:0:0:secret\n" * 4)

    def fn(f):
        n = f["runs/0/series/0/steps"].shape[0]
        _replace(f, "runs/0/series/0/hidden", shape=(n,), dtype="u1",
                 external=[(str(secret), 0, n)])
    path = _edit_h5(tmp_path, fn)
    msg = _one_line_error(path, "external storage")
    assert "/runs/0/series/0/hidden" in msg
    out = tmp_path / "out.csv"
    from tbconvert.cli import main
    assert main(["convert", str(path), str(out)]) == 4
    assert not out.exists()


def test_links_and_virtual_datasets_are_refused(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as g:
        g["steps"] = np.arange(40)

    def external_link(f):
        del f["runs/0/series/0/steps"]
        f["runs/0/series/0/steps"] = h5py.ExternalLink(str(other), "/steps")

    def soft_link(f):
        del f["runs/0/series/0/steps"]
        f["runs/0/series/0/steps"] = h5py.SoftLink("/runs/1/series/0/steps")

    def virtual(f):
        layout = h5py.VirtualLayout(shape=(40,), dtype="i8")
        layout[:] = h5py.VirtualSource(str(other), "steps", shape=(40,))
        del f["runs/0/series/0/steps"]
        f["runs/0/series/0"].create_virtual_dataset("steps", layout)

    for fn, what in ((external_link, "an external link"), (soft_link, "a soft link"),
                     (virtual, "a virtual dataset")):
        path = _edit_h5(tmp_path, fn, name=f"{fn.__name__}.h5")
        _one_line_error(path, what)


def _only_series_damaged(path, match):
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and "/runs/0/series/0" in issue.message
    assert match in issue.message, issue.message
    assert loaded.series["train"].keys() == {"big", "hist", "img"}
    assert loaded.series["eval"].keys() == {"loss", "big", "hist", "img"}


def test_uint64_and_float_steps_are_refused_not_wrapped(tmp_path):
    path = _edit_h5(tmp_path, lambda f: _replace(
        f, "runs/0/series/0/steps", data=np.arange(40, dtype=np.uint64) + np.uint64(2**63)))
    _only_series_damaged(path, "steps are uint64")
    path = _edit_h5(tmp_path, lambda f: _replace(
        f, "runs/0/series/0/steps", data=np.arange(40) + 0.5), name="y.h5")
    _only_series_damaged(path, "steps are float64")


@pytest.mark.parametrize("shape", [[-1, 3], [-1], [1] * 40])
def test_a_ragged_tensor_shape_that_is_negative_or_too_deep_costs_its_series(tmp_path, shape):
    # reshape would read -1 as "the rest": a (2, 3) tensor would come back as another shape
    def fn(f):
        shapes = f["runs/0/series/2/shapes"]
        first = shapes[()]
        first[0] = np.array(shape, np.int64)
        _replace(f, "runs/0/series/2/shapes", data=first, dtype=shapes.dtype)
    path = _edit_h5(tmp_path, fn)
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and "/runs/0/series/2" in issue.message, issue.message
    assert "tensor shape" in issue.message and "hist" not in loaded.series["train"]
    assert loaded.series["eval"]["hist"].tensors[0].shape == (2, 3)


def test_points_declared_but_never_written(tmp_path):
    def fn(f):
        for name, dtype in (("steps", "i8"), ("wall_times", "f8"), ("hidden", "?"), ("values", "f4")):
            _replace(f, f"runs/0/series/0/{name}", shape=(2**40,), dtype=dtype,
                     chunks=(1 << 16,), maxshape=(None,))
    path = _edit_h5(tmp_path, fn)
    t0 = time.monotonic()
    _only_series_damaged(path, "declares")
    assert time.monotonic() - t0 < 10


def test_deeply_nested_experiment_extra(tmp_path):
    path = _edit_h5(tmp_path, lambda f: f.attrs.__setitem__(
        "experiment_extra", "[" * 100_000 + "]" * 100_000))
    _one_line_error(path, "nested")
    path = _edit_h5(tmp_path, lambda f: f.attrs.__setitem__("experiment_extra", "[[1, 2]]"),
                    name="y.h5")
    _one_line_error(path, "not a JSON object")


@pytest.mark.slow
def test_seeded_byte_flips_in_an_hdf5_archive_read_with_ignore_checksum(tmp_path):
    """With the seal ignored, damage found by HDF5 or by the checks costs a series or run, or
    the file; what is read is what was written, or reported."""
    path = write_sample(tmp_path / "x.h5", runs=small_runs())
    data = path.read_bytes()
    base = snapshot(path)
    rng = random.Random(7)
    dst = tmp_path / "f.h5"
    for pos in rng.sample(range(seal.USERBLOCK, len(data)), 120):
        damaged = bytearray(data)
        damaged[pos] ^= 1 << (pos % 8)
        dst.write_bytes(bytes(damaged))
        assert snapshot(dst)[0] == "error"         # the seal refuses it
        got = snapshot(dst, ignore_checksum=True)
        # "reported" at least: ignore_checksum itself reports damaged_archive
        assert got[0] in ("error", "reported"), pos
    assert base[0] == "ok"


# ------------------------------------------------------------------ HDF5: writing


def _write_h5(tmp_path, runs, experiment=Experiment()):
    return write_sample(tmp_path / "w.h5", experiment=experiment, runs=runs)


def test_nul_in_the_experiment_name_is_a_clear_error(tmp_path):
    with pytest.raises(UnsupportedError, match="experiment's name holds a NUL"):
        _write_h5(tmp_path, small_runs(), Experiment(name="a\x00b"))
    assert not (tmp_path / "w.h5").exists()


def test_32_dimensional_tensors(tmp_path):
    t32 = np.ones((1,) * 32, np.float32)
    runs = [(Run("r"), [TensorSeries(run="r", tag="t", metadata=HIST, steps=[0, 1],
                                     wall_times=[0, 1], hidden=None, dtypes=[dt.DT_FLOAT] * 2,
                                     tensors=(t32, t32 * 2))])]
    path = _write_h5(tmp_path, runs)
    got = tbconvert.read(path, restarts="keep-all").series["r"]["t"]
    assert got.tensors[1].shape == (1,) * 32 and got.tensors[1].sum() == 2
    t33 = np.ones((1,) * 33, np.float32)
    runs = [(Run("r"), [TensorSeries(run="r", tag="t", metadata=HIST, steps=[0], wall_times=[0],
                                     hidden=None, dtypes=[dt.DT_FLOAT], tensors=(t33,))])]
    path.unlink()
    with pytest.raises(UnsupportedError, match="33 dimensions"):
        _write_h5(tmp_path, runs)


def test_a_full_disk_says_the_disk_is_full(tmp_path, monkeypatch):
    """Once a write fails, HDF5 reads back zeros and fails in its gzip filter; the error
    raised is the full disk, not HDF5's."""
    real = os.pwrite
    budget_left = [400_000]

    def pwrite(fd, data, offset):
        budget_left[0] -= len(data)
        if budget_left[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)
    monkeypatch.setattr(hdf5_sink.os, "pwrite", pwrite)
    rng = np.random.default_rng(0)
    chunks = [ScalarSeries(run="r", tag=f"t{k}", metadata=SCAL, steps=np.arange(50_000),
                           wall_times=np.arange(50_000.0), hidden=None,
                           values=rng.random(50_000)) for k in range(20)]
    with pytest.raises(OutputError, match="disk is full"):
        _write_h5(tmp_path, [(Run("r"), chunks)])
    assert list(tmp_path.iterdir()) == []


def test_a_dense_hdf5_row_2_to_the_40_wide(tmp_path):
    def fn(f):
        s = f["runs/0/series/2"]        # "hist": ragged in small_runs; make it dense
        assert s.attrs["tag"] == "hist"
        for name in ("dtypes", "shapes", "data", "data_offsets", "strings", "string_offsets"):
            del s[name]
        s.attrs["layout"] = "dense"
        s.attrs["tensor_dtype"] = np.int32(dt.DT_DOUBLE)
        s.create_dataset("values", shape=(3, 2**40), dtype="f8", chunks=(1, 1 << 16))
    path = _edit_h5(tmp_path, fn)
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and "declares" in issue.message
    assert "hist" not in loaded.series["train"] and "hist" in loaded.series["eval"]


def test_wrong_types_in_a_dataset_marker(tmp_path):
    out = tmp_path / "dataset"
    write_sample(out, fmt="parquet", runs=small_runs())
    marker_path = out / MARKER_FILE
    marker = json.loads(marker_path.read_text())
    marker["experiment"] = {"name": ["x"]}
    del marker[S.MARKER_DIGEST]
    marker[S.MARKER_DIGEST] = S.marker_digest(marker)
    marker_path.write_text(json.dumps(marker))
    with pytest.raises(CorruptDataError, match=r"_tbconvert.json: damaged \(experiment.name"):
        tbconvert.read(out)
    marker_path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CorruptDataError, match="_tbconvert.json: damaged: JSON nested"):
        tbconvert.read(out, format="parquet")


@pytest.mark.parametrize("series,name", [(3, "blob_offsets"), (2, "data_offsets"),
                                         (2, "string_offsets")])
def test_offsets_out_of_order_cost_their_series(tmp_path, series, name):
    def fn(f):
        ds = f[f"runs/0/series/{series}/{name}"]
        off = ds[()]
        off[1] = off[-1] + 1          # past the end, and then going back
        ds[...] = off
    path = _edit_h5(tmp_path, fn)
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and f"{name} does not index" in issue.message
    assert len(loaded.series["train"]) == 3 and len(loaded.series["eval"]) == 4


def test_a_row_group_larger_than_written_is_checked_then_read_again(tmp_path, monkeypatch):
    """Row groups over the cap (from elsewhere) are not held in memory: checked in one pass,
    decoded in a second; damage is still found before any of it is used."""
    path = write_sample(tmp_path / "x.parquet", runs=small_runs())
    base = snapshot(path)
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 10)
    assert snapshot(path) == base
    start, _ = _chunk_range(path, "hidden")
    data = bytearray(path.read_bytes())
    data[start + 3] ^= 0x08
    path.write_bytes(bytes(data))
    got = snapshot(path)
    assert got[0] in ("reported", "error")


def test_a_heap_record_that_would_make_hdf5_loop_is_refused(tmp_path):
    """libhdf5 walks a global heap collection by its records' sizes and never moves past a
    free-space record of size 0: a forged archive (sealed anew) would hang the reader inside
    the library. Refused before HDF5 opens it, with one line (a timeout, not a hang, if not)."""
    import subprocess
    import sys
    path = tmp_path / "a.h5"
    tbconvert.convert(FIXTURES / "torch_logdir", path)
    data = bytearray(path.read_bytes())
    at = data.find(b"GCOL", seal.USERBLOCK)
    assert at > 0
    struct.pack_into("<HHIQ", data, at + 16, 0, 0, 0, 0)   # the first record: free, 0 bytes
    path.write_bytes(bytes(data))
    fd = os.open(path, os.O_RDWR)
    try:
        seal.write_seal(fd)
    finally:
        os.close(fd)
    code = ("import sys, tbconvert\n"
            "try:\n    tbconvert.read(sys.argv[1])\n"
            "except tbconvert.TbconvertError as exc:\n    print(type(exc).__name__, exc)\n")
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"CorruptDataError {path}: damaged archive (the HDF5 heap at byte "
                               f"{at} would make HDF5 loop forever)"), p.stdout
    # every archive tbconvert writes passes the check
    from tbconvert.formats.hdf5 import heaps
    for name in ("torch_logdir", "tensorboardx_logdir", "tf2_logdir"):
        tbconvert.convert(FIXTURES / name, tmp_path / f"{name}.h5")
        assert heaps.endless_collection(tmp_path / f"{name}.h5") is None


def test_the_heap_scan_finds_a_looping_record_in_any_window(tmp_path, monkeypatch):
    """The scan maps the file a window at a time: a looping collection is found wherever it
    lies, also with its signature across two windows or its records past the window's end."""
    from tbconvert.formats.hdf5 import heaps
    record = struct.pack("<HHIQ", 0, 0, 0, 0)
    for page in (heaps._PAGE, 2 * heaps._PAGE):
        monkeypatch.setattr(heaps, "_WINDOW", page)
        for lead in (0, page - 2, page - 4, page - 20, 3 * page + 5):
            data = bytearray(b"\xff" * (5 * page))
            data[lead:lead + 16] = b"GCOL\x01\0\0\0" + struct.pack("<Q", 4096)
            data[lead + 16 + 32:lead + 16 + 48] = record
            # two ordinary objects (index 1, 8 bytes each) before the free one
            struct.pack_into("<HHIQ", data, lead + 16, 1, 0, 0, 0)
            struct.pack_into("<HHIQ", data, lead + 32, 2, 0, 0, 0)
            path = tmp_path / f"{page}_{lead}.bin"
            path.write_bytes(bytes(data))
            assert heaps.endless_collection(path) == lead, (page, lead)
            data[lead + 16 + 32] = 3   # no longer free space: nothing loops
            path.write_bytes(bytes(data))
            assert heaps.endless_collection(path) is None, (page, lead)


def test_a_damaged_footer_of_an_archive_of_the_older_layout_is_refused_not_a_crash(tmp_path):
    """An archive without per-row-group digests (the older layout, which any Parquet writer
    may have written again) whose footer schema is damaged: Arrow aborts the process on
    some such schemas, so the columns are checked against what tbconvert writes first."""
    import hashlib

    from helpers import run_tbconvert
    orig = tmp_path / "orig.parquet"
    tbconvert.convert(FIXTURES / "tf2_logdir", orig)
    table = pq.read_table(orig)
    meta = json.loads(table.schema.metadata[b"tbconvert"])
    meta.pop("row_groups")
    raw = json.dumps(meta).encode()
    table = table.replace_schema_metadata(
        {b"tbconvert": raw, b"tbconvert.sha256": hashlib.sha256(raw).hexdigest().encode()})
    plain = tmp_path / "plain.parquet"
    pq.write_table(table, plain)
    assert tbconvert.read(plain).series            # readable as it is
    data = plain.read_bytes()
    start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    for at in range(64, 100, 4):
        bad = bytearray(data)
        bad[start + at] = 0
        (tmp_path / "bad.parquet").write_bytes(bytes(bad))
        proc = run_tbconvert("info", tmp_path / "bad.parquet", timeout=60)
        assert proc.returncode in (0, 4), (at, proc.returncode, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr, proc.stderr


def test_a_series_dtype_that_cannot_hold_its_values_is_damage_not_a_silent_change(tmp_path):
    """The metadata names each scalar series' dtype; one that does not hold the stored
    values (forged, the checksum made again) must not round or zero them unsaid."""
    import hashlib
    orig = tmp_path / "orig.parquet"
    tbconvert.convert(FIXTURES / "tf2_logdir", orig)
    table = pq.read_table(orig)
    meta = json.loads(table.schema.metadata[b"tbconvert"])
    meta.pop("row_groups")
    lied = [s for s in meta["series"] if s.get("value_dtype") == "float32"][:2]
    lied[0]["value_dtype"], lied[1]["value_dtype"] = "float16", "int64"
    raw = json.dumps(meta).encode()
    table = table.replace_schema_metadata(
        {b"tbconvert": raw, b"tbconvert.sha256": hashlib.sha256(raw).hexdigest().encode()})
    forged = tmp_path / "forged.parquet"
    pq.write_table(table, forged)
    truth = tbconvert.read(orig, restarts="keep-all")
    loaded = tbconvert.read(forged, restarts="keep-all")
    damaged = {i.tag for i in loaded.report.issues if i.lost}
    for run, tags in truth.series.items():
        for tag, s in tags.items():
            got = loaded.series.get(run, {}).get(tag)
            if got is not None and len(got) and hasattr(s, "values"):
                assert np.array_equal(got.values.astype(np.float64),
                                      s.values.astype(np.float64), equal_nan=True), tag
    assert {lied[0]["tag"], lied[1]["tag"]} <= damaged
