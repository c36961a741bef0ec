"""An archive whose rows another tool wrote again in other row groups (``pq.write_table``
keeps the key-value metadata, so the file still carries tbconvert's checksums): read whole
when its rows are those tbconvert wrote, however grouped; rows dropped, added or changed
cost the written row groups they hit, counted and named right."""

from __future__ import annotations

import collections
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.formats.base import Options
from tbconvert.formats.parquet import schema as S
from tbconvert.verify import compare


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from tbconvert.formats.parquet import shared
    path = tmp_path_factory.mktemp("rewritten") / "orig.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared, "RUN_ROWS", -1)   # a run's row groups its own: several of them
        tbconvert.convert(FIXTURES / "torch_logdir", path)
    return path


def _load(path):
    return tbconvert.read(path, restarts="keep-all")


def _written_bounds(path) -> list[int]:
    """Where each row group tbconvert wrote starts, and the end: from its metadata."""
    meta = json.loads(pq.ParquetFile(path).metadata.metadata[S.METADATA_KEY])
    return np.cumsum([0] + [g["rows"] for g in meta[S.ROW_GROUPS_KEY]]).tolist()


def _counts(data) -> collections.Counter:
    return collections.Counter({(run, tag): len(s) for run, tags in data.series.items()
                                for tag, s in tags.items() if len(s)})


def _counts_of_rows(table: pa.Table) -> collections.Counter:
    return collections.Counter(zip(table.column("run").to_pylist(),
                                   table.column("tag").to_pylist(), strict=True))


def _damaged(data) -> list:
    issues = data.report.issues
    assert all(i.kind == "damaged_row_group" for i in issues), issues
    return issues


@pytest.mark.parametrize("row_group_size", [None, 10, 100, 1000])
def test_regrouped_rows_are_read_whole(archive, tmp_path, row_group_size):
    """pyarrow's default (one row group), small groups that split the written ones, and
    groups that merge some of them: every point, no warning, equal to the original."""
    assert len(_written_bounds(archive)) > 3
    out = tmp_path / "rw.parquet"
    pq.write_table(pq.read_table(archive), out, row_group_size=row_group_size)
    loaded = _load(out)
    assert loaded.report.issues == []
    assert _counts(loaded) == _counts(_load(archive))
    assert sum(_counts(loaded).values()) == pq.ParquetFile(archive).metadata.num_rows
    assert compare(archive, out, options=Options(restarts="keep-all")) == []


def test_regrouped_rows_too_large_to_keep_are_checked_then_read_again(archive, tmp_path,
                                                                        monkeypatch):
    out = tmp_path / "rw.parquet"
    pq.write_table(pq.read_table(archive), out, row_group_size=7)
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 4)
    loaded = _load(out)
    assert loaded.report.issues == []
    assert _counts(loaded) == _counts(_load(archive))


def _rewrite_without(archive, out, drop: slice, **kw) -> pa.Table:
    table = pq.read_table(archive)
    keep = np.ones(len(table), bool)
    keep[drop] = False
    pq.write_table(table.filter(pa.array(keep)), out, **kw)
    return table


def _only_run(table: pa.Table) -> str:
    (run,) = set(table.column("run").to_pylist())
    return run


@pytest.mark.parametrize("row_group_size", [None, 10])
def test_dropped_rows_cost_their_written_row_group_only(archive, tmp_path, row_group_size):
    """Rows after the gap are found counting from the end: they are read, not lost."""
    b = _written_bounds(archive)
    out = tmp_path / "drop.parquet"
    table = _rewrite_without(archive, out, slice(b[2] + 5, b[2] + 10),
                             row_group_size=row_group_size)
    loaded = _load(out)
    (issue,) = _damaged(loaded)
    written = b[3] - b[2]
    assert issue.count == written
    assert issue.run == _only_run(table.slice(b[2], written))
    assert "not those tbconvert wrote (rewritten by another tool?)" in issue.message
    assert f"rows {b[2]} to {b[3] - 6}" in issue.message
    assert f"(run {issue.run!r})" in issue.message and "drop.parquet" in issue.message
    kept = pa.concat_tables([table.slice(0, b[2]), table.slice(b[3])])
    assert _counts(loaded) == _counts_of_rows(kept)


def test_a_changed_value_costs_its_written_row_group(archive, tmp_path):
    b = _written_bounds(archive)
    table = pq.read_table(archive)
    at = b[4] + 10
    mask = np.zeros(len(table), bool)
    mask[at] = True
    i = table.schema.get_field_index("step")
    step = pc.if_else(pa.array(mask), pa.scalar(10**9, pa.int64()), table.column("step"))
    out = tmp_path / "edit.parquet"
    pq.write_table(table.set_column(i, table.schema.field(i), step), out)
    loaded = _load(out)
    (issue,) = _damaged(loaded)
    assert issue.count == b[5] - b[4] and issue.run == _only_run(table.slice(b[4], b[5] - b[4]))
    assert f"rows {b[4]} to {b[5] - 1} (run {issue.run!r}) do not match the " \
           f"{b[5] - b[4]} points written as row group 4" in issue.message
    kept = pa.concat_tables([table.slice(0, b[4]), table.slice(b[5])])
    assert _counts(loaded) == _counts_of_rows(kept)


def test_added_rows_are_skipped_and_counted_as_rows(archive, tmp_path):
    table = pq.read_table(archive)
    out = tmp_path / "more.parquet"
    pq.write_table(pa.concat_tables([table, table.slice(len(table) - 3)]), out)
    loaded = _load(out)
    (issue,) = _damaged(loaded)
    assert issue.count == 3 and "3 rows skipped" in issue.message
    assert f"rows {len(table)} to {len(table) + 2}" in issue.message
    assert _counts(loaded) == _counts(_load(archive))


def test_a_written_row_group_not_in_the_file(archive, tmp_path):
    b = _written_bounds(archive)
    out = tmp_path / "short.parquet"
    table = _rewrite_without(archive, out, slice(b[-2], None), row_group_size=50)
    loaded = _load(out)
    (issue,) = _damaged(loaded)
    lost = b[-1] - b[-2]
    assert issue.count == lost
    assert f"the {lost} points written as row group {len(b) - 2} are not in the file" \
        in issue.message
    assert _counts(loaded) == _counts_of_rows(table.slice(0, b[-2]))


def test_every_row_changed_costs_no_more_than_the_archive_holds(archive, tmp_path):
    table = pq.read_table(archive)
    i = table.schema.get_field_index("wall_time")
    out = tmp_path / "all.parquet"
    walls = pc.add(table.column("wall_time"), 1.0)
    pq.write_table(table.set_column(i, table.schema.field(i), walls).slice(1), out,
                   row_group_size=10)
    loaded = _load(out)
    (issue,) = _damaged(loaded)
    assert issue.count == len(table) and _counts(loaded) == collections.Counter()
    assert f"the {len(table)} points written as row groups 0 to " in issue.message
