"""ParquetReader: streams a tbconvert Parquet archive (file or directory) record batch by batch."""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tbconvert import arrowpool, budget, malloc, sourcefiles
from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError, FormatError, TbconvertError, raise_if_exhausted
from tbconvert.formats import packed, runrecords
from tbconvert.formats.base import Options, Reader, checksum_failed
from tbconvert.formats.mismatch import not_this_format
from tbconvert.formats.parquet import (
    MARKER_FILE,
    SYNC_NAMES,
    find_retired,
    keyvalue,
    large_read,
    metajson,
    slices,
)
from tbconvert.formats.parquet import columns as C
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet.digest import RowGroupDigest
from tbconvert.formats.parquet.recorded import Recorded
from tbconvert.formats.parquet.rowstream import Rows
from tbconvert.formats.parquet.seriestable import SeriesTable
from tbconvert.formats.recordlog import RecordLog
from tbconvert.model import (
    BlobSequenceSeries,
    Experiment,
    Run,
    RunData,
    ScalarSeries,
    TensorSeries,
    empty_series,
)
from tbconvert.report import Report, plural

# Columns the reader needs (names, data class and plugin come from the series table).
_READ_COLUMNS = ["series", "step", "wall_time", "value", "hidden", "tensor_dtype",
                 "tensor_shape", "tensor_content", "tensor_strings", "blobs"]


_NAME_COLUMNS = ["run", "tag", "data_class", "plugin_name", "tensor_dtype"]

# A column chunk larger than this (a point larger than a row group: an image, a tensor) is
# read through a buffer of READ_BUFFER_BYTES: read whole (pyarrow's pre-buffering), its
# compressed bytes are held while its page is decompressed and decoded, a third copy of the
# point (an image of 92 MB: 92 MB more at the peak). Smaller chunks are read whole, which
# costs about a sixth less CPU (the 30 MB chunks of an archive of images).
READ_WHOLE_BYTES = S.ROW_GROUP_BYTES
READ_BUFFER_BYTES = 1 << 20


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_header(meta: object, where: Path) -> dict:
    """Validate the decoded ``tbconvert`` JSON (format name and schema version)."""
    if not isinstance(meta, dict) or meta.get("format") != S.FORMAT_NAME:
        raise CorruptDataError(f"{where}: not a tbconvert Parquet archive (no tbconvert metadata)")
    version = meta.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise CorruptDataError(f"{where}: damaged tbconvert metadata (bad schema_version {version!r})")
    if version > S.SCHEMA_VERSION:
        raise FormatError(
            f"{where}: written by a newer tbconvert (archive schema version {version}; this "
            f"version reads up to {S.SCHEMA_VERSION}); upgrade tbconvert to read it")
    return meta


def _open_part(path: Path) -> int:
    """A descriptor of the archive file ``path``; a dataset's part that a sync retired since
    its manifest was read (a sync committed meanwhile) is opened under its retired name."""
    try:
        return sourcefiles.open_regular(path)
    except FileNotFoundError:
        retired = find_retired(path.parent, path.name) if path.name.startswith("part-") else None
        if retired is None:
            raise
        return sourcefiles.open_regular(retired)


# Arrow's own limit on the strings of a footer it decodes, which the archive's JSON passes
# for a run of more than about 650,000 records (its session logs and log messages).
_ARROW_FOOTER_STRINGS = keyvalue.ARROW_FOOTER_STRINGS


def _strings_limit(length: int | None) -> int:
    """Arrow's limit on the strings of a footer of ``length`` bytes (None: not known), raised
    to that length: the strings a footer holds cannot be longer than itself, and a tbconvert
    archive's JSON may pass Arrow's own limit (reading it then costs several times its size)."""
    return _ARROW_FOOTER_STRINGS if length is None else max(_ARROW_FOOTER_STRINGS, length)


def _footer_length(fh) -> int | None:
    """The length the Parquet file open in ``fh`` gives its footer (None: it ends otherwise)."""
    try:
        fh.seek(-8, os.SEEK_END)
        tail = fh.read(8)
        fh.seek(0)
    except (OSError, ValueError):
        return None
    if len(tail) != 8 or tail[4:] != b"PAR1":
        return None
    return int.from_bytes(tail[:4], "little")


# A footer this short is read whole by Arrow. Cutting the archive's JSON out of it first
# (_split_footer) spares Arrow's copies of a long one, but cost a sync's small part more
# than the rest of opening it (merging 16 parts: 13% of the time).
WHOLE_FOOTER_BYTES = 64 << 10


def _open_local(path: Path):
    """The archive file ``path`` open for reading."""
    try:
        # a FIFO or device would block or never end
        fh = os.fdopen(_open_part(path), "rb")
    except sourcefiles.NotRegularFile:
        raise CorruptDataError(f"{path}: not a regular file (a FIFO, device or socket); "
                               "copy the archive to a file first") from None
    except OSError as exc:
        raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
        raise CorruptDataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return fh


# Archive JSON this long is handed back to the system once read.
_GIVE_BACK_BYTES = 1 << 20


def _split_footer(fh) -> tuple[pq.FileMetaData, bytearray, slices.Slices | None] | None:
    """The footer of the archive open in ``fh`` as Arrow's metadata without the archive's
    JSON (without its row groups too when it holds many: see :mod:`slices`), the JSON, and
    the row groups' slices; None for a footer that Arrow is to read whole, as it is."""
    apart = keyvalue.split_footer(fh, S.METADATA_KEY)
    if apart is None:
        return None
    rest, value, groups, start = apart
    sliced = slices.of(rest, groups, fh, start)
    try:
        if sliced is not None and sliced.check():
            return sliced.head(), value, sliced
        return keyvalue.metadata_of(rest), value, None
    except (OSError, pa.ArrowException, ValueError):
        return None


