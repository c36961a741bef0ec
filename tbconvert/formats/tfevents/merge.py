"""Orders a run's entries in bounded memory: sorted runs spilled to temporary files, then merged.

Entries are buffered up to ``buffer_bytes``; a full buffer is sorted and
written to an unnamed temporary file beside the output. At the end the
sorted runs are merged a block at a time (never more than ``fan_in`` runs at
once; more runs are first merged into longer ones), so memory stays a small
multiple of ``buffer_bytes`` whatever the size of the run. When nothing was
spilled, the buffer is sorted in memory; both ways yield the same sequence.
"""

from __future__ import annotations

import struct
import tempfile

import numpy as np

from tbconvert.formats.tfevents.entries import COLUMN_BYTES, Entries

# Sorting a full buffer briefly holds about three times its size (joined, sorted, moved);
# 12 MiB keeps that near 40 MiB, with no loss of speed measured against 24 MiB.
BUFFER_BYTES = 12 << 20
FAN_IN = 16
# Entries handed on per step of the in-memory path.
SLICE_ENTRIES = 1 << 16

_HEAD = struct.Struct("<QQ")
_COLUMNS = (("key", np.float64), ("tag", np.int32), ("idx", np.int64), ("step", np.int64),
            ("wall", np.float64), ("kind", np.uint8))


class _SortedRun:
    """One sorted run in a temporary file, as blocks of at most ``block_bytes``."""

    def __init__(self, directory) -> None:
        self.file = tempfile.TemporaryFile(dir=directory)

    def append(self, e: Entries, block_bytes: int) -> None:
        f = self.file
        a = 0
        cost = np.cumsum(e.lengths + COLUMN_BYTES)
        while a < len(e):
            base = int(cost[a - 1]) if a else 0
            b = max(a + 1, int(np.searchsorted(cost, base + block_bytes, side="right")))
            part = e.slice(a, b)
            f.write(_HEAD.pack(len(part), len(part.data)))
            for name, dtype in _COLUMNS:
                f.write(np.ascontiguousarray(getattr(part, name), dtype).tobytes())
            f.write(np.ascontiguousarray(part.offs).tobytes())
            f.write(memoryview(np.ascontiguousarray(part.data)))   # (no copy of a large value)
            a = b

    def append_pieces(self, columns: tuple, pieces: list) -> None:
        """One entry (its ``columns``, in :data:`_COLUMNS`' order) whose data is ``pieces``
        one after the other, written as they are."""
        f = self.file
        size = sum(len(memoryview(p).cast("B")) for p in pieces)
        f.write(_HEAD.pack(1, size))
        for value, (_, dtype) in zip(columns, _COLUMNS, strict=True):
            f.write(np.array([value], dtype).tobytes())
        f.write(np.array([0, size], np.int64).tobytes())
        for p in pieces:
            f.write(p)

    def rewind(self) -> None:
        self.file.seek(0)

    def next_block(self) -> Entries | None:
        f = self.file
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return None
        n, nbytes = _HEAD.unpack(head)
        cols = {}
        for name, dtype in _COLUMNS:
            cols[name] = np.frombuffer(f.read(n * np.dtype(dtype).itemsize), dtype)
        offs = np.frombuffer(f.read((n + 1) * 8), np.int64)
        data = np.frombuffer(f.read(nbytes), np.uint8)
        return Entries(**cols, offs=offs, data=data)

    def close(self) -> None:
        self.file.close()


class Sorter:
    """Collects entries in any order and hands them back sorted, in pieces."""

    def __init__(self, directory, buffer_bytes: int = BUFFER_BYTES, fan_in: int = FAN_IN) -> None:
        self.directory = directory
        self.buffer_bytes = buffer_bytes
        self.fan_in = max(2, fan_in)
        self.block_bytes = max(1, buffer_bytes // (2 * self.fan_in))
        self.pending: list[Entries] = []
        self.pending_bytes = 0
        self.runs: list[_SortedRun] = []
        self.peak_bytes = 0      # most bytes of entries held at once (a test checks the cap)
        self.total_bytes = 0
        self.spills = 0

    def _held(self, extra: int) -> None:
        self.peak_bytes = max(self.peak_bytes, self.pending_bytes + extra)

    def add(self, e: Entries) -> None:
        if not len(e):
            return
        self.pending.append(e)
        self.pending_bytes += e.nbytes
        self.total_bytes += e.nbytes
        self._held(0)
        if self.pending_bytes >= self.buffer_bytes:
            self._spill()

    def add_pieces(self, key: float, tag: int, idx: int, step: int, wall: float, kind: int,
                   pieces: list) -> None:
        """One entry whose data (a large value) is ``pieces``: a sorted run of its own,
        written from them, so that they are never joined in memory."""
        size = sum(len(memoryview(p).cast("B")) for p in pieces)
        if self.pending:
            self._spill()
        run = _SortedRun(self.directory)
        run.append_pieces((key, tag, idx, step, wall, kind), pieces)
        self.runs.append(run)
        self.spills += 1
        self.total_bytes += size + COLUMN_BYTES

    def _sorted_pending(self) -> Entries:
        parts = self.pending
        merged = Entries.concat(parts)
        self._held(merged.nbytes if len(parts) > 1 else 0)
        self.pending, self.pending_bytes = [], 0
        del parts            # the joined copy is all that is left to sort
        out = merged.sorted()
        self._held(merged.nbytes + (out.nbytes if out is not merged else 0))
        return out

    def _spill(self) -> None:
        run = _SortedRun(self.directory)
        run.append(self._sorted_pending(), self.block_bytes)
        self.runs.append(run)
        self.spills += 1

    def drain(self):
        """Yield every entry in order, as sorted pieces; the sorter is empty afterwards."""
        if not self.runs:
            if self.pending:
                e = self._sorted_pending()
                for a in range(0, len(e), SLICE_ENTRIES):
                    yield e.slice(a, min(a + SLICE_ENTRIES, len(e)))
            return
        if self.pending:
            self._spill()
        try:
            while len(self.runs) > self.fan_in:
                group, self.runs = self.runs[:self.fan_in], self.runs[self.fan_in:]
                longer = _SortedRun(self.directory)
                for piece in self._merge(group):
                    longer.append(piece, self.block_bytes)
                self.runs.append(longer)
            yield from self._merge(self.runs)
        finally:
            for run in self.runs:
                run.close()
            self.runs = []

    def _merge(self, runs: list[_SortedRun]):
        for run in runs:
            run.rewind()
        blocks = [run.next_block() for run in runs]
        live = [(r, b) for r, b in zip(runs, blocks, strict=True) if b is not None and len(b)]
        try:
            while live:
                held = sum(b.nbytes for _, b in live)
                # Everything up to the smallest last entry of the loaded blocks is final.
                lasts = [(float(b.key[-1]), int(b.tag[-1]), int(b.idx[-1])) for _, b in live]
                bound = min(lasts)
                taken, rest = [], []
                for run, block in live:
                    k = block.not_after(*bound)
                    if k:
                        taken.append(block.slice(0, k))
                    block = block.slice(k, len(block)) if k < len(block) else run.next_block()
                    if block is not None and len(block):
                        rest.append((run, block))
                    else:
                        run.close()
                piece = Entries.concat(taken)
                # A piece taken from one run is in order already.
                out = piece if len(taken) == 1 else piece.sorted()
                self._held(held + piece.nbytes + (out.nbytes if out is not piece else 0))
                live = rest
                yield out
        finally:
            for run in runs:
                run.close()
