"""Columns of a long series kept in a temporary file instead of memory.

A scalars line of millions of points would cost gigabytes held as Python
numbers and still hundreds of megabytes as arrays. Reading such a line, and
collecting one for writing, puts its columns here piece by piece and reads
them back a block at a time. The file is anonymous (unlinked at once), so a
killed process leaves nothing behind.
"""

from __future__ import annotations

import numpy as np

from tbconvert.arrayfile import ArrayFile


def series_file() -> ArrayFile:
    """A temporary file for the columns of long series."""
    return ArrayFile("tbconvert-series-")


class Column:
    """One array written to an :class:`~tbconvert.arrayfile.ArrayFile` in pieces (other arrays' pieces may lie
    between them) and read back a range at a time."""

    def __init__(self, spill: ArrayFile, dtype) -> None:
        self.spill = spill
        self.dtype = np.dtype(dtype)
        self.pieces: list[tuple[int, int]] = []     # (where, how many values)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def add(self, arr: np.ndarray) -> None:
        if len(arr):
            self.pieces.append((self.spill.put(arr.astype(self.dtype, copy=False)), len(arr)))
            self.n += len(arr)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Values ``start`` to ``stop`` (a block, never the whole of a long column)."""
        parts, first = [], 0
        for at, count in self.pieces:
            lo, hi = max(start, first), min(stop, first + count)
            if lo < hi:
                parts.append(self.spill.get(at + (lo - first) * self.dtype.itemsize,
                                            self.dtype, hi - lo))
            first += count
            if first >= stop:
                break
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, self.dtype)


class MeasuredColumn(Column):
    """A :class:`Column` that also keeps what a reader asks of the whole before reading
    it back: its least finite value (wall times: the run's start) and whether every value
    is a float32 (scalar values: the series' dtype)."""

    def __init__(self, spill: ArrayFile, dtype) -> None:
        super().__init__(spill, dtype)
        self.finite_min: float | None = None
        self.float32_exact = True

    def add(self, arr: np.ndarray) -> None:
        super().add(arr)
        if self.dtype.kind != "f" or not len(arr):
            return
        finite = arr[np.isfinite(arr)]
        if len(finite):
            low = float(finite.min())
            self.finite_min = low if self.finite_min is None else min(self.finite_min, low)
        if self.float32_exact:
            with np.errstate(over="ignore", invalid="ignore"):
                back = arr.astype(np.float32).astype(np.float64)
            self.float32_exact = np.array_equal(back, arr, equal_nan=True)
