"""HDF5 archive: a layout h5py users can navigate, names as attributes, error messages."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest
from test_archives_roundtrip import assert_lossless, sample_runs, write_sample

import tbconvert
from tbconvert import dtypes as dt
from tbconvert import registry
from tbconvert.cli import main
from tbconvert.errors import CorruptDataError, FormatError
from tbconvert.formats.hdf5 import Hdf5Format, schema, seal
from tbconvert.report import Report


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
    # and read without --from, as a Parquet file without its suffix is
    (tmp_path / "archive.bin").rename(tmp_path / "archive")
    assert registry.detect_source(tmp_path / "archive") is Hdf5Format


def test_many_chunks_and_big_series_read_in_slices(tmp_path, monkeypatch):
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    monkeypatch.setattr(schema, "READ_POINTS", 1000)
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
        tbconvert.read(path)
    assert str(path) in str(info.value)
    assert not Hdf5Format.sniff(path)


def test_not_hdf5(tmp_path):
    path = tmp_path / "junk.h5"
    path.write_bytes(b"\x00junk" * 100)
    with pytest.raises(CorruptDataError, match="not a readable HDF5 file"):
        tbconvert.read(path)


def _reseal(path):
    """Seal an archive edited by h5py again, as if tbconvert had written it so."""
    fd = os.open(path, os.O_RDWR)
    try:
        seal.write_seal(fd)
    finally:
        os.close(fd)


def test_newer_schema_version(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    with h5py.File(path, "a") as f:
        f.attrs["schema_version"] = 7
    _reseal(path)
    with pytest.raises(FormatError, match="newer tbconvert.*upgrade"):
        tbconvert.read(path)


def test_truncated_file(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDataError, match="x.h5: the archive is damaged.*truncated"):
        tbconvert.read(path)


def test_seal_is_in_the_user_block_and_plain_h5py_reads_the_archive(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    head = path.read_bytes()[:seal.USERBLOCK]
    assert head.startswith(b'tbconvert-hdf5-seal {"bytes": ')
    assert seal.check_seal(path) is True
    with h5py.File(path, "r") as f:
        assert f.userblock_size == seal.USERBLOCK
        assert f.attrs["tbconvert_format"] == "tbconvert-hdf5"
    assert Hdf5Format.sniff(path)


def test_changed_bytes_are_refused_before_hdf5_opens_the_file(tmp_path, capsys):
    path = write_sample(tmp_path / "x.h5")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match="checksum does not match.*ignore_checksum=True"):
        tbconvert.read(path)
    assert main(["info", str(path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ignore-checksum" in err
    loaded = tbconvert.read(path, ignore_checksum=True, restarts="keep-all")
    assert [i.kind for i in loaded.report.issues][:1] == ["damaged_archive"]
    # the table functions take the advice as read() does
    with pytest.raises(CorruptDataError, match="ignore_checksum=True"):
        tbconvert.scalars_table(path)
    report = Report()
    table = tbconvert.scalars_table(path, ignore_checksum=True, restarts="keep-all",
                                    report=report)
    assert [i.kind for i in report.issues][:1] == ["damaged_archive"] and table.num_rows
    assert tbconvert.hparams_table(path, ignore_checksum=True) is not None
    with pytest.raises(TypeError, match="ignore_checksums"):
        tbconvert.scalars(path, ignore_checksums=True)


def test_editing_with_h5py_breaks_the_seal(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    with h5py.File(path, "a") as f:
        f.attrs["note"] = "added by hand"
    with pytest.raises(CorruptDataError, match="edited after it was written"):
        tbconvert.read(path)
    loaded = tbconvert.read(path, ignore_checksum=True, restarts="keep-all")
    assert loaded.report.issues[0].kind == "damaged_archive" and len(loaded.report.issues) == 1
    assert loaded.series.keys() == tbconvert.read(write_sample(tmp_path / "y.h5")).series.keys()


def test_damaged_series_costs_that_series_only(tmp_path):
    path = write_sample(tmp_path / "x.h5")
    whole = tbconvert.read(path, restarts="keep-all")
    with h5py.File(path, "a") as f:
        run0 = f["runs/0"].attrs["name"]
        tag0 = f["runs/0/series/0"].attrs["tag"]
        del f["runs/0/series/0/wall_times"]
    _reseal(path)
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and "/runs/0/series/0" in issue.message
    assert (issue.run, issue.tag) == (run0, tag0)
    for run, tags in whole.series.items():
        for tag, series in tags.items():
            if (run, tag) == (run0, tag0):
                continue   # (series 0 may share its tag with another series of the run)
            got = loaded.series[run][tag]
            np.testing.assert_array_equal(got.steps, series.steps)
            np.testing.assert_array_equal(got.wall_times, series.wall_times)


# ------------------------------------------------------------------ many small series

def _many_tags_logdir(root, runs=1, tags=3000, steps=2):
    """Event files of ``runs`` runs, each ``tags`` scalar tags of ``steps`` points (and one
    histogram tag, so tensors come through the same writer)."""
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries, TensorSeries
    rng = np.random.default_rng(0)
    scal = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    hist = Metadata("histograms", b"", "", "", DataClass.TENSOR)

    def chunks(name):
        for k in range(tags):
            yield ScalarSeries(run=name, tag=f"layer{k // 4}/metric{k % 4}", metadata=scal,
                               steps=np.arange(steps, dtype=np.int64),
                               wall_times=1.7e9 + np.arange(steps) * 0.5, hidden=None,
                               values=rng.random(steps).astype(np.float32))
        yield TensorSeries(run=name, tag="weights", metadata=hist,
                           steps=np.arange(steps, dtype=np.int64),
                           wall_times=1.7e9 + np.arange(steps) * 0.5, hidden=None,
                           dtypes=np.full(steps, dt.DT_DOUBLE, np.int32),
                           tensors=tuple(rng.random((4, 3)) for _ in range(steps)))
    with open_writer(root, format="tfevents") as w:
        for i in range(runs):
            w.write_run(Run(f"run{i}", 1.7e9), chunks(f"run{i}"))
    return root


def test_a_run_of_many_tags_round_trips(tmp_path):
    """3,000 tags of 2 points: event files -> HDF5 -> event files hold the same points, and
    the archive holds every series as the schema says (one group each, resizable datasets)."""
    from tbconvert.verify import compare
    src = _many_tags_logdir(tmp_path / "logs")
    h5 = tmp_path / "x.h5"
    report = tbconvert.convert(src, h5, jobs=1)
    assert not report.lost
    back = tmp_path / "back"
    tbconvert.convert(h5, back, to_format="tfevents", jobs=1)
    assert compare(src, back) == []
    with h5py.File(h5, "r") as f:
        tags = f["runs/0/tags"].asstr()[()]
        assert len(tags) == 3001 and tags[0] == "layer0/metric0" and tags[-1] == "weights"
        assert len(f["runs/0/series"]) == 3001
        s = f["runs/0/series/2999"]
        assert s.attrs["tag"] == "layer749/metric3" and s.attrs["kind"] == "scalar"
        assert s.attrs["plugin_content"].dtype == np.uint8
        for name, dtype in (("steps", np.int64), ("wall_times", np.float64),
                            ("hidden", np.bool_), ("values", np.float32)):
            assert s[name].dtype == dtype and s[name].shape == (2,)
            assert s[name].maxshape == (None,) and s[name].compression == "gzip"
        assert s["steps"][()].tolist() == [0, 1]
        w = f["runs/0/series/3000"]
        assert w.attrs["layout"] == "dense" and w["values"].shape == (2, 4, 3)


def test_many_tags_the_same_archive_for_every_jobs(tmp_path):
    src = _many_tags_logdir(tmp_path / "logs", runs=3, tags=200)
    tbconvert.convert(src, tmp_path / "one.h5", jobs=1)
    tbconvert.convert(src, tmp_path / "two.h5", jobs=2)
    assert (tmp_path / "one.h5").read_bytes() == (tmp_path / "two.h5").read_bytes()
    loaded = tbconvert.read(tmp_path / "one.h5", restarts="keep-all")
    assert len(loaded.series["run2"]) == 201
