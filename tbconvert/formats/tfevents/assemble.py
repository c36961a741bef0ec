"""Collect one run's decoded events and turn them into series, as TensorBoard would.

Points of a tag keep read order (duplicates included). The first metadata seen
for a tag wins, as in TensorBoard's accumulator. TensorBoard's restart rule
(docs/format-notes.md) is reproduced exactly, but what it would hide is marked in
the series' ``hidden`` mask instead of being thrown away.

Memory stays bounded whatever the run's size. The rule is exact only once the
whole run has been read (a restart near the end can hide points read at the
start), so reading is one pass that decodes each block of records into
per-tag *pieces* and puts them in a :class:`~tbconvert.formats.tfevents.spill.PieceStore`
(held in memory while small, spilled to a temporary file beyond that), while
the purges are worked out on the fly from a few facts per event. Building then
reads the pieces back tag by tag and emits bounded chunks with their hidden
masks.
"""

from __future__ import annotations

import heapq
import itertools
from array import array

import numpy as np

from tbconvert import dtypes as dt
from tbconvert import malloc
from tbconvert.formats.recordlog import RecordLog
from tbconvert.formats.tfevents import legacy, summary_templates
from tbconvert.formats.tfevents.held_batches import HeldBatches
from tbconvert.formats.tfevents.purge_log import PurgeLog, Purges, PurgesByTag, seq_of
from tbconvert.formats.tfevents.purges import RestartRule
from tbconvert.formats.tfevents.spill import PieceStore
from tbconvert.formats.tfevents.summary_templates import TagColumns
from tbconvert.formats.tfevents.tagkinds import (
    NDIM0,
    NDIM1,
    NDIMN,
    NO_KINDS,
    container,
    ndim_class,
    shared,
    tag_kinds,
    with_kind,
)
from tbconvert.model import (
    BlobSequenceSeries,
    Metadata,
    Run,
    RunRecord,
    ScalarSeries,
    TensorSeries,
)

# A chunk handed to the writer holds at most this many points or (about) this many bytes.
CHUNK_POINTS = 1 << 18
CHUNK_BYTES = 16 << 20
# A tag's few points of a block (decoded one by one, or a stack of tensors decoded in bulk)
# are held from block to block until there are this many (all tags' held points together
# at most HOLD_BYTES): a run with a histogram per parameter has one to twenty points per
# tag in a 4 MiB block, and a stored piece per tag and block cost more than its points.
HOLD_POINTS = 64
HOLD_BYTES = 16 << 20
# Tags of a run from which its building hands the heap's free memory back (see series)
TRIM_TAGS = 10_000

_NO_METADATA = (0, Metadata())


def _ragged(points: list):
    """Tensors of one dtype whose shapes differ only in their first dimension (legacy
    histograms, ``[k, 3]``) as one array and the points' lengths: ``("ragged", code,
    (array, lengths))``, or None. A run's pieces may be pickled to disk, and one array
    pickles a hundred times faster than as many small ones."""
    if len(points) < 2 or points[0] is None:
        return None
    code, first = points[0]
    if not isinstance(first, np.ndarray) or first.ndim < 1 or first.dtype.kind not in "biufc":
        return None
    dtype, rest = first.dtype, first.shape[1:]
    for p in points:
        if p is None or p[0] != code or not isinstance(p[1], np.ndarray) \
                or p[1].dtype != dtype or p[1].shape[1:] != rest:
            return None
    arrays = [p[1] for p in points]
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    return "ragged", code, (np.concatenate(arrays), lengths)


def _held_bytes(points: list) -> int:
    """What holding ``points`` over costs, or more than any budget for points whose size is
    not known without walking them (string tensors: images, text)."""
    size = 0
    for p in points:
        if p is not None:
            if p[1].dtype.kind not in "biufc":
                return HOLD_BYTES + 1
            size += p[1].nbytes
    return size + 100 * len(points)


def _held_size(bt) -> int | None:
    """What holding a tag's points of a block over costs, or None when they are stored now:
    HOLD_POINTS of them or more, string tables, or bulk columns that are not one stack."""
    rows = len(bt.points) + sum(len(c[0]) for c in bt.cols)
    if rows >= HOLD_POINTS or bt.tables or (bt.cols and not _one_stack(bt.cols)):
        return None
    return _held_bytes(bt.points) + sum(c[4].nbytes + 100 * len(c[0]) for c in bt.cols)


def _one_stack(cols: list) -> bool:
    """Whether bulk columns hold tensors of one numeric dtype, enum and shape (a point each
    row), which join into one array."""
    if not cols:
        return False
    code, first = cols[0][3], cols[0][4]
    if not isinstance(first, np.ndarray) or first.ndim < 2 or first.dtype.kind not in "biufc":
        return False
    return all(c[3] == code and isinstance(c[4], np.ndarray) and c[4].dtype == first.dtype
               and c[4].shape[1:] == first.shape[1:] for c in cols[1:])


def _stack_only(bt) -> bool:
    """Whether a tag's points of the block are all in bulk columns that join into one array."""
    return not bt.seq and not bt.tables and _one_stack(bt.cols)


def _unragged(code: int, array: np.ndarray, lengths: np.ndarray) -> list:
    """The points :func:`_ragged` packed, as views of its array."""
    ends = np.cumsum(lengths).tolist()
    starts = [0] + ends[:-1]
    return [(code, array[a:b]) for a, b in zip(starts, ends, strict=True)]


def _unit_spans(lengths: np.ndarray, col_rows: np.ndarray, unit_col: np.ndarray) -> list:
    """Where each unit's rows are, ``(start, end)`` among all rows and ``(lo, hi)`` within
    its column's, for units of ``lengths`` rows in columns of ``col_rows``."""
    ends = np.cumsum(lengths)
    starts = ends - lengths
    col_starts = np.cumsum(col_rows) - col_rows
    lo = starts - col_starts[unit_col]
    return list(zip(starts.tolist(), ends.tolist(), lo.tolist(), (lo + lengths).tolist(),
                    strict=True))