def _open_file(fh, path: Path, options: Options,
               report: Report) -> tuple[pq.ParquetFile, dict, slices.Slices | None]:
    length = _footer_length(fh)
    apart = None if length is not None and length <= WHOLE_FOOTER_BYTES else _split_footer(fh)
    sliced = None
    try:
        if apart is None:
            pf = pq.ParquetFile(fh, page_checksum_verification=True,
                                thrift_string_size_limit=_strings_limit(length))
        else:
            pf = pq.ParquetFile(fh, page_checksum_verification=True, metadata=apart[0])
            sliced = apart[2]
        pf = _parquet_file(fh, pf.metadata, set(pf.schema_arrow.names))
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
        raise CorruptDataError(
            f"{path}: not a readable Parquet file (damaged or not Parquet: {_one_line(exc)})") from None
    kv = pf.metadata.metadata or {}
    raw = kv.get(S.METADATA_KEY) if apart is None else apart[1]
    apart = None
    if raw is None:
        raise CorruptDataError(f"{path}: not a tbconvert Parquet archive (no tbconvert metadata)")
    actual = hashlib.sha256(raw).hexdigest().encode("ascii")
    size = len(raw)
    meta = metajson.loads(raw, f"{path}: damaged tbconvert metadata")
    raw = None
    if size >= _GIVE_BACK_BYTES:
        # the JSON's bytes and text, freed: the command's glibc would keep them (see malloc)
        malloc.give_back_free_heap()
    check_header(meta, path)
    # after the version check: a newer schema may protect its metadata differently
    digest = kv.get(S.DIGEST_KEY)
    if digest is None:
        checksum_failed(f"{path}: damaged tbconvert metadata (its checksum is missing)",
                        options, report, path=path)
    elif digest != actual:
        checksum_failed(f"{path}: damaged tbconvert metadata (its checksum does not match)",
                        options, report, path=path)
    # The footer is not checksummed, and Arrow aborts the whole process (rather than
    # raising) on some schemas that contradict the pages: compare it with what is written,
    # whole, or (an archive of the older layout, which any Parquet writer may have written
    # again) column by column.
    if not (pf.schema.equals(_written_schema()) if S.ROW_GROUPS_KEY in meta
            else _known_columns(pf.schema)):
        raise CorruptDataError(f"{path}: damaged archive: its Parquet schema is not the "
                               "one tbconvert writes (damaged file footer)")
    check_columns(pf.schema_arrow, path, S.COLUMNS if S.ROW_GROUPS_KEY in meta else _READ_COLUMNS)
    return pf, meta, sliced


def _parquet_file(fh, metadata, names: set, buffered: bool = False) -> pq.ParquetFile:
    """The archive open in ``fh`` for reading its values (``buffered``: see READ_WHOLE_BYTES)."""
    # names stay dictionary-encoded while read: a row group of long run names would
    # otherwise take far more memory than its values
    dictionary = [c for c in _NAME_COLUMNS if c in names]
    if buffered:
        return pq.ParquetFile(fh, page_checksum_verification=True, metadata=metadata,
                              read_dictionary=dictionary, pre_buffer=False,
                              buffer_size=READ_BUFFER_BYTES)
    return pq.ParquetFile(fh, page_checksum_verification=True, metadata=metadata,
                          read_dictionary=dictionary)


@functools.lru_cache(maxsize=1)
def _written_schema() -> pq.ParquetSchema:
    """The Parquet schema of every archive this version writes."""
    from tbconvert.formats.parquet.writer import parquet_writer
    buf = pa.BufferOutputStream()
    parquet_writer(buf).close()
    return pq.ParquetFile(pa.BufferReader(buf.getvalue())).schema


def _column_shape(column) -> tuple:
    return (column.path, column.physical_type, column.max_definition_level,
            column.max_repetition_level)


def _known_columns(schema: pq.ParquetSchema) -> bool:
    """Whether every column of ``schema`` is one tbconvert writes, laid out as it writes it
    (the same place in the nesting, physical type and levels)."""
    written = _written_schema()
    known = {_column_shape(written.column(i)) for i in range(len(written))}
    try:
        return all(_column_shape(schema.column(i)) in known for i in range(len(schema)))
    except (pa.ArrowException, ValueError):
        return False


def _same_type(got: pa.DataType, want: pa.DataType) -> bool:
    if pa.types.is_dictionary(want):
        want = want.value_type
    if pa.types.is_dictionary(got):
        got = got.value_type
    if pa.types.is_list(want):
        return pa.types.is_list(got) and got.value_type == want.value_type
    return got == want


def check_columns(schema: pa.Schema, path: Path, needed) -> None:
    """Every column the reader uses is there, with the type it was written with."""
    missing = [c for c in needed if c not in schema.names]
    if missing:
        raise CorruptDataError(f"{path}: damaged archive: missing column(s) {', '.join(missing)}")
    for name in needed:
        got, want = schema.field(name).type, S.SCHEMA.field(name).type
        if schema.get_all_field_indices(name) != [schema.get_field_index(name)] or \
                not _same_type(got, want):
            raise CorruptDataError(f"{path}: damaged archive: column {name!r} is {got}, "
                                   f"not {want}")


# A row group of more rows than this is decoded by Arrow's threads.
_THREADED_ROWS = 1 << 14


# A batch this large is decoded whole before its rows are handed on (see _decoded).
_LARGE_BATCH_BYTES = 16 << 20


