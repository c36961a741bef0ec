"""A damaged series of an HDF5 archive is skipped with what it really costs: the points it
held (as far as what is left of it tells, else "an unknown number"), and a message that names
the part that is wrong and what it should be, in plain words (no Python exception text)."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from test_hostile_archives import small_runs

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.formats.base import Options
from tbconvert.formats.hdf5 import schema, seal
from tbconvert.model import (
    DataClass,
    Experiment,
    Metadata,
    TensorSeries,
)

SCAL = Metadata("scalars", b"", "", "", DataClass.SCALAR)
HIST = Metadata("histograms", b"\x08\x01", "", "", DataClass.TENSOR)
DENSE = Metadata("custom", b"", "", "", DataClass.TENSOR)
IMG = Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE)

# series of run "train" (group /runs/0/series/<j>), and their points
LOSS, BIG, HIST_J, IMG_J, DENSE_J = 0, 1, 2, 3, 4
POINTS = {"loss": 40, "big": 2, "hist": 3, "img": 2, "dense": 4}
TAGS = ["loss", "big", "hist", "img", "dense"]

# what a raw Python or HDF5 exception says, which a report must not
RAW = ("invalid literal", "Unable to", "synchronously", "object '", "is not a valid",
       "doesn't exist", "Traceback", "Error", "errno", "cannot reshape", "codec")


def _runs():
    """test_hostile_archives' two small runs, each with a dense tensor series besides."""
    out = []
    for run, chunks in small_runs():
        out.append((run, [*chunks, TensorSeries(
            run=run.name, tag="dense", metadata=DENSE, steps=[0, 1, 2, 3],
            wall_times=[0, 1, 2, 3], hidden=None, dtypes=[dt.DT_FLOAT] * 4,
            tensors=tuple(np.full((2, 2), k, np.float32) for k in range(4)))]))
    return out


def _write(path):
    writer = tbconvert.open_writer(path, options=Options())
    with writer:
        writer.write_experiment(Experiment(name="damage"))
        for run, chunks in _runs():
            writer.write_run(run, iter(chunks))
    return path


def _damaged(tmp_path, fn, name="x.h5"):
    """An archive with ``fn(f)`` done to it by h5py, sealed again as tbconvert would."""
    path = _write(tmp_path / name)
    with h5py.File(path, "a") as f:
        assert [f[f"runs/0/series/{j}"].attrs["tag"] for j in range(5)] == TAGS
        fn(f)
    fd = os.open(path, os.O_RDWR)
    try:
        seal.write_seal(fd)
    finally:
        os.close(fd)
    return path


def _series(j):
    return f"runs/0/series/{j}"


def _replace(f, where, data, **kw):
    del f[where]
    f.create_dataset(where, data=data, **kw)


def _retype(j, name, dtype):
    def fn(f):
        where = f"{_series(j)}/{name}"
        _replace(f, where, f[where][()].astype(dtype))
    return fn


def _set_attr(j, name, value):
    def fn(f):
        f[_series(j)].attrs[name] = value
    return fn


def _delete(j, *names):
    def fn(f):
        for name in names:
            del f[f"{_series(j)}/{name}"]
    return fn


def _delete_attr(j, name):
    def fn(f):
        del f[_series(j)].attrs[name]
    return fn


def _shorten(j, name):
    def fn(f):
        where = f"{_series(j)}/{name}"
        _replace(f, where, f[where][:-1])
    return fn


def _vlen_str(j, name):
    def fn(f):
        where = f"{_series(j)}/{name}"
        n = f[where].shape[0]
        _replace(f, where, np.array(["x"] * n, dtype=object), dtype=h5py.string_dtype())
    return fn


def _null(j, name):
    def fn(f):
        where = f"{_series(j)}/{name}"
        dtype = f[where].dtype
        del f[where]
        f.create_dataset(where, data=h5py.Empty(dtype))
    return fn


