"""One Parquet file joined from runs encoded apart (``--jobs N`` to a ``.parquet`` file): the
footer codec, and the bytes against those of one writer."""

from __future__ import annotations

import errno
import io
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_archives_roundtrip import sample_runs, write_sample

import tbconvert
from tbconvert.errors import CorruptDataError
from tbconvert.formats.base import Options
from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.writer import ParquetWriter
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    ScalarSeries,
    TensorSeries,
)
from tbconvert.report import Report


def _footer_bytes(path) -> bytes:
    data = path.read_bytes()
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n:-8]


def test_footers_decode_and_encode_back_byte_for_byte(tmp_path, monkeypatch):
    """A footer of many row groups (lists of more than 14), with statistics, dictionaries,
    key-value metadata; and one written by a plain pyarrow call."""
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 3)
    path = write_sample(tmp_path / "x.parquet")
    assert pq.ParquetFile(path).metadata.num_row_groups > 15
    dataset = write_sample(tmp_path / "dataset", fmt="parquet")
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(path), plain)
    for f in [path, plain, *dataset.glob("part-*.parquet")]:
        raw = _footer_bytes(f)
        assert F.encode(F.decode(raw)) == raw, f


def test_every_compact_type_and_header_form_goes_both_ways():
    fields = [[1, F.I32, -5], [2, F.TRUE, True], [3, F.FALSE, False], [19, F.I64, -(1 << 62)],
              [20, F.BINARY, b"\x00\xff" * 40], [21, F.LIST, (F.I32, list(range(-20, 20)))],
              [22, F.LIST, (F.TRUE, [True, False, True])], [23, F.I8, -7],
              [24, F.DOUBLE, 2.5], [30, F.I16, 300],
              [31, F.STRUCT, [[1, F.LIST, (F.STRUCT, [[[1, F.BINARY, b"k"]]] * 16)]]]]
    assert F.decode(F.encode(fields)) == fields



def test_a_copied_struct_shares_nothing_that_changes_and_encoded_structs_go_in_as_they_are(
        tmp_path):
    path = write_sample(tmp_path / "x.parquet")
    fields = F.decode(_footer_bytes(path))
    copy = F.copied(fields)
    assert copy == fields
    _, groups = F.get(copy, F.FILE_ROW_GROUPS)
    _, chunks = F.get(groups[0], F.RG_COLUMNS)
    F.put(F.get(chunks[0], F.CC_META), F.CM_DATA_PAGE_OFFSET, F.I64, 1 << 40)
    F.put(groups[0], F.RG_NUM_ROWS, F.I64, 12345)
    assert F.encode(F.decode(_footer_bytes(path))) == F.encode(fields)   # untouched
    assert copy != fields
    # row groups encoded ahead give the bytes of encoding them with the rest
    _, groups = F.get(fields, F.FILE_ROW_GROUPS)
    ahead = F.copied(fields)
    F.put(ahead, F.FILE_ROW_GROUPS, F.LIST,
          (F.STRUCT, [F.Encoded(F.encode(group)) for group in groups]))
    assert F.encode(ahead) == F.encode(fields) == _footer_bytes(path)
    out = io.BytesIO()
    F.write(out, ahead)
    assert out.getvalue()[:-8] == _footer_bytes(path)

@pytest.mark.parametrize("cut", [0, 1, 7, 30])
def test_a_damaged_footer_is_a_clear_error(tmp_path, cut):
    path = write_sample(tmp_path / "x.parquet")
    raw = _footer_bytes(path)
    with pytest.raises(CorruptDataError, match="Parquet footer"):
        F.decode(raw[:len(raw) - 1 - cut] if cut else raw + b"\x00")
    with pytest.raises(CorruptDataError):
        F.read(io.BytesIO(b"PAR1" + b"\x00" * 20))


def test_a_footer_of_structs_nested_without_end_is_a_clear_error():
    # (thousands of levels: a crafted file, which must not end in a traceback)
    with pytest.raises(CorruptDataError, match="nested deeper"):
        F.decode(b"\x1c" * 5000 + b"\x00" * 5001)
    with pytest.raises(ValueError):
        F.decode_prefix(b"\x1c" * 5000, 0)


