"""The archive's JSON read apart from the rest of the footer (which Arrow reads), its list of
series an entry at a time: the same metadata, entries and errors as a whole read gives."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_archives_roundtrip import assert_lossless, canon_series, read_all, write_sample

from tbconvert import budget
from tbconvert.errors import CorruptDataError
from tbconvert.formats.base import Options
from tbconvert.formats.parquet import footer as F
from tbconvert.formats.parquet import keyvalue, metajson, reader, slices
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.reader import ArchiveFile
from tbconvert.formats.parquet.recorded import Recorded
from tbconvert.formats.parquet.seriestable import SeriesTable
from tbconvert.report import Report


def _footer(data: bytes) -> bytes:
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n:-8]


def _same_but_key(got: pq.FileMetaData, whole: pq.FileMetaData, key: bytes) -> None:
    assert got.schema.equals(whole.schema)
    assert got.num_rows == whole.num_rows and got.num_row_groups == whole.num_row_groups
    for g in range(whole.num_row_groups):
        assert got.row_group(g).to_dict() == whole.row_group(g).to_dict()
    kv = dict(whole.metadata)
    kv.pop(key)
    assert (got.metadata or {}) == kv


def _bits(table: pa.Table) -> list:
    """The table's values, NaN equal to NaN."""
    return [(col.is_null().to_pylist(), col.fill_null(0).to_numpy().view(np.int64).tolist())
            if col.type == pa.float64() else col.to_pylist() for col in table.columns]


def test_arrow_reads_the_footer_without_the_json(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 3)     # (row groups of every kind of column)
    path = write_sample(tmp_path / "x.parquet")
    whole = pq.read_metadata(path)
    assert whole.num_row_groups > 15
    with open(path, "rb") as fh:
        metadata, value = keyvalue.split(fh, S.METADATA_KEY)
        assert fh.tell() == 0
    assert isinstance(value, bytearray) and bytes(value) == whole.metadata[S.METADATA_KEY]
    _same_but_key(metadata, whole, S.METADATA_KEY)
    # its values read through it, as through the whole footer
    with open(path, "rb") as fh:
        assert _bits(pq.ParquetFile(fh, metadata=metadata).read()) == _bits(pq.read_table(path))


def _chunks(path) -> list:
    exp, runs, chunks, order = read_all(path)
    return [exp, runs, order, [[canon_series(c) for c in chunks[key]] for key in order]]


def test_row_groups_read_a_slice_at_a_time_are_those_of_the_whole_footer(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 3)
    monkeypatch.setattr(reader, "WHOLE_FOOTER_BYTES", 0)
    path = write_sample(tmp_path / "x.parquet")
    whole = pq.read_metadata(path)
    assert whole.num_row_groups > 15
    wholly = _chunks(path)
    monkeypatch.setattr(slices, "SLICE_ROW_GROUPS", 4)
    # a file read again where its row groups lie, and one without a descriptor (kept)
    for fh in (None, io.BytesIO(path.read_bytes())):
        archive = ArchiveFile(path, Options(), Report(), fh=fh)
        try:
            assert archive._slices is not None and archive.file.metadata.num_row_groups == 0
            assert (archive._slices._groups is None) == (fh is None)
            assert archive.group_count == whole.num_row_groups
            # backwards too: each slice made again when its row groups are asked for
            for g in reversed(range(whole.num_row_groups)):
                assert archive.group_rows(g) == whole.row_group(g).num_rows
                assert archive.row_group(g).to_dict() == whole.row_group(g).to_dict()
            kv = dict(whole.metadata)
            kv.pop(S.METADATA_KEY)
            assert archive.file.metadata.metadata == kv
            assert archive.file.schema.equals(whole.schema)
            assert [b.num_rows for b in archive.verified_batches()]
        finally:
            archive.close()
    assert _chunks(path) == wholly
    assert_lossless(path)


def test_a_footer_of_few_row_groups_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 3)
    monkeypatch.setattr(reader, "WHOLE_FOOTER_BYTES", 0)
    path = write_sample(tmp_path / "x.parquet")
    monkeypatch.setattr(slices, "SLICE_ROW_GROUPS", pq.read_metadata(path).num_row_groups)
    archive = ArchiveFile(path, Options(), Report())
    try:
        assert archive._slices is None
    finally:
        archive.close()
    monkeypatch.setattr(slices, "SLICE_ROW_GROUPS", slices.SLICE_ROW_GROUPS - 1)
    archive = ArchiveFile(path, Options(), Report())
    try:
        assert archive._slices is not None
    finally:
        archive.close()


