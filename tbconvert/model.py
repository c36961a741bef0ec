"""The intermediate model every format reads into and writes from.

Experiment -> run -> series -> points. A series is identified by (run, tag) and
holds its points as columns (numpy arrays), never as one Python object per
point. One series may arrive in several consecutive *chunks* with the same
(run, tag) and metadata; readers and writers never need a whole logdir in
memory, only one run.

The vocabulary is TensorBoard's: data classes SCALAR, TENSOR and
BLOB_SEQUENCE, and summary metadata (plugin name, plugin content bytes,
display name, description) kept byte for byte.

Which container a series uses follows the shape of its points, and
``metadata.data_class`` says what TensorBoard calls it:

* :class:`ScalarSeries`: data class SCALAR and every point a rank-0 number of
  one dtype. ``values`` keeps the source dtype (float32 stays float32).
* :class:`BlobSequenceSeries`: data class BLOB_SEQUENCE and every point a list
  of byte strings. A blob may be ``None``: the source lost it (a hole).
* :class:`TensorSeries`: everything else, including data class UNKNOWN
  (third-party plugins) and oddly shaped points, so nothing is ever dropped.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np


class DataClass(enum.IntEnum):
    """TensorBoard's ``SummaryMetadata.data_class`` (same numbers as the proto)."""

    UNKNOWN = 0
    SCALAR = 1
    TENSOR = 2
    BLOB_SEQUENCE = 3


@dataclass(frozen=True, slots=True)
class Metadata:
    """A series' summary metadata, as TensorBoard stores it for the tag."""

    plugin_name: str = ""
    plugin_content: bytes = b""
    display_name: str = ""
    description: str = ""
    data_class: DataClass = DataClass.UNKNOWN


@dataclass(frozen=True, slots=True)
class Experiment:
    """Experiment-level facts; all optional (event files carry none of them).

    Times are kept as the strings the source had (TensorBoard.dev exports use
    RFC 3339 with a ``Z`` suffix) so a round trip is exact. ``extra`` keeps any
    further keys a source had, so they are not lost either.
    """

    experiment_id: str = ""
    name: str = ""
    description: str = ""
    create_time: str = ""
    update_time: str = ""
    extra: dict = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.experiment_id or self.name or self.description
                    or self.create_time or self.update_time or self.extra)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run-level event that is not a time series.

    ``kind`` is the ``Event`` field name: ``meta_graph_def``, ``session_log``
    or ``log_message``; ``payload`` is that field's serialized bytes.
    (``graph_def`` and ``tagged_run_metadata`` become series, as in TensorBoard.)
    """

    kind: str
    step: int
    wall_time: float
    payload: bytes

    KINDS = ("meta_graph_def", "session_log", "log_message")

    def damage(self) -> str | None:
        """Why this record is no event an event file can hold (an archive edited or damaged
        outside tbconvert), None when it is one."""
        if self.kind not in self.KINDS:
            return f"its kind {self.kind!r} is none of {', '.join(self.KINDS)}"
        if self.kind == "meta_graph_def":     # kept as bytes, as TensorBoard keeps them
            return None
        if self._message() is None:
            message = "SessionLog" if self.kind == "session_log" else "LogMessage"
            return f"its payload does not decode as a {message}"
        return None

    def is_restart_marker(self) -> bool:
        """Whether this is a ``SessionLog`` START: its effect is in which points TensorBoard's
        restart rule hides, not an event of its own (a damaged one is no marker)."""
        if self.kind != "session_log":
            return False
        from tensorboard.compat.proto import event_pb2
        message = self._message()
        return message is not None and message.status == event_pb2.SessionLog.START

    def _message(self):
        """The payload of a session log or log message decoded, None if it does not decode."""
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2
        proto = event_pb2.SessionLog if self.kind == "session_log" else event_pb2.LogMessage
        try:
            return proto.FromString(self.payload)
        except (DecodeError, RuntimeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Run:
    """A run: a relative directory of a logdir, ``"."`` for the root.

    ``start_time`` is the wall time of the first event TensorBoard reads for
    the run (it orders runs and feeds relative-time displays); ``None`` when
    the source does not know it.

    ``records`` is any sequence of :class:`RunRecord`: a reader gives a
    :class:`~tbconvert.formats.recordlog.RecordLog`, which keeps them as bytes (a run may
    hold millions) and compares equal to a tuple of the same records.
    """

    name: str
    start_time: float | None = None
    records: Sequence[RunRecord] = ()


def _column(values, dtype, what: str, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{what} has {len(arr)} entries, expected {n}")
    return arr


@dataclass(frozen=True, slots=True, eq=False)
class _Series:
    run: str
    tag: str
    metadata: Metadata
    steps: np.ndarray
    wall_times: np.ndarray
    # True where TensorBoard's restart rule hides the point; None = none hidden.
    hidden: np.ndarray | None

    def _check_columns(self) -> None:
        object.__setattr__(self, "steps", _column(self.steps, np.int64, self._what("steps")))
        n = len(self.steps)
        object.__setattr__(
            self, "wall_times", _column(self.wall_times, np.float64, self._what("wall_times"), n))
        if self.hidden is not None:
            hidden = _column(self.hidden, np.bool_, self._what("hidden"), n)
            object.__setattr__(self, "hidden", hidden if hidden.any() else None)

    def _what(self, column: str) -> str:
        return f"series {self.run!r}/{self.tag!r}: {column}"

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def data_class(self) -> DataClass:
        return self.metadata.data_class

    @property
    def hidden_count(self) -> int:
        return 0 if self.hidden is None else int(self.hidden.sum())

    def visible(self):
        """This chunk without the points TensorBoard's restart rule hides."""
        if self.hidden is None:
            return self
        return self.take(np.flatnonzero(~self.hidden)).with_hidden(None)

    def with_hidden(self, hidden):
        return replace(self, hidden=hidden)

    def with_metadata(self, metadata: Metadata):
        return replace(self, metadata=metadata)

    def with_run(self, run: str):
        return replace(self, run=run)

    def take(self, indices):  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def _take_common(self, idx: np.ndarray) -> dict:
        return dict(
            run=self.run, tag=self.tag, metadata=self.metadata,
            steps=self.steps[idx], wall_times=self.wall_times[idx],
            hidden=None if self.hidden is None else self.hidden[idx],
        )