@pytest.mark.parametrize("share", [-1, 10, 30, 1 << 16])
def test_short_runs_share_row_groups_and_longer_ones_have_their_own(tmp_path, monkeypatch,
                                                                     share):
    """A run of at most ``shared.RUN_ROWS`` rows goes into the row group being filled; a
    longer one starts a row group and ends it. A run's rows stay together, in run order."""
    from tbconvert.formats.parquet import shared
    monkeypatch.setattr(shared, "RUN_ROWS", share)
    path = write_sample(tmp_path / "x.parquet")
    pf = pq.ParquetFile(path)
    groups = [pf.read_row_group(g, columns=["run"]).column(0).to_pylist()
              for g in range(pf.num_row_groups)]
    rows = {run.name: sum(len(c) for c in chunks) for run, chunks in sample_runs()}
    with_points = [name for name, n in rows.items() if n]
    assert [name for g in groups for name in dict.fromkeys(g)] == with_points
    for g in groups:
        names = list(dict.fromkeys(g))
        if len(names) > 1:
            assert all(rows[name] <= share for name in names), names
    for name in with_points:
        if rows[name] > share:      # its row groups hold it alone
            assert [g for g in groups if name in g] == [[name] * rows[name]]
    shares = [g for g in groups if len(set(g)) > 1]
    neighbours = any(rows[a] <= share and rows[b] <= share
                     for a, b in zip(with_points, with_points[1:], strict=False))
    assert bool(shares) == neighbours
    assert neighbours == (share == 1 << 16)   # (the sample's runs: 24, 32, 4 rows)


def _direct(path, runs) -> None:
    writer = ParquetWriter(path, Options(), Report())
    writer.write_experiment(Experiment(name="e"))
    for run, chunks in runs:
        writer.write_run(run, iter(chunks))
    writer.close()


def _joined(path, runs, scratch) -> None:
    writer = ParquetWriter(path, Options(), Report())
    writer.write_experiment(Experiment(name="e"))
    for k, (run, chunks) in enumerate(runs):
        staged = scratch / f"{k}.run"
        info = ParquetWriter.stage_run(staged, run, iter(chunks), Report(), Options())
        writer.append_staged(staged, info, run.name)
    writer.close()


_META = {"scalar": Metadata("scalars", b"", data_class=DataClass.SCALAR),
         "tensor": Metadata("histograms", b"\x08\x01", data_class=DataClass.TENSOR),
         "blob": Metadata("images", b"", data_class=DataClass.BLOB_SEQUENCE)}


@st.composite
def _runs(draw):
    runs = []
    for r in range(draw(st.integers(0, 5))):
        name = f"run{r}/" + draw(st.text("abcé ./", max_size=4))
        chunks = []
        for t in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(sorted(_META)))
            n = draw(st.sampled_from([0, 1, 3, 40, 130]))
            seed = draw(st.integers(0, 99))
            rng = np.random.default_rng(seed)
            common = dict(run=name, tag=f"t{t}", metadata=_META[kind],
                          steps=np.arange(n) * draw(st.sampled_from([1, 7, 1 << 40])),
                          wall_times=1.7e9 + rng.random(n),
                          hidden=rng.random(n) < 0.1 if draw(st.booleans()) else None)
            if kind == "scalar":
                dtype = draw(st.sampled_from(["float32", "float64", "int64"]))
                chunks.append(ScalarSeries(**common, values=(rng.random(n) * 1e6).astype(dtype)))
            elif kind == "tensor":
                shape = draw(st.sampled_from([(3,), (2, 3), ()]))
                chunks.append(TensorSeries(**common, dtypes=np.full(n, 2, np.int32),
                                           tensors=tuple(rng.random(shape) for _ in range(n))))
            else:
                counts = rng.integers(0, 3, n)
                chunks.append(BlobSequenceSeries(
                    **common, offsets=np.concatenate([[0], np.cumsum(counts)]),
                    blobs=tuple(rng.bytes(int(rng.integers(0, 50))) for _ in range(counts.sum()))))
        runs.append((Run(name, 1.7e9 + r), chunks))
    return runs


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(runs=_runs(), rows=st.sampled_from([16, 100, 1 << 18]),
       share=st.sampled_from([-1, 50, 200, 1 << 16]), segment=st.sampled_from([1, 2, 256]),
       loose=st.sampled_from([2, 64]), split=st.sampled_from([1 << 40, 1]))
