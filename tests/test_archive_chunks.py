"""The archives' readers hand tensor and blob series out in chunks of bounded payload, each
point a view of its chunk's one buffer, whatever a row group or a series holds."""

from __future__ import annotations

import numpy as np
import pytest

from tbconvert import dtypes as dt
from tbconvert.api import open_reader, open_writer
from tbconvert.formats import packed
from tbconvert.formats.hdf5 import schema as hdf5_schema
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, TensorSeries

HISTO = Metadata("histograms", b"", "", "", DataClass.TENSOR)
IMAGES = Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE)
POINTS = 3000
LIMIT = 64 << 10


def _histograms(ragged: bool) -> TensorSeries:
    rng = np.random.default_rng(1)
    steps = np.arange(POINTS, dtype=np.int64)
    sizes = rng.integers(1, 40, POINTS) if ragged else np.full(POINTS, 30)
    tensors = tuple(rng.random((int(k), 3)) for k in sizes)
    return TensorSeries(run="r", tag="h", metadata=HISTO, steps=steps, wall_times=steps + 0.5,
                        hidden=None, dtypes=np.full(POINTS, dt.DT_DOUBLE, np.int32),
                        tensors=tensors)


def _images() -> BlobSequenceSeries:
    rng = np.random.default_rng(2)
    steps = np.arange(POINTS, dtype=np.int64)
    seqs = [[rng.bytes(int(rng.integers(0, 300))) for _ in range(3)] for _ in steps]
    return BlobSequenceSeries.from_sequences(run="r", tag="i", metadata=IMAGES, steps=steps,
                                             wall_times=steps + 0.5, hidden=None,
                                             sequences=seqs)


def _payload(chunk) -> int:
    if isinstance(chunk, BlobSequenceSeries):
        return sum(len(b) for b in chunk.blobs)
    return sum(t.nbytes for t in chunk.tensors)


def _read_back(path):
    with open_reader(path) as reader:
        for run in reader.iter_runs():
            yield from run.series


@pytest.mark.parametrize("suffix", [".parquet", ".h5"])
@pytest.mark.parametrize("form", ["uniform", "ragged", "blobs"])
def test_chunks_are_bounded_and_hold_what_was_written(tmp_path, monkeypatch, suffix, form):
    monkeypatch.setattr(packed, "CHUNK_BYTES", LIMIT)
    monkeypatch.setattr(hdf5_schema, "READ_BYTES", LIMIT)
    written = _images() if form == "blobs" else _histograms(form == "ragged")
    path = tmp_path / f"a{suffix}"
    with open_writer(path) as w:
        w.write_run(Run("r", 1.0), [written])
    assert _payload(written) > 8 * LIMIT    # (one row group, one HDF5 window)
    chunks = list(_read_back(path))
    assert len(chunks) > 8
    for c in chunks:
        # at most the bound, or one point; HDF5 reads blobs a few at a time, the
        # last read going past it
        assert _payload(c) <= LIMIT + (64 * 300 if form == "blobs" else 0) or len(c) == 1
    got = np.concatenate([c.steps for c in chunks])
    assert np.array_equal(got, written.steps)
    if form == "blobs":
        assert [b for c in chunks for b in c.blobs] == list(written.blobs)
        return
    tensors = [t for c in chunks for t in c.tensors]
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in
               zip(tensors, written.tensors, strict=True))
    if form == "ragged" or suffix == ".parquet":    # (HDF5's dense layout: as h5py reads it)
        assert not any(t.flags.writeable for t in tensors)
    for c in chunks:
        # one buffer a chunk, not an object a point; points of one shape as one array
        assert (c.block is not None) == (form == "uniform")
        assert len({id(_root(t)) for t in c.tensors}) == 1


def _root(a: np.ndarray):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
