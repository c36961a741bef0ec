"""Numbers of many tags held from block to block before they are stored as one batch.

A run of 100,000 tags, each logged once a step, has one point or two of each tag in a
block: stored block by block, each tag got a piece per block, and the keys of those pieces
(a list entry per tag and block, and a row index in the batch) outgrew the points
themselves (8 million points: 150 MiB of bookkeeping). A tag's numbers of successive
blocks are therefore gathered in a *group* per dtype code, and the group is stored as one
:class:`~tbconvert.formats.tfevents.spill.Batch` when all groups together hold more than
:data:`HOLD_BYTES` (the largest first) or the file ends.

A group's key is reserved in the store when it opens, so that a tag's list of pieces keeps
read order: the key is listed once, when the tag first gets rows in the group. A tag whose
later points go elsewhere (another piece) must get no more rows in the group, which is then
stored (:meth:`HeldBatches.close`).
"""

from __future__ import annotations

import numpy as np

from tbconvert.formats.tfevents.spill import Batch

# The bytes all groups hold together (their columns, a row index each) before the largest is
# stored; storing concatenates and sorts, which takes about as much again for a moment.
HOLD_BYTES = 16 << 20


class _Group:
    __slots__ = ("key", "parts", "nbytes")

    def __init__(self, key: int) -> None:
        self.key = key
        self.parts: list = []   # (seq, steps, walls, values, rows), each sorted by (row, seq)
        self.nbytes = 0


class HeldBatches:
    """The open groups of a run's store, by dtype code."""

    def __init__(self, store, limit: int | None = None) -> None:
        self.store = store
        self.limit = HOLD_BYTES if limit is None else limit
        self._groups: dict[int, _Group] = {}
        self.open_keys: set[int] = set()
        self.stored: set[int] = set()    # keys of the batches stored (see RunAssembler._pieces)
        self._nbytes = 0

    def add(self, code: int, seq, steps, walls, values, rows) -> int:
        """Hold a block's rows of one dtype ``code`` (sorted by row, then read position; every
        row read after the group's earlier ones); the key of the batch they will be in."""
        group = self._groups.get(code)
        if group is None:
            group = self._groups[code] = _Group(self.store.reserve())
            self.open_keys.add(group.key)
        rows = rows.astype(np.int32)
        size = seq.nbytes + steps.nbytes + walls.nbytes + values.nbytes + rows.nbytes
        group.parts.append((seq, steps, walls, values, rows))
        group.nbytes += size
        self._nbytes += size
        key = group.key
        while self._nbytes > self.limit:
            largest = max(self._groups.values(), key=lambda g: g.nbytes)
            self.close(largest.key)
            # as big as the store's budget: held there too, it would double what is held
            self.store.spill()
        return key

    def close(self, key: int) -> None:
        """Store the group of ``key`` (still open)."""
        code = next(c for c, g in self._groups.items() if g.key == key)
        group = self._groups.pop(code)
        self.open_keys.discard(key)
        self._nbytes -= group.nbytes
        self._store(code, group)

    def close_all(self) -> None:
        for key in list(self.open_keys):
            self.close(key)

    def _store(self, code: int, group: _Group) -> None:
        parts, group.parts = group.parts, []
        if len(parts) == 1:
            seq, steps, walls, values, rows = parts[0]
        else:
            # each part is sorted by row and parts come in read order: a stable sort by row
            # gives each tag's rows in read order (a merge of sorted runs, which is quick)
            parts = [list(p) for p in parts]
            rows = np.concatenate([p.pop() for p in parts])
            order = np.argsort(rows, kind="stable")
            rows = rows[order]
            cols = []
            for i in range(4):
                # column by column, each let go once joined: the group is not held twice
                col = np.concatenate([p[i] for p in parts])
                for p in parts:
                    p[i] = None
                cols.append(col[order])
                del col
            del order
            seq, steps, walls, values = cols
        starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
        # kept as long as the run is read: 32 bits a tag of the batch
        uniq = rows[starts]
        bounds = np.append(starts, len(rows)).astype(np.int32)
        self.stored.add(group.key)
        self.store.put_batch(Batch(uniq, bounds, (seq, steps, walls, values), 3,
                                   ("values", code)),
                             seq.nbytes * 3 + values.nbytes + 48 * len(uniq), key=group.key)
