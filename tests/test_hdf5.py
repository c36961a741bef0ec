"""HDF5 archive: a layout h5py users can navigate, names as attributes, error messages."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import tbconvert
from tbconvert import dtypes as dt
from tbconvert import registry
from tbconvert.errors import CorruptDataError, FormatError
from tbconvert.formats.hdf5 import Hdf5Format
from tbconvert.formats.hdf5 import layout as L

from test_archives_roundtrip import assert_lossless, sample_runs, write_sample


def _series(f, run, tag):
    """What the docs tell h5py users to do: find names through the index datasets."""
    i = list(f["run_names"].asstr()[()]).index(run)
    j = list(f[f"runs/{i}/tags"].asstr()[()]).index(tag)
    return f[f"runs/{i}/series/{j}"]


def test_layout_is_navigable(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    with h5py.File(path, "r") as f:
        assert f.attrs["tbconvert_format"] == "tbconvert-hdf5"
        assert int(f.attrs["schema_version"]) == 1
        assert f.attrs["experiment_name"] == "Ñame"
        assert json.loads(f.attrs["experiment_extra"]) == {"n": 1, "nested": {"x": [1, 2]}}
        names = list(f["run_names"].asstr()[()])
        assert names == [r.name for r, _ in sample_runs()]
        # names are attributes, never paths
        assert sorted(f["runs"].keys(), key=int) == [str(i) for i in range(len(names))]
        assert f["runs/0"].attrs["name"] == "train/ünï code/v1.0"
        assert "start_time" not in f["runs/1"].attrs

        loss = _series(f, "train/ünï code/v1.0", "loss/train.v")
        assert loss.attrs["kind"] == "scalar" and loss.attrs["data_class_name"] == "scalar"
        assert loss.attrs["plugin_content"].tobytes() == b"\x00\xff\x10"
        assert loss["values"].dtype == np.float32
        assert loss["steps"][()].tolist() == list(range(10))
        assert loss["hidden"][()].tolist() == [False, False, True, True] + [False] * 6
        assert loss["values"].compression == "gzip" and loss["values"].chunks is not None
        assert loss["values"].maxshape == (None,)
        bits = loss["values"][:8].view(np.uint32).tolist()
        assert bits == [0x7FC00000, 0xFFC00001, 0x7F800001, 0x7F800000, 0xFF800000, 0x80000000,
                        0x00000001, 0x3F800000]

        i64 = _series(f, "train/ünï code/v1.0", "i64")
        assert i64["values"][()].tolist() == [2**62 + 1, -(2**63), 2**53 + 1]

        hist = _series(f, "../evil/./..", "hist")
        assert hist.attrs["layout"] == "dense" and hist["values"].shape == (4, 10, 3)
        assert int(hist.attrs["tensor_dtype"]) == dt.DT_DOUBLE

        switch = _series(f, "../evil/./..", "switch")
        assert switch.attrs["layout"] == "ragged" and "values" not in switch
        assert switch["dtypes"][()].tolist() == [dt.DT_FLOAT] * 3 + [dt.DT_INT32]
        assert [s.tolist() for s in switch["shapes"][()]] == [[2, 2], [2, 2], [5], [3]]

        alld = _series(f, "../evil/./..", "all/dtypes")
        assert alld.attrs["layout"] == "ragged"
        assert alld.attrs["plugin_content"].tobytes() == bytes(range(256)) * 300

        img = _series(f, ".", "images/ü")
        assert img["blob_offsets"][()].tolist() == [0, 3, 6, 6, 8]
        assert img["blob_missing"][()].tolist() == [False, False, False, False, True, False,
                                                    True, True]
        assert img["blobs"][0].tobytes() == b"16"

        rec = f["runs/0/records"]
        assert rec["kind"].asstr()[()].tolist() == ["session_log", "meta_graph_def", "log_message"]
        assert len(rec["payload"][1]) == 70000


def test_lossless_and_suffixes(tmp_path):
    for name in ("x.h5", "x.hdf5"):
        path = write_sample(tmp_path / name)
        assert registry.detect_source(path) is Hdf5Format
        assert_lossless(path)
    # sniffed without the suffix
    (tmp_path / "x.h5").rename(tmp_path / "archive.bin")
    assert Hdf5Format.sniff(tmp_path / "archive.bin")
    assert_lossless(tmp_path / "archive.bin", fmt="hdf5")


def test_many_chunks_and_big_series_read_in_slices(tmp_path, monkeypatch):
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    monkeypatch.setattr(L, "READ_POINTS", 1000)
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    chunks = [ScalarSeries(run="r", tag="t", metadata=md, steps=np.arange(k * 700, k * 700 + 700),
                           wall_times=np.arange(700) + 0.25, hidden=None,
                           values=np.arange(700, dtype=np.float64) * k) for k in range(10)]
    runs = [(Run("r", 1.0), chunks)]
    path = write_sample(tmp_path / "x.h5", runs=runs)
    with tbconvert.open_reader(path) as reader:
        sizes = [len(c) for rd in reader.iter_runs() for c in rd.series]
    assert sizes == [1000] * 7
    assert_lossless(path, runs)


# ------------------------------------------------------------------ errors

def test_foreign_hdf5(tmp_path):
    path = tmp_path / "foreign.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(CorruptDataError, match="not a tbconvert HDF5 archive") as info:
        tbconvert.load(path)
    assert str(path) in str(info.value)
    assert not Hdf5Format.sniff(path)


def test_not_hdf5(tmp_path):
    path = tmp_path / "junk.h5"
    path.write_bytes(b"\x00junk" * 100)
    with pytest.raises(CorruptDataError, match="not a readable HDF5 file"):
        tbconvert.load(path)


def test_newer_schema_version(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 7
    with pytest.raises(FormatError, match="newer tbconvert.*upgrade"):
        tbconvert.load(path)


def test_truncated_file(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDataError, match="x.h5"):
        tbconvert.load(path)


def test_damaged_structure(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    with h5py.File(path, "a") as f:
        del f["runs/0/series/0/wall_times"]
    with pytest.raises(CorruptDataError, match="damaged archive at /runs/0/series/0"):
        tbconvert.load(path)
