"""Short runs share row groups in a single-file archive.

A sweep of hundreds of trials is hundreds of runs of a few hundred points each. A row group
of its own for each cost about 2 ms a run (Arrow's set-up of a row group, its checksums,
its footer entry, and joining it into the file), several times the reading of the run. So a
run of at most :data:`RUN_ROWS` rows and :data:`RUN_BYTES` (Arrow) bytes goes into the row
group being filled, after the short runs before it; a longer run starts a row group of its
own and ends it. The rule looks at the rows alone, so a file is the same whichever way its
runs were encoded: one writer, segments of a many-run file (the rows of an unfinished row
group move on to the next segment), or workers of ``--jobs N`` (a short run comes back as
its Arrow batches, :func:`stage` / :func:`staged`, or the short runs of a group of runs
converted together in one stream, :class:`GroupStage`, for the leading process to add to the
row group it fills; a longer run as the Parquet file of its own row groups).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from tbconvert.formats.parquet import columns as C
from tbconvert.formats.parquet import schema as S

# The most rows and Arrow bytes of a run that shares row groups with the runs around it.
RUN_ROWS = 1 << 16
RUN_BYTES = 8 << 20


class RunRows:
    """The row pieces of one run on their way into ``sink``: held while the run may still
    share its row group (:attr:`shared`), added to the sink as they come once it cannot."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.shared = True
        self.held: list[tuple[pa.RecordBatch, int]] = []   # (piece, its Arrow bytes)
        self._rows = self._bytes = 0

    def add(self, piece: pa.RecordBatch, size: int) -> None:
        if self.shared:
            self._rows += piece.num_rows
            self._bytes += size
            if self._rows <= RUN_ROWS and self._bytes <= RUN_BYTES:
                self.held.append((piece, size))
                return
            self.own()
        self.sink.add_piece(piece, size)

    def own(self) -> None:
        """The run is too long to share: the short runs before it end their row group."""
        if self.shared:
            self.shared = False
            self.sink.flush()
            self._give()

    def end(self, flush: bool, keep: bool = False) -> None:
        """The run is over: a short one joins the row group being filled (unless ``keep``:
        its pieces stay in :attr:`held`); a long one ends its last row group (``flush``) or
        leaves it to the sink's closing."""
        if self.shared:
            if not keep:
                self._give()
        elif flush:
            self.sink.flush()

    def _give(self) -> None:
        held, self.held = self.held, []
        for piece, size in held:
            self.sink.add_piece(piece, size)


def stage(path: Path, held: list[tuple[pa.RecordBatch, int]]) -> list[int]:
    """Write a short run's pieces to ``path`` (an Arrow stream, whose dictionaries may
    change from batch to batch); their sizes, which decide where row groups end, go with
    the run's description rather than being measured anew on the copies read back."""
    with pa.OSFile(str(path), "wb") as out, pa.ipc.new_stream(out, S.SCHEMA) as stream:
        for piece, _ in held:
            stream.write_batch(piece)
    return [size for _, size in held]


def staged(path: Path, sizes: list[int], offset: int):
    """``(piece, size)`` of a run :func:`stage` wrote, its series numbers moved up by
    ``offset`` (a run encoded on its own numbers its series from 0)."""
    with pa.OSFile(str(path), "rb") as source:    # (a short run: read whole)
        reader = pa.ipc.open_stream(source.read_buffer())
        if reader.schema != S.SCHEMA:
            raise ValueError(f"{path}: a staged run of another schema")
        k = 0
        for batch in reader:
            if k >= len(sizes):
                raise ValueError(f"{path}: more pieces than were staged")
            yield _moved(batch, offset), sizes[k]
            k += 1
        if k != len(sizes):
            raise ValueError(f"{path}: fewer pieces than were staged")


def _moved(batch: pa.RecordBatch, offset: int) -> pa.RecordBatch:
    """The batch's series numbers moved up by ``offset``."""
    if not offset:
        return batch
    column = S.SCHEMA.get_field_index("series")
    ids = C.to_numbers(batch.column(column)) + np.int32(offset)
    return batch.set_column(column, S.SCHEMA.field(column),
                            C.fixed(ids.astype(np.int32), pa.int32()))


class GroupStage:
    """The short runs of a group of runs converted by one task, staged one after another in
    one Arrow stream (a file each cost more than the run's encoding). It appears under its
    name once the group's runs are all in it (:meth:`finish`)."""

    def __init__(self, path: Path, tmp: Path) -> None:
        """``tmp``: where it is written until then."""
        self.path, self._tmp = Path(path), Path(tmp)
        self.name = self.path.name
        self._out = self._stream = None

    def add(self, held: list[tuple[pa.RecordBatch, int]]) -> list[int]:
        """:func:`stage` into the group's stream."""
        if self._stream is None:
            # (buffered: Arrow writes each message in several small writes)
            self._out = pa.BufferedOutputStream(pa.OSFile(str(self._tmp), "wb"), 1 << 20)
            self._stream = pa.ipc.new_stream(self._out, S.SCHEMA)
        for piece, _ in held:
            self._stream.write_batch(piece)
        return [size for _, size in held]

    def finish(self) -> None:
        if self._stream is not None:
            self._close()
            os.replace(self._tmp, self.path)

    def discard(self) -> None:
        try:
            self._close()
        finally:
            self._tmp.unlink(missing_ok=True)

    def _close(self) -> None:
        stream, out, self._stream, self._out = self._stream, self._out, None, None
        try:
            if stream is not None:
                stream.close()
        finally:
            if out is not None:
                out.close()


class GroupStaged:
    """A :class:`GroupStage` read back, run after run in the order they were staged."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with pa.OSFile(str(path), "rb") as source:    # (short runs: read whole)
            self._reader = pa.ipc.open_stream(source.read_buffer())
        if self._reader.schema != S.SCHEMA:
            raise ValueError(f"{path}: staged runs of another schema")

    def take(self, sizes: list[int], offset: int):
        """``(piece, size)`` of the next run, as :func:`staged` gives them."""
        for size in sizes:
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                raise ValueError(f"{self.path}: fewer pieces than were staged") from None
            yield _moved(batch, offset), size
