"""Parquet archive: declared schema, plain-tool queries, directory datasets, error messages."""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES, parquet_codecs
from test_archives_roundtrip import assert_lossless, sample_runs, write_sample

import tbconvert
from tbconvert import registry
from tbconvert.errors import CorruptDataError, FormatError
from tbconvert.formats.parquet import MARKER_FILE, ParquetFormat
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.writer import _FileSink
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries

SCAL = Metadata("scalars", b"", "", "", DataClass.SCALAR)


def _scalar_runs(n=1000):
    steps = np.arange(n)
    out = []
    for run in ("train", "eval/a b", "ü.x"):
        out.append((Run(run, 10.0), [
            ScalarSeries(run=run, tag="loss", metadata=SCAL, steps=steps, wall_times=10.0 + steps,
                         hidden=None, values=(steps * 0.5).astype(np.float32)),
            ScalarSeries(run=run, tag="acc/top1", metadata=SCAL, steps=steps,
                         wall_times=10.0 + steps, hidden=None, values=-steps.astype(np.float64)),
        ]))
    return out


def test_written_schema_and_metadata(tmp_path):
    path = write_sample(tmp_path / "x.parquet")
    pf = pq.ParquetFile(path)
    # Names are stored as plain (dictionary-encoded) strings, so every reader sees strings.
    read = pf.schema_arrow
    assert read.names == S.SCHEMA.names
    for want in S.SCHEMA:
        got = read.field(want.name)
        assert got.nullable == want.nullable, want.name
        if pa.types.is_dictionary(want.type):
            assert got.type == want.type.value_type, want.name
        elif pa.types.is_list(want.type):
            assert pa.types.is_list(got.type) and got.type.value_type == want.type.value_type
        else:
            assert got.type == want.type, want.name
    meta = json.loads(pf.metadata.metadata[S.METADATA_KEY])
    assert meta["format"] == "tbconvert-parquet" and meta["schema_version"] == 1
    assert meta["experiment"]["name"] == "Ñame"
    assert [r["name"] for r in meta["runs"]] == [r.name for r, _ in sample_runs()]
    table = pq.read_table(path)
    assert table.schema.field("run").type == pa.string()
    cols = pf.metadata.row_group(0).to_dict()["columns"]
    assert all(c["compression"] == "ZSTD" for c in cols)
    by_name = {c["path_in_schema"]: c for c in cols}
    assert "BYTE_STREAM_SPLIT" in by_name["value"]["encodings"]
    assert "DELTA_BINARY_PACKED" in by_name["step"]["encodings"]
    for name in ("run", "tag", "data_class", "plugin_name", "tensor_dtype"):
        assert any("DICT" in e for e in by_name[name]["encodings"]), name


def test_value_column_is_float64_and_null_for_other_classes(tmp_path):
    path = write_sample(tmp_path / "x.parquet")
    t = pq.read_table(path).to_pandas()
    scalars = t[t["data_class"] == "scalar"]
    assert scalars["value"].notna().sum() > 0
    assert t.loc[t["data_class"] != "scalar", "value"].isna().all()
    loss = t[(t["run"] == "train/ünï code/v1.0") & (t["tag"] == "loss/train.v")]
    assert loss["step"].tolist() == list(range(10))
    assert loss["hidden"].tolist() == [False, False, True, True] + [False] * 6
    # -0.0 and the signalling-NaN payload: value column is float64, the exact bits come back
    assert np.signbit(loss["value"].iloc[5]) and loss["value"].iloc[5] == 0


def test_pandas_and_pyarrow_filter_query(tmp_path):
    path = tmp_path / "x.parquet"
    write_sample(path, runs=_scalar_runs())
    t = pq.read_table(path, columns=["step", "value"],
                      filters=[("run", "=", "train"), ("tag", "=", "loss")])
    assert t.column("step").to_pylist() == list(range(1000))
    assert t.column("value").to_pylist() == [s * 0.5 for s in range(1000)]
    df = __import__("pandas").read_parquet(path)
    assert set(df["run"].astype(str)) == {"train", "eval/a b", "ü.x"}