def test_runs_encoded_apart_join_into_the_bytes_of_one_writer(tmp_path_factory, runs, rows,
                                                              share, segment, loose, split):
    """Any runs: none, empty ones, series of every kind, row groups cut inside a run, short
    runs sharing row groups across segments of the file, payload columns encoded in halves;
    the series numbers of every run after the first are encoded anew in the joined file."""
    from tbconvert.formats.parquet import halves, shared
    from tbconvert.formats.parquet import writer as parquet_writer
    tmp = tmp_path_factory.mktemp("join")
    mp = pytest.MonkeyPatch()
    mp.setattr(S, "ROW_GROUP_ROWS", rows)
    mp.setattr(shared, "RUN_ROWS", share)
    mp.setattr(parquet_writer, "SEGMENT_RUNS", segment)
    mp.setattr(parquet_writer, "_LOOSE_PIECES", loose)
    mp.setattr(halves, "SPLIT_BYTES", split)
    try:
        _direct(tmp / "one.parquet", runs)
        _joined(tmp / "two.parquet", runs, tmp)
    finally:
        mp.undo()
    assert (tmp / "one.parquet").read_bytes() == (tmp / "two.parquet").read_bytes()
    back = tbconvert.read(tmp / "two.parquet", restarts="keep-all")   # digests checked
    assert not back.report.issues
    assert sum(len(c) for _, chunks in runs for c in chunks) == \
        sum(len(s) for tags in back.series.values() for s in tags.values())


def test_a_column_chunk_larger_than_a_copy_block_is_copied_whole(tmp_path, monkeypatch):
    """A point of 9 MB of random bytes: its column chunk is copied in several blocks (where
    the kernel does not copy it)."""
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    rng = np.random.default_rng(3)
    runs = []
    for r in range(2):
        blob = BlobSequenceSeries(run=f"r{r}", tag="big", metadata=_META["blob"],
                                  steps=[0, 1], wall_times=[1.0, 2.0], hidden=None,
                                  offsets=[0, 1, 2], blobs=(rng.bytes(9 << 20), b"small"))
        runs.append((Run(f"r{r}", 1.0), [blob]))
    _direct(tmp_path / "one.parquet", runs)
    _joined(tmp_path / "two.parquet", runs, tmp_path)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    assert (tmp_path / "two.parquet").stat().st_size > 18 << 20
    back = tbconvert.read(tmp_path / "two.parquet")
    assert back.series["r1"]["big"].blobs[0] == runs[1][1][0].blobs[0]


def _partly(limit):
    """``os.copy_file_range`` that copies at most ``limit`` bytes in all, then refuses."""
    real = os.copy_file_range
    left = [limit]

    def copy(src, dst, count, offset_src=None, offset_dst=None):
        if left[0] <= 0:
            raise OSError(errno.EXDEV, "refused")
        n = real(src, dst, min(count, left[0]), offset_src, offset_dst)
        left[0] -= n
        copied.append(n)
        return n
    copied: list[int] = []
    copy.copied = copied
    return copy


@pytest.mark.parametrize("how", ["kernel", "refused", "stops partway", "absent"])
def test_chunks_are_copied_alike_by_the_kernel_or_through_memory(tmp_path, monkeypatch, how):
    """Chunks go from file to file by ``os.copy_file_range``, a stretch of them that follow
    on at a time; where the system refuses it, or stops partway, the rest is copied in
    blocks, to the same bytes."""
    rng = np.random.default_rng(4)
    runs = [(Run(f"r{r}", 1.0), [BlobSequenceSeries(
        run=f"r{r}", tag="b", metadata=_META["blob"], steps=[0, 1], wall_times=[1.0, 2.0],
        hidden=None, offsets=[0, 1, 2], blobs=(rng.bytes(5 << 20), rng.bytes(99)))])
        for r in range(3)]
    _direct(tmp_path / "one.parquet", runs)
    if how != "absent" and not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range here")
    if how == "kernel":
        monkeypatch.setattr(os, "copy_file_range", kernel := _partly(1 << 40))
    elif how == "refused":
        monkeypatch.setattr(os, "copy_file_range", _partly(0))
    elif how == "stops partway":
        monkeypatch.setattr(os, "copy_file_range", _partly(7 << 20))
    elif how == "absent":
        monkeypatch.delattr(os, "copy_file_range", raising=False)
    _joined(tmp_path / "two.parquet", runs, tmp_path)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    if how == "kernel":
        assert sum(kernel.copied) > 15 << 20
        # a copy per stretch of chunks that follow on, not per chunk (15 columns a run): the
        # first run whole, the others around their renumbered series chunk
        assert len(kernel.copied) <= 1 + 2 * (len(runs) - 1), kernel.copied


