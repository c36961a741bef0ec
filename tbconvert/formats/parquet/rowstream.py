"""A Parquet file's rows as one stream across its row groups: the rows tbconvert wrote as one
row group may lie in several row groups of a file another tool wrote again, or in part of one."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import pyarrow as pa

from tbconvert.errors import CorruptDataError


class Rows:
    """The rows of a file's row groups as one stream, read forward from any row (the rows of
    a written row group may lie in several of a rewritten file's row groups, or in part of
    one)."""

    def __init__(self, archive, columns: list[str]) -> None:
        self._archive = archive
        self._columns = columns
        self._starts = [0]     # where each row group starts, as its footer says
        for g in range(archive.group_count):
            self._starts.append(self._starts[-1] + archive.group_rows(g))
        self.total = self._starts[-1]
        self._pos: int | None = None    # the row the next batch starts at (None: seek)
        self._group = 0
        self._it = None
        self._head = None     # the rest of a batch partly given

    def read(self, start: int, n: int) -> Iterator[pa.RecordBatch]:
        """The ``n`` rows from row ``start`` (fewer where the file ends), as batches."""
        try:
            if self._pos != start:
                self._seek(start)
            while n > 0:
                batch = self._next()
                if batch is None:
                    return
                if len(batch) > n:
                    self._head, batch = batch.slice(n), batch.slice(0, n)
                self._pos += len(batch)
                n -= len(batch)
                yield batch
        except BaseException:
            self._pos = None      # where a failed read stopped is not known: seek again
            raise

    def _seek(self, start: int) -> None:
        self._group = max(bisect.bisect_right(self._starts, start) - 1, 0)
        self._it = self._head = None
        self._pos = self._starts[self._group]
        while self._pos < start:
            batch = self._next()
            if batch is None:
                return
            skip = min(start - self._pos, len(batch))
            if skip < len(batch):
                self._head = batch.slice(skip)
            self._pos += skip

    def _next(self) -> pa.RecordBatch | None:
        if self._head is not None:
            batch, self._head = self._head, None
            return batch
        while self._group < len(self._starts) - 1:
            if self._it is None:
                self._it = iter(self._archive._batches(self._group, self._columns))
            batch = next(self._it, None)
            if batch is not None:
                return batch
            self._group += 1
            self._it = None
            if self._pos != self._starts[self._group]:
                # rows would be counted from the wrong place from here on
                raise CorruptDataError(f"row group {self._group - 1} holds other than the "
                                       "rows its footer says")
        return None
