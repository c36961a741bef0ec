"""Tensor series whose points a reader had as one array (``TensorSeries.block``): the array
is the points, and writers that take it whole write what the points one by one give."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.model import DataClass, Metadata, Run, TensorSeries, concat, joined_block

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HISTO = Metadata("histograms", b"", "", "", DataClass.TENSOR)


def _series(block, code=dt.DT_DOUBLE, start=0, hidden=None):
    steps = np.arange(start, start + len(block))
    return TensorSeries.of_block(run="r", tag="h", metadata=HISTO, steps=steps,
                                 wall_times=steps + 0.5, hidden=hidden, code=code, block=block)


def _without_block(series: TensorSeries) -> TensorSeries:
    return replace(series, tensors=tuple(np.array(t) for t in series.tensors), block=None)


def test_tf2_histograms_are_read_as_one_array():
    series = tbconvert.read(FIXTURES / "tf2_logdir" / "eager").series["."]["weights"]
    assert series.block is not None and series.block.ndim == 3 and series.block.shape[2] == 3
    assert len(series.block) == len(series) == len(series.tensors)
    for i, t in enumerate(series.tensors):
        assert np.array_equal(t, series.block[i])
    assert (series.dtypes == dt.DT_DOUBLE).all()


def test_block_follows_take_and_concat():
    block = np.arange(24, dtype=np.float64).reshape(4, 2, 3)
    s = _series(block, hidden=[False, True, False, True])
    visible = s.visible()
    assert np.array_equal(visible.block, block[[0, 2]])
    assert all(np.array_equal(t, b) for t, b in zip(visible.tensors, visible.block, strict=True))
    joined = concat([s, _series(block[:1] + 100, start=4)])
    assert np.array_equal(joined.block, np.concatenate([block, block[:1] + 100]))
    assert len(joined.tensors) == 5 and np.array_equal(joined.tensors[4], block[0] + 100)
    # a chunk of another shape or dtype joins as points, without a block
    other = concat([s, _series(np.zeros((1, 3, 3)), start=4)])
    assert other.block is None and len(other.tensors) == 5
    mixed = concat([s, _series(np.zeros((1, 2, 3), np.float32), code=dt.DT_FLOAT, start=4)])
    assert mixed.block is None and list(mixed.dtypes[-2:]) == [dt.DT_DOUBLE, dt.DT_FLOAT]


def test_blocks_side_by_side_in_one_array_are_joined_without_a_copy():
    base = np.arange(5 * 2 * 3, dtype=np.float64).reshape(5, 2, 3)
    code, joined = joined_block([_series(base[0:2]), _series(base[2:4], start=2),
                                 _series(base[4:5], start=4)])
    assert code == dt.DT_DOUBLE and np.shares_memory(joined, base)
    assert np.array_equal(joined, base)
    # anything else is copied together: out of order, a gap, another array, not contiguous
    for parts in ([base[2:5], base[0:2]], [base[0:2], base[3:5]], [base[0:2], base[2:5].copy()],
                  [base[::2], base[1:2]], [base[1:3], base[3:5, ::-1]]):
        _, joined = joined_block([_series(p, start=10 * k) for k, p in enumerate(parts)])
        assert not np.shares_memory(joined, base)
        assert np.array_equal(joined, np.concatenate(parts))


def test_histograms_per_parameter_convert_to_the_same_bytes_with_their_arrays_shared(
        tmp_path, monkeypatch):
    """A reader that puts many tags' arrays side by side in one (see assemble._store_stacks)
    lets the writer take them as one; the file is the one joining copies would give."""
    from tbconvert import model
    from tbconvert.formats.tfevents import reader
    monkeypatch.setattr(reader.TfeventsReader, "block_size", 1 << 16)
    rng = np.random.default_rng(2)
    md = Metadata("histograms", b"", "", "", DataClass.TENSOR)
    with tbconvert.open_writer(tmp_path / "logs", format="tfevents") as w:
        steps = np.arange(10)
        w.write_run(Run("r", 1e9), iter([
            TensorSeries.of_block(run="r", tag=f"layer{k:02d}/w", metadata=md, steps=steps,
                                  wall_times=1e9 + steps + k / 100, hidden=None,
                                  code=dt.DT_DOUBLE, block=rng.random((10, 30, 3)))
            for k in range(40)]))
    shared = []
    real = model._adjacent

    def spy(blocks):
        found = real(blocks)
        shared.append(found is not None)
        return found

    monkeypatch.setattr(model, "_adjacent", spy)
    tbconvert.convert(tmp_path / "logs", tmp_path / "shared.parquet")
    assert any(shared)
    monkeypatch.setattr(model, "_adjacent", lambda blocks: None)
    tbconvert.convert(tmp_path / "logs", tmp_path / "copied.parquet")
    assert (tmp_path / "shared.parquet").read_bytes() == (tmp_path / "copied.parquet").read_bytes()


@pytest.mark.parametrize("block, codes", [
    (np.zeros((3, 2)), [dt.DT_DOUBLE] * 2),                    # rows against points
    (np.zeros((2, 2)), [dt.DT_DOUBLE, dt.DT_FLOAT]),           # two dtypes
    (np.array([b"a", b"b"], dtype=object), [dt.DT_STRING] * 2),  # not numeric
])
def test_a_block_that_is_not_the_points_is_refused(block, codes):
    with pytest.raises(ValueError, match="block"):
        TensorSeries(run="r", tag="h", metadata=HISTO, steps=[0, 1], wall_times=[0.0, 1.0],
                     hidden=None, dtypes=codes, tensors=(np.zeros(2), np.zeros(2)), block=block)


@pytest.mark.parametrize("suffix", ["parquet", "h5"])
def test_writers_write_a_block_as_its_points(tmp_path, suffix):
    """The same archive whether the writer is handed the array or the points one by one."""
    rng = np.random.default_rng(5)
    chunks = [_series(rng.random((40, 30, 3)), hidden=rng.random(40) < 0.2),
              _series(rng.random((7, 30, 3)), start=40)]
    written = {}
    for name, series in (("block", chunks), ("points", [_without_block(c) for c in chunks])):
        assert (series[0].block is None) == (name == "points")
        path = tmp_path / f"{name}.{suffix}"
        with tbconvert.open_writer(path) as writer:
            writer.write_run(Run("r", 1.0), iter(series))
        written[name] = path
    if suffix == "parquet":
        a, b = (pq.read_table(written[k]) for k in ("block", "points"))
        assert a.equals(b)
    else:
        assert written["block"].read_bytes() == written["points"].read_bytes()
    back = tbconvert.read(written["block"], restarts="keep-all").series["r"]["h"]
    assert back.block is not None or suffix == "parquet"
    assert np.array_equal(np.stack(back.tensors), np.concatenate([c.block for c in chunks]))


def test_hdf5_dense_series_are_read_as_one_array(tmp_path):
    src = tmp_path / "logs"
    shutil.copytree(FIXTURES / "tf2_logdir" / "eager", src)
    tbconvert.convert(src, tmp_path / "a.h5")
    series = tbconvert.read(tmp_path / "a.h5").series["."]["weights"]
    assert series.block is not None
    assert np.array_equal(series.block, tbconvert.read(src).series["."]["weights"].block)