def _read_and_check_the_rest(path, tag):
    """The one issue of reading ``path``; every series but train/``tag`` read as written."""
    whole = _runs()
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and issue.lost, issue
    assert issue.run == "train" and issue.tag == tag, issue
    assert path.name in issue.message and f"/runs/0/series/{TAGS.index(tag)}" in issue.message
    assert not any(raw in issue.message for raw in RAW), issue.message
    assert tag not in loaded.series["train"]
    assert set(loaded.series["train"]) == set(TAGS) - {tag}
    assert set(loaded.series["eval"]) == set(TAGS)
    for run, chunks in whole:
        for chunk in chunks:
            if (run.name, chunk.tag) == ("train", tag):
                continue
            got = loaded.series[run.name][chunk.tag]
            np.testing.assert_array_equal(got.steps, chunk.steps)
            np.testing.assert_array_equal(got.wall_times, chunk.wall_times)
            assert len(got) == POINTS[chunk.tag]
    return issue


CASES = [
    # (what is done, to which series, words the message must hold, points said to be lost)
    (_retype(LOSS, "steps", "f8"), "loss", "its steps are float64, not int64", 40),
    (_retype(LOSS, "steps", "u8"), "loss", "its steps are uint64, not int64", 40),
    (_retype(LOSS, "wall_times", "i8"), "loss", "its wall_times are int64, not float64", 40),
    (_retype(LOSS, "hidden", "f4"), "loss", "its hidden are float32, not bool", 40),
    (_vlen_str(LOSS, "values"), "loss", "its values are strings, not numbers", 40),
    (_retype(BIG, "steps", "f4"), "big", "its steps are float32, not int64", 2),
    (_retype(HIST_J, "dtypes", "f4"), "hist", "its dtypes are float32, not int32", 3),
    (_retype(HIST_J, "data", "i2"), "hist", "its data are int16, not uint8", 3),
    (_vlen_str(HIST_J, "shapes"), "hist", "its shapes are strings, not variable-length int64", 3),
    (_retype(HIST_J, "data_offsets", "f8"), "hist", "its data_offsets are float64, not int64", 3),
    (_vlen_str(IMG_J, "blobs"), "img", "its blobs are strings, not variable-length uint8", 2),
    (_retype(IMG_J, "blob_missing", "i1"), "img", "its blob_missing are int8, not bool", 2),
    (_retype(DENSE_J, "values", "f8"), "dense", "its values are float64, not float32", 4),
    # attributes
    (_set_attr(LOSS, "plugin_content", "not bytes"), "loss",
     "its plugin_content attribute is a str, not bytes", 40),
    (_set_attr(LOSS, "plugin_content", np.array([1, 300], np.int64)), "loss",
     "its plugin_content attribute is an array of int64, not bytes", 40),
    (_set_attr(HIST_J, "plugin_content", np.bytes_(b"\x08\x01")), "hist",
     "its plugin_content attribute is a byte string, not bytes", 3),
    (_set_attr(LOSS, "data_class", np.int32(9)), "loss", "its data_class attribute is 9, not 0 to 3", 40),
    (_set_attr(LOSS, "data_class", "scalar"), "loss",
     "its data_class attribute is a str, not an integer", 40),
    (_set_attr(LOSS, "display_name", np.int64(3)), "loss",
     "its display_name attribute is an int64, not a string", 40),
    (_set_attr(LOSS, "kind", "bogus"), "loss", "its kind attribute is 'bogus', not scalar", 40),
    (_delete_attr(IMG_J, "plugin_name"), "img", "its plugin_name attribute is missing", 2),
    (_delete_attr(LOSS, "tag"), "loss", "its tag attribute is missing", 40),
    (_set_attr(DENSE_J, "tensor_dtype", np.int32(12345)), "dense",
     "its tensor_dtype attribute is 12345, not a TensorFlow dtype code", 4),
    (_set_attr(DENSE_J, "layout", "sparse"), "dense",
     "its layout attribute is 'sparse', not dense or ragged", 4),
    # missing datasets: the count comes from what is left
    (_delete(LOSS, "steps"), "loss", "its steps dataset is missing", 40),
    (_delete(LOSS, "wall_times"), "loss", "its wall_times dataset is missing", 40),
    (_delete(LOSS, "values"), "loss", "its values dataset is missing", 40),
    (_delete(HIST_J, "steps", "wall_times", "hidden"), "hist", "its steps dataset is missing", 3),
    (_delete(IMG_J, "steps", "wall_times", "hidden"), "img", "its steps dataset is missing", 2),
    (_delete(IMG_J, "blobs"), "img", "its blobs dataset is missing", 2),
    (_delete(HIST_J, "data_offsets"), "hist", "its data_offsets dataset is missing", 3),
    (_null(LOSS, "values"), "loss", "its values hold nothing (an empty HDF5 dataspace)", 40),
    (_null(IMG_J, "blobs"), "img", "its blobs hold nothing (an empty HDF5 dataspace)", 2),
    (_null(LOSS, "steps"), "loss", "its steps hold nothing (an empty HDF5 dataspace)", 40),
    # lengths
    (_shorten(LOSS, "wall_times"), "loss", "its wall_times hold 39 entries, not 40 like its steps", 40),
    (_shorten(LOSS, "values"), "loss", "its values hold 39 entries, not 40 like its steps", 40),
    (_shorten(HIST_J, "data_offsets"), "hist",
     "its data_offsets hold 3 entries, not 4 (one more than its 3 points)", 3),
    (_shorten(IMG_J, "blob_missing"), "img", "its blob_missing hold 2 entries, not 3 like its blobs", 2),
]


