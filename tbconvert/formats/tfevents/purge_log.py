"""A run's purges as the restart rule finds them (:class:`PurgeLog`), and each tag's hidden
mask made from them as its series is built (:class:`PurgesByTag`, :class:`Purges`).

A run of old files whose steps go back makes a purge every few events (1.8 million in 20
million points), so they are kept as columns, never as a Python object each.
"""

from __future__ import annotations

from array import array
from operator import itemgetter

import numpy as np

from tbconvert.arrayfile import ArrayFile

seq_of = itemgetter(0)   # a purge's read position, of its ``(seq, step, tags)``


# Purges held in memory before they go to the log's temporary file, as one segment.
SEGMENT = 1 << 16


class PurgeLog:
    """A run's purges, ``(seq, step, tags)`` (``tags``: a frozenset, or None for every tag),
    as 20 bytes each: as tuples with a set each they took 1 GiB. Each distinct set of tags
    is kept once and named by its set id (0: None). Past :data:`SEGMENT` purges they go to
    a temporary file a segment at a time, as a run's purges grow with it (1.8 million,
    36 MB, in 20 million points whose steps go back every few events)."""

    def __init__(self) -> None:
        self._sets: list = [None]
        self._set_ids: dict = {None: 0}
        self._file: ArrayFile | None = None
        # on file: (where, rows, rows of each set id) of each segment
        self._segments: list[tuple[int, int, np.ndarray]] = []
        self._spilled = 0
        self._last_seq: int | None = None
        self.in_order = True     # each purge read after the one before
        self._new_tail()

    def _new_tail(self) -> None:
        self._seq = array("q")
        self._step = array("q")
        self._set = array("i")       # set ids

    def set_id(self, tags: frozenset | None) -> int:
        sid = self._set_ids.get(tags)
        if sid is None:
            sid = self._set_ids[tags] = len(self._sets)
            self._sets.append(tags)
        return sid

    def append(self, purge) -> None:
        seq, step, tags = purge
        sid = self.set_id(tags)
        if self._last_seq is not None and seq <= self._last_seq:
            self.in_order = False
        self._last_seq = seq
        self._seq.append(seq)
        self._step.append(step)
        self._set.append(sid)
        if len(self._seq) >= SEGMENT:
            self._spill()

    def extend(self, purges) -> None:
        for purge in purges:
            self.append(purge)

    def extend_columns(self, seqs: np.ndarray, steps: np.ndarray, sids: np.ndarray) -> None:
        """Purges given as columns, ``sids`` from :meth:`set_id`."""
        if not len(seqs):
            return
        seqs = np.ascontiguousarray(seqs, dtype=np.int64)
        if (self._last_seq is not None and seqs[0] <= self._last_seq) or \
                (len(seqs) > 1 and not (seqs[1:] > seqs[:-1]).all()):
            self.in_order = False
        self._last_seq = int(seqs[-1])
        self._seq.frombytes(seqs.tobytes())
        self._step.frombytes(np.ascontiguousarray(steps, dtype=np.int64).tobytes())
        self._set.frombytes(np.ascontiguousarray(sids, dtype=np.int32).tobytes())
        if len(self._seq) >= SEGMENT:
            self._spill()

    def extend_shifted(self, other: PurgeLog, offset: int) -> None:
        """``other``'s purges, each read ``offset`` later."""
        ids = np.array([self.set_id(tags) for tags in other._sets], dtype=np.int32)
        for k in range(other._segment_count()):
            seq, step, sid = other._segment(k)
            self.extend_columns(seq + offset, step, ids[sid])

    def _spill(self) -> None:
        """The purges in memory to the file as a segment, its rows grouped by set id (in
        their order within each set), each row with its place in the segment: a tag's
        purges are read back without reading those of other tags."""
        if self._file is None:
            self._file = ArrayFile("tbconvert-purges-")
        seq, step, sid = self._tail()
        by_set = np.argsort(sid, kind="stable")
        at = self._file.put(seq[by_set])
        self._file.put(step[by_set])
        self._file.put(by_set.astype(np.int32))
        self._segments.append((at, len(seq), np.bincount(sid)))
        self._spilled += len(seq)
        self._new_tail()

    def _tail(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(np.frombuffer(a, dtype=t) if len(a) else np.zeros(0, t)
                     for a, t in ((self._seq, np.int64), (self._step, np.int64),
                                  (self._set, np.int32)))

    def _segment_count(self) -> int:
        return len(self._segments) + 1

    def _segment(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(seqs, steps, set ids)`` of segment ``k`` in the order logged, the last one the
        purges in memory (views of them: the log takes no more purges while they are held)."""
        if k == len(self._segments):
            return self._tail()
        at, n, counts = self._segments[k]
        get = self._file.get
        place = get(at + 16 * n, np.int32, n)
        seq, step = np.empty(n, np.int64), np.empty(n, np.int64)
        sid = np.empty(n, np.int32)
        seq[place] = get(at, np.int64, n)
        step[place] = get(at + 8 * n, np.int64, n)
        sid[place] = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        return seq, step, sid

    def _rows_of(self, k: int, sids: list[int], wanted: np.ndarray):
        """``(seqs, steps)`` of segment ``k``'s purges of set ids ``sids`` (``wanted``: the
        same as a mask of set ids), in the order logged."""
        if k == len(self._segments):
            seq, step, sid = self._tail()
            rows = wanted[sid]
            return seq[rows], step[rows]
        at, n, counts = self._segments[k]
        starts = np.cumsum(counts) - counts
        get = self._file.get
        parts = [(int(starts[s]), int(counts[s])) for s in sids if s < len(counts) and counts[s]]
        seq = np.concatenate([get(at + 8 * a, np.int64, c) for a, c in parts])
        step = np.concatenate([get(at + 8 * (n + a), np.int64, c) for a, c in parts])
        if len(parts) > 1:
            place = np.concatenate([get(at + 16 * n + 4 * a, np.int32, c) for a, c in parts])
            order = np.argsort(place, kind="stable")
            seq, step = seq[order], step[order]
        return seq, step

    def _set_rows(self, k: int) -> np.ndarray:
        """Rows of each set id in segment ``k`` (shorter where the last ones have none)."""
        if k == len(self._segments):
            return np.bincount(self._tail()[2])
        return self._segments[k][2]

    def __len__(self) -> int:
        return self._spilled + len(self._seq)

    def __iter__(self):
        sets = self._sets
        for k in range(self._segment_count()):
            columns = [c.tolist() for c in self._segment(k)]
            for seq, step, sid in zip(*columns, strict=True):
                yield seq, step, sets[sid]

    def shifted(self, offset: int):
        """The purges, each read ``offset`` later."""
        for seq, step, tags in self:
            yield seq + offset, step, tags

    def tag_sets(self) -> list:
        """The distinct sets of tags, by set id."""
        return self._sets

    def sorted(self) -> PurgeLog:
        """The log in read order: itself, or a sorted copy (made in memory at once)."""
        if self.in_order:
            return self
        parts = [self._segment(k) for k in range(self._segment_count())]
        seq, step, sid = (np.concatenate([p[i] for p in parts]) for i in range(3))
        del parts
        order = np.argsort(seq, kind="stable")
        out = PurgeLog()
        out._sets, out._set_ids = self._sets, self._set_ids
        for a in range(0, len(order), SEGMENT):
            rows = order[a:a + SEGMENT]
            out.extend_columns(seq[rows], step[rows], sid[rows])
        return out

    def close(self) -> None:
        """Let the temporary file go (the log is read no more)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __getstate__(self):
        # (a worker process hands its runs' logs over in memory: its file stays its own)
        parts = [self._segment(k) for k in range(self._segment_count())]
        return {"sets": self._sets,
                "columns": [np.concatenate([p[i] for p in parts]) for i in range(3)]}

    def __setstate__(self, state) -> None:
        self.__init__()
        for tags in state["sets"]:
            self.set_id(tags)
        seq, step, sid = state["columns"]
        for a in range(0, len(seq), SEGMENT):
            self.extend_columns(seq[a:a + SEGMENT], step[a:a + SEGMENT], sid[a:a + SEGMENT])


class PurgesByTag:
    """Each tag's :class:`Purges`, made from a run's :class:`PurgeLog` as the tag's series is
    built, a segment of the log at a time: only the tag's own rows are in memory, for one
    tag at a time (every tag's purges copied out of the log at once, then copied and sorted
    again for the tag, took 90 MB beside 1.8 million purges). Those of the tags that no
    purge names are made once and shared."""

    def __init__(self, log: PurgeLog) -> None:
        self._log = log = log.sorted()
        sets = log.tag_sets()
        self._sets = len(sets)
        self._counts = []
        for k in range(log._segment_count()):
            counts = np.zeros(len(sets), dtype=np.int64)
            rows = log._set_rows(k)
            counts[:len(rows)] = rows
            self._counts.append(counts)
        self._named: dict[str, list[int]] = {}
        for sid in range(1, len(sets)):
            for tag in sets[sid]:
                self._named.setdefault(tag, []).append(sid)
        self._shared: Purges | None = None

    def __call__(self, tag: str) -> Purges:
        named = self._named.get(tag)
        if named is not None:
            return self._of([0, *named])
        if self._shared is None:
            self._shared = self._of([0])
        return self._shared

    def _of(self, sids: list[int]) -> Purges:
        """The purges of set ids ``sids``: the segments are read last first, each one's
        steps taking the suffix minimum of the ones after it."""
        taken = [int(c[sids].sum()) for c in self._counts]
        total = sum(taken)
        seq_out = np.empty(total, dtype=np.int64)
        min_out = np.empty(total, dtype=np.int64)
        wanted = np.zeros(self._sets, dtype=bool)
        wanted[sids] = True
        end, after = total, None
        for k in reversed(range(len(taken))):
            if not taken[k]:
                continue
            seq, step = self._log._rows_of(k, sids, wanted)
            start = end - taken[k]
            seq_out[start:end] = seq
            mins = min_out[start:end]
            np.minimum.accumulate(step[::-1], out=mins[::-1])
            if after is not None:
                np.minimum(mins, after, out=mins)
            after = int(mins[0])
            end = start
        return Purges(seq_out, min_out)

    def close(self) -> None:
        self._log.close()


class Purges:
    """The purges that apply to one tag, as arrays for a vectorised hidden mask.

    A point is hidden when some purge read after it has a step at or below the
    point's step: with purges sorted by read position, that is a suffix minimum.
    """

    def __init__(self, seq: np.ndarray, min_step: np.ndarray) -> None:
        """``seq`` sorted; ``min_step``: the least step of the purges from each on."""
        self.seq = seq
        self.min_step = min_step

    def hidden(self, seq: np.ndarray, steps: np.ndarray):
        if not len(self.seq):
            return None
        idx = np.searchsorted(self.seq, seq, side="right")
        later = idx < len(self.seq)
        hidden = np.zeros(len(seq), dtype=bool)
        hidden[later] = steps[later] >= self.min_step[idx[later]]
        return hidden
