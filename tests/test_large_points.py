"""Points larger than a row group (Parquet) or than HDF5's variable-length heap suits: their
own layout (tbconvert/formats/parquet/large.py, tbconvert/formats/hdf5/large.py) read back
exactly, by tbconvert and by plain readers."""

from pathlib import Path

import numpy as np
import pytest
from helpers import run_tbconvert

import tbconvert

# over both thresholds (32 MiB in Parquet, 16 MiB in HDF5)
SIZE = (33 << 20) + 5


def _event(step: int, tag: str, fill) -> bytes:
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents.records import frame
    ev = event_pb2.Event(wall_time=1.7e9 + step, step=step)
    fill(ev.summary.value.add(tag=tag))
    return frame(ev.SerializeToString())


def _image(v, size=SIZE, seed=1):
    v.metadata.plugin_data.plugin_name = "images"
    v.tensor.dtype = 7                                     # DT_STRING
    v.tensor.tensor_shape.dim.add(size=3)
    v.tensor.string_val.extend([b"8", b"8", np.random.default_rng(seed).bytes(size)])


def _tensor(v, size=SIZE & ~7):
    v.metadata.plugin_data.plugin_name = "tensors"
    v.tensor.dtype = 2                                     # DT_DOUBLE
    v.tensor.tensor_shape.dim.add(size=2)
    v.tensor.tensor_shape.dim.add(size=size // 16)
    v.tensor.tensor_content = np.random.default_rng(2).bytes(size)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> Path:
    """Three runs: small points only; a large image between small ones (and a small image
    after it in the same series); a large tensor."""
    root = tmp_path_factory.mktemp("large_points") / "logs"
    for run in ("a", "b", "c"):
        (root / run).mkdir(parents=True)

    def scalar(v):
        v.simple_value = 0.5
    (root / "a" / "events.out.tfevents.1.host").write_bytes(
        _event(1, "loss", scalar) + _event(2, "loss", scalar))
    (root / "b" / "events.out.tfevents.1.host").write_bytes(
        _event(1, "loss", scalar) + _event(1, "img", _image)
        + _event(2, "img", lambda v: _image(v, 1000, 3)) + _event(3, "loss", scalar))
    (root / "c" / "events.out.tfevents.1.host").write_bytes(_event(5, "weights", _tensor))
    return root


def _convert(src, dst, *extra):
    out = run_tbconvert("convert", src, dst, "-q", *extra)
    assert out.returncode == 0, out.stderr
    return dst


@pytest.mark.slow
@pytest.mark.parametrize("chain", [("x.parquet",), ("x.h5",), ("x.parquet", "y.h5"),
                                   ("x.h5", "y.parquet"), ("pq_dir",)])
def test_large_points_round_trip_same_tensorboard_view(logdir, tmp_path, chain):
    from oracle import assert_same_view, tb_view
    src = logdir
    for name in chain:
        to = ["--to", "parquet"] if name == "pq_dir" else []
        src = _convert(src, tmp_path / name, *to)
    out = _convert(src, tmp_path / "out", "--to", "tfevents")
    assert_same_view(tb_view(out), tb_view(logdir))
    verified = run_tbconvert("verify", logdir, src, "-q")
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["x.parquet", "x.h5"])
def test_large_points_jobs_give_the_same_bytes(logdir, tmp_path, name):
    one = _convert(logdir, tmp_path / "1" / name, "-j", "1")
    two = _convert(logdir, tmp_path / "2" / name, "-j", "2")
    assert one.read_bytes() == two.read_bytes()


@pytest.fixture(scope="module")
def parquet_archive(logdir, tmp_path_factory) -> Path:
    return _convert(logdir, tmp_path_factory.mktemp("pq") / "x.parquet", "-j", "1")