@dataclass(frozen=True, slots=True, eq=False)
class ScalarSeries(_Series):
    """Scalar points: ``values[i]`` is the value at ``steps[i]``.

    ``values`` keeps the source dtype: float32 for ``simple_value`` and
    DT_FLOAT tensors, float64 for DT_DOUBLE, ints for integer scalar tensors; a
    TensorBoard.dev export's series (JSON numbers) is float32 when float32 holds
    every value exactly, float64 otherwise.
    """

    values: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        self._check_columns()
        values = np.asarray(self.values)
        if values.ndim != 1 or len(values) != len(self.steps):
            raise ValueError(
                f"{self._what('values')}: {len(self.steps)} steps but values of shape {values.shape}")
        if values.dtype.kind not in "fiub":
            raise ValueError(f"{self._what('values')}: numeric dtype needed, got {values.dtype}")
        object.__setattr__(self, "values", values)

    def take(self, indices) -> ScalarSeries:
        idx = np.asarray(indices)
        return ScalarSeries(**self._take_common(idx), values=self.values[idx])


@dataclass(frozen=True, slots=True, eq=False)
class TensorSeries(_Series):
    """Tensor points: each point is one numpy array of any dtype and shape.

    ``dtypes[i]`` is the TensorFlow ``DataType`` enum of point i (so types
    numpy lacks, such as bfloat16, are kept: their bits live in an unsigned
    array of the same width). String tensors are object arrays of ``bytes``.

    ``block``, when a reader had every point in one numeric array of one dtype
    and shape (histograms decoded in bulk), is that array: ``tensors[i]`` is
    ``block[i]``. Writers may take it whole instead of stacking the points
    again; use :meth:`of_block` to make such a series.
    """

    dtypes: np.ndarray = None  # type: ignore[assignment]
    tensors: tuple = ()
    block: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._check_columns()
        n = len(self.steps)
        object.__setattr__(self, "dtypes", _column(self.dtypes, np.int32, self._what("dtypes"), n))
        tensors = tuple(self.tensors)
        if len(tensors) != n:
            raise ValueError(f"{self._what('tensors')}: {len(tensors)} tensors for {n} steps")
        object.__setattr__(self, "tensors", tensors)
        block = self.block
        if block is not None and (not isinstance(block, np.ndarray) or block.ndim < 1
                                  or len(block) != n or (n and (self.dtypes != self.dtypes[0]).any())
                                  or block.dtype.kind not in "biufc"):
            raise ValueError(f"{self._what('block')}: not the points as one numeric array")

    @classmethod
    def of_block(cls, *, code: int, block: np.ndarray, **common) -> TensorSeries:
        """A series whose points are the rows of ``block``, all of dtype enum ``code``."""
        return cls(**common, dtypes=np.full(len(block), code, np.int32), tensors=tuple(block),
                   block=block)

    def take(self, indices) -> TensorSeries:
        idx = np.asarray(indices, dtype=np.int64)
        if self.block is not None and len(self.dtypes):
            return TensorSeries.of_block(**self._take_common(idx), code=int(self.dtypes[0]),
                                         block=self.block[idx])
        return TensorSeries(**self._take_common(idx), dtypes=self.dtypes[idx],
                            tensors=tuple(self.tensors[i] for i in idx))