class _TagInfo:
    """What is known about a tag across the whole run (a few bytes, not its points)."""

    __slots__ = ("first_seq", "first_pos", "kinds", "has_none", "pieces", "tid")

    def __init__(self, first_seq: int, tid: int = -1, first_pos: int = 0) -> None:
        self.first_seq = first_seq
        # the tag's place among the values of its first event: tags first seen in one event
        # keep that event's order whichever decoder read it, alone or among other records
        self.first_pos = first_pos
        self.kinds = NO_KINDS    # {(dtype code, ndim class)} of non-None points (shared)
        self.has_none = False
        self.pieces: list = []    # store keys, in read order
        self.tid = tid            # the tag's number in the batches of its run's store

    def __getstate__(self):
        return (self.first_seq, self.first_pos, self.kinds, self.has_none, self.pieces,
                self.tid)

    def __setstate__(self, state) -> None:
        self.first_seq, self.first_pos, kinds, self.has_none, self.pieces, self.tid = state
        self.kinds = shared(frozenset(kinds))

    def add_kind(self, kind) -> None:
        if kind not in self.kinds:
            self.kinds = with_kind(self.kinds, kind)


# the numpy dtype of a TensorFlow dtype code whose 1-D bulk columns are stored as "values"
# (None: they are not)
_VALUE_DTYPES: dict = {}


def _value_dtype(code: int):
    try:
        return _VALUE_DTYPES[code]
    except KeyError:
        pass
    dtype = None
    if code not in (dt.DT_STRING, dt.DT_RAW_PROTO):
        try:
            dtype = dt.numpy_dtype(code)
        except KeyError:
            dtype = None
        if dtype is not None and dtype.kind not in "fiub":
            dtype = None
    _VALUE_DTYPES[code] = dtype
    return dtype


def _read_columns(bt, groups: list) -> tuple:
    """``(seq, steps, walls)`` of a tag's points of the block: those decoded one at a time,
    then those of ``groups`` (its bulk columns, or columns and string tables)."""
    return (np.concatenate([np.array(bt.seq, dtype=np.int64)] + [c[0] for c in groups]),
            np.concatenate([np.array(bt.steps, dtype=np.int64)] + [c[1] for c in groups]),
            np.concatenate([np.array(bt.walls, dtype=np.float64)] + [c[2] for c in groups]))


# what _store_piece is given when the caller has not worked out the block's values
_UNKNOWN = object()


class _BlockTag:
    """One tag's points in the block being read."""

    __slots__ = ("seq", "steps", "walls", "points", "cols", "tables")

    def __init__(self) -> None:
        self.seq: list[int] = []
        self.steps: list[int] = []
        self.walls: list[float] = []
        self.points: list = []     # (code, ndarray) or None per slow point
        self.cols: list = []       # (seq array, steps, walls, code, values) per bulk-decoded group
        self.tables: list = []     # (seq array, steps, walls, (n, k) object array) of string points


