"""A row group's payload column encoded in two halves at once (tbconvert/formats/parquet/halves.py):
the archive reads back as the one encoded whole, by Arrow and by tbconvert, TensorBoard's view
of it written back to event files is the source's, and damage in either half is caught."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert.formats.parquet import halves
from tbconvert.formats.parquet import schema as S


def _payload_chunks(path: Path) -> list:
    md = pq.ParquetFile(path).metadata
    out = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            cc = rg.column(c)
            if cc.path_in_schema.split(".")[0] in halves.COLUMNS:
                out.append((rg.num_rows, cc))
    return out


@pytest.fixture
def both(tmp_path, monkeypatch):
    """``(whole, split)``: the fixtures' TF2 and PyTorch logdirs (histograms, images) as one
    archive each way, in row groups of 40 rows so that there are several."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "tf2_logdir", src / "tf2")
    shutil.copytree(FIXTURES / "torch_logdir", src / "torch")
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 40)
    whole, split = tmp_path / "whole.parquet", tmp_path / "split.parquet"
    tbconvert.convert(src, whole, jobs=1)
    monkeypatch.setattr(halves, "SPLIT_BYTES", 1)
    tbconvert.convert(src, split, jobs=1)
    monkeypatch.undo()
    return src, whole, split


def test_split_payload_chunks_read_back_as_the_whole_ones(both):
    src, whole, split = both
    assert pq.read_table(split).equals(pq.read_table(whole))
    chunks = _payload_chunks(split)
    halved = [(rows, cc) for rows, cc in chunks if rows >= 2]
    assert halved
    for rows, cc in halved:
        # the column's pages are those of two files: at least two, every value counted
        assert cc.num_values >= rows
        assert cc.compression == "ZSTD"
        assert not cc.has_dictionary_page
    a, b = tbconvert.read(whole, restarts="keep-all"), tbconvert.read(split, restarts="keep-all")
    assert not b.report.issues
    for run, tags in a.series.items():
        for tag, s in tags.items():
            t = b.series[run][tag]
            assert len(t) == len(s) and (t.steps == s.steps).all(), (run, tag)


def test_split_payload_shows_tensorboard_the_source(both, tmp_path):
    src, _, split = both
    back = tmp_path / "back"
    tbconvert.convert(split, back, to_format="tfevents")
    assert_same_view(tb_view(back), tb_view(src))


def test_split_runs_encoded_apart_join_into_the_same_bytes(tmp_path, monkeypatch):
    src = tmp_path / "src"
    for k in range(3):
        shutil.copytree(FIXTURES / "tf2_logdir", src / f"r{k}")
    monkeypatch.setattr(halves, "SPLIT_BYTES", 1)
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    tbconvert.convert(src, one, jobs=1)
    from tbconvert.formats.tfevents import reader
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    tbconvert.convert(src, two, jobs=2)
    assert one.read_bytes() == two.read_bytes()


@pytest.mark.parametrize("half", [0, 1])
def test_damage_in_either_half_costs_its_row_group_only(both, tmp_path, half):
    _, _, split = both
    chunks = [cc for rows, cc in _payload_chunks(split) if rows >= 2
              and cc.total_compressed_size > 200]
    cc = chunks[0]
    raw = bytearray(split.read_bytes())
    # a byte in the first pages, or in the last ones
    at = cc.data_page_offset + (40 if half == 0 else cc.total_compressed_size - 5)
    raw[at] ^= 0xFF
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bytes(raw))
    got = tbconvert.read(damaged, restarts="keep-all")
    assert got.report.issues
    assert any(got.series.values())


def test_other_readers_read_split_chunks_as_arrow_does(both):
    """DuckDB and Polars read the halves' pages (a chunk of pages of two files) as they read
    the chunk Arrow encodes whole."""
    _, whole, split = both
    duckdb = pytest.importorskip("duckdb")
    pl = pytest.importorskip("polars")
    query = "select run, tag, step, wall_time, tensor_content, blobs from '{}'"
    assert sorted(duckdb.sql(query.format(split)).fetchall(), key=repr) == \
        sorted(duckdb.sql(query.format(whole)).fetchall(), key=repr)
    columns = ["run", "tag", "step", "tensor_content", "blobs"]
    assert pl.read_parquet(split, columns=columns).equals(pl.read_parquet(whole, columns=columns))