@dataclass(frozen=True, slots=True, eq=False)
class BlobSequenceSeries(_Series):
    """Blob-sequence points: point i owns ``blobs[offsets[i]:offsets[i+1]]``.

    A blob is ``bytes``, or ``None`` where the source lost it (a hole in a
    TensorBoard.dev export); positions of the other blobs never shift.
    """

    offsets: np.ndarray = None  # type: ignore[assignment]
    blobs: tuple = ()

    def __post_init__(self) -> None:
        self._check_columns()
        n = len(self.steps)
        offsets = _column(self.offsets, np.int64, self._what("offsets"), n + 1)
        blobs = tuple(self.blobs)
        if offsets[0] != 0 or offsets[-1] != len(blobs) or (np.diff(offsets) < 0).any():
            raise ValueError(f"{self._what('offsets')}: do not index the {len(blobs)} blobs")
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "blobs", blobs)

    def sequence(self, i: int) -> tuple:
        """The blobs of point ``i``."""
        return self.blobs[self.offsets[i]:self.offsets[i + 1]]

    def sequences(self) -> Iterator[tuple]:
        for i in range(len(self.steps)):
            yield self.sequence(i)

    @property
    def missing_count(self) -> int:
        return sum(1 for b in self.blobs if b is None)

    def take(self, indices) -> BlobSequenceSeries:
        idx = np.asarray(indices, dtype=np.int64)
        seqs = [self.sequence(i) for i in idx]
        return BlobSequenceSeries.from_sequences(
            **self._take_common(idx), sequences=seqs)

    @classmethod
    def from_sequences(cls, *, sequences: Sequence[Sequence], **kw) -> BlobSequenceSeries:
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        if len(sequences):
            np.cumsum([len(s) for s in sequences], out=offsets[1:])
        blobs = tuple(b for s in sequences for b in s)
        return cls(**kw, offsets=offsets, blobs=blobs)


Series = ScalarSeries | TensorSeries | BlobSequenceSeries


def empty_series(cls: type, run: str, tag: str, metadata: Metadata,
                 value_dtype=np.float64) -> Series:
    """A series of class ``cls`` without points: archives keep a tag whose points were all
    lost, so that its metadata is not (``value_dtype``: a scalar series' dtype)."""
    common = dict(run=run, tag=tag, metadata=metadata, steps=np.zeros(0, np.int64),
                  wall_times=np.zeros(0, np.float64), hidden=np.zeros(0, bool))
    if cls is ScalarSeries:
        return ScalarSeries(**common, values=np.zeros(0, value_dtype))
    if cls is TensorSeries:
        return TensorSeries(**common, dtypes=np.zeros(0, np.int32), tensors=())
    return BlobSequenceSeries(**common, offsets=np.zeros(1, np.int64), blobs=())


@dataclass(slots=True)
class RunData:
    """One run as a reader hands it over: the run, then its series chunks.

    ``series`` must be consumed before the reader advances to the next run.
    """

    run: Run
    series: Iterable[Series]


def concat(chunks: Sequence[Series]) -> Series:
    """Join consecutive chunks of one series into one (for small data and tests)."""
    if not chunks:
        raise ValueError("nothing to concatenate")
    first = chunks[0]
    if len(chunks) == 1:
        return first
    common = dict(
        run=first.run, tag=first.tag, metadata=first.metadata,
        steps=np.concatenate([c.steps for c in chunks]),
        wall_times=np.concatenate([c.wall_times for c in chunks]),
        hidden=(None if all(c.hidden is None for c in chunks) else np.concatenate(
            [c.hidden if c.hidden is not None else np.zeros(len(c), bool) for c in chunks])),
    )
    if all(isinstance(c, ScalarSeries) for c in chunks) and \
            len({c.values.dtype for c in chunks}) == 1:
        return ScalarSeries(**common, values=np.concatenate([c.values for c in chunks]))
    if all(isinstance(c, BlobSequenceSeries) for c in chunks):
        seqs = [s for c in chunks for s in c.sequences()]
        return BlobSequenceSeries.from_sequences(**common, sequences=seqs)
    tensor_chunks = [as_tensor_series(c) for c in chunks]
    joined = joined_block(tensor_chunks)
    if joined is not None:
        return TensorSeries.of_block(**common, code=joined[0], block=joined[1])
    return TensorSeries(**common, dtypes=np.concatenate([c.dtypes for c in tensor_chunks]),
                        tensors=tuple(t for c in tensor_chunks for t in c.tensors))