def test_duckdb_query(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    path = tmp_path / "x.parquet"
    write_sample(path, runs=_scalar_runs())
    rows = duckdb.sql(f"SELECT step, value FROM '{path}' WHERE run = 'train' AND tag = 'loss' "
                      "ORDER BY step").fetchall()
    assert rows == [(s, s * 0.5) for s in range(1000)]
    meta = duckdb.sql(f"SELECT value FROM parquet_kv_metadata('{path}') "
                      "WHERE key = 'tbconvert'").fetchall()[0][0]
    assert json.loads(meta)["schema_version"] == 1


def test_polars_query(tmp_path):
    pl = pytest.importorskip("polars")
    path = tmp_path / "x.parquet"
    write_sample(path, runs=_scalar_runs())
    df = pl.read_parquet(path).filter((pl.col("run") == "eval/a b") & (pl.col("tag") == "acc/top1"))
    assert df["value"].to_list() == [-float(s) for s in range(1000)]


def test_directory_dataset_reads_as_one_table(tmp_path):
    out = tmp_path / "dataset"
    write_sample(out, runs=sample_runs(), fmt="parquet")
    files = sorted(p.name for p in out.iterdir())
    assert MARKER_FILE in files
    parts = [f for f in files if f.endswith(".parquet")]
    assert len(parts) == len(sample_runs())
    # run names never become unsafe paths
    assert all("/" not in p and not p.startswith(".") for p in parts)
    assert all(p.parent == out for p in out.rglob("*.parquet"))
    table = ds.dataset(out, format="parquet").to_table()
    total = sum(len(c) for _, cs in sample_runs() for c in cs)
    assert table.num_rows == total
    assert set(table.column("run").to_pylist()) == {r.name for r, cs in sample_runs() if cs}
    assert ParquetFormat.sniff(out)
    assert registry.detect_source(out) is ParquetFormat
    assert_lossless(out)


def test_directory_dataset_duckdb(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "dataset"
    write_sample(out, runs=_scalar_runs(), fmt="parquet")
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/*.parquet') WHERE tag = 'loss'"
                   ).fetchall()[0][0]
    assert n == 3000


@pytest.mark.filterwarnings("ignore:The inplace keyword")  # inside Dask, with pandas 3.1
def test_directory_dataset_dask(tmp_path):
    """Dask reads the directory as one frame, a run without points (an empty part) included."""
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    out = tmp_path / "dataset"
    write_sample(out, runs=sample_runs(), fmt="parquet")
    assert any(not cs for _, cs in sample_runs())
    frame = dd.read_parquet(out).compute()
    table = ds.dataset(out, format="parquet").to_table()
    assert len(frame) == table.num_rows
    for name in ("run", "tag", "step", "data_class", "tensor_dtype"):
        got = [None if v is None or v is pd.NA else v for v in frame[name].tolist()]
        assert got == table.column(name).to_pylist(), name


def test_archives_with_categorical_names_still_read(tmp_path):
    """Archives from earlier tbconvert versions kept the Arrow schema in the footer, so their
    name columns read back as dictionaries: they read exactly as before."""
    path = write_sample(tmp_path / "x.parquet")
    names = ["run", "tag", "data_class", "plugin_name", "tensor_dtype"]
    source = pq.ParquetFile(path, read_dictionary=names)
    old = tmp_path / "old.parquet"
    with pq.ParquetWriter(old, source.schema_arrow, write_page_checksum=True) as writer:
        for group in range(source.num_row_groups):     # the row groups the digests list
            writer.write_table(source.read_row_group(group))
    assert pa.types.is_dictionary(pq.ParquetFile(old).schema_arrow.field("run").type)
    assert_lossless(old)


def test_row_groups_capped_by_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "ROW_GROUP_BYTES", 200_000)
    runs = _scalar_runs(20_000)
    path = write_sample(tmp_path / "x.parquet", runs=runs)
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_row_groups >= 10
    assert_lossless(path, runs)
    path = write_sample(tmp_path / "y.parquet")
    assert_lossless(path)


def test_size_of_scalar_archive_is_small(tmp_path):
    path = tmp_path / "x.parquet"
    n = 100_000
    rng = np.random.default_rng(1)
    steps = np.arange(n)
    chunks = [ScalarSeries(run="r", tag="loss", metadata=SCAL, steps=steps,
                           wall_times=1.7e9 + np.cumsum(rng.uniform(0.01, 0.02, n)), hidden=None,
                           values=rng.normal(size=n).astype(np.float32))]
    write_sample(path, runs=[(Run("r", 1.7e9), chunks)])
    # ~45 bytes per point in event files; the archive must stay well under 35% of that
    assert path.stat().st_size / n < 14


# ------------------------------------------------------------------ errors

def _load(path):
    return tbconvert.read(path, format="parquet", restarts="keep-all")


def test_foreign_parquet_file(tmp_path):
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), path)
    with pytest.raises(CorruptDataError, match="not a tbconvert Parquet archive") as info:
        _load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert not ParquetFormat.sniff(path)


def test_not_parquet_at_all(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_bytes(b"hello world, definitely not parquet" * 10)
    with pytest.raises(CorruptDataError, match="not a readable Parquet file"):
        _load(path)


def test_newer_schema_version(tmp_path):
    path = tmp_path / "new.parquet"
    sink = _FileSink(path)
    sink.close(tbconvert.Experiment())
    meta = json.loads(pq.ParquetFile(path).metadata.metadata[S.METADATA_KEY])
    meta["schema_version"] = 99
    table = pq.read_table(path).replace_schema_metadata({S.METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, path)
    with pytest.raises(FormatError, match="newer tbconvert.*upgrade"):
        _load(path)


def test_truncated_file(tmp_path):
    path = write_sample(tmp_path / "x.parquet")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptDataError, match="x.parquet"):
        _load(path)


def test_damaged_page(tmp_path):
    """Bytes flipped all over the data pages: every page's checksum catches it; the damage is
    reported, never read as data, and never a traceback."""
    path = tmp_path / "x.parquet"
    write_sample(path, runs=_scalar_runs(20_000))
    data = bytearray(path.read_bytes())
    footer_len = struct.unpack("<I", data[-8:-4])[0]
    body_end = len(data) - 8 - footer_len
    for i in range(100, body_end - 100, 97):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    loaded = _load(path)
    assert sum(len(c) for tags in loaded.series.values() for c in tags.values()) == 0
    issues = [i for i in loaded.report.issues if i.kind == "damaged_row_group"]
    assert issues and all("x.parquet" in i.message for i in issues)
    assert sum(i.count for i in issues) == 3 * 2 * 20_000


def _column_chunk(path, group: int, column: str) -> tuple[int, int]:
    rg = pq.ParquetFile(path).metadata.row_group(group)
    col = next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema == column)
    start = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    return start, col.total_compressed_size


def test_damaged_row_group_costs_that_row_group_only(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 10_000)
    runs = _scalar_runs(20_000)            # 3 runs x 2 tags x 20,000 rows: 12 row groups
    path = write_sample(tmp_path / "x.parquet", runs=runs)
    assert pq.ParquetFile(path).metadata.num_row_groups == 12
    start, size = _column_chunk(path, 5, "value")   # rows 50,000-59,999: "eval/a b"/loss, 2nd half
    data = bytearray(path.read_bytes())
    data[start + size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    loaded = _load(path)
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_row_group" and issue.count == 10_000
    assert "row group 5" in issue.message and "'eval/a b'" in issue.message
    for run, chunks in runs:
        for c in chunks:
            got = loaded.series[run.name][c.tag]
            keep = 10_000 if (run.name, c.tag) == ("eval/a b", "loss") else 20_000
            np.testing.assert_array_equal(got.steps, c.steps[:keep])
            np.testing.assert_array_equal(got.values, c.values[:keep])
            np.testing.assert_array_equal(got.wall_times, c.wall_times[:keep])


def test_damaged_names_are_caught_by_the_metadata_checksum(tmp_path):
    path = write_sample(tmp_path / "x.parquet", runs=_scalar_runs(100))
    pf = pq.ParquetFile(path)
    kv = dict(pf.metadata.metadata)
    kv[S.METADATA_KEY] = kv[S.METADATA_KEY].replace(b'"acc/top1"', b'"acc/top2"')
    schema = pf.schema_arrow.with_metadata(kv)
    with pq.ParquetWriter(tmp_path / "y.parquet", schema) as writer:
        for group in range(pf.num_row_groups):     # the row groups the digests list
            writer.write_table(pf.read_row_group(group).replace_schema_metadata(kv))
    with pytest.raises(CorruptDataError, match="y.parquet: damaged tbconvert metadata.*checksum"):
        _load(tmp_path / "y.parquet")
    loaded = tbconvert.read(tmp_path / "y.parquet", ignore_checksum=True, restarts="keep-all")
    assert [i.kind for i in loaded.report.issues] == ["damaged_archive"]
    assert "acc/top2" in loaded.series["train"]


def test_damaged_marker(tmp_path):
    out = tmp_path / "dataset"
    write_sample(out, fmt="parquet")
    (out / MARKER_FILE).write_text("{not json")
    with pytest.raises(CorruptDataError, match="damaged"):
        _load(out)
    marker = {"format": S.FORMAT_NAME, "schema_version": 1, "parts": [{"file": "../x.parquet"}]}
    (out / MARKER_FILE).write_text(json.dumps(marker))
    with pytest.raises(CorruptDataError, match="checksum is missing.*ignore_checksum=True"):
        _load(out)
    marker[S.MARKER_DIGEST] = S.marker_digest(marker)
    (out / MARKER_FILE).write_text(json.dumps(marker))
    with pytest.raises(CorruptDataError, match="unsafe part name"):
        _load(out)


def test_every_tensor_and_blob_layout_round_trips(tmp_path):
    """The writer encodes tensor points in bulk when they share dtype and shape (stacked) or
    dtype only (concatenated), one by one otherwise; blobs with holes; each way is exact."""
    from tbconvert import dtypes as dt
    from tbconvert.model import BlobSequenceSeries, TensorSeries
    md = Metadata("x", b"", "", "", DataClass.TENSOR)
    steps = np.arange(4)

    def tensors(tag, codes, arrays, hidden=None):
        return TensorSeries(run="r", tag=tag, metadata=md, steps=steps, wall_times=steps + 0.5,
                            hidden=hidden, dtypes=codes, tensors=tuple(arrays))

    chunks = [
        tensors("stacked", [dt.DT_DOUBLE] * 4, [np.arange(6.).reshape(2, 3) + i for i in range(4)],
                hidden=[False, True, False, False]),
        tensors("rank0", [dt.DT_INT64] * 4, [np.array(2**62 + i) for i in range(4)]),
        tensors("shapes", [dt.DT_DOUBLE] * 4,
                [np.zeros((2, 3)), np.ones((1, 3)), np.zeros((0, 3)), np.arange(9.).reshape(3, 3).T]),
        tensors("lengths", [dt.DT_FLOAT] * 4, [np.arange(k, dtype="<f4") for k in (3, 0, 1, 5)]),
        tensors("mixed", [dt.DT_STRING, dt.DT_FLOAT, dt.DT_STRING, dt.DT_HALF],
                [dt.string_array([b"a", b"bc"]), np.zeros((2, 3), np.float32),
                 dt.string_array([]), np.array([1.5, -2], np.float16)]),
        BlobSequenceSeries.from_sequences(
            run="r", tag="blobs", metadata=Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE),
            steps=steps, wall_times=steps + 0.5, hidden=None,
            sequences=[[b"a", None], [], [None], [b"", b"\x00" * 70]]),
    ]
    runs = [(Run("r", 1.0), chunks)]
    path = write_sample(tmp_path / "t.parquet", runs=runs)
    assert_lossless(path, runs)


def _short_series_runs():
    from tbconvert import dtypes as dt
    from tbconvert.model import BlobSequenceSeries, TensorSeries
    other = Metadata("custom", b"\x01", "Loss", "", DataClass.SCALAR)
    tmd = Metadata("x", b"", "", "", DataClass.TENSOR)

    def scalars(tag, values, md=SCAL, hidden=None):
        steps = np.arange(len(values)) * 3
        return ScalarSeries(run="r", tag=tag, metadata=md, steps=steps, wall_times=steps + 0.25,
                            hidden=hidden, values=values)

    def tensors(tag, codes, arrays, hidden=None):
        steps = np.arange(len(arrays)) * 2
        return TensorSeries(run="r", tag=tag, metadata=tmd, steps=steps, wall_times=steps + 0.5,
                            hidden=hidden, dtypes=codes, tensors=arrays)

    def blobs(tag, sequences):
        steps = np.arange(len(sequences))
        return BlobSequenceSeries.from_sequences(
            run="r", tag=tag, metadata=Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE),
            steps=steps, wall_times=steps + 0.5, hidden=None, sequences=sequences)
    chunks = [
        scalars("a", np.arange(5, dtype=np.float32), hidden=[0, 1, 0, 0, 1]),
        scalars("b", np.array([np.nan, -0.0, np.inf], np.float32)),
        scalars("a", np.arange(4, dtype=np.float32), md=other),    # the same tag, new series
        scalars("big", np.array([2**62 + 1, -(2**60) - 3], np.int64)),   # past float64
        scalars("c", np.arange(3, dtype=np.float32)),
        TensorSeries(run="r", tag="t", metadata=tmd, steps=np.arange(2), wall_times=[1.0, 2.0],
                     hidden=None, dtypes=[dt.DT_DOUBLE] * 2, tensors=(np.zeros(2), np.ones(2))),
        scalars("d", np.arange(6, dtype=np.float64)),
        scalars("e", np.arange(7000, dtype=np.float32)),                    # long: a batch alone
        scalars("f", np.arange(2, dtype=np.float32)),
        # histograms, one per parameter: one shape, then shapes that differ, then a dtype
        *[tensors(f"h{k}", [dt.DT_DOUBLE] * 3, [np.full((4, 3), k + i, np.float64)
                                                 for i in range(3)]) for k in range(3)],
        tensors("ragged", [dt.DT_DOUBLE] * 2, [np.zeros((2, 3)), np.ones((5, 3))]),
        tensors("f32", [dt.DT_FLOAT] * 2, [np.arange(3, dtype=np.float32)] * 2),
        tensors("text", [dt.DT_STRING] * 2, [dt.string_array([b"x"]), dt.string_array([])]),
        tensors("after", [dt.DT_INT64], [np.array([2**62 + 1], np.int64)], hidden=[1]),
        blobs("img", [[b"\x89PNG", None], [], [b""]]),
        blobs("img2", [[b"a" * 300]]),
        tensors("last", [dt.DT_DOUBLE], [np.zeros(1)]),
    ]
    return [(Run("r", 1.0), chunks)]


def _same_rows(a: pa.Table, b: pa.Table) -> None:
    """Equal tables, NaNs compared by their bits."""
    assert a.schema == b.schema and a.num_rows == b.num_rows
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if pa.types.is_floating(x.type):
            x, y = (np.asarray(v.to_numpy(zero_copy_only=False)).view(np.int64) for v in (x, y))
            assert (x == y).all(), name
        else:
            assert x.equals(y), name


def test_short_series_share_batches_exactly(tmp_path, monkeypatch):
    """Short series of one kind (and scalar value dtype) are encoded together: the rows,
    their order, the series numbering and every value are what one batch per series gives."""
    from tbconvert.formats.parquet import writer as W
    runs = _short_series_runs()
    shared = write_sample(tmp_path / "shared.parquet", runs=runs)
    assert_lossless(shared, runs)
    monkeypatch.setattr(W, "SHORT_SERIES_ROWS", 0)
    alone = write_sample(tmp_path / "alone.parquet", runs=runs)
    _same_rows(pq.read_table(shared), pq.read_table(alone))
    meta = [json.loads(pq.read_metadata(p).metadata[S.METADATA_KEY])
            for p in (shared, alone)]
    assert meta[0]["series"] == meta[1]["series"]
    assert meta[0][S.ROW_GROUPS_KEY] == meta[1][S.ROW_GROUPS_KEY]    # digests of the same values


def test_shared_batches_keep_to_their_byte_cap(tmp_path, monkeypatch):
    """Series share batches by kind, up to a payload size: a cap below a histogram's bytes
    gives more batches and the same rows; string tensors keep batches of their own."""
    from tbconvert.formats.parquet import writer as W
    runs = _short_series_runs()
    sizes = []
    shared_batch = W._shared_batch

    def counted(chunks, sids, run):
        sizes.append([c.tag for c in chunks])
        return shared_batch(chunks, sids, run)
    monkeypatch.setattr(W, "_shared_batch", counted)
    wide = write_sample(tmp_path / "wide.parquet", runs=runs)
    assert ["h0", "h1", "h2", "ragged", "f32"] in sizes and ["text"] in sizes
    assert ["after", "img"] not in sizes and ["img", "img2"] in sizes
    sizes.clear()
    monkeypatch.setattr(W, "SHARED_BATCH_BYTES", 200)
    narrow = write_sample(tmp_path / "narrow.parquet", runs=runs)
    assert ["h0"] in sizes and ["h1"] in sizes and ["img2"] in sizes
    _same_rows(pq.read_table(wide), pq.read_table(narrow))


def test_many_one_point_series_share_batches_exactly(tmp_path, monkeypatch):
    """Thousands of one-point series (a run that logs a tag per step, say), their value
    dtypes changing along the way, as one batch per series gives them."""
    from tbconvert.formats.parquet import writer as W
    chunks = []
    for k in range(3000):
        dtype = np.float32 if (k // 700) % 2 == 0 else np.float64
        chunks.append(ScalarSeries(run="r", tag=f"t{k % 1000}", metadata=SCAL, steps=[k],
                                   wall_times=[k + 0.5], hidden=None,
                                   values=np.array([k * 0.25], dtype)))
    runs = [(Run("r", 1.0), chunks)]
    shared = write_sample(tmp_path / "shared.parquet", runs=runs)
    monkeypatch.setattr(W, "SHORT_SERIES_ROWS", 0)
    alone = write_sample(tmp_path / "alone.parquet", runs=runs)
    _same_rows(pq.read_table(shared), pq.read_table(alone))
    assert_lossless(shared, runs)


def test_uncompressed_part_reads_the_same(tmp_path):
    """A small part written without compression (a sync's) holds what a compressed one does."""
    from tbconvert.formats.parquet.writer import write_part
    from tbconvert.model import Experiment
    runs = _short_series_runs()
    (run, chunks), = runs
    for compress in (True, False):
        write_part(tmp_path / f"{compress}.parquet", Experiment(), run, iter(chunks),
                   compress=compress)
    assert parquet_codecs(tmp_path / "False.parquet") == {"UNCOMPRESSED"}
    assert parquet_codecs(tmp_path / "True.parquet") == {"ZSTD"}
    plain, packed = (pq.ParquetFile(tmp_path / f"{c}.parquet") for c in (False, True))
    _same_rows(plain.read(), packed.read())
    assert plain.metadata.metadata == packed.metadata.metadata


_WATCHED = """
import sys
asked = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pandas":
            asked.append(name)
        return None
sys.meta_path.insert(0, Watch())
"""


def _pandas_asked(code: str) -> list:
    """The pandas modules a fresh interpreter asked for while it ran ``code``."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _WATCHED + code + "\nprint(asked)"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_merging_parts_never_asks_for_pandas(tmp_path):
    """Merging a run's parts (a sync's compaction) reads them back without pyarrow's pandas
    shim, which imports pandas: most of a second, in a process that may never need it."""
    assert _pandas_asked(f"""
from pathlib import Path
import numpy as np
from tbconvert.formats.parquet.writer import merge_parts, write_part
from tbconvert.model import DataClass, Experiment, Metadata, Run, ScalarSeries
from tbconvert.report import Report
md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
tmp = Path({str(tmp_path)!r})
parts = []
for k in range(3):
    steps = np.arange(10) + 10 * k
    chunk = ScalarSeries(run="r", tag="loss", metadata=md, steps=steps, wall_times=steps + 0.5,
                         hidden=None, values=steps.astype(np.float32))
    parts.append(tmp / f"p{{k}}.parquet")
    write_part(parts[-1], Experiment(), Run("r", 1.0), iter([chunk]), compress=k != 1)
report = Report()
merge_parts(parts, tmp / "merged.parquet", Experiment(), report)
assert not report.issues, report.issues
""") == []
    assert pq.read_table(tmp_path / "merged.parquet").column("step").to_pylist() == \
        list(range(30))


def test_reading_an_archive_never_asks_for_pandas(tmp_path):
    """Reading an archive through the API (which does not block pandas as the command
    does) leaves pandas unimported: pyarrow's ``to_numpy`` would import it, most of a
    second and about 50 MiB, for a program that may never use it."""
    src = write_sample(tmp_path / "a.parquet")
    assert _pandas_asked(f"""
import tbconvert
tbconvert.convert({str(src)!r}, {str(tmp_path / "back")!r}, to_format="tfevents")
tbconvert.convert({str(src)!r}, {str(tmp_path / "joined.parquet")!r}, jobs=2)
""") == []


def test_numbers_from_buffers_are_what_to_numpy_gives():
    from tbconvert.formats.parquet.columns import to_numbers
    cases = [pa.array([1, 2, 3], pa.int64()), pa.array([1.5, None, 3.0]),
             pa.array([1, None, 3], pa.int32()), pa.array(np.arange(20, dtype=np.int32)).slice(3, 9),
             pa.array([True, False] * 9).slice(5, 7), pa.array([0.5, None] * 5).slice(1, 6),
             pa.array([], pa.float64()), pa.array([np.nan, -0.0, np.inf], pa.float32())]
    for a in cases:
        got, want = to_numbers(a), a.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype, a.type
        if got.dtype.kind == "f":
            assert np.array_equal(got, want, equal_nan=True)
            assert (np.signbit(got) == np.signbit(want)).all()
        else:
            assert np.array_equal(got, want)
    flags = pa.array([True, None, False] * 7).slice(4, 11)      # to_numpy: objects, None
    assert to_numbers(flags).tolist() == [v is True for v in flags.to_pylist()]


def test_a_large_footer_added_after_arrow_closes_is_arrows_bytes(tmp_path, monkeypatch):
    """The archive's JSON past _SMALL_FOOTER is added to the footer after Arrow has closed
    the file (footer.add_key_value): the file is byte for byte the one Arrow writes with it."""
    from tbconvert.formats.parquet import writer as W
    from tbconvert.model import Experiment
    (run, chunks), = _short_series_runs()
    for small_footer, name in ((1 << 30, "arrow"), (0, "added")):
        monkeypatch.setattr(W, "_SMALL_FOOTER", small_footer)
        W.write_part(tmp_path / name, Experiment(), run, iter(chunks))
    assert (tmp_path / "added").read_bytes() == (tmp_path / "arrow").read_bytes()


def test_part_files_the_marker_does_not_list_are_told_of_not_read(tmp_path):
    """Readers of the bare directory read every part file; tbconvert reads those the marker
    lists, and says so of the others (a sync cut short leaves some until the next one)."""
    import shutil
    out = tmp_path / "ds"
    tbconvert.convert(FIXTURES / "torch_logdir", out, to_format="parquet")
    listed = sorted(out.glob("part-*.parquet"))
    shutil.copy(max(listed, key=lambda p: p.stat().st_size), out / "part-00099-stray.parquet")
    report = tbconvert.convert(out, tmp_path / "again.parquet")
    [note] = [i for i in report.issues if i.kind == "parts_not_listed"]
    assert note.message == (
        f"{out}: 1 part file(s) that its _tbconvert.json does not list were not read "
        "(part-00099-stray.parquet); readers of every file (pyarrow.dataset, DuckDB's glob, "
        "Dask) read them: a sync cut short leaves them until the next one, otherwise remove "
        "them")
    assert not note.lost and note.count == 1
    # what tbconvert read is the dataset the marker lists; a bare-directory reader sees more
    from tbconvert.verify import compare
    assert compare(FIXTURES / "torch_logdir", out) == []
    assert ds.dataset(out, format="parquet").count_rows() > \
        ds.dataset(listed, format="parquet").count_rows()
