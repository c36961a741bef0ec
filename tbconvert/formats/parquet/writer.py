"""ParquetWriter: one file (``.parquet``/``.pq``) or a directory dataset (one file per run)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tbconvert import arrowpool
from tbconvert import dtypes as dt
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.parquet import (
    MARKER_FILE,
    footer,
    halves,
    join,
    large,
    pages,
    shared,
    spool,
)
from tbconvert.formats.parquet import columns as C
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.digest import ColumnDigest, RowGroupDigest
from tbconvert.formats.recordlog import RecordLog
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Run,
    ScalarSeries,
    Series,
    TensorSeries,
    joined_block,
)
from tbconvert.output import AtomicOutput
from tbconvert.report import Report

SUFFIXES = (".parquet", ".pq")


def part_name(index: int, run: str, generation: int | None = None) -> str:
    """``part-00003-<hint>.parquet``: the index keeps names unique; the hint is only a readable
    ASCII trace of the run name (Spark, Hadoop and glob patterns mishandle ``%``, ``[``...).
    A dataset kept up to date by ``sync`` adds ``-g0007``, the generation that wrote the part
    (see :func:`sortable`)."""
    hint = re.sub(r"[^A-Za-z0-9_-]+", "_", run).strip("_")[:60] or "root"
    gen = "" if generation is None else f"-g{sortable(generation)}"
    return f"{S.PART_PREFIX}{index:05d}-{hint}{gen}.parquet"


def sortable(n: int) -> str:
    """``n`` in four digits or more, spelt so that names sort in the order of the numbers:
    readers of the bare directory (DuckDB, pandas, Polars) take a run's parts in name order.
    Past four digits a letter tells how many more there are (``0042``, ``9999``, ``A10000``,
    ``B100000``): every digit sorts before every letter."""
    digits = f"{n:04d}"
    return digits if len(digits) == 4 else chr(ord("A") + len(digits) - 5) + digits



def local_sink(path) -> pa.NativeFile:
    """``path`` opened for Arrow to write, by its bytes: Arrow's own path handling refuses a
    name that is not valid UTF-8 (which a POSIX file name may be)."""
    return pa.OSFile(os.fsencode(path), "wb")


# Arrow's writer hands a file each page header, page and footer piece as a write of its own,
# and asks where it is before most of them: a small part (a sync's) took about 70 system
# calls. Gathered in a buffer, they are a few; larger writes go straight through.
SINK_BUFFER_BYTES = 256 << 10


def buffered_sink(path) -> pa.NativeFile:
    """:func:`local_sink` behind a buffer (closing it flushes and closes the file)."""
    raw = local_sink(path)
    try:
        return pa.BufferedOutputStream(raw, SINK_BUFFER_BYTES)
    except BaseException:
        raw.close()
        raise


def parquet_writer(where, schema: pa.Schema = S.SCHEMA, compress: bool = True) -> pq.ParquetWriter:
    """A Parquet writer with the archive's settings, for its schema or some of its columns
    (which it encodes as it would within the whole). ``compress`` False leaves the pages
    uncompressed (see :func:`write_part`)."""
    names = set(schema.names)

    def only(columns):
        return {k: v for k, v in columns.items() if k.split(".")[0] in names} \
            if isinstance(columns, dict) else [k for k in columns if k in names]
    return pq.ParquetWriter(
        where, schema, compression=S.COMPRESSION if compress else "none",
        compression_level=only(S.COMPRESSION_LEVELS) if compress else None,
        use_dictionary=only(S.DICTIONARY_COLUMNS),
        column_encoding=only(S.COLUMN_ENCODING),
        write_statistics=only(["run", "tag", "step", "series"]),
        write_page_checksum=True,  # so that damage is found on reading, never read as data
        # No Arrow schema in the footer: readers then see the names as plain strings, not
        # categoricals. Categoricals break Dask on a directory dataset with pandas 3: a
        # part whose column is empty or all null gets categories of another dtype.
        store_schema=False)


def _pieces(batch: pa.RecordBatch):
    """``(piece, Arrow bytes)`` of a batch cut to at most a row group each; a single point
    larger than a row group is a piece of its own (a 72 MiB tensor is real data)."""
    n = batch.num_rows
    if n == 0:
        return
    # A batch far below a row group is common (a sync's few points per series): its buffers'
    # size is known at once, where ``nbytes`` walks every column (25 us a batch).
    size = batch.get_total_buffer_size()
    if size <= S.ROW_GROUP_BYTES // 2 and n <= S.ROW_GROUP_ROWS:
        yield batch, size
        return
    size = batch.nbytes
    if size <= S.ROW_GROUP_BYTES and n <= S.ROW_GROUP_ROWS:
        yield batch, size
        return
    per = max(1, min(S.ROW_GROUP_ROWS, int(n * S.ROW_GROUP_BYTES / max(size, 1))))
    for start in range(0, n, per):
        piece = batch.slice(start, per)
        yield piece, piece.nbytes


_DTYPE_NAMES: dict = {}


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, which numpy works out anew at every call (several microseconds)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


class _SeriesIds:
    """The archive's series list, numbered in first-seen order."""

    def __init__(self) -> None:
        # each run's JSON text: bytes, or a spool.Text of a run of very many records
        self.runs: list = []
        # each series' JSON, or (until :meth:`series_json`) the fields it is made of: a
        # tuple is a fraction of a dict's memory, for a run of 100,000 tags
        self.series: list = []
        self._series_ids: dict = {}
        # the number of the first series: a segment of a file numbers on from the ones before
        self.first_id = 0

    def series_id(self, run_index: int, chunk: Series, kind: str, value_dtype) -> int:
        return self.series_id_of(run_index, chunk.tag, kind, chunk.metadata, value_dtype)

    def series_id_of(self, run_index: int, tag: str, kind: str, md, value_dtype) -> int:
        """The number of a series known by its fields (as a part's series table lists them)."""
        key = (run_index, tag, kind, md, value_dtype)
        sid = self._series_ids.get(key)
        if sid is None:
            sid = self.first_id + len(self.series)
            self._series_ids[key] = sid
            self.series.append(key)
        return sid

    def series_json(self, start: int = 0, stop: int | None = None) -> list[dict]:
        """The series list (``start:stop`` of it) as the archive's metadata holds it."""
        return [s if isinstance(s, dict) else S.series_to_json(*s)
                for s in self.series[start:stop]]

    def series_text(self) -> list[bytes]:
        """:meth:`series_json` as the pieces of its JSON text, made a slice of series at a
        time: a dict per series all at once took several times the text's size (100,000
        tags: about 60 MB)."""
        parts = []
        for a in range(0, len(self.series), _SERIES_SLICE):
            parts.append(S.dumps(self.series_json(a, a + _SERIES_SLICE))[1:-1])
            parts.append(b",")
        return [b"["] + parts[:-1] + [b"]"]


_SERIES_SLICE = 4096


def _key_value(sink, experiment: Experiment) -> dict[bytes, bytes]:
    """The footer's key-value metadata of a file whose runs, series and row groups ``sink``
    holds: the archive's JSON and its digest."""
    # the text json.dumps gives for the whole dict, with the runs and series lists made apart
    head = S.dumps({"format": S.FORMAT_NAME, "schema_version": S.SCHEMA_VERSION,
                    "experiment": S.experiment_to_json(experiment), "runs": []})
    runs = [b","] * (2 * len(sink.runs) - 1) if sink.runs else []
    runs[::2] = sink.runs
    parts = [head[:-2], *runs, b'],"series":', *sink.series_text(), b",",
             S.dumps({S.ROW_GROUPS_KEY: sink.row_groups})[1:]]
    pieces = spool.Pieces(parts)
    if pieces.size <= _SMALL_FOOTER and all(isinstance(p, bytes) for p in parts):
        raw = b"".join(parts)
        return {S.METADATA_KEY: raw,
                S.DIGEST_KEY: hashlib.sha256(raw).hexdigest().encode("ascii")}
    # Written from its pieces (see _close_with): a run's records may be in a spool, and
    # the JSON of 100,000 series (about 18 MB) joined was held twice, pieces and text.
    return {S.METADATA_KEY: pieces, S.DIGEST_KEY: pieces.sha256().encode("ascii")}


def _run_text(run: Run, where: Path):
    """The run's JSON text: bytes, or a :class:`spool.Text` in ``where`` when long."""
    text = spool.Text(where)
    for piece in S.run_text(run):
        text.add(piece)
    return text.value()


# Tiny batches a row group being filled holds before they are made one (see add_piece).
_LOOSE_PIECES = 64
# The largest archive JSON that Arrow writes into a footer itself (see _FileSink._close_with).
_SMALL_FOOTER = 1 << 20
# Beside a run encoded on its own (stage_run), the file of its JSON when that is long.
RUN_TEXT_SUFFIX = ".run.json"
# Archive JSON bytes (held four times by Arrow) that cost about what decoding one row group's
# footer entry does (about 50 KB of Python objects): many runs of few series go to Arrow.
_FOOTER_BYTES_PER_GROUP = 12_000


class _FileSink(_SeriesIds):
    """One Parquet file being written: buffers record batches into byte-capped row groups."""

    def __init__(self, path: Path, compress: bool = True, lazy: bool = False) -> None:
        """``lazy``: the file is opened only once rows are written to it (a run staged for
        :class:`_JoinedSink` whose rows go to the row group the output fills writes none)."""
        super().__init__()
        self.path = path
        self._compress = compress
        self._fh = self._writer = None
        if not lazy:
            self._open()
        self._buffer: list[pa.RecordBatch] = []
        self._bytes = self._rows = 0
        self._pieces = 0    # batches added to the row group being filled
        self._loose = 0     # ... of which the last ones, not yet compacted (see add_piece)
        self.row_groups: list[dict] = []
        # per row group, its series numbers as (numbers, counts) runs: kept for a run encoded
        # on its own, whose numbers the joined file moves (see _renumbering)
        self.series_runs: list | None = None
        # the payload chunks written beside Arrow's, by (row group, column): see large.py
        self._large: dict = {}

    def _open(self) -> None:
        fh = buffered_sink(self.path)
        try:
            self._writer = parquet_writer(fh, compress=self._compress)
        except BaseException:
            fh.close()
            raise
        self._fh = fh

    def add(self, batch: pa.RecordBatch) -> None:
        for piece, size in _pieces(batch):
            self.add_piece(piece, size)

    def add_piece(self, batch: pa.RecordBatch, size: int) -> None:
        """Add a batch of at most a row group (``size``: its Arrow bytes)."""
        n = batch.num_rows
        if self._bytes + size > S.ROW_GROUP_BYTES or self._rows + n > S.ROW_GROUP_ROWS:
            self.flush(more=True)
        self._buffer.append(batch)
        self._bytes += size
        self._rows += n
        self._pieces += 1
        self._loose += 1
        if self._loose >= _LOOSE_PIECES and self._combined():
            # Thousands of tiny runs sharing a row group: a batch object each (about 2 KB)
            # would grow with them. The batches since the last compaction are made one, as
            # the whole row group will be (a copy of few rows each time).
            loose = self._buffer[-self._loose:]
            joined = pa.Table.from_batches(loose, schema=S.SCHEMA).combine_chunks()
            self._buffer[-self._loose:] = joined.to_batches()
            self._loose = 0

    def add_large(self, batch: pa.RecordBatch, payload: large.Payload) -> None:
        """Add a row group of the one point ``batch`` holds (its payload column null),
        whose payload is written as its own column chunk (see :mod:`large`)."""
        self.flush()
        if self._writer is None:
            self._open()
        self._buffer.append(batch)
        self._rows = 1
        table = self._take(payload)
        self._writer.write_table(table, row_group_size=1)
        del table
        column = S.SCHEMA.get_field_index(payload.name)
        self._large[(len(self.row_groups) - 1, column)] = large.write_chunk(self._fh, payload)

    def unfilled(self) -> tuple:
        """The row group being filled, taken out (see :meth:`refill`): the rows of short runs
        that a next segment of the file goes on filling."""
        held = (self._buffer, self._bytes, self._rows, self._pieces, self._loose)
        self._buffer, self._bytes, self._rows, self._pieces, self._loose = [], 0, 0, 0, 0
        return held

    def refill(self, held: tuple) -> None:
        assert not self._buffer
        self._buffer, self._bytes, self._rows, self._pieces, self._loose = held

    def flush(self, more: bool = False) -> None:
        """Write the row group being filled (``more``: its rows go on in the next one)."""
        table = self._take()
        if table is not None:
            self._write(table, halved=not more)

    def _take(self, payload: large.Payload | None = None) -> pa.Table | None:
        """The buffered batches as the next row group, its digest recorded (None: none);
        ``payload``: the values of its payload column, which the batches hold as null."""
        if not self._buffer:
            return None
        table = pa.Table.from_batches(self._buffer, schema=S.SCHEMA)
        if len(self._buffer) > 1 and self._combined():
            table = table.combine_chunks()
        digest = RowGroupDigest(S.COLUMNS)
        digest.update(table)
        if payload is not None:
            digest.columns[payload.name] = payload.digest()
        self.row_groups.append(digest.to_json())
        if self.series_runs is not None:
            self.series_runs.append(_runs_of(table.column("series")))
        self._buffer = []
        self._bytes = self._rows = self._pieces = self._loose = 0
        return table

    def _combined(self) -> bool:
        """Whether the row group being filled is made one chunk a column: Arrow's writer and
        the digest cost about as much per chunk as per byte for short batches (a sync's few
        points per series, the short runs sharing a row group)."""
        return self._pieces > 1 and (self._bytes <= S.COMBINE_BYTES or
                                     self._bytes < self._pieces * S.COMBINE_BATCH_BYTES)

    def _write(self, table: pa.Table, halved: bool = True) -> None:
        """Write ``table``, the last row group taken. ``halved``: its payload column may be
        encoded in halves on two cores (see :mod:`halves`)."""
        if self._writer is None:
            self._open()
        n = table.num_rows
        c = halves.column_to_split(table, self._compress and halved)
        if c is None:
            self._writer.write_table(table, row_group_size=max(n, 1))
        else:
            field = table.schema.field(c)
            finish = halves.begin(table.column(c), field, column_chunk)
            self._writer.write_table(table.set_column(c, field, pa.nulls(n, field.type)),
                                     row_group_size=n)
            self._large[(len(self.row_groups) - 1, c)] = halves.write(self._fh, finish())
        del table
        arrowpool.release()

    def close(self, experiment: Experiment) -> None:
        self.flush()
        self._close_with(_key_value(self, experiment))

    def close_later(self, experiment: Experiment):
        """What :meth:`close` does that needs the interpreter, done now; the rest (Arrow
        encoding the last row group and writing it and the footer, which it does without
        the GIL) is the call returned, for another thread to make while this one reads on."""
        table = self._take()
        meta = _key_value(self, experiment)

        def finish() -> None:
            try:
                if table is not None:
                    self._write(table)
                self._close_with(meta)
            except BaseException:
                self.discard()
                raise
        return finish

    def _close_with(self, meta: dict[bytes, bytes]) -> None:
        """Close the file, the archive's metadata ``meta`` in its footer: a small one (a
        sync's part) Arrow writes itself, without the GIL; a large one is added after Arrow
        has closed the file (the same bytes), as Arrow would hold several copies of it."""
        size = len(meta[S.METADATA_KEY])
        # Arrow holds about four copies of the metadata while it writes the footer; adding
        # it afterwards decodes the footer into Python objects, about 50 KB a row group
        small = size <= _SMALL_FOOTER or size < len(self.row_groups) * _FOOTER_BYTES_PER_GROUP
        if small and not isinstance(meta[S.METADATA_KEY], bytes):
            # (joined only here, for Arrow: a spooled run's records never are, past 1 MiB)
            small = size <= _SMALL_FOOTER or meta[S.METADATA_KEY].in_memory()
            if small:
                meta = {**meta, S.METADATA_KEY: b"".join(meta[S.METADATA_KEY].blocks())}
        if self._writer is None:
            self._open()
        if small:
            self._writer.add_key_value_metadata(meta)
        self._writer.close()
        self._fh.close()
        if self._large:
            large.patch(self.path, self._large)
        if not small:
            footer.add_key_value(self.path, meta)

    def close_bare(self) -> None:
        """Close without the archive's metadata: a run encoded for :class:`_JoinedSink`."""
        self.flush()
        if self._writer is None:
            self._open()
        self._writer.close()
        self._fh.close()
        if self._large:
            large.patch(self.path, self._large)

    def discard(self) -> None:
        if self._writer is None:
            return
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - already failing; the file is removed anyway
            pass
        self._fh.close()


def _slices(chunk: Series, rows: int):
    """The chunk in pieces of at most ``rows`` points: the Arrow columns of a piece (nulls
    included) take several times its numpy size, and a reader may hand over millions."""
    n = len(chunk)
    if n <= rows:
        if n:
            yield chunk
        return
    for a in range(0, n, rows):
        if isinstance(chunk, ScalarSeries):
            b = min(n, a + rows)
            yield ScalarSeries(run=chunk.run, tag=chunk.tag, metadata=chunk.metadata,
                               steps=chunk.steps[a:b], wall_times=chunk.wall_times[a:b],
                               hidden=None if chunk.hidden is None else chunk.hidden[a:b],
                               values=chunk.values[a:b])
        else:
            yield chunk.take(np.arange(a, min(n, a + rows)))


def _names(names: list[str], lengths: list[int], index_type=np.int32) -> pa.DictionaryArray:
    """``names[k]`` ``lengths[k]`` times, dictionary-encoded."""
    first = names[0]
    if names.count(first) == len(names):    # one plugin, one data class: the usual case
        return C.const_dict(first, sum(lengths), index_type)
    position: dict[str, int] = {}
    codes = np.array([position.setdefault(name, len(position)) for name in names],
                     dtype=index_type)
    index = C.fixed(np.repeat(codes, lengths), pa.from_numpy_dtype(np.dtype(index_type)))
    return pa.DictionaryArray.from_arrays(index, C.some_strings(tuple(position)))


def _joined_column(arrays: list, dtype) -> np.ndarray:
    return np.asarray(arrays[0], dtype) if len(arrays) == 1 else np.concatenate(arrays, dtype=dtype)


def _rows_columns(chunks: list[Series], sids: list[int], run: str) -> dict:
    """The columns every kind has, of the rows of ``chunks`` one after another."""
    lengths = [len(c) for c in chunks]
    n = sum(lengths)
    mds = [c.metadata for c in chunks]
    hidden = _joined_column([np.zeros(len(c), dtype=bool) if c.hidden is None else c.hidden
                             for c in chunks], bool)
    series = np.full(n, sids[0], dtype=np.int32) if len(chunks) == 1 else \
        np.repeat(np.array(sids, dtype=np.int32), lengths)
    return {
        "run": C.const_dict(run, n), "tag": _names([c.tag for c in chunks], lengths),
        "step": C.fixed(_joined_column([c.steps for c in chunks], np.int64), pa.int64()),
        "wall_time": C.fixed(_joined_column([c.wall_times for c in chunks], np.float64),
                             pa.float64()),
        "hidden": C.bools(hidden),
        "data_class": _names([S.DATA_CLASS_NAMES[DataClass(md.data_class)] for md in mds],
                             lengths, np.int8),
        "plugin_name": _names([md.plugin_name for md in mds], lengths),
        "series": C.fixed(series, pa.int32()),
    }


def _batch(cols: dict, n: int) -> pa.RecordBatch:
    nulls = _nulls(n)
    arrays = [nulls[k] if (col := cols.get(name)) is None else col
              for k, name in enumerate(S.COLUMNS)]
    return pa.RecordBatch.from_arrays(arrays, schema=S.SCHEMA)


@functools.lru_cache(maxsize=8)
def _nulls(n: int) -> list:
    """A column of ``n`` nulls of each type of the schema (Arrow arrays are immutable: the
    runs of a sweep, of one length each, share them)."""
    return [pa.nulls(n, f.type) for f in S.SCHEMA]


def scalars_batch(chunks: list[ScalarSeries], sids: list[int], run: str) -> pa.RecordBatch:
    """The rows of scalar series whose values have one dtype, one series after another."""
    cols = _rows_columns(chunks, sids, run)
    values = _joined_column([c.values for c in chunks], chunks[0].values.dtype)
    n = len(values)
    with np.errstate(all="ignore"):
        v64 = values.astype(np.float64)
    cols["value"] = C.fixed(v64, pa.float64())
    # Where float64 does not give the original back bit for bit (int64 beyond 2**53,
    # signalling NaNs), the exact little-endian bytes go to tensor_content as well.
    store = np.dtype(values.dtype.newbyteorder("<")) if values.dtype.kind != "b" else values.dtype
    original = np.ascontiguousarray(values, dtype=store)
    with np.errstate(all="ignore"):
        back = v64.astype(store)
    inexact = np.flatnonzero(original.view(np.uint8).reshape(n, -1)
                             != back.view(np.uint8).reshape(n, -1)) if n else []
    if len(inexact):
        rows = np.unique(inexact // store.itemsize)
        valid = np.zeros(n, dtype=bool)
        valid[rows] = True
        lengths = valid * store.itemsize
        cols["tensor_content"] = C.binary(original[rows].tobytes(), lengths, valid)
        codes = np.full(n, dt.tf_dtype_of(store), dtype=np.int32)
        cols["tensor_dtype"] = C.dict_codes(codes, dt.NAMES, valid=valid)
        cols["tensor_shape"] = C.lists(C.fixed(np.zeros(0, np.int64), pa.int64()),
                                       np.zeros(n, np.int64), pa.list_(pa.int64()), valid)
    return _batch(cols, n)


def _shapes(arrays: list, n: int) -> pa.Array:
    ndims = np.fromiter((a.ndim for a in arrays), np.int64, n)
    dims = np.fromiter(itertools.chain.from_iterable(a.shape for a in arrays), np.int64,
                       int(ndims.sum()))
    return C.lists(C.fixed(dims, pa.int64()), ndims, pa.list_(pa.int64()))


def _stacked(chunks: list[TensorSeries], codes: np.ndarray):
    """Every point in one array when all have one numeric dtype and one shape (a histogram
    series, say): one copy (none when the reader had them so) instead of a bytes object
    per point; None otherwise."""
    code = int(codes[0])
    if code == dt.DT_STRING or (codes != code).any():
        return None
    joined = joined_block(chunks)
    if joined is not None:
        return np.ascontiguousarray(joined[1], dtype=dt.numpy_dtype(code))
    try:
        block = np.stack([a for c in chunks for a in c.tensors])
    except ValueError:      # shapes differ
        return None
    return np.ascontiguousarray(block, dtype=dt.numpy_dtype(code))


def _joined(arrays: list, codes: np.ndarray):
    """Content bytes and per-point lengths when every point has one numeric dtype (shapes
    may differ: legacy histograms): one concatenation instead of a bytes object per point."""
    code = int(codes[0])
    first = arrays[0].dtype
    if code == dt.DT_STRING or first.kind == "O" or (codes != code).any() or any(
            a.dtype != first for a in arrays):
        return None
    flat = np.concatenate([a.reshape(-1) for a in arrays])
    flat = np.ascontiguousarray(flat, dtype=dt.numpy_dtype(code))
    sizes = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    return flat, sizes * flat.itemsize


def tensors_batch(chunks: list[TensorSeries], sids: list[int], run: str) -> pa.RecordBatch:
    """The rows of tensor series, one series after another."""
    cols = _rows_columns(chunks, sids, run)
    codes = _joined_column([c.dtypes for c in chunks], np.int32)
    n = len(codes)
    cols["tensor_dtype"] = C.dict_codes(codes, dt.NAMES)
    block = _stacked(chunks, codes) if n else None
    if block is not None:
        shape = np.array(block.shape[1:], dtype=np.int64)
        cols["tensor_shape"] = C.lists(C.fixed(np.tile(shape, n), pa.int64()),
                                       np.full(n, len(shape), np.int64), pa.list_(pa.int64()))
        cols["tensor_content"] = C.binary(block, np.full(n, block.nbytes // n, np.int64))
        return _batch(cols, n)
    arrays = [a if isinstance(a, np.ndarray) else np.asarray(a)
              for c in chunks for a in c.tensors]
    is_string = codes == dt.DT_STRING
    cols["tensor_shape"] = _shapes(arrays, n)
    joined = _joined(arrays, codes) if n else None
    if joined is not None:
        cols["tensor_content"] = C.binary(joined[0], joined[1])
        return _batch(cols, n)
    parts = [b"" if s else np.ascontiguousarray(a, dtype=dt.numpy_dtype(c)).tobytes()
             for c, s, a in zip(codes.tolist(), is_string.tolist(), arrays, strict=True)]
    lengths = np.fromiter(map(len, parts), np.int64, n)
    cols["tensor_content"] = C.binary(b"".join(parts), lengths, ~is_string)
    if is_string.any():
        elements, counts = [], np.zeros(n, dtype=np.int64)
        for i in np.flatnonzero(is_string).tolist():
            flat = arrays[i].reshape(-1).tolist()
            counts[i] = len(flat)
            elements.extend(flat)
        cols["tensor_strings"] = C.lists(C.binary_of(elements), counts,
                                         pa.list_(pa.binary()), is_string)
    return _batch(cols, n)


def blobs_batch(chunks: list[BlobSequenceSeries], sids: list[int], run: str) -> pa.RecordBatch:
    """The rows of blob-sequence series, one series after another."""
    cols = _rows_columns(chunks, sids, run)
    blobs = chunks[0].blobs if len(chunks) == 1 else \
        list(itertools.chain.from_iterable(c.blobs for c in chunks))
    counts = _joined_column([np.diff(c.offsets) for c in chunks], np.int64)
    cols["blobs"] = C.lists(C.binary_of(blobs), counts, pa.list_(pa.binary()))
    return _batch(cols, len(counts))


def _series_id(sink: _FileSink, run_index: int, chunk: Series) -> int:
    if isinstance(chunk, ScalarSeries):
        return sink.series_id(run_index, chunk, S.KIND_SCALAR, dtype_name(chunk.values.dtype))
    kind = S.KIND_BLOB_SEQUENCE if isinstance(chunk, BlobSequenceSeries) else S.KIND_TENSOR
    return sink.series_id(run_index, chunk, kind, None)


def _batch_of(sink: _FileSink, run_index: int, chunk: Series, run: str) -> pa.RecordBatch:
    return _shared_batch([chunk], [_series_id(sink, run_index, chunk)], run)


def _payload_free(sink: _FileSink, run_index: int, chunk: Series, run: str) -> pa.RecordBatch:
    """The batch of a lone point whose payload column :mod:`large` writes: that column
    null, the others as :func:`_batch_of` makes them (without a copy of the payload)."""
    cols = _rows_columns([chunk], [_series_id(sink, run_index, chunk)], run)
    if isinstance(chunk, TensorSeries):
        cols["tensor_dtype"] = C.dict_codes(np.asarray(chunk.dtypes, np.int32), dt.NAMES)
        cols["tensor_shape"] = _shapes([np.asarray(chunk.tensors[0])], 1)
    return _batch(cols, 1)


def write_part(path: Path, experiment: Experiment, run: Run, series: Iterable[Series],
               compress: bool = True, later: bool = False):
    """One run as one part file of a directory dataset, the bytes
    :class:`ParquetWriter` writes for it (a part holds no name of its own, so a part
    written elsewhere and renamed is the same file). The caller lists it in the dataset's
    marker. ``compress`` False suits a small part that is soon merged into a larger one:
    setting up compression costs a small part more than writing it. ``later``: the part is
    complete only once the call returned is made (see :meth:`_FileSink.close_later`)."""
    arrowpool.choose()
    sink = _FileSink(path, compress)
    try:
        _write_into(sink, run, series, end=not later)
        if later:
            return sink.close_later(experiment)
        sink.close(experiment)
    except BaseException:
        sink.discard()
        raise
    return None


def merge_parts(files: list[Path], path: Path, experiment: Experiment, report: Report) -> None:
    """The parts ``files`` of one run (a dataset that ``sync`` keeps) written as the one part
    ``path``: the first part's start time, every part's records and rows in part order, so
    that a reader gets the same run from it. Rows are copied as Arrow batches, each row group
    only once its values match the checksums recorded with it; a part that is not whole
    raises :class:`~tbconvert.errors.CorruptDataError` (damage is never written anew under
    fresh checksums)."""
    from tbconvert.errors import CorruptDataError
    from tbconvert.formats.parquet.reader import ArchiveFile
    arrowpool.choose()
    sink = _FileSink(path)
    try:
        records, start_time, name = RecordLog(), None, None
        for k, f in enumerate(files):
            part = ArchiveFile(f, Options(), report)
            try:
                if len(part.runs) != 1 or part.row_groups is None:
                    raise CorruptDataError(f"{f}: not a part of one run written by tbconvert")
                run = part.runs[0]
                if k == 0:
                    name, start_time = run.name, run.start_time
                    sink.runs.append(b"")
                records.extend(run.records)
                ids = np.array([sink.series_id_of(0, tag, kind, md, None if d is None else
                                                  np.dtype(d).name)
                                for _, tag, kind, md, d in part.series], dtype=np.int32)
                groups = part.group_count
                if groups != len(part.row_groups):
                    raise CorruptDataError(f"{f}: {groups} row groups, "
                                           f"{len(part.row_groups)} written")
                for group in range(groups):
                    for batch in part.verified(group, part.row_groups[group]):
                        sink.add(_with_series(batch, ids))
            finally:
                part.close()
        sink.runs[0] = _run_text(Run(name, start_time, records), Path(path).parent)
        sink.close(experiment)
    except BaseException:
        sink.discard()
        raise


def _with_series(batch: pa.RecordBatch, ids: np.ndarray) -> pa.RecordBatch:
    """The batch as the archive's schema has it (read back, its dictionaries have other
    index types and its lists other item names), its series numbers ``n`` made ``ids[n]``."""
    i = batch.schema.get_field_index("series")
    column = batch.column(i)
    if column.null_count or column.type != pa.int32():
        from tbconvert.errors import CorruptDataError
        raise CorruptDataError("a part's series column holds nulls or is not int32")
    old = C.to_numbers(column)
    batch = batch.set_column(i, batch.schema.field(i), C.fixed(ids[old], pa.int32()))
    return pa.Table.from_batches([batch]).cast(S.SCHEMA).combine_chunks().to_batches()[0]


class _JoinedSink:
    """One Parquet file joined from runs that were each encoded on their own (``stage_run``,
    maybe in other processes): the bytes :class:`_FileSink` writes for the same runs, since
    a longer run's row groups hold it alone (short runs are added to a segment's row group
    being filled: see :mod:`shared`). A run's series are numbered from 0 where it was
    encoded; here its ``series`` column chunks are encoded anew with the file's numbers.
    What the footer lists of every run (its JSON, its series', its row groups' entries and
    checksums) waits in spools beside the file, not in memory: a file may hold any number
    of runs."""

    def __init__(self, path: Path) -> None:
        where = Path(path).parent
        self._spools: list[spool.Spool] = []
        self._fh = None
        try:
            self.runs, self.series, self.row_groups, footers = (
                self._spool(where, sep) for sep in (b",", b",", b",", b""))
            self._fh = open(path, "wb")
        except BaseException:
            self.discard()
            raise
        self._file = join.JoinedFile(self._fh, footers)

    def _spool(self, where: Path, sep: bytes) -> spool.Spool:
        made = spool.Spool(where, sep)
        self._spools.append(made)
        return made

    def append(self, path: Path, info: dict) -> None:
        """The run ``stage_run`` encoded into ``path``, described by ``info``."""
        text = info["run"]
        if isinstance(text, dict):
            text = path.with_name(text["file"])
            try:
                self.append_runs(path, [spool.FileText(text)], info["series"],
                                 info["row_groups"], info["series_runs"])
            finally:
                text.unlink(missing_ok=True)
            return
        self.append_runs(path, [text], info["series"], info["row_groups"],
                         info["series_runs"])

    def append_segment(self, sink: _FileSink) -> None:
        """The runs a closed (``close_bare``) sink of their own holds, their series numbered
        on from this file's (``first_id``): copied as they are."""
        if sink.first_id != len(self.series):
            raise ValueError("a segment numbers its series from another place")
        self.append_runs(sink.path, sink.runs, sink.series_json(), sink.row_groups, None)

    def append_runs(self, path: Path, runs: list, series: list, row_groups: list,
                    series_runs: list | None) -> None:
        """Runs encoded into the Parquet file ``path`` on their own: their JSON, their
        series' (numbered from 0, each naming its run by its index among ``runs``), each row
        group's digest and series numbers (see ``_FileSink.series_runs``; None where the
        runs' series already have the file's numbers)."""
        run_base, offset = len(self.runs), len(self.series)
        digests = [dict(d, crc32c=dict(d["crc32c"])) for d in row_groups]
        with open(path, "rb") as src:
            if not offset or series_runs is None:   # numbers the file's already
                self._file.append(src)
            else:
                self._file.append(src, _renumbering(offset, digests, series_runs))
        # (the items of a JSON list, each as S.dumps gives it within the list)
        for run in runs:
            self.runs.add(run)
        for s in series:
            self.series.add(S.dumps(dict(s, run=s["run"] + run_base)))
        for digest in digests:
            self.row_groups.add(S.dumps(digest))

    def _key_value(self, experiment: Experiment) -> dict:
        """:func:`_key_value` of the runs joined: the same bytes, from the spools."""
        head = S.dumps({"format": S.FORMAT_NAME, "schema_version": S.SCHEMA_VERSION,
                        "experiment": S.experiment_to_json(experiment), "runs": []})
        groups = S.dumps({S.ROW_GROUPS_KEY: []})
        raw = spool.Pieces([head[:-2], self.runs, b'],"series":[', self.series, b"],",
                            groups[1:-2], self.row_groups, b"]}"])
        return {S.METADATA_KEY: raw, S.DIGEST_KEY: raw.sha256().encode("ascii")}

    def close(self, experiment: Experiment) -> None:
        try:
            self._file.close(self._key_value(experiment))
        finally:
            self.discard()

    def discard(self) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
        finally:
            for made in self._spools:
                made.close()


def _runs_of(ids) -> tuple[np.ndarray, np.ndarray]:
    """A column of series numbers as runs: ``(numbers, counts)``."""
    ids = C.to_numbers(ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids)
    heads = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))) if len(ids) else \
        np.zeros(0, dtype=np.int64)
    return ids[heads].astype(np.int32), np.diff(np.append(heads, len(ids)))


def _renumbering(offset: int, digests: list[dict], runs: list) -> join.Replace:
    """For :meth:`join.JoinedFile.append`: the ``series`` column chunks of a run encoded on
    its own with their numbers moved up by ``offset`` (their digests in ``digests``
    updated): moved where they lie (:mod:`pages`), or else encoded anew. ``runs``: each row
    group's numbers as :func:`_runs_of` gives them."""
    # (every column before it is flat: its column chunk has the field's index)
    column = S.SCHEMA.get_field_index("series")
    level = S.COMPRESSION_LEVELS["series"]

    def replace(group: int, c: int, chunk: list, src):
        if c != column:
            return None
        numbers, counts = runs[group]
        moved = C.fixed(np.repeat(numbers + np.int32(offset), counts), pa.int32())
        digest = ColumnDigest()
        digest.update(moved)
        digests[group]["crc32c"]["series"] = digest.hexdigest()
        at, size = join.chunk_span(chunk)
        src.seek(at)
        found = pages.moved_int32_chunk(src.read(size), chunk, offset, level)
        if found is not None:
            return found[0], found[1], at
        return _series_chunk(moved)
    return replace


def _series_chunk(moved: pa.Array):
    """The ``series`` column chunk of a row group of the series numbers ``moved``, encoded:
    its bytes, its footer entry and where it starts in the file that entry describes."""
    return column_chunk(moved, S.SCHEMA.field("series"))


def column_chunk(column, field: pa.Field) -> tuple[pa.Buffer, list, int]:
    """The column ``column`` (the archive's ``field``) encoded as one column chunk, as the
    archive's writer encodes it within the whole: :func:`only_chunk` of a Parquet file of
    that column alone."""
    schema = pa.schema([field])
    out = pa.BufferOutputStream()
    writer = parquet_writer(out, schema)
    writer.write_table(pa.table([column], schema=schema), row_group_size=max(len(column), 1))
    writer.close()
    return only_chunk(out.getvalue())


def only_chunk(raw) -> tuple[bytes, list, int]:
    """The column chunk of the Parquet file ``raw`` (bytes, or a ``pa.Buffer``: its chunk is
    then a slice of it, not a copy) of one column and one row group: its bytes, its footer
    entry and where it starts in the file."""
    fields, _ = footer.read(pa.BufferReader(raw))
    _, groups = footer.get(fields, footer.FILE_ROW_GROUPS)
    _, chunks = footer.get(groups[0], footer.RG_COLUMNS)
    at, size = join.chunk_span(chunks[0])
    return raw[at:at + size], chunks[0], at


# Series shorter than this share record batches (a sync's few new points per tag, a run of
# many short tags, a histogram per parameter): Arrow's per-batch and per-chunk costs outweigh
# their rows. A shared batch holds at most SHARED_BATCH_BYTES of payload.
SHORT_SERIES_ROWS = 4096
SHARED_BATCH_BYTES = 4 << 20


def _sharing(chunk: Series) -> tuple[tuple, int] | None:
    """``(key, payload bytes)`` of a chunk that may share a batch with the chunks of the same
    key around it, or None. String tensors keep batches of their own: their size is not known
    without walking every element."""
    n = len(chunk)
    if n >= SHORT_SERIES_ROWS:
        return None
    if isinstance(chunk, ScalarSeries):
        return ("scalar", chunk.values.dtype), n * chunk.values.dtype.itemsize
    if isinstance(chunk, BlobSequenceSeries):
        size = sum(len(b) for b in chunk.blobs if b is not None)
    else:
        if (chunk.dtypes == dt.DT_STRING).any():
            return None
        size = chunk.block.nbytes if chunk.block is not None else \
            sum(a.nbytes if isinstance(a, np.ndarray) else np.asarray(a).nbytes
                for a in chunk.tensors)
    return ((type(chunk),), size) if size <= SHARED_BATCH_BYTES else None


def _shared_batch(chunks: list[Series], sids: list[int], run: str) -> pa.RecordBatch:
    first = chunks[0]
    if isinstance(first, ScalarSeries):
        return scalars_batch(chunks, sids, run)
    if isinstance(first, BlobSequenceSeries):
        return blobs_batch(chunks, sids, run)
    return tensors_batch(chunks, sids, run)


def _write_into(sink: _FileSink, run: Run, series: Iterable[Series], end: bool = True,
                stage: bool = False) -> shared.RunRows:
    """Encode ``run`` into ``sink`` (a short run shares the row group being filled: see
    :mod:`shared`); ``end`` False leaves a longer run's last row group buffered (the sink's
    closing writes it: see :meth:`_FileSink.close_later`); ``stage`` leaves a short run's
    rows out of the sink, in what is returned: what the run's rows became."""
    run_index = len(sink.runs)
    sink.runs.append(_run_text(run, Path(sink.path).parent))
    out = shared.RunRows(sink)
    short: list[Series] = []
    sids: list[int] = []
    key = None
    rows = size = 0

    def add(batch: pa.RecordBatch) -> None:
        for piece, piece_size in _pieces(batch):
            out.add(piece, piece_size)

    def add_short() -> None:
        nonlocal rows, size
        if short:
            add(_shared_batch(short, sids, run.name))
            short.clear()
            sids.clear()
            rows = size = 0
    empty: dict = {}    # series without points, listed at the end (see below)
    with_rows: set = set()
    for piece in series:
        if not len(piece):
            empty.setdefault(piece.tag, piece)
            continue
        with_rows.add(piece.tag)
        for chunk, payload in (part for whole in _slices(piece, S.WRITE_SLICE_ROWS)
                               for part in large.split(whole)):
            if payload is not None:
                add_short()
                out.own()
                sink.add_large(_payload_free(sink, run_index, chunk, run.name), payload)
                payload = None
                continue
            sharing = _sharing(chunk)
            if sharing is None:
                add_short()
                add(_batch_of(sink, run_index, chunk, run.name))
                continue
            if short and (sharing[0] != key or rows + len(chunk) > S.WRITE_SLICE_ROWS
                          or size + sharing[1] > SHARED_BATCH_BYTES):
                add_short()
            key = sharing[0]
            # numbered where it comes, as if it had a batch of its own
            sids.append(_series_id(sink, run_index, chunk))
            short.append(chunk)
            rows += len(chunk)
            size += sharing[1]
    # The loop's names would keep the last series alive while its batch is encoded: a
    # large point (an image, a tensor) would be held twice over Arrow's own copies.
    piece = chunk = None
    add_short()
    # A series without points (an export holds them) is listed without rows, unless its tag
    # got points under other metadata or another dtype: then it is that series, not two.
    for tag, piece in empty.items():
        if tag not in with_rows:
            _series_id(sink, run_index, piece)
    # A longer run's row groups hold it alone: then a run encoded on its own (stage_run)
    # has the row groups it has in the file, and runs encoded apart join into the same bytes.
    out.end(flush=end, keep=stage)
    return out


# The most runs one Arrow writer encodes into a Parquet file (see ParquetWriter._next_segment).
SEGMENT_RUNS = 256


class ParquetWriter(Writer):
    """Writes a ``.parquet``/``.pq`` file, or a directory dataset for any other name."""

    keeps_hidden = True

    def __init__(self, path: Path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        arrowpool.choose()
        self.directory = not self.path.name.lower().endswith(SUFFIXES)
        self.run_parts = "parquet" if self.directory else "staged"
        self.out = AtomicOutput(self.path, force=options.force, directory=self.directory)
        self._experiment = Experiment()
        self._sink: _FileSink | _JoinedSink | None = None
        self._parts: list[dict] = []
        # one file of many runs: the runs after the first SEGMENT_RUNS go to segment files
        # in a scratch directory, each joined to the output once full (see _next_segment)
        self._segment: _FileSink | None = None
        self._scratch = None
        self._staged: shared.GroupStaged | None = None   # the staged group being added

    def write_experiment(self, experiment: Experiment) -> None:
        self._experiment = experiment

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        self.guard(lambda: self._write_run(run, series))

    def _write_run(self, run: Run, series: Iterable[Series]) -> None:
        if self.directory:
            name = part_name(len(self._parts), run.name)
            sink = _FileSink(self.out.tmp / name)
            self._parts.append({"file": name, "run": run.name})
            self._sink = sink
        elif self._sink is None:
            self._sink = _FileSink(self.out.tmp)
        elif len(self._current().runs) >= SEGMENT_RUNS:
            self._next_segment()    # (only once a run is to follow a full segment)
        _write_into(self._current(), run, series)
        if self.directory:
            self._sink.close(self._experiment)
            self._sink = None

    def _current(self) -> _FileSink:
        return self._segment if self._segment is not None else self._sink

    def _next_segment(self) -> None:
        """Join the runs written so far to the output, and write the next ones to a segment
        of their own: Arrow holds each row group's metadata until its file is closed (15 to
        40 KB a run of few series), so one writer for thousands of runs grew without bound.
        The bytes are those of one writer: a longer run's row groups hold it alone, and the
        row group that short runs were filling goes on in the next segment."""
        if self._segment is None:
            # the first runs, written straight into the output, become its first segment
            first = self._sink
            held = first.unfilled()
            first.close_bare()
            first.path = self._scratch_dir() / "segment-0.parquet"
            os.replace(self.out.tmp, first.path)
            self._sink = _JoinedSink(self.out.tmp)
            self._sink.append_segment(first)
            os.unlink(first.path)
        else:
            held = self._end_segment(carry=True)
        self._new_segment().refill(held)

    def _scratch_dir(self) -> Path:
        from tbconvert.output import ScratchDir
        if self._scratch is None:
            self._scratch = ScratchDir(self.path)
        return self._scratch.path

    def _new_segment(self) -> _FileSink:
        self._segment = _FileSink(self._scratch_dir() / f"segment-{len(self._sink.runs)}.parquet")
        self._segment.first_id = len(self._sink.series)
        return self._segment

    def _end_segment(self, carry: bool) -> tuple | None:
        """Join the segment to the output; ``carry``: its unfilled row group is taken out
        and returned, for the next segment to go on filling."""
        done, self._segment = self._segment, None
        held = done.unfilled() if carry else None
        done.close_bare()
        self._sink.append_segment(done)
        os.unlink(done.path)
        return held

    def next_part(self, run: str) -> str:
        """The name the next run's part gets; :meth:`adopt_part` lists it once written
        (by :func:`write_part`, maybe in another process)."""
        return part_name(len(self._parts), run)

    @staticmethod
    def group_stage(path: Path, tmp: Path) -> shared.GroupStage:
        """Where :meth:`stage_run` puts the rows of the short runs of a group of runs
        converted together (see :class:`~tbconvert.runtasks.RunGroup`)."""
        return shared.GroupStage(path, tmp)

    @staticmethod
    def stage_run(path: Path, run: Run, series: Iterable[Series], report: Report,
                  options: Options, group: shared.GroupStage | None = None) -> dict:
        """One run encoded on its own into the new Parquet file ``path`` (maybe in another
        process), for :meth:`append_staged` to copy into the output; a short run's rows go
        to ``group`` (its group's :meth:`group_stage`), when given, and ``path`` is then
        not made (a file cost more than such a run's encoding)."""
        arrowpool.choose()
        if group is None:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # never another's
        sink = _FileSink(path, lazy=True)
        sink.series_runs = []
        try:
            rows = _write_into(sink, run, series, stage=True)
            if rows.shared:
                # rows for the leading process to add to the row group it fills
                sink.discard()
                info = {"shared": shared.stage(path, rows.held)} if group is None else \
                    {"shared": group.add(rows.held), "group": group.name}
            else:
                sink.close_bare()
                info = {"row_groups": sink.row_groups, "series_runs": sink.series_runs}
            text = sink.runs[0]
            if not isinstance(text, bytes):
                # a run of very many records: its JSON waits beside the part, not in the pickle
                text_path = path.with_name(path.name + RUN_TEXT_SUFFIX)
                with open(text_path, "xb") as out:
                    for block in text.blocks():
                        out.write(block)
                text.close()
                text = {"file": text_path.name}
        except BaseException:
            sink.discard()
            raise
        return {"run": text, "series": sink.series_json(), **info}

    def append_staged(self, path: Path, info: dict, run_name: str) -> None:
        """Add a run :meth:`stage_run` wrote, as :meth:`write_run` would have written it:
        a short run's rows to the row group being filled (in a segment of the file: see
        :meth:`_next_segment`), a longer run's row groups copied as they are."""
        def append():
            if self._sink is None:
                self._sink = _JoinedSink(self.out.tmp)
            if "shared" not in info:
                if self._segment is not None:
                    self._end_segment(carry=False)
                self._sink.append(path, info)
                return
            if self._segment is not None and len(self._segment.runs) >= SEGMENT_RUNS:
                self._next_segment()
            segment = self._segment or self._new_segment()
            run_index = len(segment.runs)
            offset = segment.first_id + len(segment.series)
            text = info["run"]
            if isinstance(text, dict):
                # a run of very many records: its JSON's file, which goes with the task's
                # other files before the segment is joined
                source = path.with_name(text["file"])
                text = spool.Text(self._scratch_dir())
                for block in spool.FileText(source).blocks():
                    text.add(block)
                text = text.value()
                source.unlink()
            segment.runs.append(text)
            segment.series.extend(dict(s, run=run_index) for s in info["series"])
            pieces = self._group_staged(path.with_name(info["group"])).take(
                info["shared"], offset) if "group" in info else \
                shared.staged(path, info["shared"], offset)
            for piece, size in pieces:
                segment.add_piece(piece, size)
        self.guard(append)

    def _group_staged(self, path: Path) -> shared.GroupStaged:
        """The staged group at ``path``, read on from where its last run ended (the runs of a
        group come one after another); the group before it is let go of, and its file."""
        if self._staged is None or self._staged.path != path:
            self._let_go_of_staged()
            self._staged = shared.GroupStaged(path)
        return self._staged

    def _let_go_of_staged(self) -> None:
        if self._staged is not None:
            done, self._staged = self._staged, None
            done.path.unlink(missing_ok=True)

    def adopt_part(self, file: str, run: str) -> None:
        self._parts.append({"file": file, "run": run})

    def close(self) -> None:
        def finish():
            if self.directory:
                marker = {"format": S.FORMAT_NAME, "schema_version": S.SCHEMA_VERSION,
                          "experiment": S.experiment_to_json(self._experiment),
                          "parts": self._parts}
                marker[S.MARKER_DIGEST] = S.marker_digest(marker)
                with open(self.out.tmp / MARKER_FILE, "x", encoding="utf-8") as fh:
                    json.dump(marker, fh, ensure_ascii=False, indent=1)
            else:
                self._let_go_of_staged()
                if self._sink is None:      # no run: a file of no rows
                    self._sink = _FileSink(self.out.tmp)
                if self._segment is not None:
                    self._end_segment(carry=False)
                self._sink.close(self._experiment)
                if self._scratch is not None:
                    self._scratch.remove()
            self.out.commit()
        self.guard(finish)

    def abort(self) -> None:
        self._let_go_of_staged()
        if self._segment is not None:
            self._segment.discard()
            self._segment = None
        if self._scratch is not None:
            self._scratch.remove()
        if self._sink is not None:
            self._sink.discard()
            self._sink = None
        self.out.abort()
