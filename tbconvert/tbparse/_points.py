"""What a directory's points are kept as between tables: narrow columns and the cells
tables show, with what a table needs of a series (``take``, ``with_hidden``).

Integer columns (steps, read positions) are packed: a column that grows by the
same amount at every point, as steps and the positions of an interleaved tag
nearly always do, is three numbers; any other is kept in 32 bits where it fits.
"""

from __future__ import annotations

import numpy as np

_INT32 = 1 << 31


class Progression:
    """``start, start + stride, ...``: ``n`` integers kept as three numbers."""

    __slots__ = ("n", "start", "stride")

    def __init__(self, start: int, stride: int, n: int) -> None:
        self.start, self.stride, self.n = start, stride, n

    def __len__(self) -> int:
        return self.n

    def array(self) -> np.ndarray:
        out = np.arange(self.n, dtype=np.int64)
        out *= self.stride
        out += self.start
        return out


def pack(a: np.ndarray):
    """An integer column as a :class:`Progression` where it is one, else in 32 bits where
    it fits."""
    n = len(a)
    if n > 2 and a.dtype.kind in "iu":
        start, stride = int(a[0]), int(a[1]) - int(a[0])
        if int(a[-1]) == start + stride * (n - 1) and bool((np.diff(a) == stride).all()):
            return Progression(start, stride, n)
    if a.dtype == np.int64 and n and -_INT32 <= a.min() and a.max() < _INT32:
        return a.astype(np.int32)
    return a


def unpack(column) -> np.ndarray:
    return column.array() if isinstance(column, Progression) else column


class Scalars:
    """Scalar points of one tag, narrow: what a table needs of a ``ScalarSeries``."""

    __slots__ = ("_steps", "hidden", "values", "wall_times")

    def __init__(self, steps, values, wall_times, hidden) -> None:
        self._steps, self.values, self.wall_times, self.hidden = steps, values, wall_times, hidden

    @property
    def steps(self) -> np.ndarray:
        return unpack(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def hidden_count(self) -> int:
        return 0 if self.hidden is None else int(self.hidden.sum())

    def take(self, idx) -> Scalars:
        return Scalars(self.steps[idx], self.values[idx], self.wall_times[idx],
                       None if self.hidden is None else self.hidden[idx])

    def with_hidden(self, hidden) -> Scalars:
        return Scalars(self._steps, self.values, self.wall_times, hidden)


class Tensors:
    """Tensor or blob-sequence points of one tag, each as the array a table shows.

    ``parts`` are lists of read-only arrays: rows of the arrays the reader decoded in
    bulk (tensors of one shape share one array per block), or arrays of their own."""

    __slots__ = ("_steps", "hidden", "parts", "wall_times")

    def __init__(self, steps, wall_times, hidden, parts: list) -> None:
        self._steps, self.wall_times, self.hidden, self.parts = steps, wall_times, hidden, parts

    steps = Scalars.steps
    __len__ = Scalars.__len__
    hidden_count = Scalars.hidden_count

    @property
    def tensors(self) -> list:
        return [a for part in self.parts for a in part]

    def take(self, idx) -> Tensors:
        tensors = self.tensors
        return Tensors(self.steps[idx], self.wall_times[idx],
                       None if self.hidden is None else self.hidden[idx],
                       [[tensors[i] for i in np.asarray(idx).tolist()]])

    def with_hidden(self, hidden) -> Tensors:
        return Tensors(self._steps, self.wall_times, hidden, self.parts)


def read_only(a: np.ndarray) -> np.ndarray:
    # Cells are shared by every table built from them: changed in place, they would change
    # the next table too.
    a.flags.writeable = False
    return a
