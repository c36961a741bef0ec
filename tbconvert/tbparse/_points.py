"""What a directory's points are kept as between tables: narrow columns and the cells
tables show, with what a table needs of a series (``take``, ``with_hidden``)."""

from __future__ import annotations

import numpy as np


class Scalars:
    """Scalar points of one tag, narrow: what a table needs of a ``ScalarSeries``."""

    __slots__ = ("steps", "values", "wall_times", "hidden")

    def __init__(self, steps, values, wall_times, hidden) -> None:
        self.steps, self.values, self.wall_times, self.hidden = steps, values, wall_times, hidden

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def hidden_count(self) -> int:
        return 0 if self.hidden is None else int(self.hidden.sum())

    def take(self, idx) -> "Scalars":
        return Scalars(self.steps[idx], self.values[idx], self.wall_times[idx],
                       None if self.hidden is None else self.hidden[idx])

    def with_hidden(self, hidden) -> "Scalars":
        return Scalars(self.steps, self.values, self.wall_times, hidden)


class Tensors:
    """Tensor or blob-sequence points of one tag, each as the array a table shows.

    ``parts`` are lists of read-only arrays: rows of the arrays the reader decoded in
    bulk (tensors of one shape share one array per block), or arrays of their own."""

    __slots__ = ("steps", "wall_times", "hidden", "parts")

    def __init__(self, steps, wall_times, hidden, parts: list) -> None:
        self.steps, self.wall_times, self.hidden, self.parts = steps, wall_times, hidden, parts

    def __len__(self) -> int:
        return len(self.steps)

    hidden_count = Scalars.hidden_count

    @property
    def tensors(self) -> list:
        return [a for part in self.parts for a in part]

    def take(self, idx) -> "Tensors":
        tensors = self.tensors
        return Tensors(self.steps[idx], self.wall_times[idx],
                       None if self.hidden is None else self.hidden[idx],
                       [[tensors[i] for i in np.asarray(idx).tolist()]])

    def with_hidden(self, hidden) -> "Tensors":
        return Tensors(self.steps, self.wall_times, hidden, self.parts)


def read_only(a: np.ndarray) -> np.ndarray:
    # Cells are shared by every table built from them: changed in place, they would change
    # the next table too.
    a.flags.writeable = False
    return a
