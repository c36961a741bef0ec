"""A lone large point's payload chunk read without Arrow (tbconvert/formats/parquet/large_read.py):
the points are those Arrow's reading gives, and damage is caught and told as before."""

import shutil
import zlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_large_records import _view

import tbconvert
from tbconvert.api import open_reader
from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet import large, large_read
from tbconvert.report import Report

SIZE = large.LARGE_BYTES + 5


def _event(step: int, tag: str, fill) -> bytes:
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents.records import frame
    ev = event_pb2.Event(wall_time=1.7e9 + step, step=step)
    fill(ev.summary.value.add(tag=tag))
    return frame(ev.SerializeToString())


def _image(v, size=SIZE):
    v.metadata.plugin_data.plugin_name = "images"
    v.tensor.dtype = 7                                     # DT_STRING
    v.tensor.tensor_shape.dim.add(size=3)
    v.tensor.string_val.extend([b"8", b"8", np.random.default_rng(size).bytes(size)])


def _tensor(v):
    v.metadata.plugin_data.plugin_name = "tensors"
    v.tensor.dtype = 1                                     # DT_FLOAT
    v.tensor.tensor_shape.dim.add(size=SIZE // 4)
    v.tensor.tensor_content = np.random.default_rng(2).bytes(SIZE // 4 * 4)


def _scalar(v):
    v.simple_value = 0.5


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """A run of a large image between small points, and a run of a large tensor."""
    root = tmp_path_factory.mktemp("large_read")
    (root / "logs" / "b").mkdir(parents=True)
    (root / "logs" / "c").mkdir()
    (root / "logs" / "b" / "events.out.tfevents.1.host").write_bytes(
        _event(1, "loss", _scalar) + _event(1, "img", _image)
        + _event(2, "img", lambda v: _image(v, 1000)) + _event(3, "loss", _scalar))
    (root / "logs" / "c" / "events.out.tfevents.1.host").write_bytes(_event(5, "w", _tensor))
    tbconvert.convert(root / "logs", root / "x.parquet", jobs=1)
    return root / "x.parquet"


def _read(path: Path) -> tuple[list, list]:
    report = Report()
    reader = open_reader(path, report=report)
    try:
        got = [_view(c) for run in reader.iter_runs() for c in run.series]
    finally:
        reader.close()
    return got, [(i.kind, i.message, i.count) for i in report.issues]


def _both(path: Path, monkeypatch) -> tuple:
    """The reading of ``path``, and Arrow's (no chunk read apart)."""
    fast = _read(path)
    with monkeypatch.context() as m:
        m.setattr(large_read, "_COLUMNS", {})
        arrow = _read(path)
    return fast, arrow


def _large_chunks(path: Path) -> list:
    pf = pq.ParquetFile(path)
    return [found for g in range(pf.metadata.num_row_groups)
            if (found := large_read.find(pf, g)) is not None]


def test_large_chunks_read_apart_give_the_points_arrow_gives(archive, monkeypatch):
    chunks = _large_chunks(archive)
    assert sorted(c[0] for c in chunks) == ["blobs", "tensor_content"]
    with open(archive, "rb") as fh:
        columns = {c[0]: large_read.read(fh, c) for c in chunks}
    assert columns["blobs"].items == [b"8", b"8", np.random.default_rng(SIZE).bytes(SIZE)]
    assert columns["tensor_content"].items == [np.random.default_rng(2).bytes(SIZE // 4 * 4)]
    fast, arrow = _both(archive, monkeypatch)
    assert fast == arrow
    assert not fast[1] and len(fast[0]) == 4


def _rewrite_page(path: Path, name: str, change) -> None:
    """Change the payload page of column ``name`` with ``change(bytearray of its body, k)``,
    then set its header's CRC to match (only the archive's own digest can tell); ``k``
    counts the tries, until the CRC takes as many bytes as before (the page stays where
    it is)."""
    (found,) = [c for c in _large_chunks(path) if c[0] == name]
    _, _, at, size, _ = found
    with open(path, "r+b") as fh:
        fh.seek(at)
        raw = bytes(fh.read(size))
        header, pos = F.decode_prefix(raw, 0)
        for k in range(100):
            body = bytearray(raw[pos:])
            change(body, k)
            crc = zlib.crc32(body)
            F.put(header, 4, F.I32, crc - (1 << 32) if crc >= 1 << 31 else crc)
            head = F.encode(header)
            if len(head) == pos:
                break
        fh.seek(at)
        fh.write(head + body)


@pytest.mark.parametrize("name", ["blobs", "tensor_content"])
def test_a_payload_changed_with_its_page_crc_is_caught_by_the_digest(archive, tmp_path,
                                                                     monkeypatch, name):
    path = tmp_path / "d.parquet"
    shutil.copy(archive, path)

    def flip(body, k):
        body[len(body) // 2 + k] ^= 0x10
    _rewrite_page(path, name, flip)
    fast, arrow = _both(path, monkeypatch)
    assert fast == arrow
    assert [(k, n) for k, _, n in fast[1]] == [("damaged_row_group", 1)]
    assert "do not match their checksum" in fast[1][0][1]
    assert sum(len(v[4]) for v in fast[0]) == 4      # of the five points


@pytest.mark.parametrize("name", ["blobs", "tensor_content"])
def test_a_damaged_payload_page_is_told_as_arrow_tells_it(archive, tmp_path, monkeypatch,
                                                          name):
    path = tmp_path / "d.parquet"
    shutil.copy(archive, path)
    (found,) = [c for c in _large_chunks(path) if c[0] == name]
    with open(path, "r+b") as fh:
        fh.seek(found[2] + found[3] // 2)
        byte = fh.read(1)
        fh.seek(found[2] + found[3] // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with open(path, "rb") as fh:
        assert large_read.read(fh, found) is None      # (left to Arrow)
    fast, arrow = _both(path, monkeypatch)
    assert fast == arrow
    assert [(k, n) for k, _, n in fast[1]] == [("damaged_row_group", 1)]
    assert "CRC" in fast[1][0][1]
    assert sum(len(v[4]) for v in fast[0]) == 4


def test_levels_of_another_layout_are_left_to_arrow(archive, tmp_path, monkeypatch):
    """A page whose levels are bit-packed (as another writer may encode them) is not read
    here; Arrow reads it."""
    path = tmp_path / "d.parquet"
    shutil.copy(archive, path)

    def bitpacked(body, k):
        # the tensor's one definition level, 1, as a bit-packed group of eight (and, to
        # keep the CRC's width, a last value byte changed: the digest tells that one)
        assert bytes(body[:6]) == b"\x02\x00\x00\x00\x02\x01"
        body[4:6] = b"\x03\x01"
        body[-1] ^= k
    _rewrite_page(path, "tensor_content", bitpacked)
    (found,) = [c for c in _large_chunks(path) if c[0] == "tensor_content"]
    with open(path, "rb") as fh:
        assert large_read.read(fh, found) is None
    fast, arrow = _both(path, monkeypatch)
    assert fast == arrow