def test_a_short_footer_is_read_whole_by_arrow_with_the_same_outcome(tmp_path, monkeypatch):
    """A footer of at most WHOLE_FOOTER_BYTES (a sync's part) goes to Arrow as it is; the
    archive reads the same as with its JSON cut out first."""
    path = write_sample(tmp_path / "x.parquet")
    monkeypatch.setattr(reader, "WHOLE_FOOTER_BYTES", len(_footer(path.read_bytes())))
    split = []
    monkeypatch.setattr(keyvalue, "split_footer",
                        lambda fh, key, real=keyvalue.split_footer: split.append(1) or real(fh, key))
    wholly = _chunks(path)
    assert not split
    monkeypatch.setattr(reader, "WHOLE_FOOTER_BYTES", 0)
    assert _chunks(path) == wholly and split
    assert_lossless(path)


def _write(table, path, meta: dict) -> None:
    with pq.ParquetWriter(path, table.schema, store_schema=False) as w:
        w.write_table(table)
        w.add_key_value_metadata(meta)


def test_a_key_value_list_of_fifteen_entries_or_more_keeps_its_form(tmp_path):
    table = pa.table({"a": [1, 2, 3]})
    for n in (1, 14, 15, 16, 40):
        meta = {f"k{i}": "v" * i for i in range(n)}
        path = tmp_path / f"{n}.parquet"
        _write(table, path, meta)
        whole = pq.read_metadata(path)
        for key in (b"k0", f"k{n - 1}".encode()):
            data = _footer(path.read_bytes())
            rest, lo, hi = F.without_key(data, key)
            assert data[lo:hi] == whole.metadata[key]
            with open(path, "rb") as fh:
                metadata, value = keyvalue.split(fh, key)
            assert bytes(value) == whole.metadata[key]
            _same_but_key(metadata, whole, key)