def _one_column_chunk(ids, compress=True, dictionary=True):
    """The ``series`` column chunk Arrow writes for ``ids``: its bytes, its ColumnChunk."""
    import pyarrow as pa

    from tbconvert.formats.parquet.writer import only_chunk, parquet_writer
    field = S.SCHEMA.field("series")
    out = pa.BufferOutputStream()
    if dictionary:
        writer = parquet_writer(out, pa.schema([field]), compress=compress)
    else:
        writer = pq.ParquetWriter(out, pa.schema([field]), use_dictionary=False,
                                  compression="zstd", write_page_checksum=True)
    writer.write_table(pa.table([pa.array(ids, pa.int32())], schema=pa.schema([field])))
    writer.close()
    return only_chunk(out.getvalue().to_pybytes())


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("offset", [1, 7, 300, 70_000])
def test_a_series_chunk_moved_where_it_lies_is_the_chunk_arrow_writes(compress, offset):
    """Many pages (Arrow cuts them at 20,000 values), their statistics, the dictionary page
    compressed or not: moving the numbers in place gives Arrow's own chunk for them."""
    from tbconvert.formats.parquet import pages
    rng = np.random.default_rng(offset)
    ids = np.repeat(rng.permutation(40), rng.integers(1, 3000, 40))
    raw, chunk, at = _one_column_chunk(ids, compress)
    want, want_chunk, want_at = _one_column_chunk(ids + offset, compress)
    level = S.COMPRESSION_LEVELS["series"] if compress else None
    got, got_chunk = pages.moved_int32_chunk(raw, chunk, offset, level)
    assert got == want
    assert at == want_at and got_chunk == want_chunk


def test_a_chunk_that_cannot_be_moved_in_place_is_left_to_encoding():
    from tbconvert.formats.parquet import pages
    raw, chunk, _ = _one_column_chunk(np.arange(100), dictionary=False)
    assert pages.moved_int32_chunk(raw, chunk, 5, 3) is None           # no dictionary
    raw, chunk, _ = _one_column_chunk(np.array([0, (1 << 31) - 10]))
    assert pages.moved_int32_chunk(raw, chunk, 10, 3) is None          # past int32
    assert pages.moved_int32_chunk(raw[:-3], chunk, 1, 3) is None      # cut short


@pytest.mark.parametrize("in_place", [True, False])
def test_joined_runs_move_their_series_in_place_or_encode_them(tmp_path, monkeypatch,
                                                                in_place):
    """The joined file is the one writer's bytes both ways: each later run's ``series``
    chunks moved where they lie, or (where that cannot be done) encoded anew."""
    from test_archives_roundtrip import sample_runs

    from tbconvert.formats.parquet import pages, shared
    from tbconvert.formats.parquet import writer as parquet_writer
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr(shared, "RUN_ROWS", -1)     # every run its own row groups
    calls = {"moved": 0, "encoded": 0}
    real_move, real_encode = pages.moved_int32_chunk, parquet_writer._series_chunk

    def move(*args):
        calls["moved"] += 1
        return real_move(*args) if in_place else None

    def encode(*args):
        calls["encoded"] += 1
        return real_encode(*args)
    monkeypatch.setattr(pages, "moved_int32_chunk", move)
    monkeypatch.setattr(parquet_writer, "_series_chunk", encode)
    runs = sample_runs()
    _direct(tmp_path / "one.parquet", runs)
    _joined(tmp_path / "two.parquet", runs, tmp_path)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    assert calls["moved"] > 5
    assert calls["encoded"] == (0 if in_place else calls["moved"])


