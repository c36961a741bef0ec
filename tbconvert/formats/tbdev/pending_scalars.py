"""A scalar series collected for its ``scalars.json`` line, and that line written in pieces.

The writer merges a series' chunks into one line. Held as arrays until the
line is written, and then as Python numbers and one string, a series of 25
million points cost close to 2 GiB. Here its columns stay in memory only up to
the writer's budget, beyond which they go to a temporary file, and the line is
written a block of numbers at a time, each block spelled by ``json`` as it
spells the whole list: the bytes are those of one ``json.dumps`` of the line.
"""

from __future__ import annotations

import json

import numpy as np

from tbconvert.arrayfile import ArrayFile
from tbconvert.formats.tbdev import export_dir
from tbconvert.formats.tbdev.spill import Column

# How many numbers are spelled at a time (a few megabytes of Python numbers and text).
WRITE_BLOCK_POINTS = 1 << 17
# A line's points in the key order ``json.dumps(sort_keys=True)`` gives them.
_KEYS = ("steps", "values", "wall_times")
_EMPTY_POINTS = '{"points": {"steps": [], "values": [], "wall_times": []}'


class PendingScalars:
    """The three columns of one line: the newest chunks in memory, older ones spilled."""

    def __init__(self) -> None:
        self._held: dict[str, list[np.ndarray]] = {key: [] for key in _KEYS}
        self._spilled: dict[str, Column] | None = None
        self.held_bytes = 0

    def add(self, steps: np.ndarray, values: np.ndarray, wall_times: np.ndarray) -> None:
        for key, arr in zip(_KEYS, (steps, values, wall_times), strict=True):
            self._held[key].append(arr)
            self.held_bytes += arr.nbytes

    def spill(self, spill: ArrayFile) -> None:
        """Move the chunks held in memory to ``spill``."""
        if self._spilled is None:
            self._spilled = {"steps": Column(spill, np.int64), "values": Column(spill, np.float64),
                             "wall_times": Column(spill, np.float64)}
        for key, arrays in self._held.items():
            if arrays:
                self._spilled[key].add(np.concatenate(arrays))
            arrays.clear()
        self.held_bytes = 0

    def _blocks(self, key: str):
        column = self._spilled and self._spilled[key]
        if column:
            for start in range(0, len(column), WRITE_BLOCK_POINTS):
                yield column.read(start, start + WRITE_BLOCK_POINTS)
        for arr in self._held[key]:
            for start in range(0, len(arr), WRITE_BLOCK_POINTS):
                yield arr[start:start + WRITE_BLOCK_POINTS]

    def write_line(self, write, run: str, summary_metadata: str, tag: str) -> None:
        """Write the line with ``write`` (text), as ``export_dir.dumps_line`` spells it."""
        line = export_dir.dumps_line({"points": {key: [] for key in _KEYS}, "run": run,
                                      "summary_metadata": summary_metadata, "tag": tag})
        if not line.startswith(_EMPTY_POINTS):
            raise AssertionError(f"json spells the points as {line[:80]!r}")
        opening = '{"points": {'
        for key in _KEYS:
            write(f'{opening}"{key}": [')
            opening = "], "
            first = True
            for block in self._blocks(key):
                if len(block):
                    # json spells each number of a list alone: a block's spelling without
                    # its brackets is that block's part of the whole list's
                    write(("" if first else ", ") + json.dumps(block.tolist())[1:-1])
                    first = False
        write("]}" + line[len(_EMPTY_POINTS):])