def joined_block(chunks: Sequence[TensorSeries]) -> tuple[int, np.ndarray] | None:
    """``(dtype enum, block)``: the points of ``chunks``, one after another, as one array,
    when every chunk has a :attr:`TensorSeries.block` and all have one dtype enum, numpy
    dtype and row shape; None otherwise."""
    blocks = [c.block for c in chunks]
    if any(b is None or not len(b) for b in blocks):
        return None
    code, first = int(chunks[0].dtypes[0]), blocks[0]
    if not all(b.dtype == first.dtype and b.shape[1:] == first.shape[1:] and c.dtypes[0] == code
               for b, c in zip(blocks, chunks, strict=True)):
        return None
    if len(blocks) == 1:
        return code, first
    together = _adjacent(blocks)
    return code, together if together is not None else np.concatenate(blocks)


def _adjacent(blocks: list) -> np.ndarray | None:
    """The rows of ``blocks`` (of one dtype and row shape) as one view, when they lie one
    after another in one array (a reader that built them so): no copy of them all."""
    base = blocks[0].base
    if not isinstance(base, np.ndarray) or not base.flags.c_contiguous:
        return None
    first = at = blocks[0].__array_interface__["data"][0]
    for b in blocks:
        if b.base is not base or not b.flags.c_contiguous or \
                b.__array_interface__["data"][0] != at:
            return None
        at += b.nbytes
    return np.ndarray((sum(len(b) for b in blocks), *blocks[0].shape[1:]), blocks[0].dtype,
                      buffer=base, offset=first - base.__array_interface__["data"][0])


def as_tensor_series(series: Series) -> TensorSeries:
    """The same points in the most general container (one array per point)."""
    from tbconvert import dtypes as dt

    if isinstance(series, TensorSeries):
        return series
    common = dict(run=series.run, tag=series.tag, metadata=series.metadata,
                  steps=series.steps, wall_times=series.wall_times, hidden=series.hidden)
    if isinstance(series, ScalarSeries):
        code = dt.tf_dtype_of(series.values.dtype)
        return TensorSeries(**common, dtypes=np.full(len(series), code, np.int32),
                            tensors=tuple(series.values[i:i + 1].reshape(()) for i in range(len(series))))
    tensors = []
    for seq in series.sequences():
        arr = np.empty(len(seq), dtype=object)
        arr[:] = [b"" if b is None else b for b in seq]
        tensors.append(arr)
    return TensorSeries(**common, dtypes=np.full(len(series), dt.DT_STRING, np.int32),
                        tensors=tuple(tensors))


def as_scalar_series(series: Series, report=None) -> ScalarSeries | None:
    """``series`` as scalars, for tables, charts and comparisons: a scalar series itself, or a
    series of the scalar data class whose every point is a single number that a scalar series
    could not keep as it was (bfloat16, kept as its bits; a tag whose dtype changed), in the
    dtype numpy promotes theirs to (integers stay integers; beside floats, an integer beyond
    2**53 is rounded, and counted in ``report`` when given). None for anything else."""
    from tbconvert import dtypes as dt

    if isinstance(series, ScalarSeries):
        return series
    if not isinstance(series, TensorSeries) or series.data_class != DataClass.SCALAR:
        return None
    points = []
    for code, tensor in zip(series.dtypes.tolist(), series.tensors, strict=True):
        arr = np.asarray(tensor)
        if arr.size != 1 or arr.dtype.kind not in "fiub" or code == dt.DT_RAW_PROTO:
            return None
        points.append(dt.bfloat16_values(arr) if code == dt.DT_BFLOAT16 else arr)
    dtype = np.result_type(*{arr.dtype for arr in points}) if points else np.dtype(np.float64)
    values = np.empty(len(points), dtype)
    rounded = 0
    with np.errstate(invalid="ignore"):      # (a signaling NaN widened: still a NaN)
        for i, arr in enumerate(points):
            values[i] = arr.reshape(())
            if dtype.kind == "f" and arr.dtype.kind in "iu" \
                    and int(values[i]) != int(arr.reshape(())):
                rounded += 1
    if rounded and report is not None:
        report.add("inexact_value", f"{series.run}/{series.tag}: {rounded} integer value(s) "
                   "beyond 2**53 rounded to the nearest float64 (the tag mixes integers and "
                   "floats)", run=series.run, tag=series.tag, count=rounded)
    return ScalarSeries(run=series.run, tag=series.tag, metadata=series.metadata,
                        steps=series.steps, wall_times=series.wall_times, hidden=series.hidden,
                        values=values)
