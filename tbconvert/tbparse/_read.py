"""Reading one directory's event files with each point's file and raw legacy fields.

tbparse's frames name the event file each row came from and give histogram
fields (``sum``, ``sum_squares``, untrimmed buckets) that TensorBoard's
migration drops. Both are per-point facts the event-file reader hands over
through its public seam: :meth:`TfeventsReader.read_positioned` gives each
point's read position (which says the file it came from), and its
``value_hook`` sees the raw ``HistogramProto`` when the event is decoded.
Everything else is the ordinary columnar reading, with TensorBoard's restart
rule and damage handling.

What is kept between tables is small, since every table is built from it again
and pandas alone takes about 100 MiB: scalar points as narrow columns (steps and
read positions packed, see ``_points``; values in their written dtype); tensors and blob
sequences as the read-only arrays a table shows (rows of the arrays the reader
decoded in bulk where it could), so that building a table makes no object per
point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tbconvert import api
from tbconvert import dtypes as dt
from tbconvert.errors import MissingDependencyError
from tbconvert.formats.tfevents.reader import TfeventsReader
from tbconvert.formats.tfevents.spill import PieceStore
from tbconvert.model import BlobSequenceSeries, Metadata, ScalarSeries, TensorSeries
from tbconvert.report import Report
from tbconvert.tbparse._points import Progression, Scalars, Tensors, pack, unpack
from tbconvert.tbparse._points import read_only as _read_only

# Smaller blocks than a conversion's, and pieces past 2 MiB wait in a temporary file:
# a table's columns are held beside them, and neither makes reading slower.
_BLOCK = 1 << 20
_STORE_LIMIT = 2 << 20


def _tensors(chunk, walls) -> Tensors:
    if isinstance(chunk, BlobSequenceSeries):
        widths = np.diff(chunk.offsets)
        if len(widths) and (widths == widths[0]).all() and widths[0] and (
                None not in chunk.blobs):
            # sequences of one length: rows of one table, filled in one go
            table = np.empty((len(widths), int(widths[0])), dtype=object)
            table.reshape(-1)[:] = chunk.blobs
            parts = list(_read_only(table))
        else:
            parts = []
            for seq in chunk.sequences():
                arr = np.empty(len(seq), dtype=object)
                arr[:] = [b"" if b is None else b for b in seq]
                parts.append(_read_only(arr))
    else:
        # rows of the arrays the reader decoded in bulk, or arrays of their own
        parts = [_read_only(np.asarray(a)) for a in chunk.tensors]
    return Tensors(pack(chunk.steps), walls, chunk.hidden, [parts])


def _as_tensors(s: Scalars) -> Tensors:
    return Tensors(s.steps, s.wall_times, s.hidden,
                   [[_read_only(s.values[i:i + 1].reshape(())) for i in range(len(s))]])


def _joined(parts: list):
    if len(parts) == 1:
        return parts[0]
    hidden = None
    if any(p.hidden is not None for p in parts):
        hidden = np.concatenate([p.hidden if p.hidden is not None else np.zeros(len(p), bool)
                                 for p in parts])
    steps = pack(np.concatenate([p.steps for p in parts]).astype(np.int64, copy=False))
    walls = [p.wall_times for p in parts]
    if all(w.strides == (0,) for w in walls):
        walls = np.broadcast_to(np.float64(0), len(steps))
    else:
        walls = np.concatenate(walls)
    if isinstance(parts[0], Tensors):
        return Tensors(steps, walls, hidden, [q for p in parts for q in p.parts])
    return Scalars(steps, np.concatenate([p.values for p in parts]), walls, hidden)


SSI_TAG = "_hparams_/session_start_info"
UNKNOWN = object()     # TagData.point_types not yet worked out


def _value_taker(histos: dict):
    """The reader's value hook keeping by (position, tag) each legacy histogram's own fields,
    each string tensor of rank 2 or more (audio clips with their labels, which
    TensorBoard's reading keeps only the clips of) and each hparams session start's plugin
    data (a run's first metadata is all the reading keeps, and each file has its own)."""

    def take(seq, value):
        if value.tag == SSI_TAG and value.HasField("metadata"):
            histos[(seq, SSI_TAG)] = value.metadata.plugin_data.content
        kind = value.WhichOneof("value")
        if kind == "histo":
            h = value.histo
            histos[(seq, value.tag)] = (
                h.min, h.max, h.num, h.sum, h.sum_squares,
                _read_only(np.array(h.bucket_limit, dtype=np.float64)),
                _read_only(np.array(h.bucket, dtype=np.float64)))
            # The table is built from these fields alone: the reader need not turn the
            # buckets into TensorBoard's tensor as well.
            h.Clear()
        elif (kind == "tensor" and value.tensor.dtype == dt.DT_STRING
              and len(value.tensor.tensor_shape.dim) >= 2):
            try:
                histos[(seq, value.tag or value.node_name)] = _read_only(
                    dt.proto_to_array(value.tensor)[1])
            except dt.TensorDecodeError:
                pass  # the reader reports it
    return take


@dataclass
class TagData:
    """Every point of one tag of a directory (hidden ones too), in read order."""

    tag: str
    metadata: Metadata
    chunks: list = field(default_factory=list)
    seqs: list = field(default_factory=list)
    # the table of each point, for a tag written in several forms, None for a tag of one
    # form (see _frames.point_types)
    point_types: object = UNKNOWN

    def series(self):
        if len({type(c) for c in self.chunks}) > 1:
            # a tag written as scalars in one file and as tensors in another (read per file)
            return _joined([_as_tensors(c) if isinstance(c, Scalars) else c
                            for c in self.chunks])
        return _joined(self.chunks)

    def seq(self) -> np.ndarray:
        if len(self.seqs) == 1:
            return unpack(self.seqs[0])
        return np.concatenate([unpack(s) for s in self.seqs])

    @property
    def hidden_count(self) -> int:
        return sum(c.hidden_count for c in self.chunks)

    def packed_seq(self):
        return self.seqs[0] if len(self.seqs) == 1 else pack(self.seq())

    def first_last(self):
        """The first and last read positions (None: no points)."""
        ends = [(s.start, s.start + s.stride * (s.n - 1)) if isinstance(s, Progression)
                else (int(s[0]), int(s[-1])) for s in self.seqs if len(s)]
        if not ends:
            return None, None
        return ends[0][0], ends[-1][1]

    def settle(self) -> None:
        """Join narrow scalar parts once, so that every table does not join them again."""
        if len(self.chunks) > 1 and len({type(c) for c in self.chunks}) == 1:
            self.chunks = [_joined(self.chunks)]
            self.seqs = [pack(self.seq())]


def release_free_heap() -> None:
    """Give the heap the reading freed back to the system (glibc keeps it otherwise), so
    that the tables built next do not stand on top of it. Elsewhere: nothing to do.
    Called once a reader has read its tree (it walks the whole heap)."""
    from tbconvert import malloc
    malloc.give_back_free_heap()


@dataclass
class DirData:
    """A directory's event files (sorted, as tbparse lists them) and their points."""

    files: list[Path]
    starts: np.ndarray           # first read position of each file
    tags: dict[str, TagData]
    histos: dict
    run_groups: list             # per file: index of the read (run) it belongs to

    def file_of(self, seq: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.starts, seq, side="right") - 1


def read_dir(files: list[Path], per_file: bool, report: Report, label: str,
             wall_times: bool = True) -> DirData:
    """Read ``files`` (one directory's event files, in order) as one run, or one run per
    file (``per_file``: each file's restarts purge only within it, as tbparse does).
    Without ``wall_times`` the points' wall times are not kept (a table that does not
    show them needs 8 bytes less per point)."""
    options = api.make_options(restarts="keep-all")
    groups = [[f] for f in files] if per_file else ([files] if files else [])
    tags: dict[str, TagData] = {}
    histos: dict = {}
    starts: list[int] = []
    position = 0
    for group in groups:
        reader = TfeventsReader(group[0].parent, options, report)
        reader.block_size = _BLOCK
        reader.value_hook = _value_taker(histos)
        known = len(starts)
        try:
            read = reader.read_positioned(label, group, store=PieceStore(limit=_STORE_LIMIT),
                                          first_position=position,
                                          every_start_purges=per_file)
            starts.extend(read.starts.tolist())
            position = read.end + 2
            for chunk, seq in read.chunks:
                td = tags.get(chunk.tag)
                if td is None:
                    td = tags[chunk.tag] = TagData(chunk.tag, chunk.metadata)
                if isinstance(chunk, ScalarSeries):
                    walls = (chunk.wall_times if wall_times
                             else np.broadcast_to(np.float64(0), len(chunk)))
                    chunk = Scalars(pack(chunk.steps), chunk.values, walls, chunk.hidden)
                elif isinstance(chunk, (TensorSeries, BlobSequenceSeries)):
                    walls = (chunk.wall_times if wall_times
                             else np.broadcast_to(np.float64(0), len(chunk)))
                    chunk = _tensors(chunk, walls)
                td.chunks.append(chunk)
                td.seqs.append(pack(seq))
                del chunk, seq
        except (KeyboardInterrupt, MemoryError, MissingDependencyError):
            # protobuf loads when a record first needs it: missing, it fails every directory
            raise
        except Exception as exc:  # noqa: BLE001 - one unreadable directory costs only itself
            report.add("unreadable_run", f"{label}: could not be read ({exc}); skipped", run=label)
            if len(starts) == known:     # its files hold no points
                starts.extend([position] * len(group))
    for td in tags.values():
        td.settle()
    return DirData(list(files), np.array(starts, dtype=np.int64), tags, histos, [])