def test_footers_it_does_not_read_are_left_to_arrow(tmp_path):
    table = pa.table({"a": [1, 2, 3]})
    plain = tmp_path / "plain.parquet"
    pq.write_table(table, plain)
    twice = tmp_path / "twice.parquet"
    _write(table, twice, {"k": "1"})
    data = _footer(twice.read_bytes())
    fields = F.decode(data)
    _, items = F.get(fields, F.FILE_KEY_VALUE)
    F.put(fields, F.FILE_KEY_VALUE, F.LIST, (F.STRUCT, items + items))
    assert F.without_key(data, b"k") is not None
    assert F.without_key(F.encode(fields), b"k") is None          # the key twice
    assert F.without_key(_footer(plain.read_bytes()), S.METADATA_KEY) is None
    for cut in (1, 7, len(data) // 2, len(data) - 1):
        assert F.without_key(data[:cut], b"k") is None
        assert F.without_key(data[:cut] + b"\x00" * 5, b"k") is None
    for raw in (b"", b"PAR1", b"PAR1" + b"\x00" * 20 + b"\xff\xff\xff\x00PAR1",
                plain.read_bytes()):
        assert keyvalue.split(io.BytesIO(raw), S.METADATA_KEY) is None


def _entry(i, **edit):
    entry = {"run": 0, "tag": f"t{i}", "kind": "scalar", "plugin_name": "scalars",
             "plugin_content": "", "display_name": f"t{i}", "description": "",
             "data_class": "scalar", "value_dtype": "float32"}
    entry.update(edit)
    return entry


def _both(text, runs: int = 1):
    """What the whole read and the entry-at-a-time read give for ``text``: the metadata
    (series as entries) or the error message."""
    out = []
    for read in (budget.loads_json, metajson.loads):
        try:
            meta = read(text, "x")
            series = meta.get("series") if isinstance(meta, dict) else None
            if isinstance(series, metajson.Entries):
                series = list(series.checked(runs))
            elif isinstance(series, list):
                series = [S.series_from_json(e, i, runs) for i, e in enumerate(series)]
            out.append(meta if series is None else {**meta, "series": series})
        except (CorruptDataError, S.BadMetadata) as exc:
            out.append((type(exc), str(exc)))
    return out


def _s(*items: str, end: str = "]}") -> str:
    """The text of an object whose series list holds ``items`` (JSON texts)."""
    return '{"series":[' + ",".join(items) + end


_E0, _E1 = json.dumps(_entry(0)), json.dumps(_entry(1))
_ODD = json.dumps(_entry(1, kind="odd"))
_NESTED = {n: "[" * n + "]" * n for n in (62, 63, 64, 70, 100_000)}


@pytest.mark.parametrize("text", [
    '{"format":"f","series":[]}',
    ' \n{ "series" : [ ' + _E0 + " , " + _E1 + ' ] , "runs" : [1] }\t',
    _s(_E0, end='],"series":[' + _E1 + "]}"),
    '{"series":{"a":1}}', '{"series":null}', '[1,2]', '"text"', '{}', ' {} ',
    _s(_E0, _ODD), _s(json.dumps(_entry(0, run=3)), _ODD, json.dumps(_entry(2))),
    _s(_E0, json.dumps(_entry(1, kind="odd", run=5))), _s(json.dumps(_entry(0, run=True)), _E1),
    _s(_E0, "7"), _s(_E0, _E1, end="]"), _s(_E0 + " " + _E1), _s(_E0, end=",]}"),
    _s(_E0, _ODD, "7", end="}"),
    '{"series":[]} x', '{"series" []}', '{1:2}', '{"a":1,}', '{"a":1 "b":2}', '',
    _s(_NESTED[62]), _s(_NESTED[63]), _s(_NESTED[100_000]),
    '{"a":' + _NESTED[63] + "}", '{"a":' + _NESTED[64] + "}", _s(_NESTED[70], end='], "b":1'),
])
def test_entries_read_one_at_a_time_are_those_of_the_whole_json(text):
    for raw in (text.encode(), bytearray(text.encode()), b"\xef\xbb\xbf" + text.encode(),
                text.encode("utf-16")):
        whole, apart = _both(raw)
        assert apart == whole


def _group(rows=8, **edit):
    crcs = {name: f"{k:08x}" + "0" * 32 for k, name in enumerate(S.COLUMNS)}
    crcs.update(edit)
    return json.dumps({"rows": rows, "crc32c": crcs})


def _groups_both(text: bytes) -> list:
    """:func:`_both` for the row groups an archive's JSON records."""
    out = []
    for read in (budget.loads_json, metajson.loads):
        try:
            meta = read(text, "x")
            groups = meta.get(S.ROW_GROUPS_KEY)
            if isinstance(groups, Recorded):
                groups = list(groups.checked())
                assert len(groups) == len(meta[S.ROW_GROUPS_KEY])
            else:
                groups = S.row_groups_from_json(groups)
            out.append({**meta, S.ROW_GROUPS_KEY: groups})
        except (CorruptDataError, S.BadMetadata) as exc:
            out.append((type(exc), str(exc)))
    return out


def _g(*items: str, end: str = "]}") -> str:
    return '{"format":"f","row_groups":[' + ",".join(items) + end


@pytest.mark.parametrize("text", [
    _g(), _g(_group(), _group(0)), '{"row_groups":null}', '{"row_groups":{"a":1}}',
    _g(_group(run="ABCDEF01" + "0" * 32), _group(tag="xyz"), _group(step=""),
       _group(value="0" * 41), _group(hidden="é" * 40)),    # kept as written
    _g(_group(), _group(1 << 63), _group(1 << 70)), _g(_group(), _group(-1), _group()),
    _g(_group(), "7", _group(rows=True)),
    _g(_group(run=1)), _g(_group(), '{"rows":1}'), _g(_group(), _group(extra="0")),
    _g(_group(), end="]"), _g(_group(), end=",]}"),
])
def test_row_groups_read_one_at_a_time_are_those_of_the_whole_json(text):
    whole, apart = _groups_both(text.encode())
    assert apart == whole


def test_the_series_table_gives_back_each_entry_as_it_was_put_in():
    import numpy as np

    from tbconvert.model import DataClass, Metadata
    entries = [(0, "loss", "scalar", Metadata("scalars", b"", "loss", "", DataClass.SCALAR),
                np.dtype("float32")),
               (1, "acc", "scalar", Metadata("scalars", b"", "", "", DataClass.SCALAR),
                np.dtype("float64")),
               (1, "a\u00e9\U0001f600\ud800", "tensor",
                Metadata("text", b"\x00\x01", "shown", "about it", DataClass.TENSOR), None),
               (0, "", "blob_sequence", Metadata("images", b"", "", "", DataClass.BLOB_SEQUENCE),
                None),
               (2, "loss", "scalar", Metadata("scalars", b"", "loss", "", DataClass.SCALAR),
                np.dtype("float32"))]
    table = SeriesTable.of(entries)
    table.done()
    assert len(table) == 5 and list(table) == entries
    assert [table[i] for i in (-1, -5)] == [entries[-1], entries[0]]
    assert [table.run(i) for i in range(5)] == [0, 1, 1, 0, 2]
    assert [table.kind(i) for i in range(5)] == [e[2] for e in entries]
    with pytest.raises(IndexError):
        table[5]
    text = json.dumps({"series": [_entry(i) for i in range(3)]})
    assert list(metajson.loads(text.encode(), "x")["series"].checked(1)) == \
        [S.series_from_json(_entry(i), i, 1) for i in range(3)]


def test_the_footers_bytes_are_let_go_once_read():
    raw = bytearray(json.dumps({"series": [_entry(0)]}).encode())
    assert len(metajson.loads(raw, "x")["series"].checked(1)) == 1 and raw == b""


def test_an_archive_is_told_by_its_footer_without_arrow_reading_it(tmp_path, monkeypatch):
    from tbconvert.formats.parquet import ParquetFormat
    path = write_sample(tmp_path / "x.parquet")
    data = path.read_bytes()
    bare = tmp_path / "archive"
    bare.write_bytes(data)
    assert ParquetFormat.sniff(bare)
    # the JSON's key twice: told by Arrow, as before
    footer = _footer(data)
    fields = F.decode(footer)
    _, items = F.get(fields, F.FILE_KEY_VALUE)
    F.put(fields, F.FILE_KEY_VALUE, F.LIST, (F.STRUCT, items + items))
    twice = F.encode(fields)
    bare.write_bytes(data[:-8 - len(footer)] + twice + len(twice).to_bytes(4, "little") + F.MAGIC)
    assert F.without_key(twice, S.METADATA_KEY) is None
    assert ParquetFormat.sniff(bare)
    monkeypatch.setattr(keyvalue, "split_footer", lambda fh, key: None)
    bare.write_bytes(data)
    assert ParquetFormat.sniff(bare)


@pytest.mark.parametrize("window", [1, 2, 3, 5, 8, 64])
def test_the_json_read_a_window_at_a_time_is_the_json_read_whole(monkeypatch, window):
    """Values cut by the end of the decoded window (numbers above all, and characters of
    several bytes) are read as whole ones, runs' records included."""
    import base64
    monkeypatch.setattr(metajson, "WINDOW_BYTES", window)
    records = [{"kind": "log_message", "step": k * 12345, "wall_time": 1.5e9 + k / 7,
                "payload": base64.b64encode(f"é{k}".encode()).decode()} for k in range(40)]
    meta = {"format": "tbconvert", "x": [1.5e-10, -0.0, 123456789012345, "ü€𝄞", None, True],
            "runs": [{"name": "rün", "start_time": 1.25e9, "records": records},
                     {"name": "b", "records": []}, 7],
            "series": [_entry(i) for i in range(3)], "y": -12e+3}
    for text in (json.dumps(meta), json.dumps(meta, ensure_ascii=False, indent=1)):
        got = metajson.loads(text.encode(), "x")
        assert {k: v for k, v in got.items() if k not in ("runs", "series")} == \
            {k: v for k, v in meta.items() if k not in ("runs", "series")}
        assert list(got["series"].checked(1)) == \
            [S.series_from_json(_entry(i), i, 1) for i in range(3)]
        run = S.run_from_json(got["runs"][0])
        assert (run.name, run.start_time) == ("rün", 1.25e9)
        assert list(run.records) == [S.record_from_json(r, "") for r in records]
        assert got["runs"][2] == 7
        assert len(S.run_from_json(got["runs"][1]).records) == 0


def test_a_damaged_record_is_told_as_a_list_of_them_tells_it():
    meta = {"runs": [{"name": "a", "records": [
        {"kind": "k", "step": 1, "wall_time": 2.0, "payload": ""},
        {"kind": "k", "step": "x", "wall_time": 2.0, "payload": ""}]}]}
    streamed = metajson.loads(json.dumps(meta).encode(), "x")["runs"][0]
    with pytest.raises(S.BadMetadata) as whole:
        S.run_from_json(json.loads(json.dumps(meta))["runs"][0])
    with pytest.raises(S.BadMetadata) as read:
        S.run_from_json(streamed)
    assert str(read.value) == str(whole.value) and "runs[0].records[1]" in str(read.value)
