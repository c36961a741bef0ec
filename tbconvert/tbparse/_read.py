"""Reading one directory's event files with each point's file and raw legacy fields.

tbparse's frames name the event file each row came from and give histogram
fields (``sum``, ``sum_squares``, untrimmed buckets) that TensorBoard's
migration drops. Both are per-point facts the event-file reader sees while
reading: a point's read position (``seq``) says which file it came from, and
the raw ``HistogramProto`` is at hand when the event is decoded. So the reader
and its assembler are extended here (not changed) to keep those two facts on
the side; everything else is the ordinary columnar reading, with TensorBoard's
restart rule and damage handling.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tbconvert import api
from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import event_files
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.formats.tfevents.reader import RunProgress, TfeventsReader
from tbconvert.formats.tfevents.spill import PieceStore
from tbconvert.model import Metadata
from tbconvert.report import Report

_INT32 = 1 << 31


class _Assembler(RunAssembler):
    """A run assembler that remembers the read positions of each chunk it builds.

    ``every_start_purges``: TensorBoard's legacy accumulator (tbparse's) purges at every
    ``SessionLog.START``; its dashboards only from the second one of a run on.
    """

    def __init__(self, name: str, every_start_purges: bool = False) -> None:
        # Pieces past 8 MiB wait in a temporary file: the table's columns need the memory.
        super().__init__(name, PieceStore(limit=8 << 20))
        self.chunk_seqs: list[np.ndarray] = []
        if every_start_purges:
            self._seen_start = True

    def _chunk(self, tag, md, shape, pieces, purges):
        self.chunk_seqs.append(np.concatenate([p[0] for p in pieces]))
        return super()._chunk(tag, md, shape, pieces, purges)


class _Reader(TfeventsReader):
    """The event-file reader, keeping by (seq, tag) each legacy histogram's own fields and
    each string tensor of rank 2 or more (audio clips with their labels, which
    TensorBoard's reading keeps only the clips of)."""

    # Smaller blocks than a conversion's: a table's columns are held beside them.
    block_size = 4 << 20

    def __init__(self, path, options, report) -> None:
        super().__init__(path, options, report)
        self.histos: dict[tuple[int, str], tuple] = {}

    def _event(self, asm, seq, event, path):
        if event.WhichOneof("what") == "summary":
            for value in event.summary.value:
                if value.WhichOneof("value") == "histo":
                    h = value.histo
                    self.histos[(seq, value.tag)] = (
                        h.min, h.max, h.num, h.sum, h.sum_squares,
                        np.array(h.bucket_limit, dtype=np.float64),
                        np.array(h.bucket, dtype=np.float64))
                    # The table is built from these fields alone: the reader need not turn
                    # the buckets into TensorBoard's tensor as well.
                    h.Clear()
                elif (value.WhichOneof("value") == "tensor" and value.tensor.dtype == dt.DT_STRING
                      and len(value.tensor.tensor_shape.dim) >= 2):
                    try:
                        self.histos[(seq, value.tag or value.node_name)] = \
                            dt.proto_to_array(value.tensor)[1]
                    except dt.TensorDecodeError:
                        pass  # the reader reports it
        super()._event(asm, seq, event, path)


@dataclass
class TagData:
    """Every point of one tag of a directory (hidden ones too), in read order."""

    tag: str
    metadata: Metadata
    chunks: list = field(default_factory=list)
    seqs: list = field(default_factory=list)

    def series(self):
        from tbconvert.model import concat
        return concat(self.chunks)

    def seq(self) -> np.ndarray:
        return np.concatenate(self.seqs)


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
    offset = 0
    for group in groups:
        reader = _Reader(group[0].parent, options, report)
        asm = _Assembler(label, every_start_purges=per_file)
        asm.next_seq = offset
        reader._run_progress = RunProgress(None)
        try:
            for path in group:
                starts.append(asm.next_seq)
                if path.name.endswith(event_files.PROFILE_EMPTY):
                    continue
                reader._read_file(path, asm)
            _run, chunks = asm.build()
            for chunk in chunks:
                td = tags.get(chunk.tag)
                if td is None:
                    td = tags[chunk.tag] = TagData(chunk.tag, chunk.metadata)
                if not wall_times:
                    chunk = replace(chunk, wall_times=np.broadcast_to(np.float64(0), len(chunk)))
                td.chunks.append(chunk)
                seq = asm.chunk_seqs[-1]
                td.seqs.append(seq.astype(np.int32) if len(seq) and seq[-1] < _INT32 else seq)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001 - one unreadable directory costs only itself
            report.add("unreadable_run", f"{label}: could not be read ({exc}); skipped", run=label)
        finally:
            asm.store.close()
        histos.update(reader.histos)
        offset = asm.next_seq + 2
    return DirData(list(files), np.array(starts, dtype=np.int64), tags, histos, [])
