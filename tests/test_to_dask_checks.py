"""``tbconvert.to_dask`` gives what tbconvert's own reader accepts: each partition's task
checks its file's checksums, so damaged or edited rows raise an error naming the file
instead of coming back as data; files tbconvert did not write are refused at once."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.errors import CorruptDataError, UsageError
from tbconvert.formats.parquet import schema as S

dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

# Dask's own reading calls a pandas method pandas 3.1 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.reset_index")


@pytest.fixture(autouse=True)
def synchronous():
    import dask
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    from tbconvert.formats.parquet import shared
    path = tmp_path_factory.mktemp("to_dask") / "orig.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared, "RUN_ROWS", -1)   # a run's row groups its own: several of them
        tbconvert.convert(FIXTURES / "torch_logdir", path)
    return path


def _as_dask_gives(frame: pd.DataFrame) -> pd.DataFrame:
    text = [c for c in frame.columns if pd.api.types.is_string_dtype(frame[c].dtype)
            and frame[c].dtype != object]
    return frame.astype({c: pd.StringDtype("pyarrow") for c in text})


def _edited(archive, out, run="train", tag="loss", step=0, value=999.0):
    """``value`` at (run, tag, step), written by pyarrow one row group per row group."""
    pf = pq.ParquetFile(archive)
    with pq.ParquetWriter(out, pf.schema_arrow) as writer:
        for group in range(pf.num_row_groups):
            t = pf.read_row_group(group)
            hit = pc.and_(pc.and_(pc.equal(t.column("run"), run), pc.equal(t.column("tag"), tag)),
                          pc.equal(t.column("step"), step))
            i = t.schema.get_field_index("value")
            t = t.set_column(i, t.schema.field(i),
                             pc.if_else(hit, pa.scalar(value), t.column("value")))
            writer.write_table(t)
    assert pq.ParquetFile(out).metadata.num_row_groups == pf.num_row_groups
    return out


def test_an_intact_archive_with_its_dtypes(archive):
    frame = tbconvert.to_dask(archive)
    want = _as_dask_gives(pd.read_parquet(archive))
    assert frame.npartitions == 1
    assert dict(frame.dtypes) == dict(want.dtypes)       # known before computing
    pd.testing.assert_frame_equal(frame.compute().reset_index(drop=True), want)


@pytest.mark.parametrize("row_group_size", [None, 10])
def test_an_archive_regrouped_by_pyarrow_reads_whole(archive, tmp_path, row_group_size):
    out = tmp_path / "rw.parquet"
    pq.write_table(pq.read_table(archive), out, row_group_size=row_group_size)
    got = tbconvert.to_dask(out).compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, tbconvert.to_dask(archive).compute()
                                  .reset_index(drop=True))


def test_an_edited_value_raises_when_computed(archive, tmp_path):
    path = _edited(archive, tmp_path / "edit.parquet")
    frame = tbconvert.to_dask(path)          # lazy: the check is in the partition's task
    with pytest.raises(CorruptDataError, match=r"edit\.parquet: row group \d+ is damaged "
                                               r"\(its values do not match their checksum.*"
                                               r"column\(s\) value .*\(run 'train'\)"):
        frame.compute()
    with pytest.raises(CorruptDataError, match="edit.parquet"):
        frame[frame.tag == "loss"].value.max().compute()
    data = tbconvert.read(path, restarts="keep-all")      # what tbconvert's reader says
    assert [i.kind for i in data.report.issues] == ["damaged_row_group"]


def test_an_edited_value_in_a_regrouped_archive_raises(archive, tmp_path):
    path = _edited(archive, tmp_path / "edit.parquet")
    out = tmp_path / "rw.parquet"
    pq.write_table(pq.read_table(path), out)
    with pytest.raises(CorruptDataError, match=r"rw\.parquet: its row groups are not those "
                                               r"tbconvert wrote .* do not match the"):
        tbconvert.to_dask(out).compute()


def _flip_in_column(path, out, column, group=2):
    rg = pq.ParquetFile(path).metadata.row_group(group)
    col = next(rg.column(i) for i in range(rg.num_columns)
               if rg.column(i).path_in_schema == column)
    data = bytearray(path.read_bytes())
    # in the page's values, past its header (whose statistics nothing reads)
    data[col.data_page_offset + col.total_compressed_size * 3 // 4] ^= 0x01
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("column", ["step", "wall_time"])
def test_a_flipped_byte_in_a_data_page_raises(archive, tmp_path, column):
    path = _flip_in_column(archive, tmp_path / "flip.parquet", column)
    data = tbconvert.read(path, restarts="keep-all")      # what tbconvert's reader says
    assert [i.kind for i in data.report.issues] == ["damaged_row_group"]
    with pytest.raises(CorruptDataError, match=r"flip\.parquet: row group 2 is damaged"):
        tbconvert.to_dask(path).compute()


def test_a_damaged_part_of_a_dataset_names_that_part(tmp_path):
    dataset = tmp_path / "dataset"
    tbconvert.convert(FIXTURES / "torch_logdir", dataset, to_format="parquet")
    parts = sorted(dataset.glob("part-*.parquet"))
    victim = next(p for p in parts if pq.ParquetFile(p).metadata.num_rows > 20)
    tmp = tmp_path / "edited.parquet"
    table = pq.read_table(victim)
    i = table.schema.get_field_index("step")
    bumped = pc.add(table.column("step"), 1)
    pq.write_table(table.set_column(i, table.schema.field(i), bumped), tmp)
    tmp.replace(victim)
    frame = tbconvert.to_dask(dataset)
    assert frame.npartitions == len(parts)
    with pytest.raises(CorruptDataError, match=victim.name):
        frame.compute()
    others = [k for k, p in enumerate(parts) if p != victim]
    got = frame.partitions[others].compute()
    assert len(got) == sum(pq.ParquetFile(parts[k]).metadata.num_rows for k in others)


@pytest.mark.parametrize("writer", ["pandas", "pyarrow"])
def test_a_file_without_tbconvert_metadata_is_refused_as_info_refuses_it(tmp_path, writer):
    path = tmp_path / "foreign.parquet"
    if writer == "pandas":
        pd.DataFrame({"run": ["a"], "step": [1], "value": [0.5]}).to_parquet(path)
    else:
        pq.write_table(pa.table({"a": [1, 2]}), path)
    with pytest.raises(CorruptDataError) as read:
        tbconvert.info(path)
    with pytest.raises(CorruptDataError) as dask:
        tbconvert.to_dask(path)
    assert str(dask.value) == str(read.value)
    assert "foreign.parquet: not a tbconvert Parquet archive (no tbconvert metadata)" \
        in str(dask.value)


def test_edited_tbconvert_metadata_is_refused_at_once(archive, tmp_path):
    pf = pq.ParquetFile(archive)
    kv = dict(pf.metadata.metadata)
    meta = json.loads(kv[S.METADATA_KEY])
    meta["runs"][0]["name"] = "renamed"
    kv[S.METADATA_KEY] = json.dumps(meta).encode()
    out = tmp_path / "meta.parquet"
    pq.write_table(pq.read_table(archive).replace_schema_metadata(kv), out)
    with pytest.raises(CorruptDataError, match=r"meta\.parquet: damaged tbconvert metadata "
                                               r"\(its checksum does not match\)"):
        tbconvert.to_dask(out)


def test_columns_and_filters_are_applied_after_the_check(archive, tmp_path):
    frame = tbconvert.to_dask(archive, columns=["run", "step", "value"],
                              filters=[("tag", "==", "loss")])
    want = _as_dask_gives(pd.read_parquet(archive, columns=["run", "step", "value"],
                                          filters=[("tag", "==", "loss")]))
    assert list(frame.columns) == ["run", "step", "value"]
    pd.testing.assert_frame_equal(frame.compute().reset_index(drop=True), want)
    projected = tbconvert.to_dask(archive)[["tag", "value"]]
    assert len(projected.compute()) == pq.ParquetFile(archive).metadata.num_rows
    damaged = _edited(archive, tmp_path / "edit.parquet")
    with pytest.raises(CorruptDataError, match="edit.parquet"):
        tbconvert.to_dask(damaged, columns=["step"], filters=[("tag", "==", "accuracy")]).compute()


def test_options_it_cannot_apply_to_a_checked_read_are_refused(archive):
    with pytest.raises(UsageError, match="to_dask takes columns= and filters=, not index="):
        tbconvert.to_dask(archive, index="step")


def test_on_a_local_cluster(archive, tmp_path):
    distributed = pytest.importorskip("distributed")
    path = _edited(archive, tmp_path / "edit.parquet")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert len(client.compute(tbconvert.to_dask(archive)).result()) > 0
        with pytest.raises(CorruptDataError, match="edit.parquet"):
            client.compute(tbconvert.to_dask(path)).result()
