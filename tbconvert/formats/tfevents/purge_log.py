"""A run's purges as the restart rule finds them (:class:`PurgeLog`), and each tag's hidden
mask made from them as its series is built (:class:`PurgesByTag`, :class:`Purges`).

A run of old files whose steps go back makes a purge every few events (1.8 million in 20
million points), so they are kept as columns, never as a Python object each.
"""

from __future__ import annotations

from array import array
from operator import itemgetter

import numpy as np

seq_of = itemgetter(0)   # a purge's read position, of its ``(seq, step, tags)``


class PurgeLog:
    """A run's purges, ``(seq, step, tags)`` (``tags``: a frozenset, or None for every tag),
    kept as 20 bytes each: as tuples with a set each they took 1 GiB. Each distinct set of
    tags is kept once and named by its set id (0: None)."""

    def __init__(self) -> None:
        self._seq = array("q")
        self._step = array("q")
        self._set = array("i")       # index in _sets
        self._sets: list = [None]
        self._set_ids: dict = {None: 0}

    def set_id(self, tags: frozenset | None) -> int:
        sid = self._set_ids.get(tags)
        if sid is None:
            sid = self._set_ids[tags] = len(self._sets)
            self._sets.append(tags)
        return sid

    def append(self, purge) -> None:
        seq, step, tags = purge
        sid = self.set_id(tags)
        self._seq.append(seq)
        self._step.append(step)
        self._set.append(sid)

    def extend(self, purges) -> None:
        for purge in purges:
            self.append(purge)

    def extend_columns(self, seqs: np.ndarray, steps: np.ndarray, sids: np.ndarray) -> None:
        """Purges given as columns, ``sids`` from :meth:`set_id`."""
        self._seq.frombytes(np.ascontiguousarray(seqs, dtype=np.int64).tobytes())
        self._step.frombytes(np.ascontiguousarray(steps, dtype=np.int64).tobytes())
        self._set.frombytes(np.ascontiguousarray(sids, dtype=np.int32).tobytes())

    def extend_shifted(self, other: PurgeLog, offset: int) -> None:
        """``other``'s purges, each read ``offset`` later."""
        seq, step, sid = other._arrays()
        ids = np.array([self.set_id(tags) for tags in other._sets], dtype=np.int32)
        self.extend_columns(seq + offset, step, ids[sid])

    def __len__(self) -> int:
        return len(self._seq)

    def __iter__(self):
        sets = self._sets
        for seq, step, sid in zip(self._seq, self._step, self._set, strict=True):
            yield seq, step, sets[sid]

    def shifted(self, offset: int):
        """The purges, each read ``offset`` later."""
        for seq, step, tags in self:
            yield seq + offset, step, tags

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(np.frombuffer(a, dtype=t) if len(a) else np.zeros(0, t)
                     for a, t in ((self._seq, np.int64), (self._step, np.int64),
                                  (self._set, np.int32)))

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(seqs, steps, set ids)`` sorted by read position: views of the log itself when
        its purges were found in that order (as the restart rule and :meth:`joined
        <tbconvert.formats.tfevents.assemble.RunAssembler.joined>` log them), sorted copies
        otherwise. The log takes no more purges while views of it are held."""
        seq, step, sid = self._arrays()
        if len(seq) > 1 and not (seq[1:] > seq[:-1]).all():
            order = np.argsort(seq, kind="stable")
            seq, step, sid = seq[order], step[order], sid[order]
        return seq, step, sid

    def tag_sets(self) -> list:
        """The distinct sets of tags, by set id."""
        return self._sets


class PurgesByTag:
    """Each tag's :class:`Purges`, made from a run's :class:`PurgeLog` as the tag's series is
    built. A tag that every purge applies to reads the log's own arrays; other tags copy
    their own rows, one tag at a time (every tag's purges copied at once, then sorted
    again, took 90 MB beside 1.8 million purges). Those of the tags that no purge names
    are made once and shared."""

    def __init__(self, log: PurgeLog) -> None:
        self._seq, self._step, self._sid = log.columns()
        sets = log.tag_sets()
        self._rows_of_set = np.bincount(self._sid, minlength=len(sets))
        self._named: dict[str, list[int]] = {}
        for sid in range(1, len(sets)):
            for tag in sets[sid]:
                self._named.setdefault(tag, []).append(sid)
        self._shared: Purges | None = None
        self._by_set: np.ndarray | None = None   # row numbers ordered by set id, once needed

    def __call__(self, tag: str) -> Purges:
        named = self._named.get(tag)
        if named is not None:
            return self._of([0, *named])
        if self._shared is None:
            self._shared = self._of([0])
        return self._shared

    def _of(self, sids: list[int]) -> Purges:
        counts = self._rows_of_set
        rows = int(counts[sids].sum())
        if rows == len(self._seq):
            return Purges(self._seq, self._step)
        if rows * 64 >= len(self._seq):
            wanted = np.zeros(len(counts), dtype=bool)
            wanted[sids] = True
            take = wanted[self._sid]
        else:
            # a few rows among many: found through the rows ordered by set, not by looking
            # at every row for each such tag
            if self._by_set is None:
                self._by_set = np.argsort(self._sid, kind="stable").astype(
                    np.int32 if len(self._sid) < 1 << 31 else np.int64)
            ends = np.cumsum(counts)
            take = np.concatenate([self._by_set[ends[s] - counts[s]:ends[s]] for s in sids])
            take.sort()
        return Purges(self._seq[take], self._step[take])


class Purges:
    """The purges that apply to one tag, as arrays for a vectorised hidden mask.

    A point is hidden when some purge read after it has a step at or below the
    point's step: with purges sorted by read position, that is a suffix minimum.
    """

    def __init__(self, seq: np.ndarray, steps: np.ndarray) -> None:
        """``seq`` sorted, the purges' steps in that order."""
        self.seq = seq
        self.min_step = np.minimum.accumulate(steps[::-1])[::-1] if len(steps) else steps

    def hidden(self, seq: np.ndarray, steps: np.ndarray):
        if not len(self.seq):
            return None
        idx = np.searchsorted(self.seq, seq, side="right")
        later = idx < len(self.seq)
        hidden = np.zeros(len(seq), dtype=bool)
        hidden[later] = steps[later] >= self.min_step[idx[later]]
        return hidden