@pytest.mark.parametrize("fn,tag,words,lost", CASES,
                         ids=[f"{c[1]}-{c[2].split(',')[0][4:]}" for c in CASES])
def test_a_damaged_series_counts_the_points_it_loses(tmp_path, fn, tag, words, lost):
    issue = _read_and_check_the_rest(_damaged(tmp_path, fn), tag)
    assert words in issue.message, issue.message
    assert issue.count == lost, issue
    assert f"its {lost} points were skipped" in issue.message, issue.message


def test_the_tag_of_a_series_whose_tag_attribute_is_damaged_is_the_runs_listed_one(tmp_path):
    path = _damaged(tmp_path, _set_attr(HIST_J, "tag", np.float64(1.5)))
    issue = _read_and_check_the_rest(path, "hist")
    assert "its tag attribute is a float64, not a string" in issue.message
    assert issue.count == 3


def test_a_series_nothing_left_of_counts_an_unknown_number_of_points(tmp_path):
    path = _damaged(tmp_path, _delete(LOSS, "steps", "wall_times", "hidden", "values"))
    issue = _read_and_check_the_rest(path, "loss")
    assert "its steps dataset is missing" in issue.message
    assert "an unknown number of points" in issue.message and issue.count == 0


def test_strict_counts_a_loss_of_unknown_size_as_an_item(tmp_path):
    from helpers import run_tbconvert
    path = _damaged(tmp_path, _delete(LOSS, "steps", "wall_times", "hidden", "values"))
    proc = run_tbconvert("convert", path, tmp_path / "out.parquet", "--strict")
    assert proc.returncode == 8, proc.stderr
    assert "warning: 1 series of an archive skipped for damage\n" in proc.stderr, proc.stderr
    assert "--strict: 1 item(s) were skipped" in proc.stderr, proc.stderr


