"""Columns of a long series kept in a temporary file instead of memory.

A scalars line of millions of points would cost gigabytes held as Python
numbers and still hundreds of megabytes as arrays. Reading such a line, and
collecting one for writing, puts its columns here piece by piece and reads
them back a block at a time. The file is anonymous (unlinked at once), so a
killed process leaves nothing behind.
"""

from __future__ import annotations

import tempfile

import numpy as np

from tbconvert.errors import OutputError


class Spill:
    """An anonymous temporary file of arrays, appended to and read back by place."""

    def __init__(self) -> None:
        self._file = None

    def put(self, arr: np.ndarray) -> int:
        """Append ``arr``'s bytes; returns where they start."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="tbconvert-series-")
            self._file.seek(0, 2)
            at = self._file.tell()
            self._file.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
        except OSError as exc:
            from tbconvert.output import describe_os_error
            raise OutputError(describe_os_error(
                exc, f"temporary file in {tempfile.gettempdir()}")) from None
        return at

    def get(self, at: int, dtype, count: int) -> np.ndarray:
        arr = np.empty(count, dtype)
        self._file.seek(at)
        if self._file.readinto(memoryview(arr).cast("B")) != arr.nbytes:
            # (someone else truncated the temporary file)
            raise OutputError(f"temporary file in {tempfile.gettempdir()}: cut short while "
                              "it was read back")
        return arr

    def size(self) -> int:
        """Where the next array would start."""
        if self._file is None:
            return 0
        return self._file.seek(0, 2)

    def truncate(self, size: int = 0) -> None:
        """Forget the arrays put from ``size`` on (no column reads them any more)."""
        if self._file is not None:
            self._file.truncate(size)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Column:
    """One array written to a :class:`Spill` in pieces (other arrays' pieces may lie
    between them) and read back a range at a time."""

    def __init__(self, spill: Spill, dtype) -> None:
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

    def __init__(self, spill: Spill, dtype) -> None:
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
