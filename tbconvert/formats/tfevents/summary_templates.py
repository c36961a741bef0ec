"""Vectorised decoding of repetitive summary events, the bulk of most event files.

A training loop writes millions of events that differ only in wall time,
step and the numbers of their values: PyTorch and tensorboardX write
``Event{wall_time, step, summary{value{tag, simple_value}}}``; TensorFlow 2
and Keras a tensor with ``tensor_content`` and the same ``SummaryMetadata``
on every value; ``tf.summary.merge_all`` several values in one event; TF2
histograms a ``[k, 3]`` double tensor. Records of one length that share a
field map (where each field sits) share every other byte, so we learn the map from one record,
check that the others match it byte for byte (numpy, all at once) and slice
the varying fields out as columns. Anything that does not match exactly
(strings, typed repeated fields, unknown fields, a tag twice in one event)
is left to the protobuf path, so the result is always what protobuf would
have decoded.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import lru_cache

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.base import dependency
from tbconvert.formats.tfevents import legacy, small_messages
from tbconvert.formats.tfevents.encode import read_varint
from tbconvert.formats.tfevents.windows import windows
from tbconvert.model import DataClass, Metadata

MIN_GROUP = 16        # below this, protobuf is as fast and simpler
MAX_TEMPLATES = 64    # field maps tried per record length before giving up on the rest
MAX_FAILURES = 4      # field maps that could not be learnt before a length group is left to protobuf
# Values per event a template may hold: merge_all over a model of a summary per layer writes
# 100,000 in one event, each ~25 us through protobuf, ~5 us to learn and well under 1 us to
# read by template. A slot is packed in ~50 bytes (see Slots), so a map of this many is ~6 MiB.
MAX_VALUES = 1 << 17
# A record this long is worth a template alone: learning it costs about what one protobuf
# decoding does (every value of it Python objects), and a block holds only a few such records.
# Up to a length of MAX_VALUES values of a few tens of bytes: a longer one (a model's graph,
# an image) is no event of many values, and is not compared byte for byte nor kept.
WIDE_BYTES = 1 << 16
WIDE_MAX_BYTES = 8 << 20
# What :class:`Learnt` keeps of the maps of wide records for the next blocks of a file, the
# latest kept whatever its size (one of MAX_VALUES values is ~10 MiB with its record).
LEARNT_BYTES = 16 << 20


@dataclass(slots=True)
class Slot:
    """Where one value of a templated event keeps its number(s)."""

    tag: bytes
    value_off: int
    value_size: int        # bytes of the varying payload
    value_dtype: np.dtype  # little-endian storage dtype
    shape: tuple           # () for a scalar
    code: int              # TensorFlow dtype of the point
    simple: bool           # legacy simple_value (metadata is made by the loader)
    metadata: bytes | None  # serialized SummaryMetadata, identical in every matched record
    tag_off: int = -1      # where the tag's bytes start in the record
    # a float32 field that TensorBoard reads through a Python float (simple_value, float_val),
    # which quiets a signaling NaN; tensor_content keeps its bits
    quiet: bool = False


# What a slot shares with the values read alike (see _alike): all but its tag and offsets.
_KIND_FIELDS = ("value_size", "value_dtype", "shape", "code", "simple", "metadata", "quiet")


class Slots:
    """The slots of a field map, packed: the tags' bytes in one buffer, offsets in arrays and
    each slot's kind (what it shares with the values read alike) as a number. An event of
    100,000 values held a :class:`Slot` each, ~250 bytes apiece with its tag and ints, for as
    long as its map was kept: 25 MiB of the peak of reading TF1's ``merge_all`` of a model of
    a summary per layer, and of scattered small objects the heap could not give back.
    Indexing and iterating give :class:`Slot` objects."""

    def __init__(self) -> None:
        self.kinds: list[tuple] = []
        self._kind_ids: dict[tuple, int] = {}
        self.kind = array("i")
        self.value_off = array("q")
        self.tag_off = array("q")
        self._tags = bytearray()
        self._tag_ends = array("q")

    def add(self, tag: bytes, value_off: int, kind: tuple, tag_off: int) -> None:
        """A slot of ``kind`` (the values of :data:`_KIND_FIELDS`)."""
        k = self._kind_ids.get(kind)
        if k is None:
            k = self._kind_ids[kind] = len(self.kinds)
            self.kinds.append(kind)
        self.kind.append(k)
        self.value_off.append(value_off)
        self.tag_off.append(tag_off)
        self._tags += tag
        self._tag_ends.append(len(self._tags))

    def append(self, slot: Slot) -> None:
        self.add(slot.tag, slot.value_off, _kind(slot), slot.tag_off)

    def tag(self, i: int) -> bytes:
        return bytes(self._tags[self._tag_ends[i - 1] if i else 0:self._tag_ends[i]])

    def tags(self, lo: int, hi: int) -> list[str]:
        """The tags of slots ``lo:hi`` as text (each checked UTF-8 when learnt)."""
        ends = self._tag_ends[lo:hi].tolist()
        starts = [self._tag_ends[lo - 1] if lo else 0, *ends[:-1]]
        buf = self._tags
        return [buf[a:b].decode("utf-8") for a, b in zip(starts, ends, strict=True)]

    def nbytes(self) -> int:
        return len(self._tags) + 36 * len(self.kind)

    def __len__(self) -> int:
        return len(self.kind)

    def __bool__(self) -> bool:
        return len(self.kind) > 0

    def __getitem__(self, i: int) -> Slot:
        if i < 0:
            i += len(self.kind)
        if not 0 <= i < len(self.kind):
            raise IndexError(i)
        size, dtype, shape, code, simple, metadata, quiet = self.kinds[self.kind[i]]
        return Slot(self.tag(i), self.value_off[i], size, dtype, shape, code, simple, metadata,
                    self.tag_off[i], quiet)

    def __iter__(self):
        return (self[i] for i in range(len(self.kind)))


@dataclass
class FieldMap:
    """Where the varying fields of one record shape sit: wall time, step, and a slot per value."""

    wall_off: int          # -1: field absent (wall time 0.0)
    step_off: int          # -1: field absent (step 0)
    step_len: int
    slots: Slots = dc_field(default_factory=Slots)
    # what is worked out of the slots once for every block a map is matched in (see Learnt)
    derived: dict = dc_field(default_factory=dict, repr=False, compare=False)

    @property
    def tag(self) -> bytes:  # single-value field maps, kept for callers that predate slots
        return self.slots.tag(0)

    @property
    def any_tag(self) -> bool:
        """Whether records of other tags (of the same length) match this map too: for
        events of one value. A run that logs a metric per layer has thousands of tags of a
        few points each, which a map per tag would leave to protobuf one record at a time.
        In an event of several values, which tags share it is part of the template."""
        return len(self.slots) == 1 and self.slots.tag_off[0] >= 0


@dataclass(slots=True)
class TagColumns:
    """Decoded events of one tag: record indices, steps, wall times, values.

    ``values`` has one row per event: shape ``(n,)`` for scalars, ``(n, *shape)``
    for fixed-shape tensors (TF2 histograms). ``metadata`` is the serialized
    ``SummaryMetadata`` every one of these values carried (None: none).

    Records of one field map but several tags stay one object when ``tags`` is set:
    ``tags[i]`` holds rows ``bounds[i]:bounds[i + 1]`` (tags in order of first record,
    each tag's rows in read order; ``tag`` is ``tags[0]``). A block of a run that logs
    100,000 tags would otherwise make a few numpy arrays for every tag.
    """

    tag: str
    simple: bool
    code: int
    index: np.ndarray
    steps: np.ndarray
    wall_times: np.ndarray
    values: np.ndarray
    metadata: bytes | None = None
    tags: list | None = None
    bounds: np.ndarray | None = None
    position: int = 0      # the value's place in its event (several values: its slot)
    positions: range | None = None   # with ``tags``: the place of each tag's value, if not one

    def split(self) -> list[TagColumns]:
        """A :class:`TagColumns` per tag."""
        if self.tags is None:
            return [self]
        b = self.bounds.tolist()
        places = self.unit_positions()
        return [TagColumns(tag, self.simple, self.code, self.index[lo:hi], self.steps[lo:hi],
                           self.wall_times[lo:hi], self.values[lo:hi], self.metadata,
                           position=place)
                for tag, lo, hi, place in zip(self.tags, b[:-1], b[1:], places, strict=True)]

    def unit_positions(self):
        """The place in its event of the value of each tag of ``tags``."""
        return self.positions if self.positions is not None else [self.position] * len(self.tags)


class Learnt:
    """Field maps of wide records learnt in earlier blocks of a file, by record length, with
    the record each was learnt from: a block of such records may hold only one, and learning
    a map of 100,000 values anew each time costs as much as decoding it. Matching a record
    against a kept map is what matching it within its block is, so the result is the same."""

    def __init__(self, limit: int = LEARNT_BYTES) -> None:
        self.limit = limit
        self.maps: dict[int, tuple[FieldMap, np.ndarray]] = {}

    def get(self, length: int):
        return self.maps.get(length)

    def keep(self, length: int, field_map: FieldMap, template: np.ndarray) -> None:
        self.maps.pop(length, None)
        self.maps[length] = (field_map, template)
        while sum(_held(m) for m in self.maps.values()) > self.limit and len(self.maps) > 1:
            del self.maps[next(iter(self.maps))]     # the oldest goes


def _held(kept) -> int:
    """Rough bytes of a kept map: its record and its slots."""
    field_map, template = kept
    return len(template) + field_map.slots.nbytes()


def _fields(buf: bytes, pos: int, end: int):
    """(field number, wire type, value start, value end, varint value) for each field."""
    while pos < end:
        key, pos = read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            start = pos
            value, pos = read_varint(buf, pos, end)
            yield field, wire, start, pos, value
        elif wire == 1:
            yield field, wire, pos, pos + 8, None
            pos += 8
        elif wire == 5:
            yield field, wire, pos, pos + 4, None
            pos += 4
        elif wire == 2:
            length, pos = read_varint(buf, pos, end)
            yield field, wire, pos, pos + length, length
            pos += length
        else:
            raise ValueError("unsupported wire type")
        if pos > end:
            raise ValueError("field runs past its message")


def learn_field_map(buf: bytes) -> FieldMap | None:
    """Where the fields of a templatable summary event sit, or None if ``buf`` is anything else."""
    try:
        return _learn(buf)
    except (ValueError, IndexError):
        return None


def event_fields(buf: bytes):
    """``(wall_off, step_off, step_len, (summary start, end))`` of an Event holding only
    wall time, step and a summary, each at most once; None for anything else."""
    wall_off = step_off = -1
    step_len = 0
    summary = None
    seen = set()
    for field, wire, start, end, _ in _fields(buf, 0, len(buf)):
        if field in seen:
            return None
        seen.add(field)
        if field == 1 and wire == 1:
            wall_off = start
        elif field == 2 and wire == 0:
            step_off, step_len = start, end - start
        elif field == 5 and wire == 2:
            summary = (start, end)
        else:
            return None
    if summary is None:
        return None
    return wall_off, step_off, step_len, summary


def _learn(buf: bytes) -> FieldMap | None:
    head = event_fields(buf)
    if head is None:
        return None
    wall_off, step_off, step_len, summary = head
    field_map = FieldMap(wall_off, step_off, step_len)
    tags = set()
    slots = field_map.slots
    for field, wire, start, end, _ in _fields(buf, *summary):
        if (field, wire) != (1, 2) or len(slots) >= MAX_VALUES:
            return None
        slot = _slot(buf, start, end)
        # a tag twice in one event: which metadata wins is an ordering question; protobuf decides
        if slot is None or slot[0] in tags:
            return None
        tags.add(slot[0])
        slots.add(*slot)
    return field_map if slots else None


_F4 = np.dtype("<f4")
_SIMPLE = (4, _F4, (), dt.DT_FLOAT, True, None, True)    # a simple_value's kind


def _slot(buf: bytes, start: int, end: int) -> tuple | None:
    """``(tag, value offset, kind, tag offset)`` of the value at ``start:end`` (see
    :meth:`Slots.add`), or None if it is not templatable."""
    n = end - start - 7
    if 0 < n < 128 and buf[start] == 0x0A and buf[start + 1] == n and buf[start + n + 2] == 0x15:
        # {tag, simple_value}, the commonest value (thousands in a merge_all event): the
        # fields the walk below would find, without walking them
        tag = bytes(buf[start + 2:start + n + 2])
        try:
            tag.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return tag, start + n + 3, _SIMPLE, start + 2
    tag = value = metadata = None
    tag_off = -1
    quiet = False
    for field, wire, s, e, _ in _fields(buf, start, end):
        if field == 1 and wire == 2 and tag is None:
            tag, tag_off = bytes(buf[s:e]), s
        elif field == 2 and wire == 5 and value is None:
            value = (s, 4, _F4, (), dt.DT_FLOAT, True)
            quiet = True
        elif field == 8 and wire == 2 and value is None:
            value, quiet = _tensor_value(buf, s, e)
            if value is None:
                return None
        elif field == 9 and wire == 2 and metadata is None:
            metadata = bytes(buf[s:e])
            if _parse_metadata(metadata) is None:
                return None
        else:
            return None
    if not tag or value is None:
        return None
    try:
        tag.decode("utf-8")
    except UnicodeDecodeError:
        return None
    value_off, size, dtype, shape, code, simple = value
    return tag, value_off, (size, dtype, shape, code, simple, metadata, quiet), tag_off


def _shape(buf: bytes, start: int, end: int) -> tuple | None:
    """A TensorShapeProto of plain known sizes, or None."""
    dims = []
    for field, wire, s, e, _ in _fields(buf, start, end):
        if field != 2 or wire != 2:
            return None
        size = None
        for f2, w2, _s, _e, v in _fields(buf, s, e):
            if f2 != 1 or w2 != 0 or size is not None or v >= 1 << 40:
                return None
            size = v
        dims.append(size if size is not None else 0)
    return tuple(dims)


def _tensor_value(buf: bytes, start: int, end: int):
    """``(value, quiet)``: where the tensor's number(s) sit (None: not templatable), and
    whether they are float32s of ``float_val``, which TensorBoard quiets (see Slot)."""
    code = None
    payload = None
    shape = None
    for field, wire, s, e, v in _fields(buf, start, end):
        if field == 1 and wire == 0 and code is None:
            code = v
        elif field == 2 and wire == 2 and shape is None:
            shape = _shape(buf, s, e)
            if shape is None:
                return None, False
        elif field in (4, 5, 6) and wire == 2 and payload is None:
            payload = (field, s, e - s)
        else:
            return None, False
    if payload is None or shape is None or code is None:
        return None, False
    field, off, size = payload
    if shape == ():
        # rank 0: TensorFlow 2 writes tensor_content; older writers the packed typed field
        if code == dt.DT_FLOAT and size == 4 and field in (4, 5):
            return (off, 4, np.dtype("<f4"), (), code, False), field == 5
        if code == dt.DT_DOUBLE and size == 8 and field in (4, 6):
            return (off, 8, np.dtype("<f8"), (), code, False), False
    # bool: a numpy bool scalar taken out of a column would normalise bytes other than 0 and 1,
    # which protobuf decoding keeps; strings are not fixed-size
    if field != 4 or code in (dt.DT_STRING, dt.DT_BOOL, dt.DT_RAW_PROTO) or code not in dt.NAMES:
        return None, False
    np_dtype = dt.numpy_dtype(code)
    if size == 0 or size != math.prod(shape) * np_dtype.itemsize:
        return None, False
    return (off, size, np_dtype.newbyteorder("<"), shape, code, False), False


@lru_cache(maxsize=1024)
def _parse_metadata(raw: bytes) -> Metadata | None:
    """The metadata of a SummaryMetadata serialization, read once per distinct one (None:
    protobuf rejects it). Protobuf, costly to import, only for a form it alone reads."""
    fields = small_messages.summary_metadata(raw)
    if fields is not None:
        return legacy.metadata_from_fields(*fields)
    message = dependency("google.protobuf.message", "tfevents")
    summary_pb2 = dependency("tensorboard.compat.proto.summary_pb2", "tfevents")
    try:
        return legacy.metadata_from_proto(summary_pb2.SummaryMetadata.FromString(raw))
    except (message.DecodeError, RuntimeError, ValueError):
        return None


@lru_cache(maxsize=1024)
def _metadata(tag: str, simple: bool, raw: bytes | None) -> Metadata | None:
    if simple:
        # TensorBoard's migration of simple_value: fresh scalars metadata, display name kept
        md = _parse_metadata(raw) if raw is not None else None
        return Metadata("scalars", b"", (md.display_name if md else "") or tag,
                        md.description if md else "", DataClass.SCALAR)
    if raw is None:
        return None
    return _parse_metadata(raw)


def column_metadata(cols: TagColumns, tag: str | None = None) -> Metadata | None:
    """The metadata TensorBoard keeps for the points of ``cols`` (of its tag ``tag``, for
    grouped columns; None: they bring none)."""
    return _metadata(cols.tag if tag is None else tag, cols.simple, cols.metadata)


# Records of at least this many bytes are gathered a range of columns at a time; shorter
# ones are copied whole once (each gather costs a pass over the rows, whatever its width).
GATHER_BYTES = 256


class _Rows:
    """Records of one length as the rows of a matrix. A wide record's (a histogram's or an
    image's: mostly values, copied again when they are taken out) bytes are gathered from
    the block a range of columns at a time, the matrix never made: copying whole records
    cost as much as the rest of decoding them. Short records are copied whole, once."""

    __slots__ = ("data", "starts", "length", "_matrix")

    def __init__(self, data: np.ndarray, starts: np.ndarray, length: int,
                 matrix: np.ndarray | None = None) -> None:
        self.data, self.starts, self.length = data, starts, length
        if matrix is None and length < GATHER_BYTES:
            # (a zero-copy window view indexed: no (n x length) index matrix is built)
            matrix = windows(data, length)[starts]
        self._matrix = matrix

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def wide(self) -> bool:
        return self._matrix is None

    def take(self, which) -> _Rows:
        """The rows ``which`` (indices, or a slice)."""
        matrix = None if self._matrix is None else self._matrix[which]
        return _Rows(self.data, self.starts[which], self.length, matrix)

    def row(self, i: int) -> np.ndarray:
        """Row ``i``."""
        if self._matrix is not None:
            return self._matrix[i]
        s = int(self.starts[i])
        return self.data[s:s + self.length]

    def peek(self, a: int, b: int) -> np.ndarray:
        """Bytes ``a:b`` of every row, maybe a view."""
        if self._matrix is not None:
            return self._matrix[:, a:b]
        if b <= a or not len(self.starts):
            return np.zeros((len(self.starts), max(b - a, 0)), np.uint8)
        return windows(self.data[a:], b - a)[self.starts]

    def columns(self, a: int, b: int) -> np.ndarray:
        """Bytes ``a:b`` of every row, an ``(n, b - a)`` array of their own."""
        return np.ascontiguousarray(self.peek(a, b)) if self._matrix is not None else \
            self.peek(a, b)

    def gather(self, offsets: np.ndarray) -> np.ndarray:
        """Bytes ``offsets`` (an array of any shape) of every row: ``(n, *offsets.shape)``."""
        if self._matrix is not None:
            return self._matrix[:, offsets]
        return self.data[self.starts.reshape((-1,) + (1,) * offsets.ndim) + offsets]


def decode(buf: bytes, starts: np.ndarray, lengths: np.ndarray, only: np.ndarray | None = None,
           min_group: int | None = None, learnt: Learnt | None = None):
    """Split records into decoded columns and the indices left for protobuf.

    Returns ``(columns, rest)``: a list of :class:`TagColumns` (one per tag
    and field map; a multi-value map gives one per value, sharing ``index``)
    and a sorted int64 array of record indices that still need the general
    decoder. ``only``: the record indices to look at (default: all);
    ``min_group``: the fewest records of one length worth a template (default
    :data:`MIN_GROUP`; records of :data:`WIDE_BYTES` or more are worth one alone);
    ``learnt``: maps of wide records kept from earlier blocks, tried first and kept for later.
    """
    if min_group is None:
        min_group = MIN_GROUP
    data = np.frombuffer(buf, dtype=np.uint8)
    columns: list[TagColumns] = []
    rest = [np.zeros(0, np.int64)]
    for length, members in _length_groups(lengths if only is None else lengths[only]):
        if only is not None:
            members = only[members]
        wide = WIDE_BYTES <= length <= WIDE_MAX_BYTES
        least = 1 if wide else min_group
        known = learnt.get(length) if learnt is not None and wide else None
        if len(members) < least:
            rest.append(members)
            continue
        rows = _Rows(data, starts[members], int(length))
        pending = np.ones(len(members), dtype=bool)
        failures = 0
        for _ in range(MAX_TEMPLATES):
            todo = np.flatnonzero(pending)
            # records that are not templatable (legacy histograms...) tend to come in whole groups
            if len(todo) < max(least, 1) or failures >= MAX_FAILURES:
                break
            if known is not None:
                (field_map, template), known = known, None
            else:
                first = todo[0]
                template = rows.row(first)
                # (a wide record is read where it is: a copy of every one learnt from would
                # cost more than the reading)
                field_map = learn_field_map(memoryview(template) if wide else template.tobytes())
                if field_map is None:
                    failures += 1
                    pending[first] = False
                    rest.append(members[first:first + 1])
                    continue
                if learnt is not None and wide:
                    learnt.keep(int(length), field_map, template.copy())
            every = len(todo) == len(rows)
            hits = _matches(rows if every else rows.take(todo), template, field_map)
            matched = todo[hits]
            pending[matched] = False
            same = every and len(matched) == len(rows)
            found, refused = _columns(field_map, members[matched], rows if same else rows.take(matched))
            columns.extend(found)
            if len(refused):
                rest.append(refused)
        rest.append(members[pending])
    return columns, np.sort(np.concatenate(rest))


def _length_groups(lengths: np.ndarray):
    """(length, sorted record indices) per distinct record length, in a linear-time sort."""
    if not len(lengths):
        return []
    small = lengths.max() < 1 << 16
    # a stable sort of 16-bit keys is a radix sort in numpy
    order = np.argsort(lengths.astype(np.uint16) if small else lengths, kind="stable")
    ordered = lengths[order]
    cuts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    bounds = np.concatenate(([0], cuts, [len(order)])).tolist()
    return [(int(ordered[lo]), order[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]


def _fixed_bytes(field_map: FieldMap, length: int) -> np.ndarray:
    """True at each byte that every record of the map holds as its template does."""
    fixed = field_map.derived.get("fixed")
    if fixed is None or len(fixed) != length:
        fixed = field_map.derived["fixed"] = ~_variable_bytes(field_map, length)
    return fixed


# Fixed bytes in at most this many stretches, and at most this share of a record, are
# compared stretch by stretch; others as whole rows, masked.
_MAX_STRETCHES = 16
_MAX_FIXED_SHARE = 0.5


def _fixed_stretches(field_map: FieldMap, fixed: np.ndarray) -> list | None:
    """``[(start, end)]`` of the stretches of ``fixed`` bytes, when comparing them alone
    pays (see :data:`_MAX_STRETCHES`), else None."""
    key = ("stretches", len(fixed))
    if key not in field_map.derived:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], fixed.view(np.int8), [0]))))
        pairs = list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))
        pays = len(pairs) <= _MAX_STRETCHES and fixed.sum() <= _MAX_FIXED_SHARE * len(fixed)
        field_map.derived[key] = pairs if pays else None
    return field_map.derived[key]


def _variable_bytes(field_map: FieldMap, length: int) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    if field_map.wall_off >= 0:
        mask[field_map.wall_off:field_map.wall_off + 8] = True
    if field_map.step_off >= 0:
        mask[field_map.step_off:field_map.step_off + field_map.step_len] = True
    slots = field_map.slots
    if len(slots) <= 16:
        # (a map of a value or a few, learnt anew every block: numpy's calls cost more)
        for off, k in zip(slots.value_off, slots.kind, strict=True):
            mask[off:off + slots.kinds[k][0]] = True
    else:
        offs = np.frombuffer(slots.value_off, np.int64)
        sizes = np.array([kind[0] for kind in slots.kinds],
                         np.int64)[np.frombuffer(slots.kind, np.int32)]
        for size in np.unique(sizes).tolist():
            mask[(offs[sizes == size][:, None] + np.arange(size)).ravel()] = True
    if field_map.any_tag:
        tag_off = slots.tag_off[0]
        mask[tag_off:tag_off + len(slots.tag(0))] = True
    return mask


def _matches(rows: _Rows, template: np.ndarray, field_map: FieldMap) -> np.ndarray:
    length = rows.length
    fixed = _fixed_bytes(field_map, length)
    stretches = _fixed_stretches(field_map, fixed)
    ok = np.ones(len(rows), dtype=bool)
    # rows a few at a time, so that a block's records are never compared in one (n x length)
    # temporary, nor a wide record (100,000 values) column slice by column slice
    step = max(1, (1 << 20) // max(length, 1))
    for lo in range(0, len(rows), step):
        part = rows if lo == 0 and step >= len(rows) else rows.take(slice(lo, lo + step))
        if stretches is not None:
            # only the fixed bytes are gathered and compared: a histogram's or an image's
            # record is mostly its values
            good = ok[lo:lo + step]
            for a, b in stretches:
                good &= (part.peek(a, b) == template[a:b]).all(axis=1)
            continue
        differ = part.peek(0, length) != template
        differ &= fixed
        ok[lo:lo + step] = ~differ.any(axis=1)
    if field_map.step_off >= 0:
        step = rows.peek(field_map.step_off, field_map.step_off + field_map.step_len)
        ok &= (step[:, :-1] & 0x80 != 0).all(axis=1) & (step[:, -1] & 0x80 == 0)
    return np.flatnonzero(ok)


def _columns(field_map: FieldMap, index: np.ndarray, rows: _Rows):
    """``(columns, refused)``: the matched records' columns, a :class:`TagColumns` per
    value (per tag and value when the map takes any tag), and the record indices whose tag
    is no UTF-8 (protobuf refuses those events: it is left to say so)."""
    names = bounds = None
    refused = np.zeros(0, np.int64)
    if field_map.any_tag:
        # grouped by tag first, so that the values are gathered once, in their final order
        tag_off = field_map.slots.tag_off[0]
        order, names, bounds, bad = _tag_groups(
            rows.peek(tag_off, tag_off + len(field_map.slots.tag(0))))
        if len(bad):
            refused = np.sort(index[bad])
        if names is not None and not names:
            return [], refused
        if order is not None and rows.wide:
            rows, index, order = rows.take(order), index[order], None
    n = len(index)
    if field_map.wall_off >= 0:
        walls = rows.columns(field_map.wall_off, field_map.wall_off + 8).view("<f8")[:, 0]
    else:
        walls = np.zeros(n, np.float64)
    steps = np.zeros(n, dtype=np.uint64)
    if field_map.step_off >= 0:
        raw = rows.peek(field_map.step_off, field_map.step_off + field_map.step_len)
        for j in range(field_map.step_len):
            byte = raw[:, j].astype(np.uint64) & np.uint64(0x7F)
            steps |= byte << np.uint64(7 * j)
    steps = steps.view(np.int64)
    walls = walls.astype(np.float64)
    out = []
    runs = field_map.derived.get("alike")
    if runs is None:
        runs = field_map.derived["alike"] = _alike(field_map.slots)
    tags = field_map.derived.setdefault("names", {})
    for lo, hi in runs:
        if hi - lo == 1:
            slot = field_map.slots[lo]
            raw = rows.columns(slot.value_off, slot.value_off + slot.value_size)
            values = raw.view(slot.value_dtype).reshape((n,) + slot.shape)
            if slot.quiet:
                values = dt.quieted(values)
            out.append(TagColumns(slot.tag.decode("utf-8"), slot.simple, slot.code, index,
                                  steps, walls, values, slot.metadata, position=lo))
        else:
            if (lo, hi) not in tags:
                # the same str objects every block: the reader keys its tags by them
                tags[lo, hi] = field_map.slots.tags(lo, hi)
            out.append(_grouped(field_map.slots, lo, hi, tags[lo, hi], index, steps, walls,
                                rows))
    if not field_map.any_tag or names is None:
        return out, refused
    cols = out[0]
    if bounds is None:
        cols.tag = names[0]
        return [cols], refused
    rows_of = (cols.index, cols.steps, cols.wall_times, cols.values)
    if order is not None:
        # (short records: their few columns are put in order, not the records)
        rows_of = tuple(a[order] for a in rows_of)
    return [TagColumns(names[0], cols.simple, cols.code, *rows_of, cols.metadata, names,
                       bounds)], refused


def _kind(slot: Slot) -> tuple:
    return tuple(getattr(slot, name) for name in _KIND_FIELDS)


def _alike(slots: Slots) -> list:
    """``(lo, hi)`` of each run of consecutive slots whose values are read alike and that
    bring the same metadata: one column for all of them, in the slots' order."""
    kinds = np.frombuffer(slots.kind, np.int32)
    cuts = (np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist()
    bounds = [0, *cuts, len(kinds)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def _grouped(slots: Slots, first: int, last: int, tags: list, index: np.ndarray,
             steps: np.ndarray, walls: np.ndarray, rows: _Rows) -> TagColumns:
    """One grouped :class:`TagColumns` of the slots ``first:last``, alike (``first``: the
    place of the first in its event; ``tags``: theirs): tag ``i`` holds the ``i``-th value
    of every record, a few numpy calls for thousands of values where a column per value
    took a dozen calls each."""
    n, k = len(index), last - first
    head = slots[first]
    offs = np.frombuffer(slots.value_off, np.int64)[first:last]
    raw = rows.gather(offs[:, None] + np.arange(head.value_size))   # (n, k, size)
    values = np.ascontiguousarray(raw.transpose(1, 0, 2)).view(head.value_dtype)
    values = values.reshape((k * n,) + head.shape)
    if head.quiet:
        values = dt.quieted(values)
    return TagColumns(head.tag.decode("utf-8"), head.simple, head.code, np.tile(index, k),
                      np.tile(steps, k), np.tile(walls, k), values, head.metadata,
                      tags, np.arange(k + 1) * n,
                      position=first, positions=range(first, first + k))


def _tag_groups(tags: np.ndarray):
    """How records of one map but any tag (``tags``: each one's tag bytes, one length) group
    by tag, tags in order of first record, each tag's records in read order: ``(order,
    names, bounds, refused)``, the records' order by tag (None: as they are), the tags that
    are UTF-8 (None: there are no records), where each tag's records begin and end in that
    order (None: one tag), and the places of the records whose tag is no UTF-8."""
    n, width = tags.shape
    none = np.zeros(0, np.int64)
    if n == 0:
        return None, None, None, none
    if bool((tags == tags[0]).all()):
        name = _tag_text(tags[0].tobytes())
        return (None, [name], None, none) if name is not None else \
            (None, [], None, np.arange(n))
    keys = np.ascontiguousarray(tags).view(f"V{width}")[:, 0]
    _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True,
                                          return_counts=True)
    inverse = inverse.reshape(-1)
    # groups in order of their first record; a stable sort keeps each group's records in order
    by_first = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_first] = np.arange(len(first))
    order = np.argsort(rank[inverse], kind="stable")
    counts = counts[by_first]
    names = [_tag_text(r.tobytes()) for r in tags[first[by_first]]]
    refused = none
    if None in names:
        bad = np.array([name is None for name in names])
        refused = order[np.repeat(bad, counts)]
        order = order[np.repeat(~bad, counts)]
        counts = counts[~bad]
        names = [name for name in names if name is not None]
    bounds = np.zeros(len(names) + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    return order, names, bounds, refused


def _tag_text(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