@pytest.mark.parametrize("logdir", ["torch_logdir", "tf2_logdir", "tensorboardx_logdir"])
@pytest.mark.parametrize("per_segment", [1, 2])
def test_a_file_written_in_segments_is_the_file_one_writer_writes(tmp_path, monkeypatch,
                                                                   logdir, per_segment):
    """A file of many runs is written SEGMENT_RUNS runs at a time, each segment joined once
    full: the same bytes, and no segment left beside it."""
    from tbconvert.formats.parquet import writer
    whole, segmented = tmp_path / "whole.parquet", tmp_path / "segmented.parquet"
    tbconvert.convert(FIXTURES / logdir, whole, jobs=1)
    monkeypatch.setattr(writer, "SEGMENT_RUNS", per_segment)
    tbconvert.convert(FIXTURES / logdir, segmented, jobs=1)
    assert segmented.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["segmented.parquet", "whole.parquet"]


def test_an_interrupted_segmented_file_leaves_nothing(tmp_path, monkeypatch):
    from tbconvert.formats.parquet import writer
    monkeypatch.setattr(writer, "SEGMENT_RUNS", 1)
    real = writer._JoinedSink.append_segment
    calls = []

    def interrupted(self, sink):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, sink)

    monkeypatch.setattr(writer._JoinedSink, "append_segment", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "out.parquet", jobs=1)
    assert list(tmp_path.iterdir()) == []


def _tiny_run(k: int):
    md = _META["scalar"]
    chunks = [ScalarSeries(run=f"run{k:05d}", tag=tag, metadata=md,
                           steps=np.arange(2, dtype=np.int64),
                           wall_times=np.array([1.5, 2.5]) + k, hidden=None,
                           values=np.array([k, k + 0.5], dtype=np.float32))
              for tag in ("loss", "accuracy", "lr", "grad_norm")]
    return Run(f"run{k:05d}", 1.0 + k, ()), chunks


def test_a_file_of_many_runs_keeps_no_memory_per_run(tmp_path, monkeypatch):
    """What the footer lists of each run (its JSON, its series', its row group's entry and
    checksums) waits beside the file, not in memory: 20,000 short runs took 9 KB each,
    past the memory bound."""
    import tracemalloc

    from tbconvert.formats.parquet import columns, shared
    from tbconvert.formats.parquet import writer as parquet_writer
    from tbconvert.formats.parquet.reader import ArchiveFile
    monkeypatch.setattr(parquet_writer, "SEGMENT_RUNS", 10)
    monkeypatch.setattr(shared, "RUN_ROWS", -1)   # a row group a run: the most footer
    path = tmp_path / "many.parquet"
    writer = ParquetWriter(path, Options(), Report())
    writer.write_experiment(Experiment(name="e"))
    runs = 700

    def write(ks) -> None:
        for k in ks:
            run, chunks = _tiny_run(k)
            writer.write_run(run, iter(chunks))
    tracemalloc.start()
    try:
        for k in range(5000):   # the names' cache full: each run's name replaces another
            columns._one_string(f"filler {k}")
        write(range(100))
        before = tracemalloc.get_traced_memory()[0]
        write(range(100, runs))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    writer.close()
    assert grown / (runs - 100) < 1000    # bytes a run (it was about 4,600)
    archive = ArchiveFile(path, Options(), Report())
    try:
        assert [r.name for r in archive.runs] == [f"run{k:05d}" for k in range(runs)]
        assert len(archive.series) == 4 * runs
        assert archive.group_count == len(archive.row_groups) == runs
        assert sum(len(chunk) for _, chunk in archive.chunks()) == 8 * runs
    finally:
        archive.close()
    assert [p.name for p in tmp_path.iterdir()] == ["many.parquet"]


def test_a_spool_closed_on_a_full_disk_says_nothing(tmp_path):
    # A conversion given up on a full disk closes its spools on the way out: their last
    # buffered bytes cannot be written then, and that is no new error (it hid the full disk's
    # exit 9 behind an internal error).
    from tbconvert.formats.parquet import spool

    made = spool.Spool(tmp_path, b",")
    made.add(b"x" * 100)
    real = made._fh

    class Full:
        def close(self):
            real.close()
            raise OSError(28, "No space left on device")
    made._fh = Full()
    made.close()
    assert real.closed