def _letting_go(batches):
    """``batches`` one by one, none kept here once handed on, the next asked for before a
    large one is handed on: Arrow's iterator holds the batch it gave (and the row group's
    pages once it gave the last) until it is asked for the next."""
    if isinstance(batches, list):   # (a row group read once, checked and kept)
        while batches:
            yield batches.pop(0)
        return
    it = iter(batches)
    batch = next(it, None)
    while batch is not None:
        if batch.get_total_buffer_size() < _LARGE_BATCH_BYTES:
            yield batch
            batch = next(it, None)
            continue
        held = [batch]
        batch = next(it, None)
        yield held.pop()    # (not kept in this frame while it is used)


class ArchiveFile:
    """One archive file: its runs, its series table, and its chunks in row order."""

    def __init__(self, path: Path, options: Options, report: Report, fh=None) -> None:
        """``fh``: the file already open (a remote one; closed with the archive), ``path``
        then only names it in messages."""
        self.path = path
        self.report = report
        self.seen = np.zeros(0, dtype=bool)     # the series that rows were found for
        self._unseen: dict | None = None
        if fh is None:
            fh = _open_local(path)
        try:
            self.file, meta, self._slices = _open_file(fh, path, options, report)
        except BaseException:
            fh.close()
            raise
        self._fh = fh
        self._names = set(self.file.schema_arrow.names)
        self._buffered: pq.ParquetFile | None = None   # (see _reader)
        # the slice of row groups read now (see slices): its number, file, buffered file
        self._slice: list | None = None
        try:
            self._read_meta(meta)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._buffered = self._slice = None
        self.file.close(force=True)  # also its file handle (see _open_file)

    def _read_meta(self, meta: dict) -> None:
        path = self.path
        try:
            self.experiment = S.experiment_from_json(meta.get("experiment"))
            runs = meta.get("runs")
            series = meta.get("series")
            if not isinstance(runs, list) or not isinstance(series, (list, metajson.Entries)):
                raise S.BadMetadata("runs and series must be lists")
            self.runs = [runrecords.checked(S.run_from_json(r, i), self.report, str(path))
                         for i, r in enumerate(runs)]
            if isinstance(series, metajson.Entries):
                self.series = series.checked(len(self.runs))
            else:
                self.series = SeriesTable.of(S.series_from_json(e, i, len(self.runs))
                                             for i, e in enumerate(series))
                self.series.done()
            recorded = meta.get(S.ROW_GROUPS_KEY)
            self.row_groups = recorded.checked() if isinstance(recorded, Recorded) else \
                S.row_groups_from_json(recorded)
            # (a flag a series: a set of 100,000 numbers took 7 MB)
            self.seen = np.zeros(len(self.series), dtype=bool)
        except S.BadMetadata as exc:
            raise CorruptDataError(f"{path}: damaged tbconvert metadata ({_one_line(exc)})") from None

    def chunks(self) -> Iterator[tuple[int, object]]:
        """``(run_index, chunk)`` in row order. A damaged row group costs its rows (reported),
        not the rest of the file: every page carries a checksum, and every row group's
        decoded values are compared with the checksum written with them before any is used."""
        recorded = self.row_groups
        if recorded is not None and not self._as_written(recorded):
            yield from self._regrouped(recorded)
            return
        for group in range(self.group_count):
            rows = self.group_rows(group)

            def batches(group=group):
                if recorded is None:
                    return self._batches(group, _READ_COLUMNS)
                return self._large_point(group, recorded[group]) or \
                    self.verified(group, recorded[group])

            def damaged(exc, lost, group=group, rows=rows) -> str:
                return (f"{self.path}: row group {group} is damaged ({_one_line(exc)}); "
                        f"{lost} of its {plural(rows, 'point')} skipped{self._runs_in(group)}")
            yield from self._decoded(batches, rows, damaged)

    def _decoded(self, batches, rows: int, damaged) -> Iterator[tuple[int, object]]:
        """``(run_index, chunk)`` of the ``rows`` rows that ``batches()`` gives. A failure
        part-way (reading, checking, decoding) costs the rows not yet given, reported with
        ``damaged(exc, lost)``."""
        done = 0
        try:
            given = batches()
            large = getattr(given, "large", None)
            for batch in _letting_go(given):
                decoded = self._decode(batch, large)
                if batch.get_total_buffer_size() >= _LARGE_BATCH_BYTES:
                    # a large point (an image): decoded at once, and Arrow's batch let go
                    # before it is used, rather than held along with its copy
                    decoded, batch = list(decoded), None
                for run_index, chunk in decoded:
                    done += len(chunk)
                    yield run_index, chunk
                decoded = None
            batch = None
            arrowpool.release()
        except (OSError, pa.ArrowException, ValueError, TypeError, KeyError, IndexError,
                CorruptDataError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            lost = max(rows - done, 0)
            self.report.add("damaged_row_group", damaged(exc, lost), path=self.path, count=lost)

    @property
    def group_count(self) -> int:
        """The file's row groups."""
        if self._slices is None:
            return self.file.metadata.num_row_groups
        return self._slices.count

    def group_rows(self, group: int) -> int:
        if self._slices is None:
            return self.file.metadata.row_group(group).num_rows
        return self._slices.rows[group]

    def row_group(self, group: int) -> pq.RowGroupMetaData:
        pf, local = self._sliced(group)
        return pf.metadata.row_group(local)

    def _sliced(self, group: int) -> tuple[pq.ParquetFile, int]:
        """The file as Arrow reads row group ``group`` of it, and that row group's number
        there: the file of its slice, for a footer of many (see :mod:`slices`)."""
        if self._slices is None:
            return self.file, group
        k, local = divmod(group, self._slices.size)
        if self._slice is None or self._slice[0] != k:
            self._slice = None      # (the last slice's metadata let go before the next)
            metadata = self._slices.metadata(k)
            self._slice = [k, _parquet_file(self._fh, metadata, self._names), None]
        return self._slice[1], local

    def _batches(self, group: int, columns):
        # Arrow's threads cost a small row group (a sync's part) more than they save
        pf, local = self._reader(group)
        rg = pf.metadata.row_group(local)
        return pf.iter_batches(batch_size=S.READ_BATCH_ROWS, row_groups=[local],
                               columns=columns, use_threads=rg.num_rows > _THREADED_ROWS)

    def _reader(self, group: int) -> tuple[pq.ParquetFile, int]:
        """:meth:`_sliced`, but a row group with a column chunk larger than
        READ_WHOLE_BYTES is read through a buffer (the same file and settings otherwise)."""
        pf, local = self._sliced(group)
        rg = pf.metadata.row_group(local)
        if all(rg.column(c).total_compressed_size <= READ_WHOLE_BYTES
               for c in range(rg.num_columns)):
            return pf, local
        if self._slice is not None:
            if self._slice[2] is None:
                self._slice[2] = _parquet_file(self._fh, pf.metadata, self._names,
                                               buffered=True)
            return self._slice[2], local
        if self._buffered is None:
            self._buffered = _parquet_file(self._fh, self.file.metadata, self._names,
                                           buffered=True)
        return self._buffered, local

    def verified(self, group: int, expected: dict) -> list:
        """The row group's batches (every column), once their values match the recorded
        checksum (:class:`CorruptDataError` if they do not)."""
        # A row group larger than tbconvert writes (an archive from elsewhere) is read twice,
        # checked then decoded, rather than held in memory.
        rg = self.row_group(group)
        keep = rg.total_byte_size <= 2 * S.ROW_GROUP_BYTES and rg.num_rows <= S.ROW_GROUP_ROWS
        digest = RowGroupDigest(S.COLUMNS)
        batches = self._digested(group, list(S.COLUMNS), digest, expected, keep)
        _check(digest, expected)
        return batches if keep else self._batches(group, list(S.COLUMNS))

    def _digested(self, group: int, names: list, digest: RowGroupDigest, expected: dict,
                  keep: bool = True) -> list:
        """The row group's batches of the columns ``names``, each added to ``digest`` as it is
        read (none past the rows recorded in ``expected``); kept with ``keep``."""
        batches = []
        for batch in self._batches(group, names):
            digest.update(batch)
            if digest.rows > expected["rows"]:
                break
            if keep:
                batches.append(batch)
        return batches

    def _large_point(self, group: int, expected: dict) -> large_read.Batches | None:
        """:meth:`verified` for decoding, of a row group holding a lone large point whose
        payload chunk :mod:`large_read` reads (the batch's column a stand-in for it); None
        for any other row group."""
        pf, local = self._reader(group)
        found = large_read.find(pf, local)
        column = None if found is None else large_read.read(self._fh, found)
        if column is None:
            return None
        others = [name for name in S.COLUMNS if name != column.name]
        digest = RowGroupDigest(others)
        batches = large_read.Batches(self._digested(group, others, digest, expected))
        digest.names.append(column.name)
        digest.columns[column.name] = column.digest()
        _check(digest, expected)
        field = pf.schema_arrow.field(column.name)
        at = S.SCHEMA.get_field_index(column.name)
        for k, batch in enumerate(batches):
            batches[k] = batch.add_column(at, field, column.stand_in(field.type)) \
                if batch.num_rows else batch.add_column(at, field, pa.nulls(0, field.type))
        batches.large = column
        return batches

    def _as_written(self, recorded: list) -> bool:
        """Whether the file's row groups are those the checksums were recorded for."""
        return [self.group_rows(g) for g in range(self.group_count)] == \
            [g["rows"] for g in recorded]

    def _regrouped(self, recorded: list) -> Iterator[tuple[int, object]]:
        """``chunks()`` of a file whose row groups are not those tbconvert wrote (see
        :meth:`_located`): rows that match no written row group cost themselves, reported
        once per stretch with the written points they stand for."""
        rows = Rows(self, list(S.COLUMNS))
        for start, end, found, held in self._located(rows, recorded):
            if found is None:
                message, count, run = self._unmatched(start, end, held, recorded)
                what = "point" if held else "row"    # written points, or rows added
                self.report.add("damaged_row_group", f"{message}: {plural(count, what)} "
                                "skipped", path=self.path, run=run, count=count)
            else:
                yield from self._decoded_range(rows, found, start, end - start, held)

    def _located(self, rows: Rows, recorded: list):
        """The file's rows in order as ``(start, end, k, held)``: rows ``start`` to ``end``
        are written row group ``k``, their values checked (``held``: their batches, or
        ``[]``: too large to keep, read them again); with ``k`` None they match no written row
        group, and ``held`` lists the written row groups that were to be there.

        For a file whose row groups are not those tbconvert wrote: another tool
        (``pyarrow.parquet.write_table``...) wrote its rows again, in other row groups. The
        checksums do not depend on how rows are batched, so each written row group is looked
        for as a range of the file's rows, all row groups read as one stream: where its
        rows are written to be, counting from the start, or, when the file holds more or
        fewer rows than were written, counting from the end (rows dropped or added before
        it)."""
        shift = rows.total - sum(g["rows"] for g in recorded)
        end = 0             # where the rows found so far end
        missing = []        # written row groups not found since then
        written_at = 0      # where the next written row group starts, counting from the start
        from_end = False    # whether the last one found was counted from the end
        for k, expected in enumerate(recorded):
            n = expected["rows"]
            starts = [written_at, written_at + shift] if shift else [written_at]
            if from_end:
                starts.reverse()
            written_at += n
            found = batches = None
            for start in starts:
                # never rows given already, nor past the end
                if start >= end and start + n <= rows.total:
                    batches = self._verified_range(rows, start, expected)
                    if batches is not None:
                        found = start
                        break
            if found is None:
                missing.append(k)
                continue
            from_end = found != written_at - n
            if found > end or missing:
                yield end, found, None, missing
            missing = []
            yield found, found + n, k, batches
            end = found + n
        if rows.total > end or missing:
            yield end, rows.total, None, missing

    def verified_batches(self) -> Iterator[pa.RecordBatch]:
        """Every row of the file as Arrow batches (every column) in row order, each row group
        once its values match the checksums written with it, however the file's row groups
        now split the rows; :class:`CorruptDataError` naming the file at the first that does
        not (for readers without a report: nothing damaged is ever given)."""
        recorded = self.row_groups
        groups = self.group_count
        try:
            if recorded is None:    # an archive from before the checksums: its pages' CRCs
                for group in range(groups):
                    yield from self._batches(group, None)
                return
            if self._as_written(recorded):
                for group in range(groups):
                    yield from self._checked_group(group, recorded[group])
                return
            rows = Rows(self, list(S.COLUMNS))
            for start, end, found, held in self._located(rows, recorded):
                if found is None:
                    raise CorruptDataError(self._unmatched(start, end, held, recorded)[0])
                yield from held or rows.read(start, end - start)
        except (OSError, pa.ArrowException, ValueError, TypeError, KeyError,
                IndexError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            raise CorruptDataError(f"{self.path}: damaged archive ({_one_line(exc)})") from None

    def _checked_group(self, group: int, expected: dict):
        try:
            return self.verified(group, expected)
        except (OSError, pa.ArrowException, ValueError, TypeError, KeyError, IndexError,
                CorruptDataError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            raise CorruptDataError(f"{self.path}: row group {group} is damaged "
                                   f"({_one_line(exc)}){self._runs_in(group)}") from None

    def _verified_range(self, rows: Rows, start: int, expected: dict):
        """The batches of the file's rows ``start`` onwards that make up the written row group
        ``expected``, once they match its checksum (``[]`` when too large to keep: read them
        again); None when they do not, or do not read."""
        digest = RowGroupDigest(S.COLUMNS)
        kept: list | None = [] if expected["rows"] <= S.ROW_GROUP_ROWS else None
        size = 0
        try:
            for batch in rows.read(start, expected["rows"]):
                digest.update(batch)
                size += batch.nbytes
                if kept is not None and size <= 2 * S.ROW_GROUP_BYTES:
                    kept.append(batch)
                else:
                    kept = None
        except (OSError, pa.ArrowException, ValueError, TypeError, KeyError, IndexError,
                CorruptDataError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            return None
        if digest.mismatch(expected):
            return None
        return kept if kept is not None else []

    def _decoded_range(self, rows: Rows, k: int, start: int, n: int, batches: list):
        """``(run_index, chunk)`` of the verified rows ``start`` to ``start + n``, written as
        row group ``k``."""
        def damaged(exc, lost) -> str:
            return (f"{self.path}: rows {start} to {start + n - 1}, written as row group {k}, "
                    f"are damaged ({_one_line(exc)}); {lost} of their {plural(n, 'point')} "
                    f"skipped{self._runs_between(start, start + n)[0]}")
        yield from self._decoded(lambda: batches or rows.read(start, n), n, damaged)

    def _unmatched(self, start: int, end: int, missing: list,
                   recorded: list) -> tuple[str, int, str | None]:
        """What the file's rows ``start`` to ``end`` are, in a message (that match none of the
        written row groups ``missing``, which were to be there, or no written row group at
        all), the points or rows they cost, and their run when one."""
        written = sum(recorded[k]["rows"] for k in missing)
        runs, run = self._runs_between(start, end)
        where = f"{self.path}: its row groups are not those tbconvert wrote (rewritten by " \
                "another tool?)"
        rows = f"rows {start} to {end - 1}" if end - start > 1 else f"row {start}"
        if not missing:
            # rows tbconvert did not write (added): nothing says what they hold
            return f"{where}, and its {rows}{runs} match no checksum tbconvert wrote", \
                end - start, run
        groups = f"row group {missing[0]}" if len(missing) == 1 else \
            f"row groups {missing[0]} to {missing[-1]}"
        points = f"{plural(written, 'point')} written as {groups}"
        if end <= start:
            return f"{where}, and the {points} are not in the file", max(written, 1), run
        return f"{where}, and its {rows}{runs} do not match the {points}", max(written, 1), run

    def _runs_between(self, start: int, end: int) -> tuple[str, str | None]:
        """Which runs the file's rows ``start`` to ``end`` hold, for a message (from the first
        and last rows: runs are written one after the other), and the run when only one."""
        if end <= start:
            return "", None
        first = last = None
        try:
            for batch in Rows(self, ["run"]).read(start, end - start):
                if len(batch):
                    col = batch.column(0)
                    first = col[0].as_py() if first is None else first
                    last = col[len(col) - 1].as_py()
        except Exception:  # noqa: BLE001 - only a hint for the message
            pass
        if not isinstance(first, str) or not isinstance(last, str):
            return "", None
        if first == last:
            return f" (run {first!r})", first
        return f" (runs {first!r} to {last!r})", None

    def _runs_in(self, group: int) -> str:
        """Which runs a row group held, from its statistics (when they survived)."""
        try:
            rg = self.row_group(group)
            names = [rg.column(i).path_in_schema for i in range(rg.num_columns)]
            stats = rg.column(names.index("run")).statistics
            if stats is not None and stats.has_min_max:
                lo, hi = stats.min, stats.max
                return f" (run {lo!r})" if lo == hi else f" (runs {lo!r} to {hi!r})"
        except Exception:  # noqa: BLE001 - only a hint for the message
            pass
        return ""

    def _decode(self, batch: pa.RecordBatch, large: large_read.LargeColumn | None = None):
        """``large``: the payload column the batch holds a stand-in for (its one row)."""
        n = batch.num_rows
        if n == 0:
            return
        col = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
        if col["series"].null_count:
            raise CorruptDataError("a row without a series index")
        sids = C.to_numbers(col["series"])
        if (sids < 0).any() or (sids >= len(self.series)).any():
            raise CorruptDataError("series index out of range")
        bounds = np.flatnonzero(sids[1:] != sids[:-1]) + 1
        starts = np.concatenate([[0], bounds]).tolist()
        ends = np.concatenate([bounds, [n]]).tolist()
        steps = C.to_numbers(col["step"])
        walls = C.to_numbers(col["wall_time"])
        hidden = C.to_numbers(col["hidden"])
        if any(col[c].null_count for c in ("step", "wall_time", "hidden")):
            raise CorruptDataError("a row without a step, wall time or hidden flag")
        values = None
        self.seen[sids[starts]] = True
        for s, e in self._cut(col, sids, starts, ends):
            run_index, tag, kind, md, dtype = self.series[int(sids[s])]
            common = dict(run=self.runs[run_index].name, tag=tag, metadata=md,
                          steps=steps[s:e], wall_times=walls[s:e], hidden=hidden[s:e])
            try:
                if kind == S.KIND_SCALAR:
                    if values is None:
                        values = C.to_numbers(col["value"])
                    chunk = ScalarSeries(**common, values=self._scalars(col, values, s, e, dtype))
                elif kind == S.KIND_TENSOR:
                    chunk = self._tensors(col, s, e, common, large)
                else:
                    seqs = col["blobs"].slice(s, e - s).to_pylist()
                    if large is not None and large.listed and seqs:
                        seqs = [large.items]
                    if any(q is None for q in seqs):
                        raise ValueError("blob-sequence point without a blobs list")
                    chunk = BlobSequenceSeries.from_sequences(**common, sequences=seqs)
            except (KeyError, TypeError, ValueError, IndexError, CorruptDataError) as exc:
                # the rows of one series are damaged: they cost themselves, not the row group
                self.report.add(
                    "damaged_points", f"{self.path}: damaged archive in run "
                    f"{self.runs[run_index].name!r}, series {tag!r} ({_one_line(exc)}); "
                    f"{plural(e - s, 'point')} skipped", path=self.path,
                    run=self.runs[run_index].name,
                    tag=tag, count=e - s)
                continue
            yield run_index, chunk

    def _cut(self, col, sids: np.ndarray, starts: list, ends: list):
        """The batch's row ranges of one series each, a tensor or blob series' cut into
        ranges of at most :data:`packed.CHUNK_BYTES` of payload (a batch holds up to a
        row group)."""
        for s, e in zip(starts, ends, strict=True):
            kind = self.series.kind(int(sids[s]))
            if kind == S.KIND_SCALAR or e - s < 2:
                yield s, e
                continue
            payload = _tensor_payload(col, s, e) if kind == S.KIND_TENSOR else \
                _list_payload(col["blobs"].slice(s, e - s))
            for a, b in packed.spans(payload):
                yield s + a, s + b

    def without_rows(self, run_index: int) -> list:
        """The series of run ``run_index`` listed with no row read: series kept without
        points (once the run's rows have been read)."""
        if self._unseen is None:    # the series never seen by the first call, by run
            self._unseen = {}
            for sid in np.flatnonzero(~self.seen).tolist():
                self._unseen.setdefault(self.series.run(sid), []).append(sid)
        return [_empty(self.runs[run_index].name, *self.series[sid][1:])
                for sid in self._unseen.get(run_index, ()) if not self.seen[sid]]

    @staticmethod
    def _scalars(col, values, s, e, dtype):
        v = values[s:e]
        content = col["tensor_content"].slice(s, e - s)
        exact = content.null_count != len(content)     # rows the writer gave exact bytes for
        with np.errstate(all="ignore"):
            out = v.astype(dtype)
        if dtype != np.float64:
            # every value the writer gave no exact bytes for is exact in the series' dtype:
            # a dtype that does not hold them (a damaged or forged series entry) would
            # change them silently
            back = out.astype(np.float64)
            wrong = (back != v) & ~(np.isnan(back) & np.isnan(v))
            if exact:
                wrong &= C.validity_of(content) == 0
            if wrong.any():
                raise ValueError(f"{int(np.count_nonzero(wrong))} value(s) that a {dtype} "
                                 "cannot hold, where the series says its values are of that type")
        if exact:
            for i, raw in enumerate(content.to_pylist()):
                if raw is not None:
                    if len(raw) != dtype.itemsize:
                        raise ValueError(f"exact value of {len(raw)} bytes for a {dtype} scalar")
                    out[i] = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))[0]
        return out

    def _tensors(self, col, s, e, common, large=None) -> TensorSeries:
        k = e - s
        names = col["tensor_dtype"].slice(s, k).to_pylist()
        shapes = col["tensor_shape"].slice(s, k).to_pylist()
        content = col["tensor_content"].slice(s, k)
        strings = col["tensor_strings"].slice(s, k)
        valid = C.validity_of(content)
        offsets = _binary_offsets(content)
        if large is not None and not large.listed:
            data = large.content()      # (read on its own: not copied again)
        else:
            data = packed.owned(content.buffers()[2], int(offsets[0]), int(offsets[-1]))
        offsets = (offsets - offsets[0]).tolist()
        codes = np.empty(k, dtype=np.int32)
        tensors = []
        for i in range(k):
            if names[i] not in dt.CODES:
                raise ValueError(f"unknown tensor_dtype {str(names[i])[:40]!r}")
            code = dt.CODES[names[i]]
            codes[i] = code
            if shapes[i] is None or None in shapes[i]:
                raise ValueError("a tensor without a shape")
            shape = tuple(shapes[i])
            where = f"{self.path}: series {common['tag']!r}"
            budget.check_dims(shape, where)
            size = int(np.prod(shape, dtype=object))
            if code == dt.DT_STRING:
                elems = strings[i].as_py()
                if elems is None or None in elems or len(elems) != size:
                    raise ValueError(f"a string tensor of shape {list(shape)} holds "
                                     f"{0 if elems is None else len(elems)} elements")
                tensors.append(dt.string_array(elems, shape))
            else:
                lo, hi = offsets[i], offsets[i + 1]
                dtype = dt.numpy_dtype(code)
                if not valid[i] or hi - lo != size * dtype.itemsize:
                    raise ValueError(f"a {names[i]} tensor of shape {list(shape)} holds "
                                     f"{hi - lo if valid[i] else 0} bytes")
                tensors.append(packed.point(data, lo, hi, dtype, shape))
                shapes[i] = shape
        block = packed.block_of(data, codes, shapes)
        if block is not None:
            return TensorSeries.of_block(**common, code=int(codes[0]), block=block)
        return TensorSeries(**common, dtypes=codes, tensors=tuple(tensors))


def _check(digest: RowGroupDigest, expected: dict) -> None:
    """:class:`CorruptDataError` when a row group's values do not match their checksum."""
    problem = digest.mismatch(expected)
    if problem:
        raise CorruptDataError(f"its values do not match their checksum: {problem}")


def _binary_offsets(arr: pa.Array) -> np.ndarray:
    """The ``len(arr) + 1`` offsets of a binary column into its data buffer."""
    return np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, 4 * arr.offset).astype(np.int64)


def _tensor_payload(col, s: int, e: int) -> np.ndarray:
    """Cumulative bytes rows ``s..e`` of a tensor series decode to (content, and string
    elements), ``e - s + 1`` rising values."""
    content = _binary_offsets(col["tensor_content"].slice(s, e - s))
    strings = col["tensor_strings"].slice(s, e - s)
    if strings.null_count == len(strings):
        return content
    return content + _list_payload(strings)


def _list_payload(lists: pa.Array) -> np.ndarray:
    """Cumulative bytes the rows of a column of lists of binary decode to, each element
    at what it costs once decoded, ``len(lists) + 1`` rising values."""
    ends = _binary_offsets(lists)      # (a list column's offsets: the same layout)
    values = lists.values              # (the whole child column, which they index)
    elements = _binary_offsets(values)[ends] if len(values) else 0
    return elements + ends * dt.STRING_ELEMENT_BYTES


def _empty(run: str, tag: str, kind: str, md, dtype):
    return empty_series(_CLASS_OF_KIND[kind], run, tag, md, dtype)


_CLASS_OF_KIND = {S.KIND_SCALAR: ScalarSeries, S.KIND_TENSOR: TensorSeries,
                  S.KIND_BLOB_SEQUENCE: BlobSequenceSeries}


def read_marker(path: Path, options: Options, report: Report) -> dict:
    marker = path / MARKER_FILE
    try:
        meta = budget.loads_json(sourcefiles.read_bytes(marker), f"{marker}: damaged")
    except FileNotFoundError:
        raise _without_marker(path) from None
    except IsADirectoryError:
        raise CorruptDataError(f"{marker}: damaged (a directory, not the dataset's JSON "
                               "manifest)") from None
    except OSError as exc:
        raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
        raise CorruptDataError(f"{marker}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptDataError(f"{marker}: damaged ({_one_line(exc)})") from None
    check_header(meta, marker)
    digest = meta.pop(S.MARKER_DIGEST, None)
    if digest is None:
        checksum_failed(f"{marker}: damaged (its checksum is missing)", options, report,
                        path=marker)
    elif digest != S.marker_digest(meta):
        checksum_failed(f"{marker}: damaged (its checksum does not match)", options, report,
                        path=marker)
    parts = meta.get("parts")
    if not isinstance(parts, list) or not all(
            isinstance(p, dict) and isinstance(p.get("file"), str) for p in parts):
        raise CorruptDataError(f"{marker}: damaged (bad parts list)")
    for p in parts:
        name = p["file"]
        if "/" in name or "\\" in name or name in (".", "..") or not name.startswith(S.PART_PREFIX):
            raise CorruptDataError(f"{marker}: damaged (unsafe part name {name!r})")
    return meta


def _without_marker(path: Path) -> TbconvertError:
    """A directory without a marker: a dataset that lost it (damage), a first sync's that
    has not committed yet, or none at all."""
    try:
        names = [p.name for p in sourcefiles.listdir(path)]
    except OSError:
        names = []
    if any(n.startswith(S.PART_PREFIX) and n.endswith(".parquet") for n in names):
        return CorruptDataError(f"{path}: damaged Parquet dataset: its part files are there but "
                                f"not {MARKER_FILE}, which lists them")
    if any(n.startswith(SYNC_NAMES) for n in names):
        return FormatError(f"{path}: a Parquet dataset whose first sync has not finished (it "
                           "is running, or was killed): nothing of it is committed yet; run "
                           "the sync again")
    from tbconvert import registry
    data = registry.web_view_data(Path(path), names)
    if data is not None:
        return FormatError(registry.web_view_message(path, data))
    return not_this_format(path, "parquet", f"a directory without {MARKER_FILE} (the file that "
                                            "makes a directory a tbconvert Parquet dataset)")


def _tell_unlisted_parts(path: Path, parts: list[dict], report: Report) -> None:
    """Part files the marker does not list are not the dataset's: not read, but told of, as
    readers of the bare directory read them."""
    listed = {p["file"] for p in parts}
    try:
        unlisted = sorted(p.name for p in sourcefiles.listdir(path) if p.name.startswith(S.PART_PREFIX)
                          and p.name.endswith(".parquet") and p.name not in listed)
    except OSError:
        return
    if unlisted:
        shown = ", ".join(unlisted[:3]) + (f" and {len(unlisted) - 3} more" if len(unlisted) > 3
                                           else "")
        report.add("parts_not_listed", f"{path}: {len(unlisted)} part file(s) that its "
                   f"{MARKER_FILE} does not list were not read ({shown}); readers of every file "
                   "(pyarrow.dataset, DuckDB's glob, Dask) read them: a sync cut short leaves "
                   "them until the next one, otherwise remove them", path=path,
                   count=len(unlisted), lost=False)


def _run_groups(files: list[Path], parts: list[dict]) -> list[list[Path]]:
    """The part files by run: consecutive parts naming one run hold that one run."""
    groups: list[list[Path]] = []
    last = None
    for f, p in zip(files, parts, strict=True):
        run = p.get("run")
        if groups and isinstance(run, str) and run == last:
            groups[-1].append(f)
        else:
            groups.append([f])
        last = run if isinstance(run, str) else None
    return groups


def _series_key(chunk) -> tuple:
    dtype = chunk.values.dtype if isinstance(chunk, ScalarSeries) else None
    return type(chunk), chunk.tag, chunk.metadata, dtype


def read_parts(files: list[Path], options: Options, report: Report) -> Iterator[RunData]:
    """One run kept in several parts (a dataset that ``sync`` keeps up to date), read as
    one: the first part's start time, every part's records and points, in part order.
    A tag's chunks come part by part, so other tags' chunks may come between them."""
    runs = []
    for f in files:
        source = ArchiveFile(f, options, report)
        try:
            if len(source.runs) != 1:
                raise CorruptDataError(f"{f}: damaged dataset: a part of run "
                                       f"{source.runs[0].name if source.runs else '?'!r} "
                                       f"holds {len(source.runs)} runs, not one")
            runs.append(source.runs[0])
        finally:
            source.close()
    first = runs[0]
    records = RecordLog()
    for part in runs:
        records.extend(part.records)
    run = Run(name=first.name, start_time=first.start_time, records=records)

    def chunks():
        seen, empty = set(), {}
        for f in files:
            source = ArchiveFile(f, options, report)
            try:
                for _, chunk in source.chunks():
                    seen.add(_series_key(chunk))
                    yield chunk
                for chunk in source.without_rows(0):
                    empty.setdefault(_series_key(chunk), chunk)
            finally:
                source.close()
        yield from (chunk for key, chunk in empty.items() if key not in seen)
    series = chunks()
    yield RunData(run=run, series=series)
    for _ in series:
        pass


class ParquetReader(Reader):
    """Reads a file written by :class:`ParquetWriter`, or a directory dataset."""

    def __init__(self, path: Path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        arrowpool.choose()
        if self.path.is_dir():
            marker = read_marker(self.path, options, report)
            try:
                self._experiment = S.experiment_from_json(marker.get("experiment"))
            except S.BadMetadata as exc:
                raise CorruptDataError(f"{self.path / MARKER_FILE}: damaged ({exc})") from None
            parts = marker["parts"]
            _tell_unlisted_parts(self.path, parts, report)
            # a part that is gone costs its points only, with --ignore-checksum
            kept = []
            for p in parts:
                f = self.path / p["file"]
                if f.is_file() or find_retired(self.path, f.name) is not None:
                    kept.append(p)
                    continue
                checksum_failed(f"{f}: missing from the dataset listed in {MARKER_FILE}",
                                options, report, path=f)
            self._files = [self.path / p["file"] for p in kept]
            self._groups = _run_groups(self._files, kept)
            self._first = None
        else:
            self._first = ArchiveFile(self.path, options, report)
            self._experiment = self._first.experiment
            self._files = [self.path]
            self._groups = [[self.path]]

    def experiment(self) -> Experiment:
        return self._experiment

    def iter_runs(self) -> Iterator[RunData]:
        for group in self._groups:
            f = group[0]
            if self._first is not None and f == self.path:
                yield from self._runs_of(self._first)
                continue
            if len(group) > 1:
                yield from self._spread_run(group)
                continue
            source = ArchiveFile(f, self.options, self.report)
            try:
                yield from self._runs_of(source)
            finally:
                source.close()

    def _spread_run(self, files: list[Path]) -> Iterator[RunData]:
        yield from read_parts(files, self.options, self.report)

    def close(self) -> None:
        if self._first is not None:
            self._first.close()

    def _runs_of(self, source: ArchiveFile) -> Iterator[RunData]:
        it = source.chunks()
        pending: list = []  # at most one (run_index, chunk) looked ahead

        def take(run_index: int):
            yield from rows(run_index)
            yield from source.without_rows(run_index)

        def rows(run_index: int):
            while True:
                if not pending:
                    nxt = next(it, None)
                    if nxt is None:
                        return
                    pending.append(nxt)
                idx, chunk = pending[0]
                if idx < run_index:
                    pending.pop()
                    continue  # leftovers of a run the caller did not consume
                if idx != run_index:
                    return
                pending.pop()
                yield chunk

        for i, run in enumerate(source.runs):
            yield RunData(run=Run(name=run.name, start_time=run.start_time, records=run.records),
                          series=take(i))
            for _ in take(i):  # drain what the consumer left
                pass
        for _ in it:  # rows of unknown runs would be a damaged file; chunks() validates ids
            pass