class RunAssembler(RestartRule):
    """Receives a run's events in read order (``seq`` increases) and builds its series.

    Events arrive block by block; :meth:`end_block` closes a block (its pieces
    go to the store and its purges are found). :meth:`build` may be called
    once, after the last block.
    """

    # Purge out of order as TensorBoard's legacy EventAccumulator does (tbparse reads with
    # it) rather than as its dashboards do: see _legacy_accumulator_purges.
    legacy_accumulator = False

    def __init__(self, name: str, store: PieceStore | None = None,
                 detached: bool = False) -> None:
        self.name = name
        # A detached assembler reads files that do not start the run (another process reads
        # the earlier ones): what the restart rule makes of its first events depends on the
        # step and file version that the earlier files end with, so those purges are kept as
        # conditions and settled by :meth:`joined`, in file order.
        self.detached = detached
        self.cond_starts: list[tuple[int, int, bool | None]] = []
        self.cond_purges: list[tuple[int, int, frozenset, bool, bool | None]] = []
        self.start_time: float | None = None
        self.store = store if store is not None else PieceStore()
        self._held = HeldBatches(self.store)
        # the last read position of each block with bulk numbers: a held batch's piece of a
        # tag is cut there again when built, so that chunks end where they did when each
        # block was a piece (and outputs keep their bytes)
        self.block_ends = array("q")
        self._grouped: set | None = None    # a joined run's held batches, (part, key)
        self._ends = None
        self.info: dict[str, _TagInfo] = {}
        self._by_tid: list[_TagInfo] = []   # self.info's values by their tid
        self._tag_names: list[str] = []      # and their tags
        self.first_metadata: dict[str, tuple[int, Metadata]] = {}
        # in read order, which is their order (``seq`` only grows): see :meth:`record`
        self.records = RecordLog(directory=getattr(self.store, "directory", None))
        self.versions: list[tuple[int, float]] = []
        self.purges = PurgeLog()     # (seq, step, tags: frozenset | None)
        self.points_read = 0
        self.next_seq = 0   # where the next file's records are numbered from
        self._session_starts: list[tuple[int, int]] = []
        # events that are not summaries, (seq, step): only the legacy accumulator's rule
        # (see legacy_accumulator) looks at them
        self._other_events: list[tuple[int, int]] = []
        self._seen_start = False
        self._last_step: int | None = None if detached else -1
        self._block: dict[str, _BlockTag] = {}
        # summary events of the block: (seq, step, tag) rows, several for a multi-value event
        self._summary_rows: list[tuple[int, int, str]] = []
        # bulk-decoded points of the block: (seqs, steps, tag) of blobs, or (seqs, steps, tid
        # of each row) of _fast_columns' rows (numbers and tensors apart)
        self._fast_rows: list[tuple[np.ndarray, np.ndarray, str | np.ndarray]] = []
        # 1-D bulk columns of the block, (tag, seqs, TagColumns): stored together, as batches
        self._bulk: list = []

    # -- receiving ---------------------------------------------------------------------------
    def first_wall_time(self, wall: float) -> None:
        if self.start_time is None:
            self.start_time = wall

    def file_version(self, seq: int, version: str) -> None:
        try:
            parsed = float(version.split("brain.Event:")[-1])
        except ValueError:
            parsed = -1.0
        if parsed != parsed:
            # TensorBoard reads "brain.Event:nan" as a version below 2, the legacy rule; NaN
            # here stands for a version set by earlier files (a part read on its own)
            parsed = -1.0
        self.versions.append((seq, parsed))

    def session_start(self, seq: int, step: int) -> None:
        self._session_starts.append((seq, step))

    def record(self, seq: int, rec: RunRecord) -> None:
        # (records come in read order, and a joined run's parts in file order, so they are
        # kept in order without their ``seq``, as bytes: a run may hold millions)
        self.records.append(rec)
        self.other_event(seq, rec.step)

    def other_event(self, seq: int, step: int) -> None:
        """An event that is no summary (to TensorBoard's legacy accumulator, which does not
        make graphs and run metadata summaries either)."""
        if self.legacy_accumulator:
            self._other_events.append((seq, step))

    def metadata(self, seq: int, tag: str, md: Metadata) -> None:
        if tag not in self.first_metadata or self.first_metadata[tag][0] > seq:
            self.first_metadata[tag] = (seq, md)

    def _tag(self, tag: str, seq: int, pos: int | None = None) -> _BlockTag:
        bt = self._block.get(tag)
        if bt is None:
            bt = self._block[tag] = _BlockTag()
        self._tag_info(tag, seq, pos)
        return bt

    def _tag_info(self, tag: str, seq: int, pos: int | None = None) -> _TagInfo:
        """The tag's facts, its first appearance moved to the record ``seq`` (value ``pos``
        of its event; None: the first, unless the tag is known there already) if earlier."""
        info = self.info.get(tag)
        if info is None:
            info = self.info[tag] = _TagInfo(seq, len(self._by_tid), pos or 0)
            self._by_tid.append(info)
            self._tag_names.append(tag)
        elif seq < info.first_seq:
            # a block's decoders hand points over out of read order: a tag's place among
            # the series is its earliest record, whichever decoder read it
            info.first_seq = seq
            info.first_pos = pos or 0
        elif seq == info.first_seq and pos is not None and pos < info.first_pos:
            info.first_pos = pos
        return info

    def point(self, seq: int, step: int, wall: float, tag: str, point,
              pos: int | None = None) -> None:
        """One point, of the value ``pos`` of the event read at ``seq`` (None: its only one)."""
        bt = self._tag(tag, seq, pos)
        bt.seq.append(seq)
        bt.steps.append(step)
        bt.walls.append(wall)
        bt.points.append(point)

    def summary_event(self, seq: int, step: int, tags) -> None:
        for tag in tags:
            self._summary_rows.append((seq, step, tag))
        if not tags:
            # an empty summary (or one whose every value was skipped) still sets the step that
            # TensorBoard's out-of-order rule compares the next summary with
            self._summary_rows.append((seq, step, None))

    def fast(self, seqs: np.ndarray, cols: TagColumns) -> None:
        """Points decoded in bulk: one tag, one dtype and shape (events may hold several tags)."""
        self._fast_columns(np.asarray(seqs, dtype=np.int64), [cols])

    def fast_columns(self, base: int, columns: list) -> None:
        """Every :class:`TagColumns` a block's bulk decoders gave, in their order: as
        :meth:`fast` for each, the record at index ``i`` read at position ``base + 2 * i``
        (a few numpy calls for the whole block rather than several per column)."""
        columns = [c for c in columns if len(c.index)]
        if columns:
            index = columns[0].index if len(columns) == 1 else \
                np.concatenate([c.index for c in columns])
            self._fast_columns(base + 2 * np.asarray(index, dtype=np.int64), columns)

    def _fast_columns(self, seqs: np.ndarray, columns: list) -> None:
        """``columns`` (none empty) whose points were read at ``seqs``, one after another."""
        n = len(columns)
        if not n:
            return
        # a unit is one tag's rows of a column: the column, or a tag of grouped columns
        # (TagColumns.tags), which are never split into an object per tag
        col_rows = np.fromiter((len(c.index) for c in columns), np.int64, n)
        if all(c.tags is None for c in columns):
            unit_tags = [c.tag for c in columns]
            unit_pos = [c.position for c in columns]
            lengths = col_rows
            unit_col = np.arange(n)
        else:
            unit_tags, unit_pos, parts, counts = [], [], [], []
            for c in columns:
                if c.tags is None:
                    unit_tags.append(c.tag)
                    unit_pos.append(c.position)
                    parts.append(col_rows[len(counts):len(counts) + 1])
                    counts.append(1)
                else:
                    unit_tags.extend(c.tags)
                    unit_pos.extend(c.unit_positions())
                    parts.append(np.diff(c.bounds))
                    counts.append(len(c.tags))
            lengths = np.concatenate(parts)
            unit_col = np.repeat(np.arange(n), counts)
        ends = np.cumsum(lengths)
        firsts = seqs[ends - lengths].tolist()
        numbers = [type(c.values) is np.ndarray and c.values.ndim == 1 for c in columns]
        first_md = self.first_metadata
        tag_info = self._tag_info
        block = self._block
        unit_tids, tids = [], []
        spans = None
        as_arrays: dict = {}    # a column's steps and wall times, as the block keeps them
        for k, (tag, j, pos) in enumerate(zip(unit_tags, unit_col.tolist(), unit_pos,
                                              strict=True)):
            first = firsts[k]
            cols = columns[j]
            tid = tag_info(tag, first, pos).tid
            unit_tids.append(tid)
            if numbers[j]:
                # numbers: kept with the block's other numbers (see _store_bulk)
                tids.append(tid)
            else:
                # tensors: the unit's rows join its tag's points of the block (its facts were
                # looked at above; hundreds of tags a block: a histogram per parameter)
                if spans is None:
                    spans = _unit_spans(lengths, col_rows, unit_col)
                start, end, lo, hi = spans[k]
                arrays = as_arrays.get(j)
                if arrays is None:
                    arrays = as_arrays[j] = (np.asarray(cols.steps, dtype=np.int64),
                                             np.asarray(cols.wall_times, dtype=np.float64))
                bt = block.get(tag)
                if bt is None:
                    bt = block[tag] = _BlockTag()
                bt.cols.append((seqs[start:end], arrays[0][lo:hi], arrays[1][lo:hi], cols.code,
                                cols.values[lo:hi]))
            known = first_md.get(tag)
            if known is None or known[0] > first:
                md = summary_templates.column_metadata(cols, tag)
                if md is not None:
                    self.metadata(first, tag, md)
        if spans is not None:
            # the rows of every unit that is no number, at once, as numbers' are below
            rows = np.repeat(np.array(unit_tids, dtype=np.int64), lengths)
            other = np.repeat(~np.array(numbers)[unit_col], lengths)
            steps = np.concatenate([as_arrays[j][0] if j in as_arrays else c.steps
                                    for j, c in enumerate(columns)], dtype=np.int64,
                                   casting="unsafe")
            self._fast_rows.append((seqs[other], steps[other], rows[other]))
        if not tids:
            return
        if len(tids) < len(unit_tags):
            keep_col = np.array(numbers)
            keep = keep_col[unit_col]
            seqs = seqs[np.repeat(keep, lengths)]
            lengths = lengths[keep]
            unit_col = (np.cumsum(keep_col) - 1)[unit_col[keep]]
            columns = [c for c, k in zip(columns, numbers, strict=True) if k]
        steps = np.concatenate([c.steps for c in columns], dtype=np.int64, casting="unsafe")
        tids = np.array(tids, dtype=np.int64)
        rows = np.repeat(tids, lengths)
        self._bulk.append((seqs, steps, rows, tids, lengths, unit_col, columns))
        self._fast_rows.append((seqs, steps, rows))

    def fast_blobs(self, seqs: np.ndarray, cols) -> None:
        """Points decoded in bulk by ``blob_templates``: each is ``cols.head + (blob,)``."""
        n = len(seqs)
        if not n:
            return
        seqs = np.asarray(seqs, dtype=np.int64)
        steps = np.asarray(cols.steps, dtype=np.int64)
        bt = self._tag(cols.tag, int(seqs[0]))
        # one (n, k) object array: row i is point i (kept whole; rows are taken only if the
        # tag's points must become tensors)
        table = np.empty((n, len(cols.head) + 1), dtype=object)
        for j, s in enumerate(cols.head):
            table[:, j] = s
        table[:, -1] = cols.blobs
        bt.tables.append((seqs, steps, np.asarray(cols.wall_times, dtype=np.float64), table))
        self._fast_rows.append((seqs, steps, cols.tag))
        self.metadata(int(seqs[0]), cols.tag, cols.metadata)

    # -- one block done ----------------------------------------------------------------------
    def end_block(self, last: bool = True) -> None:
        """Store the block's points and find the purges its events make. Unless ``last``, a
        tag's few decoded points may be held over to be stored with the next block's (see
        :meth:`end_file`)."""
        self._find_purges()
        # where the block ends, for held batches to be cut there (see _pieces): one end a
        # block, its last row held in any batch
        ends = []
        if self._bulk:
            ends.append(max(int(b[0].max()) for b in self._bulk))
            self._store_bulk()
        held, held_bytes = {}, 0
        numbers, stored = [], []
        for tag, bt in self._block.items():
            values = None if bt.tables else self._as_values(bt)
            if values is not None and _value_dtype(values[1]) == values[0].dtype:
                numbers.append((tag, bt, values))
                continue
            size = None if last else _held_size(bt)
            if size is not None and held_bytes + size <= HOLD_BYTES:
                held[tag] = bt
                held_bytes += size
                continue
            stored.append((tag, bt, values))
        self._store_tags(stored)
        if numbers:
            ends.append(self._store_numbers(numbers))
        if ends:
            self.block_ends.append(max(ends))
        self._block = held
        self._summary_rows = []
        self._fast_rows = []
        self._session_starts = []
        self._other_events = []

    def end_file(self) -> None:
        """Store what :meth:`end_block` held over: a file read to its end leaves nothing
        behind (a part of a run read elsewhere is handed over whole)."""
        held, self._block = self._block, {}
        self._store_tags([(tag, bt, _UNKNOWN) for tag, bt in held.items()])
        self._held.close_all()

    def _store_tags(self, items: list) -> None:
        """Store each ``(tag, block tag, values)`` as a piece: those whose points are one
        stack of tensors together (:meth:`_store_stacks`), the others one by one
        (:meth:`_store_piece`, ``values`` as it takes them)."""
        stacks = []
        for tag, bt, values in items:
            if _stack_only(bt):
                stacks.append((tag, bt))
            else:
                self._store_piece(tag, bt, values)
        if stacks:
            self._store_stacks(stacks)

    def _store_bulk(self) -> None:
        """The block's 1-D bulk columns: a tag whose every point of the block is such a
        column of one numeric dtype goes in one batch per dtype with the other such tags (a
        few numpy calls for all of them); its piece is what :meth:`_store_piece` would have
        stored. The other tags' columns join their points there."""
        bulk, self._bulk = self._bulk, []
        if len(bulk) == 1:
            seqs, steps, rows, tids, lengths, unit_col, columns = bulk[0]
        else:
            seqs, steps, rows, tids, lengths = (np.concatenate([b[i] for b in bulk])
                                                for i in range(5))
            sizes = [len(b[6]) for b in bulk]
            offsets = np.cumsum([0] + sizes[:-1])
            unit_col = np.concatenate([b[5] + o for b, o in zip(bulk, offsets.tolist(),
                                                                strict=True)])
            columns = [c for b in bulk for c in b[6]]
        names = self._tag_names
        ucol = unit_col.tolist()
        # each unit's code: its tag's, when all the tag's columns of the block have that code
        # and its dtype and the tag has no other points in the block; -1: not in a batch.
        # (arrays, not a dict of every tag: a block may hold 100,000 tags)
        col_codes = []
        for cols in columns:
            dtype = _value_dtype(cols.code)
            col_codes.append(cols.code if dtype is not None and cols.values.dtype == dtype
                             else -1)
        entry_codes = np.array(col_codes, dtype=np.int64)[unit_col]
        if len(tids) > 1:
            order = np.argsort(tids, kind="stable")
            sorted_tids = tids[order]
            heads = np.flatnonzero(np.concatenate(([True], sorted_tids[1:] != sorted_tids[:-1])))
            if len(heads) < len(tids):    # a tag in several columns
                codes = entry_codes[order]
                lo, hi = np.minimum.reduceat(codes, heads), np.maximum.reduceat(codes, heads)
                tag_codes = np.where(lo == hi, lo, -1)
                entry_codes[order] = np.repeat(tag_codes, np.diff(np.append(heads, len(tids))))
        if self._block:
            elsewhere = np.zeros(len(names), dtype=bool)
            elsewhere[[self.info[tag].tid for tag in self._block]] = True
            entry_codes[elsewhere[tids]] = -1
        col_rows = np.fromiter((len(c.index) for c in columns), np.int64, len(columns))
        slow = np.flatnonzero(entry_codes < 0).tolist()
        if slow:
            spans = _unit_spans(lengths, col_rows, unit_col)
            for k in slow:
                cols = columns[ucol[k]]
                start, end, lo, hi = spans[k]
                self._tag(names[int(tids[k])], int(seqs[start])).cols.append(
                    (seqs[start:end], steps[start:end],
                     np.asarray(cols.wall_times[lo:hi], dtype=np.float64), cols.code,
                     cols.values[lo:hi]))
        found = {int(entry_codes[0])} if (entry_codes == entry_codes[0]).all() else \
            set(entry_codes.tolist())
        for code in sorted(found - {-1}):
            take = entry_codes == code
            if take.all():
                self._store_batch(code, seqs, steps, rows, columns, None)
                continue
            row_take = np.repeat(take, lengths)
            used = np.zeros(len(columns), dtype=bool)
            used[unit_col[take]] = True
            # the rows of the columns used, and of those the rows taken
            pick = row_take[np.repeat(used, col_rows)]
            self._store_batch(code, seqs[row_take], steps[row_take], rows[row_take],
                              [c for c, u in zip(columns, used.tolist(), strict=True) if u], pick)

    def _store_numbers(self, numbers: list) -> int:
        """Tags whose every point of the block is a number of one dtype, ``(tag, block tag,
        (values, code))``, decoded one event at a time, held in batches by dtype as the bulk
        decoders' are: stored as a piece per tag and block, an event of 100,000 values
        (``merge_all``'s, and every event file tbconvert writes of a run of that many tags)
        cost a piece per tag and event, more than the points themselves. Returns the last
        read position of their rows."""
        by_code: dict = {}
        for tag, bt, (values, code) in numbers:
            by_code.setdefault(code, []).append((self.info[tag].tid, bt, values))
        top = 0
        for code, items in sorted(by_code.items()):
            per_tag = [_read_columns(bt, bt.cols) for _, bt, _ in items]
            seq, steps, walls = (np.concatenate([c[k] for c in per_tag]) for k in range(3))
            del per_tag
            values = np.concatenate([v for _, _, v in items])
            rows = np.repeat(np.array([tid for tid, _, _ in items], dtype=np.int64),
                             [len(v) for _, _, v in items])
            top = max(top, int(seq.max()))
            self._hold_rows(code, seq, steps, walls, values, rows)
        return top

    def _store_batch(self, code: int, seq, steps, rows, columns: list, pick) -> None:
        """Rows of ``columns`` as one batch (``pick``: which of their rows, None: all)."""
        dtype = _value_dtype(code)
        walls = np.concatenate([c.wall_times for c in columns], dtype=np.float64,
                               casting="unsafe")
        values = np.concatenate([c.values for c in columns]).astype(dtype, copy=False)
        if pick is not None:
            walls, values = walls[pick], values[pick]
        self._hold_rows(code, seq, steps, walls, values, rows)

    def _hold_rows(self, code: int, seq, steps, walls, values, rows) -> None:
        """Rows of numbers of one dtype ``code`` (``rows``: each one's tag id) into the held
        batch of their dtype."""
        # by tag, then (stable) by read position: each tag's rows as _store_piece orders them
        order = np.lexsort((seq, rows))
        if not (order[1:] > order[:-1]).all():
            seq, steps, walls, values, rows = (seq[order], steps[order], walls[order],
                                               values[order], rows[order])
        starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
        uniq = rows[starts]
        held = self._held
        key = held.add(code, seq, steps, walls, values, rows)
        kind = (code, NDIM0)
        by_tid = self._by_tid
        open_keys = held.open_keys
        left = set()    # groups a tag of this block has left (its rows went to another one)
        for a in range(0, len(uniq), 4096):   # (not a Python int per tag of the block at once)
            for tid in uniq[a:a + 4096].tolist():
                info = by_tid[tid]
                pieces = info.pieces
                if not pieces or pieces[-1] != key:
                    if pieces and pieces[-1] in open_keys:
                        left.add(pieces[-1])
                    pieces.append(key)
                info.add_kind(kind)
        for other in left:
            if other in open_keys:
                held.close(other)
        self.points_read += len(seq)

    def _store_piece(self, tag: str, bt: _BlockTag, values=_UNKNOWN) -> None:
        """Store the tag's points of the block as one piece (``values``: what
        :meth:`_as_values` gives of them, where it is known already); points that are one
        stack of tensors go to :meth:`_store_stack` instead."""
        info = self.info[tag]
        n_slow = len(bt.seq)
        self._close_held(info)
        groups = bt.cols + bt.tables
        if not n_slow and len(groups) == 1:
            # one column or table and nothing else, taken as it is
            seq = np.array(groups[0][0], dtype=np.int64)
            steps = np.array(groups[0][1], dtype=np.int64)
            walls = np.array(groups[0][2], dtype=np.float64)
        else:
            seq, steps, walls = _read_columns(bt, groups)
        # read order, as a stable sort leaves it (most often the order already is)
        in_order = bool((seq[1:] >= seq[:-1]).all())
        if not in_order:
            order = np.argsort(seq, kind="stable")
            seq, steps, walls = seq[order], steps[order], walls[order]
        for code, arr in (p for p in bt.points if p is not None):
            info.add_kind((code, ndim_class(arr)))
        info.has_none |= any(p is None for p in bt.points)
        for c in bt.cols:
            info.add_kind((c[3], min(np.ndim(c[4]) - 1, NDIMN)))
        if bt.tables:
            info.add_kind((dt.DT_STRING, NDIM1))
        widths = {t[3].shape[1] for t in bt.tables}
        if values is _UNKNOWN:
            values = None if bt.tables else self._as_values(bt)
        if bt.tables and not bt.points and not bt.cols and len(widths) == 1:
            table = np.concatenate([t[3] for t in bt.tables])
            payload = ("table", None, table if in_order else table[order])
            size = seq.nbytes * 3 + len(seq) * 100 + _payload_bytes(table)
        elif values is not None:
            payload = ("values", values[1], values[0] if in_order else values[0][order])
            size = seq.nbytes * 3 + values[0].nbytes
        else:
            points = list(bt.points)
            for c in bt.cols:
                rows = c[4] if isinstance(c[4], np.ndarray) else np.asarray(c[4])
                points.extend(zip(itertools.repeat(c[3], len(rows)), rows, strict=True))
            for t in bt.tables:
                points.extend(zip(itertools.repeat(dt.DT_STRING, len(t[3])), t[3], strict=True))
            if not in_order:
                points = [points[i] for i in order.tolist()]
            held = sum(_payload_bytes(p[1]) for p in bt.points if p is not None) \
                + sum(_payload_bytes(c[4]) for c in bt.cols) \
                + sum(_payload_bytes(t[3]) for t in bt.tables)
            size = seq.nbytes * 3 + 100 * len(points) + held
            payload = _ragged(points) or ("points", None, points)
        self.points_read += len(seq)
        info.pieces.append(self.store.put((seq, steps, walls) + payload, size))

    def _close_held(self, info: _TagInfo) -> None:
        if info.pieces and info.pieces[-1] in self._held.open_keys:
            # the tag's rows held in a group come before this piece's: none may join them
            self._held.close(info.pieces[-1])

    def _store_stacks(self, stacks: list) -> None:
        """``(tag, block tag)`` of tags whose points of the block are stacks (see
        :meth:`_store_stack`), stored in the order their series will come in; those of one
        dtype and row shape that follow each other, each in several columns to be copied
        together, are copied into one array: a writer given their series one after another
        then takes their rows as one (:func:`~tbconvert.model.joined_block`) instead of
        copying them together again."""
        info = self.info
        stacks.sort(key=lambda item: (info[item[0]].first_seq, info[item[0]].first_pos))
        def joins(cols: list, first: np.ndarray) -> bool:
            # (only columns that are copied together anyway: one column is kept as it is)
            return len(cols) > 1 and cols[0][4].dtype == first.dtype and \
                cols[0][4].shape[1:] == first.shape[1:]

        k = 0
        while k < len(stacks):
            first = stacks[k][1].cols[0][4]
            end = k + 1
            if joins(stacks[k][1].cols, first):
                while end < len(stacks) and joins(stacks[end][1].cols, first):
                    end += 1
            if end - k == 1:
                tag, bt = stacks[k]
                self._store_stack(info[tag], bt.cols)
            else:
                rows = [sum(len(c[4]) for c in bt.cols) for _, bt in stacks[k:end]]
                shared = np.empty((sum(rows), *first.shape[1:]), dtype=first.dtype)
                at = 0
                for (tag, bt), n in zip(stacks[k:end], rows, strict=True):
                    out = shared[at:at + n]
                    np.concatenate([c[4] for c in bt.cols], out=out)
                    self._store_stack(info[tag], bt.cols, out)
                    at += n
            k = end

    def _store_stack(self, info: _TagInfo, cols: list, stack: np.ndarray | None = None) -> None:
        """:meth:`_store_piece` of a tag whose points of the block are bulk columns of tensors
        of one dtype, enum and shape (a histogram per parameter: hundreds of such tags a
        block), in fewer steps: one array of them, as that method stores them (``stack``:
        the columns' rows already put together, and kept in that array)."""
        self._close_held(info)
        code = cols[0][3]
        if len(cols) == 1:
            seq, steps, walls = (np.array(cols[0][k], dtype=t)
                                 for k, t in enumerate((np.int64, np.int64, np.float64)))
        else:
            seq, steps, walls = (np.concatenate([c[k] for c in cols]) for k in range(3))
        given = stack is not None
        if not given:
            stack = cols[0][4] if len(cols) == 1 else np.concatenate([c[4] for c in cols])
        if not bool((seq[1:] >= seq[:-1]).all()):
            order = np.argsort(seq, kind="stable")
            seq, steps, walls = seq[order], steps[order], walls[order]
            if given:
                stack[...] = stack[order]      # (in its shared array)
            else:
                stack = stack[order]
        info.add_kind((code, min(stack.ndim - 1, NDIMN)))
        self.points_read += len(seq)
        info.pieces.append(self.store.put((seq, steps, walls, "stack", code, stack),
                                          seq.nbytes * 3 + stack.nbytes + 100 * len(seq)))

    @staticmethod
    def _as_values(bt: _BlockTag):
        """``(values, code)`` when every point of the block is a number of one dtype."""
        if any(np.ndim(c[4]) != 1 for c in bt.cols):
            return None
        codes = {c[3] for c in bt.cols}
        for p in bt.points:
            if p is None or p[1].ndim != 0:
                return None
            codes.add(p[0])
            if len(codes) > 1:
                return None
        if len(codes) != 1:
            return None
        code = codes.pop()
        if code in (dt.DT_STRING, dt.DT_RAW_PROTO):
            return None
        try:
            dtype = dt.numpy_dtype(code)
        except KeyError:
            return None
        if dtype.kind not in "fiub" or any(p[1].dtype != dtype for p in bt.points) or any(
                np.asarray(c[4]).dtype != dtype for c in bt.cols):
            return None
        parts = [np.array([p[1] for p in bt.points], dtype=dtype)] + [c[4] for c in bt.cols]
        return np.concatenate(parts).astype(dtype, copy=False), code

    # -- what a later read of the run's files needs to know ----------------------------------
    def restart_state(self) -> dict:
        """What TensorBoard's restart rule carries from the files read so far into later
        ones, as plain values: the last step, whether a session START was seen, the file
        version in force (None: no ``file_version`` record yet)."""
        return {"last_step": self._last_step, "seen_start": self._seen_start,
                "version": self.versions[-1][1] if self.versions else None}

    @classmethod
    def resumed(cls, name: str, state: dict) -> RunAssembler:
        """An assembler standing for files already read, whose :meth:`restart_state` was
        ``state``: the first of the parts given to :meth:`joined`, before one that reads on."""
        asm = cls(name)
        asm._last_step, asm._seen_start = state["last_step"], state["seen_start"]
        if state["version"] is not None:
            asm.versions = [(0, state["version"])]
        return asm

    # -- joining the parts of a run read by several processes --------------------------------
    @classmethod
    def joined(cls, name: str, parts: list[RunAssembler]) -> RunAssembler:
        """One assembler for the run whose files ``parts`` read, in file order (the first part
        starts the run; the others are detached). Built, it gives what one assembler reading
        every file would: sequence numbers are shifted past the earlier parts', and each
        detached part's conditional purges are settled by what the parts before it end with."""
        run = cls(name, _JoinedStore([p.store for p in parts]))
        run._grouped = set()
        last_step, version, seen_start, offset = -1, 0.0, False, 0
        for index, part in enumerate(parts):
            settled = []
            for seq, step, modern in part.cond_starts:
                if modern if modern is not None else version >= 2:
                    if seen_start:
                        settled.append((seq + offset, step, None))
                    seen_start = True
            for seq, step, tags, needs_prev, legacy_known in part.cond_purges:
                legacy_mode = legacy_known if legacy_known is not None else version < 2
                if legacy_mode and (step < last_step or not needs_prev):
                    settled.append((seq + offset, step, tags))
            # in read order, as PurgesByTag reads the log without sorting a copy of it
            if settled:
                settled.sort(key=seq_of)
                run.purges.extend(heapq.merge(settled, part.purges.shifted(offset), key=seq_of))
            else:
                run.purges.extend_shifted(part.purges, offset)
            seen_start |= part._seen_start
            if part._last_step is not None:
                last_step = part._last_step
            if part.versions:
                version = part.versions[-1][1]
            run.versions.extend((seq + offset, v) for seq, v in part.versions)
            run.records.extend(part.records)
            part.records.close()
            run.block_ends.extend(end + offset for end in part.block_ends)
            run._grouped.update((index, key) for key in part._held.stored)
            for tag, (seq, md) in part.first_metadata.items():
                run.first_metadata.setdefault(tag, (seq + offset, md))
            for tag, info in part.info.items():
                into = run.info.get(tag)
                if into is None:
                    into = run.info[tag] = _TagInfo(info.first_seq + offset,
                                                    first_pos=info.first_pos)
                into.kinds |= info.kinds
                into.has_none |= info.has_none
                into.pieces.extend((index, key, offset, info.tid) for key in info.pieces)
            if run.start_time is None:
                run.start_time = part.start_time
            run.points_read += part.points_read
            offset += part.next_seq
        run.next_seq = offset
        run._last_step, run._seen_start = last_step, seen_start
        return run

    # -- building ----------------------------------------------------------------------------
    def run(self) -> Run:
        return Run(self.name, self.start_time, self.records)

    def build(self):
        """The run and an iterator of its series chunks (tags in order of first appearance)."""
        if self._block or self._summary_rows or self._session_starts or self._other_events:
            self.end_block()
        self._held.close_all()
        return self.run(), self.series()

    def series(self):
        """Chunks of every tag, in order of first appearance; reads the store once."""
        purges = PurgesByTag(self.purges)
        try:
            info = self.info
            order = sorted(info, key=lambda t: (info[t].first_seq, info[t].first_pos))
            if len(order) >= TRIM_TAGS or self.store.spilled():
                # Reading left the heap's high-water mark behind (blocks of records, their
                # columns, the tags' first objects), which glibc keeps for reuse: the
                # writer's own state would come on top of it. Once a run, and only a
                # large one: a sweep of thousands of small runs would pay for nothing.
                malloc.give_back_free_heap()
            for tag in order:
                yield from self._tag_series(tag, purges(tag))
                # taken: the keys go while the writer's own state of the run grows
                info[tag].pieces = ()
        finally:
            self.store.close()
            purges.close()

    def _tag_series(self, tag: str, purges: Purges):
        info = self.info[tag]
        raw_md = self.first_metadata.get(tag, _NO_METADATA)[1]
        md, fixups, kinds = tag_kinds(raw_md, info.kinds, info.has_none)
        # only these plugins' points change shape (legacy.fix_point); the others pass as they are
        refit = fixups and (md.plugin_name in ("audio", "hparams")
                            or md.plugin_name in legacy.GRAPH_SUB_PLUGINS)
        if not kinds:
            for key in info.pieces:
                self.store.take(key, info.tid)
            return
        shape = container(md, kinds)
        pending, n, nbytes = [], 0, 0
        as_they_are = not fixups or shape[0] == "scalar"     # (numbers pass unchanged below)

        def fits(rows: int, size: int) -> bool:
            """Whether numbers of ``rows`` rows and ``size`` bytes (as counted below) join
            the pending ones without making a chunk."""
            return as_they_are and n + rows < CHUNK_POINTS and nbytes + size < CHUNK_BYTES

        for seq, steps, walls, kind, code, payload in self._pieces(info, fits):
            if kind == "ragged":
                kind, payload = "points", _unragged(code, *payload)
            if kind == "table" and (refit or info.has_none or shape[0] != "blobs"):
                kind, payload = "points", list(zip(itertools.repeat(dt.DT_STRING), payload))
            if kind == "stack" and (refit or info.has_none):
                kind, payload = "points", list(zip(itertools.repeat(code), payload))
            if kind == "values" and fixups and shape[0] != "scalar":
                kind, payload = "points", [(code, np.asarray(v)) for v in payload]
            if kind == "points" and (refit or info.has_none):
                fixed = [legacy.fix_point(md.plugin_name, p) for p in payload] if refit else payload
                keep = [i for i, p in enumerate(fixed) if p is not None]
                if len(keep) != len(fixed):
                    idx = np.array(keep, dtype=np.int64)
                    seq, steps, walls = seq[idx], steps[idx], walls[idx]
                    fixed = [fixed[i] for i in keep]
                payload = fixed
            if not len(seq):
                continue
            pending.append((seq, steps, walls, kind, code, payload))
            n += len(seq)
            nbytes += seq.nbytes * 3 + (
                payload.nbytes if kind == "values" else
                payload.nbytes + 100 * len(payload) if kind == "stack" else
                100 * len(payload) + _payload_bytes(payload) if kind == "table" else
                sum(_payload_bytes(p[1]) + 100 for p in payload))
            if n >= CHUNK_POINTS or nbytes >= CHUNK_BYTES:
                yield self._chunk(tag, md, shape, pending, purges)
                pending, n, nbytes = [], 0, 0
        if pending:
            yield self._chunk(tag, md, shape, pending, purges)

    def _pieces(self, info: _TagInfo, fits=None):
        """The tag's pieces, a held batch's cut where its blocks ended. ``fits(rows, size)``:
        whether numbers of that many rows and bytes would be in one chunk all the same,
        cut or not (they are then given whole, which spares the cutting and the joining)."""
        grouped = self._held.stored if self._grouped is None else self._grouped
        ends = self._ends
        for key in info.pieces:
            piece = self.store.take(key, info.tid)
            if (key if self._grouped is None else key[:2]) not in grouped or len(piece[0]) < 2:
                yield piece
                continue
            if fits is not None and piece[3] == "values" and \
                    fits(len(piece[0]), piece[0].nbytes * 3 + piece[5].nbytes):
                yield piece
                continue
            if ends is None:
                ends = self._ends = np.array(self.block_ends, dtype=np.int64)
            seq = piece[0]
            at = np.searchsorted(ends, seq, side="left")
            cuts = (np.flatnonzero(at[1:] != at[:-1]) + 1).tolist()
            if not cuts:
                yield piece
                continue
            for a, b in zip([0] + cuts, cuts + [len(seq)], strict=True):
                yield (seq[a:b], piece[1][a:b], piece[2][a:b], piece[3], piece[4],
                       piece[5][a:b])

    def _chunk(self, tag, md, shape, pieces, purges):
        if len(pieces) == 1:
            seq, steps, walls = pieces[0][:3]
        else:
            seq = np.concatenate([p[0] for p in pieces])
            steps = np.concatenate([p[1] for p in pieces])
            walls = np.concatenate([p[2] for p in pieces])
        hidden = purges.hidden(seq, steps)
        if shape[0] == "scalar":
            dtype = shape[1]
            parts = [p[5] if p[3] == "values" else np.array([a for _, a in p[5]], dtype=dtype)
                     for p in pieces]
            values = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return ScalarSeries(run=self.name, tag=tag, metadata=md, steps=steps,
                                wall_times=walls, hidden=hidden,
                                values=values.astype(dtype, copy=False))
        common = dict(run=self.name, tag=tag, metadata=md, steps=steps, wall_times=walls,
                      hidden=hidden)
        if shape[0] == "blobs" and all(p[3] == "table" for p in pieces):
            tables = [p[5] for p in pieces]
            widths = np.concatenate([np.full(len(t), t.shape[1], np.int64) for t in tables])
            offsets = np.zeros(len(widths) + 1, dtype=np.int64)
            np.cumsum(widths, out=offsets[1:])
            blobs = tuple(itertools.chain.from_iterable(t.ravel().tolist() for t in tables))
            return BlobSequenceSeries(**common, offsets=offsets, blobs=blobs)
        first = pieces[0]
        if shape[0] != "blobs" and first[3] == "stack" and all(
                p[3] == "stack" and p[4] == first[4] and p[5].dtype == first[5].dtype
                and p[5].shape[1:] == first[5].shape[1:] for p in pieces):
            block = first[5] if len(pieces) == 1 else np.concatenate([p[5] for p in pieces])
            return TensorSeries.of_block(**common, code=first[4], block=block)
        points = []
        for _, _, _, kind, code, payload in pieces:
            if kind == "values":
                points.extend((code, np.asarray(v)) for v in payload)
            elif kind == "table":
                points.extend(zip(itertools.repeat(dt.DT_STRING), payload))
            elif kind == "stack":
                points.extend(zip(itertools.repeat(code), payload))
            else:
                points.extend(payload)
        if shape[0] == "blobs":
            arrays = [arr for _, arr in points]
            offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
            np.cumsum(np.fromiter(map(len, arrays), np.int64, len(arrays)), out=offsets[1:])
            return BlobSequenceSeries(**common, offsets=offsets,
                                      blobs=tuple(itertools.chain.from_iterable(arrays)))
        return TensorSeries(**common, dtypes=np.array([c for c, _ in points], dtype=np.int32),
                            tensors=tuple(a for _, a in points))


class _JoinedStore:
    """The piece stores of a run's parts as one: a key names the part's store, its key there
    and the part's sequence offset."""

    def __init__(self, stores: list) -> None:
        self.stores = stores

    def take(self, key, tid=None):
        index, inner, offset, part_tid = key
        piece = self.stores[index].take(inner, part_tid)
        return (piece[0] + offset,) + tuple(piece[1:]) if offset else piece

    def spill(self) -> None:
        for store in self.stores:
            store.spill()

    def spilled(self) -> bool:
        return any(store.spilled() for store in self.stores)

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _payload_bytes(x) -> int:
    """The bytes ``x`` (an array, a list of them, a blob) holds, counted for the store's
    budget and a chunk's size: an object array's elements too (images, audio, text), which
    its ``nbytes`` (a pointer each) leaves out, and which then never made a run of images
    spill. (Not :func:`_held_bytes`, which gives up on such points at once.)"""
    if isinstance(x, (bytes, bytearray)):
        return len(x)
    if isinstance(x, np.ndarray):
        return x.nbytes + (sum(_payload_bytes(v) for v in x.flat) if x.dtype == object else 0)
    if isinstance(x, (list, tuple)):
        return 8 * len(x) + sum(_payload_bytes(v) for v in x)
    return 0