@pytest.mark.slow
def test_large_parquet_points_are_plain_parquet_to_other_readers(logdir, parquet_archive):
    import pyarrow.parquet as pq
    table = pq.read_table(parquet_archive)
    runs = table.column("run").to_pylist()
    tags = table.column("tag").to_pylist()
    image = table.column("blobs")[[k for k, (r, t) in enumerate(zip(runs, tags, strict=True))
                                   if (r, t) == ("b", "img")][0]].as_py()
    assert image == [b"8", b"8", np.random.default_rng(1).bytes(SIZE)]
    (k,) = [k for k, r in enumerate(runs) if r == "c"]
    content = table.column("tensor_content")[k].as_py()
    assert content == np.random.default_rng(2).bytes(SIZE & ~7)
    assert table.column("tensor_shape")[k].as_py() == [2, (SIZE & ~7) // 16]
    duckdb = pytest.importorskip("duckdb")
    got = duckdb.sql(f"select run, tag, step, octet_length(tensor_content), len(blobs), "
                     f"octet_length(blobs[3]) from '{parquet_archive}' order by run, tag, step"
                     ).fetchall()
    assert ("b", "img", 1, None, 3, SIZE) in got
    assert ("c", "weights", 5, SIZE & ~7, None, None) in got


@pytest.mark.slow
def test_large_parquet_points_footer_lists_their_chunks_exactly(parquet_archive):
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(parquet_archive).metadata
    size = parquet_archive.stat().st_size
    found = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        chunks = [group.column(c) for c in range(group.num_columns)]
        assert group.total_byte_size == sum(c.total_uncompressed_size for c in chunks)
        spans = sorted((c.data_page_offset if c.dictionary_page_offset is None else
                        c.dictionary_page_offset, c.total_compressed_size) for c in chunks)
        for (a, n), (b, _) in zip(spans, spans[1:], strict=False):
            assert a + n <= b, "column chunks overlap"
        assert spans[-1][0] + spans[-1][1] <= size
        for c in chunks:
            if c.total_compressed_size > SIZE:
                found += 1
                assert c.compression == "UNCOMPRESSED" and c.encodings == ("RLE", "PLAIN")
                assert not c.has_dictionary_page and not c.is_stats_set
    assert found == 2


def test_ordinary_archives_keep_their_layout(tmp_path):
    # a point below the thresholds is written as before: one compressed chunk by Arrow, and
    # an HDF5 archive of schema version 1
    import h5py
    import pyarrow.parquet as pq
    src = tmp_path / "logs" / "r"
    src.mkdir(parents=True)
    (src / "events.out.tfevents.1.host").write_bytes(
        _event(1, "img", lambda v: _image(v, 2 << 20)))
    tbconvert.convert(src.parent, tmp_path / "x.parquet")
    tbconvert.convert(src.parent, tmp_path / "x.h5")
    meta = pq.ParquetFile(tmp_path / "x.parquet").metadata
    assert {meta.row_group(0).column(c).compression for c in range(14)} == {"ZSTD"}
    with h5py.File(tmp_path / "x.h5") as f:
        assert int(f.attrs["schema_version"]) == 1
        assert "large_blobs" not in f["runs/0/series/0"]


@pytest.mark.slow
def test_large_hdf5_blobs_are_datasets_plain_readers_read(logdir, tmp_path):
    import h5py
    arch = _convert(logdir, tmp_path / "x.h5")
    with h5py.File(arch) as f:
        assert int(f.attrs["schema_version"]) == 2
        names = [f["runs"][str(i)].attrs["name"] for i in range(3)]
        series = f["runs"][str(names.index("b"))]["series"]
        (img,) = [series[j] for j in series if series[j].attrs["tag"] == "img"]
        assert list(img["large_blobs"]) == ["2"]
        assert img["large_blobs/2"][()].tobytes() == np.random.default_rng(1).bytes(SIZE)
        assert img["blobs"][2].size == 0


def _damaged_chunk(path: Path) -> None:
    """Flip a byte in the middle of the archive's large payload."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(path).metadata
    for g in range(meta.num_row_groups):
        for c in range(meta.row_group(g).num_columns):
            col = meta.row_group(g).column(c)
            if col.total_compressed_size > SIZE:
                at = col.data_page_offset + col.total_compressed_size // 2
                with open(path, "r+b") as fh:
                    fh.seek(at)
                    byte = fh.read(1)
                    fh.seek(at)
                    fh.write(bytes([byte[0] ^ 0xFF]))
                return


@pytest.mark.slow
def test_damaged_large_points_are_told_not_raised(parquet_archive, logdir, tmp_path):
    import shutil

    import h5py
    pq_copy = tmp_path / "d.parquet"
    shutil.copy(parquet_archive, pq_copy)
    _damaged_chunk(pq_copy)
    out = run_tbconvert("convert", pq_copy, tmp_path / "e", "--to", "tfevents")
    assert "Traceback" not in out.stderr
    assert "row group 2 is damaged" in out.stderr and "CRC" in out.stderr, out.stderr

    h5 = _convert(logdir, tmp_path / "d.h5")
    with h5py.File(h5, "r+") as f:
        for i in f["runs"]:
            for j in f["runs"][i]["series"]:
                s = f["runs"][i]["series"][j]
                if "large_blobs" in s:
                    del s["large_blobs/2"]
                    s["large_blobs/2"] = np.zeros(3, np.float32)
    out = run_tbconvert("convert", h5, tmp_path / "e2", "--to", "tfevents",
                        "--ignore-checksum")
    assert "Traceback" not in out.stderr
    assert "large_blobs/2" in out.stdout + out.stderr
