"""Parquet and HDF5 archives: lossless model round trips, and fixture round trips proven
with TensorBoard's own reading (tests/oracle.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FIXTURES, LOGDIRS

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.formats.base import Options
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    RunRecord,
    ScalarSeries,
    TensorSeries,
    concat,
)

ARCHIVES = ["x.parquet", "x.h5", "pq_dir"]


# ---------------------------------------------------------------- sample data

def _md(plugin, dc, content=b"", display="", desc=""):
    return Metadata(plugin, content, display, desc, dc)


def _f32_bits(*bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def sample_runs():
    """Runs and chunks covering every field of the model."""
    runs = []
    # run 1: odd name, every scalar dtype, hidden points, records, multi-chunk series
    name = "train/ünï code/v1.0"
    scal = _md("scalars", DataClass.SCALAR, b"\x00\xff\x10", "Loss", "the *loss*")
    special = _f32_bits(0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000,
                        0x00000001, 0x3F800000)  # NaNs (quiet, payload, signalling), +-Inf, -0.0
    chunks = [
        ScalarSeries(run=name, tag="loss/train.v", metadata=scal, steps=np.arange(8),
                     wall_times=1.7e9 + np.arange(8) * 0.1, hidden=[0, 0, 1, 1, 0, 0, 0, 0],
                     values=special),
        ScalarSeries(run=name, tag="f64", metadata=scal, steps=[5, 3, 3], wall_times=[1.0, -0.0, 2.5],
                     hidden=None, values=np.array([np.nan, -0.0, -np.inf])),
        ScalarSeries(run=name, tag="loss/train.v", metadata=scal, steps=[8, 9],
                     wall_times=[9.0, np.nextafter(9.0, 10)], hidden=None,
                     values=np.array([1.5, -2.25], np.float32)),
        ScalarSeries(run=name, tag="i64", metadata=scal, steps=[0, 1, 2], wall_times=[0, 1, 2],
                     hidden=None, values=np.array([2**62 + 1, -(2**63), 2**53 + 1], np.int64)),
        ScalarSeries(run=name, tag="u64", metadata=scal, steps=[0, 1], wall_times=[0, 1],
                     hidden=None, values=np.array([2**64 - 1, 7], np.uint64)),
        ScalarSeries(run=name, tag="i32", metadata=scal, steps=[0, 1], wall_times=[0, 1],
                     hidden=None, values=np.array([-(2**31), 2**31 - 1], np.int32)),
        ScalarSeries(run=name, tag="b", metadata=scal, steps=[0, 1], wall_times=[0, 1],
                     hidden=None, values=np.array([True, False])),
        ScalarSeries(run=name, tag="f16", metadata=scal, steps=[0, 1], wall_times=[0, 1],
                     hidden=None, values=np.array([np.inf, -0.0], np.float16)),
    ]
    runs.append((Run(name, 1.7e9, (RunRecord("session_log", 0, 1.7e9, b"\x08\x01"),
                                   RunRecord("meta_graph_def", 3, 1.7e9 + 1, b"\x00" * 70000),
                                   RunRecord("log_message", 4, 5.5, b""))), chunks))

    # run 2: tensors of every dtype (ragged), dense series, dense->ragged switch
    name2 = "../evil/./.."
    rng = np.random.default_rng(0)
    codes = sorted(c for c in dt.NAMES if c not in (dt.DT_STRING, dt.DT_RAW_PROTO))
    tensors, dts = [], []
    for code in codes:
        storage = dt.numpy_dtype(code)
        raw = rng.integers(0, 256, size=6 * storage.itemsize, dtype=np.uint8)
        arr = raw.view(storage).reshape(2, 3)
        if storage.kind == "b":
            arr = raw[:6].astype(bool).reshape(2, 3)
        tensors.append(arr)
        dts.append(code)
    tensors.append(dt.string_array([b"a\x00b", b"", "é".encode()], (3,)))
    dts.append(dt.DT_STRING)
    tensors.append(np.frombuffer(b"\x08\x14\x12\x00", np.uint8))
    dts.append(dt.DT_RAW_PROTO)
    tensors.append(np.zeros((0, 4), np.float32))
    dts.append(dt.DT_FLOAT)
    tensors.append(dt.string_array([b"only"], ()))
    dts.append(dt.DT_STRING)
    n = len(tensors)
    tmd = _md("custom_plugin", DataClass.UNKNOWN, bytes(range(256)) * 300)
    hist = _md("histograms", DataClass.TENSOR, b"\x08\x01")
    dense = [np.arange(30, dtype=np.float64).reshape(10, 3) * i for i in range(4)]
    chunks2 = [
        TensorSeries(run=name2, tag="all/dtypes", metadata=tmd, steps=np.arange(n),
                     wall_times=np.arange(n) + 0.5, hidden=None, dtypes=dts, tensors=tuple(tensors)),
        TensorSeries(run=name2, tag="hist", metadata=hist, steps=[0, 1], wall_times=[0, 1],
                     hidden=[True, False], dtypes=[dt.DT_DOUBLE] * 2, tensors=tuple(dense[:2])),
        TensorSeries(run=name2, tag="hist", metadata=hist, steps=[2, 3], wall_times=[2, 3],
                     hidden=None, dtypes=[dt.DT_DOUBLE] * 2, tensors=tuple(dense[2:])),
        TensorSeries(run=name2, tag="switch", metadata=hist, steps=[0, 1], wall_times=[0, 1],
                     hidden=None, dtypes=[dt.DT_FLOAT] * 2,
                     tensors=(np.ones((2, 2), np.float32), np.full((2, 2), -0.0, np.float32))),
        TensorSeries(run=name2, tag="switch", metadata=hist, steps=[2, 3], wall_times=[2, 3],
                     hidden=[False, True], dtypes=[dt.DT_FLOAT, dt.DT_INT32],
                     tensors=(np.ones((5,), np.float32), np.arange(3, dtype=np.int32))),
    ]
    runs.append((Run(name2, None), chunks2))

    # run 3: blob sequences with holes and empty sequences
    name3 = "."
    img = _md("images", DataClass.BLOB_SEQUENCE, b"\x10\x02", "img", "")
    chunks3 = [
        BlobSequenceSeries.from_sequences(
            run=name3, tag="images/ü", metadata=img, steps=[0, 1, 2], wall_times=[0, 1, 2],
            hidden=[False, False, True],
            sequences=[[b"16", b"16", b"\x89PNG" + bytes(1000)], [b"1", None, b""], []]),
        BlobSequenceSeries.from_sequences(
            run=name3, tag="images/ü", metadata=img, steps=[3], wall_times=[3], hidden=None,
            sequences=[[None, None]]),
    ]
    runs.append((Run(name3, 0.0), chunks3))
    runs.append((Run("empty run", 12.5), []))
    return runs


SAMPLE_EXPERIMENT = Experiment(experiment_id="abc", name="Ñame", description="multi\nline",
                               create_time="2024-01-01T00:00:00Z", update_time="",
                               extra={"n": 1, "nested": {"x": [1, 2]}})


def write_sample(path, experiment=SAMPLE_EXPERIMENT, runs=None, fmt=None):
    writer = tbconvert.open_writer(path, format=fmt, options=Options())
    with writer:
        writer.write_experiment(experiment)
        for run, chunks in (runs if runs is not None else sample_runs()):
            writer.write_run(run, iter(chunks))
    return path


def read_all(path, fmt=None):
    """(experiment, [run], {(run, tag): [chunks]}, [(run, tag) in first-seen order])."""
    with tbconvert.open_reader(path, format=fmt) as reader:
        exp = reader.experiment()
        runs, chunks, order = [], {}, []
        for rd in reader.iter_runs():
            runs.append(rd.run)
            for c in rd.series:
                assert c.run == rd.run.name
                key = (c.run, c.tag)
                if key not in chunks:
                    order.append(key)
                chunks.setdefault(key, []).append(c)
    return exp, runs, chunks, order


def canon_tensor(code, arr):
    arr = np.asarray(arr)
    if code == dt.DT_STRING:
        return (code, arr.shape, tuple(bytes(x) for x in arr.reshape(-1)))
    return (code, arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())


def canon_series(s):
    """Everything a series holds, with floats as bits (NaN payloads, -0.0 included)."""
    out = {"meta": s.metadata, "type": type(s).__name__,
           "steps": s.steps.tolist(), "wall": s.wall_times.tobytes(),
           "hidden": (np.zeros(len(s), bool) if s.hidden is None else s.hidden).tolist()}
    if isinstance(s, ScalarSeries):
        out["values"] = (s.values.dtype.str, s.values.tobytes())
    elif isinstance(s, BlobSequenceSeries):
        out["blobs"] = [tuple(q) for q in s.sequences()]
    else:
        out["tensors"] = [canon_tensor(int(c), t) for c, t in zip(s.dtypes, s.tensors, strict=True)]
    return out


def assert_lossless(path, runs_in=None, experiment=SAMPLE_EXPERIMENT, fmt=None):
    runs_in = runs_in if runs_in is not None else sample_runs()
    exp, runs, chunks, order = read_all(path, fmt)
    assert exp == experiment
    assert runs == [r for r, _ in runs_in]
    expected_order, expected = [], {}
    for _, cs in runs_in:
        for c in cs:
            if (c.run, c.tag) not in expected:
                expected_order.append((c.run, c.tag))
            expected.setdefault((c.run, c.tag), []).append(c)
    assert order == expected_order
    for key, cs in expected.items():
        assert canon_series(concat(chunks[key])) == canon_series(concat(cs)), key


@pytest.mark.parametrize("dst", ARCHIVES)
def test_model_round_trip_is_lossless(tmp_path, dst):
    fmt = "parquet" if dst == "pq_dir" else None
    path = write_sample(tmp_path / dst, fmt=fmt)
    assert_lossless(path, fmt=fmt if dst != "pq_dir" else None)  # the directory is sniffed


@pytest.mark.parametrize("dst", ARCHIVES)
def test_archive_to_archive(tmp_path, dst):
    src = write_sample(tmp_path / "src.parquet")
    fmt = "parquet" if dst == "pq_dir" else None
    report = tbconvert.convert(src, tmp_path / dst, to_format=fmt)
    assert not report.lost
    assert_lossless(tmp_path / dst)
    report = tbconvert.convert(tmp_path / dst, tmp_path / "back.h5")
    assert_lossless(tmp_path / "back.h5")


@pytest.mark.parametrize("dst", ARCHIVES)
def test_abort_leaves_nothing(tmp_path, dst):
    path = tmp_path / dst
    with pytest.raises(RuntimeError):
        with tbconvert.open_writer(path, format="parquet" if dst == "pq_dir" else None,
                                   options=Options()) as w:
            run, chunks = sample_runs()[0]
            w.write_run(run, iter(chunks))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dst", ARCHIVES)
def test_existing_destination_refused_then_forced(tmp_path, dst):
    fmt = "parquet" if dst == "pq_dir" else None
    write_sample(tmp_path / dst, fmt=fmt)
    with pytest.raises(tbconvert.TbconvertError, match="already exists"):
        write_sample(tmp_path / dst, fmt=fmt)
    runs = sample_runs()[:1]
    writer = tbconvert.open_writer(tmp_path / dst, format=fmt, options=Options(force=True))
    with writer:
        for run, chunks in runs:
            writer.write_run(run, iter(chunks))
    assert_lossless(tmp_path / dst, runs, Experiment())


@pytest.mark.parametrize("dst", ["x.parquet", "x.h5"])
def test_unconsumed_runs_are_skipped_cleanly(tmp_path, dst):
    write_sample(tmp_path / dst)
    with tbconvert.open_reader(tmp_path / dst) as reader:
        names = [rd.run.name for rd in reader.iter_runs()]  # series never consumed
    assert names == [r.name for r, _ in sample_runs()]
    loaded = tbconvert.read(tmp_path / dst, runs="^\\.$", tags="ü", restarts="keep-all")
    assert list(loaded.series) == ["."] and list(loaded.series["."]) == ["images/ü"]


# ---------------------------------------------------------------- fixtures, via TensorBoard



@pytest.mark.parametrize("archive", ["x.parquet", "x.h5", "pq_dir"])
@pytest.mark.parametrize("logdir", LOGDIRS)
def test_fixture_round_trip_same_tensorboard_view(tmp_path, logdir, archive):
    from oracle import assert_same_view, tb_view

    src = FIXTURES / logdir
    arch = tmp_path / archive
    tbconvert.convert(src, arch, to_format="parquet" if archive == "pq_dir" else None)
    out = tmp_path / "out"
    tbconvert.convert(arch, out, to_format="tfevents")
    assert_same_view(tb_view(out), tb_view(src))


def test_fixture_hidden_points_kept_in_archive(tmp_path):
    # torch_logdir/resumed_purged: the restart rule hides points; the archive keeps them marked.
    tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "x.parquet")
    import pyarrow.parquet as pq
    table = pq.read_table(tmp_path / "x.parquet", columns=["run", "hidden"]).to_pandas()
    hidden_runs = set(table.loc[table["hidden"], "run"].astype(str))
    assert "resumed_purged" in hidden_runs
    assert "resumed" not in hidden_runs


@pytest.mark.parametrize("archive", ["x.parquet", "x.h5"])
def test_export_archive_export_keeps_metadata_json(tmp_path, archive):
    src = next((FIXTURES / "tbdev_export").iterdir())
    tbconvert.convert(src, tmp_path / archive)
    out = tmp_path / "export"
    tbconvert.convert(tmp_path / archive, out, to_format="tbdev")
    original = json.loads((src / "metadata.json").read_text())
    copies = list(out.rglob("metadata.json"))
    assert copies, "no metadata.json written"
    copy = json.loads(copies[0].read_text())
    assert copy.get("name") == original.get("name")
    assert copy.get("description") == original.get("description")
    before = tbconvert.read(src, restarts="keep-all")
    after = tbconvert.read(tmp_path / archive, restarts="keep-all")
    assert before.experiment == after.experiment
    assert list(before.runs) == list(after.runs)
    for run in before.series:
        for tag, s in before.series[run].items():
            assert canon_series(after.series[run][tag]) == canon_series(s), (run, tag)