def test_points_declared_but_not_stored_are_not_counted(tmp_path):
    """A length the file does not back with data is no point count: none is trusted."""
    def fn(f):
        for name, dtype in (("steps", "i8"), ("wall_times", "f8"), ("hidden", "?"),
                            ("values", "f4")):
            del f[f"{_series(LOSS)}/{name}"]
            f.create_dataset(f"{_series(LOSS)}/{name}", shape=(2**40,), dtype=dtype,
                             chunks=(1 << 16,), maxshape=(None,))
    issue = _read_and_check_the_rest(_damaged(tmp_path, fn), "loss")
    assert "its steps dataset declares" in issue.message, issue.message
    assert "an unknown number of points" in issue.message and issue.count == 0


def test_damage_found_after_some_points_counts_the_rest(tmp_path, monkeypatch):
    """Points read before the damage is found are kept; the issue counts the rest."""
    def fn(f):
        shapes = f[f"{_series(HIST_J)}/shapes"]
        rows = shapes[()]
        rows[2] = np.array([5], np.int64)     # the string tensor of point 2 holds 2 strings
        _replace(f, f"{_series(HIST_J)}/shapes", rows, dtype=shapes.dtype)
    path = _damaged(tmp_path, fn)
    monkeypatch.setattr(schema, "READ_BYTES", 1)    # a point a chunk
    loaded = tbconvert.read(path, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_series" and issue.tag == "hist"
    assert "its string_offsets give point 2 2 strings, not the 5 of its tensor shape [5]" \
        in issue.message, issue.message
    assert "1 of its 3 points was skipped (the first 2 were read)" in issue.message
    assert issue.count == 1
    assert len(loaded.series["train"]["hist"]) == 2


def test_ragged_bytes_that_do_not_fill_a_shape_name_the_offsets(tmp_path):
    def fn(f):
        shapes = f[f"{_series(HIST_J)}/shapes"]
        rows = shapes[()]
        rows[0] = np.array([2, 2], np.int64)   # 6 doubles stored
        _replace(f, f"{_series(HIST_J)}/shapes", rows, dtype=shapes.dtype)
    issue = _read_and_check_the_rest(_damaged(tmp_path, fn), "hist")
    assert "its data_offsets give point 0 48 bytes, not the 32 of its tensor shape [2, 2]" \
        in issue.message, issue.message
    assert issue.count == 3


def test_the_qa_reproduction_on_a_foreign_copy(tmp_path):
    """The copy drops the seal: the file is read as a foreign HDF5 file, series by series."""
    src = _write(tmp_path / "orig.h5")
    copy = tmp_path / "u.h5"
    with h5py.File(src) as s, h5py.File(copy, "w") as d:
        for k, v in s.attrs.items():
            d.attrs[k] = v
        for k in s:
            s.copy(s[k], d, name=k)
    with h5py.File(copy, "r+") as f:
        _retype(LOSS, "steps", "f8")(f)
        _set_attr(HIST_J, "plugin_content", "not bytes")(f)
    loaded = tbconvert.read(copy, restarts="keep-all")
    issues = {i.tag: i for i in loaded.report.issues}
    assert set(issues) == {"loss", "hist"}
    assert issues["loss"].count == 40 and "its steps are float64, not int64" in issues["loss"].message
    assert issues["hist"].count == 3
    assert "its plugin_content attribute is a str, not bytes" in issues["hist"].message
    assert not any(raw in i.message for i in issues.values() for raw in RAW)
    assert "series of an archive skipped for damage (43 points counted)" in \
        loaded.report.summary_lines()[0]
    assert set(loaded.series["train"]) == {"big", "img", "dense"}
    assert set(loaded.series["eval"]) == set(TAGS)


def test_a_lost_series_group_is_told_and_the_series_after_it_still_read(tmp_path):
    """The run's tags list the series: one whose group is gone is told (under its listed
    tag), and the last series of the run is not left unread for it."""
    path = _damaged(tmp_path, lambda f: f.__delitem__(_series(HIST_J)))
    issue = _read_and_check_the_rest(path, "hist")
    assert "its group is missing" in issue.message
    assert "an unknown number of points" in issue.message and issue.count == 0
