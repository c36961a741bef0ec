"""TensorBoard's restart rule, worked out block by block as a run is read.

Which points a restart hides depends on events read after them (a session START, or below
file version 2 a step going back), so :class:`RestartRule` records each block's purges as
``(seq, step, tags)`` as the block ends, and :class:`Purges` later turns one tag's purges
into its hidden mask. The rule itself is described in docs/format-notes.md.
"""

from __future__ import annotations

import heapq
from array import array
from operator import itemgetter

import numpy as np

seq_of = itemgetter(0)   # a purge's read position


class RestartRule:
    """The purge-finding half of :class:`~tbconvert.formats.tfevents.assemble.RunAssembler`
    (which holds the state these methods read: the block's summary rows and bulk rows, the
    file versions, the last step, the session starts)."""

    def _version_at(self, seqs: np.ndarray) -> np.ndarray:
        """File version in force when each event was read (0 = none seen)."""
        before = np.nan if self.detached else 0.0   # NaN: set by the earlier files
        if not self.versions:
            return np.full(len(seqs), before)
        vseq = np.array([s for s, _ in self.versions])
        vval = np.array([v for _, v in self.versions])
        idx = np.searchsorted(vseq, seqs, side="left") - 1
        return np.where(idx >= 0, vval[np.maximum(idx, 0)], before)

    def _find_purges(self) -> None:
        """Purges of this block's events; every earlier event is already known."""
        starts = []
        if self._session_starts:
            seqs = np.array([s for s, _ in self._session_starts])
            versions = self._version_at(seqs).tolist()
            for (seq, step), version in zip(self._session_starts, versions, strict=True):
                if version != version:    # NaN: modern or not as the earlier files say
                    self.cond_starts.append((seq, step, None))
                    continue
                if version < 2:
                    continue
                if self._seen_start:
                    starts.append((seq, step, None))
                elif self.detached:       # a purge if the earlier files saw a start
                    self.cond_starts.append((seq, step, True))
                self._seen_start = True
        # in read order, as PurgeLog.columns finds them without sorting a copy
        self.purges.extend(heapq.merge(starts, self._out_of_order_purges(), key=seq_of))

    def _out_of_order_purges(self):
        if self.legacy_accumulator:
            return self._legacy_accumulator_purges()
        seq_parts = [np.array([r[0] for r in self._summary_rows], dtype=np.int64)]
        step_parts = [np.array([r[1] for r in self._summary_rows], dtype=np.int64)]
        for seqs, steps, _ in self._fast_rows:
            seq_parts.append(seqs)
            step_parts.append(steps)
        seqs = np.concatenate(seq_parts)
        if not len(seqs):
            return []
        steps = np.concatenate(step_parts)
        order = np.argsort(seqs, kind="stable")
        seqs, steps = seqs[order], steps[order]
        first_of_event = np.concatenate(([True], seqs[1:] != seqs[:-1]))
        ev_seq, ev_step = seqs[first_of_event], steps[first_of_event]
        unknown_prev = self._last_step is None
        prev = np.concatenate(([0 if unknown_prev else self._last_step], ev_step[:-1]))
        self._last_step = int(ev_step[-1])
        version = self._version_at(ev_seq)
        legacy_mode = version < 2
        lower = ev_step < prev
        conds = []   # (index, needs a lower step than the earlier files' last, legacy or None)
        if unknown_prev:
            lower[0] = False
            if not (version[0] >= 2):
                conds.append((0, True, None if np.isnan(version[0]) else True))
        conds.extend((int(i), False, None) for i in np.flatnonzero(lower & np.isnan(version)))
        hits = np.flatnonzero(lower & legacy_mode)
        if not len(hits) and not conds:
            return []
        # (sets and searchsorted, not np.union1d / np.intersect1d: np.unique imports numpy.ma,
        # 7 ms of a sync command's start)
        tags_by_seq = self._tags_of(set(ev_seq[hits].tolist())
                                    | {int(ev_seq[i]) for i, _, _ in conds})
        for i, needs_prev, legacy_known in conds:
            seq = int(ev_seq[i])
            self.cond_purges.append((seq, int(ev_step[i]), frozenset(tags_by_seq.get(seq, ())),
                                     needs_prev, legacy_known))
        return [(int(ev_seq[h]), int(ev_step[h]), frozenset(tags_by_seq.get(int(ev_seq[h]), ())))
                for h in hits]

    def _legacy_accumulator_purges(self):
        """The out-of-order rule of TensorBoard's legacy ``EventAccumulator`` (tbparse's reader):
        below file version 2, a summary event at a lower step than the last one it kept purges
        its own tags' later points, and is not kept as the last step itself; any other event,
        a graph or a session log too, is. One event at a time: whether an event purges depends
        on what the ones before it did."""
        events: dict[int, tuple[int, bool]] = {}
        for seq, step, _ in self._summary_rows:
            events[seq] = (step, True)
        for seqs, steps, _ in self._fast_rows:
            for seq, step in zip(seqs.tolist(), steps.tolist(), strict=True):
                events[seq] = (step, True)
        for seq, step in self._other_events:
            events.setdefault(seq, (step, False))
        if not events:
            return []
        order = sorted(events)
        version = self._version_at(np.array(order, dtype=np.int64)).tolist()
        last = -1 if self._last_step is None else self._last_step
        hits = []
        for seq, v in zip(order, version, strict=True):
            if v >= 2:
                continue          # (there a START purges, and the last step is not kept)
            step, summary = events[seq]
            if summary and step < last:
                hits.append((seq, step))
            else:
                last = step
        self._last_step = last
        if not hits:
            return []
        tags_by_seq = self._tags_of({seq for seq, _ in hits})
        return [(seq, step, frozenset(tags_by_seq.get(seq, ()))) for seq, step in hits]

    def _tags_of(self, wanted: set) -> dict[int, set]:
        """The tags of the block's summary events ``wanted`` (by sequence number)."""
        sorted_wanted = np.array(sorted(wanted), dtype=np.int64)
        tags_by_seq: dict[int, set] = {}
        for seq, _, tag in self._summary_rows:
            if seq in wanted:
                tags = tags_by_seq.setdefault(seq, set())
                if tag is not None:
                    tags.add(tag)
        for fseqs, _, tag in self._fast_rows:
            at = np.minimum(np.searchsorted(sorted_wanted, fseqs), len(sorted_wanted) - 1)
            hit = sorted_wanted[at] == fseqs
            if isinstance(tag, str):
                for seq in fseqs[hit].tolist():
                    tags_by_seq.setdefault(seq, set()).add(tag)
                continue
            # the block's numbers (_fast_columns): the tag of each row by its number
            names = self._tag_names
            for seq, tid in zip(fseqs[hit].tolist(), tag[hit].tolist(), strict=True):
                tags_by_seq.setdefault(seq, set()).add(names[tid])
        return tags_by_seq


class PurgeLog:
    """A run's purges, ``(seq, step, tags)`` in the order found (``tags``: a frozenset, or
    None for every tag), kept as 20 bytes each: a run of old files whose steps go back
    makes a purge every few events (1.8 million in 20 million points), and as tuples with
    a set each they took 1 GiB. Each distinct set of tags is kept once."""

    def __init__(self) -> None:
        self._seq = array("q")
        self._step = array("q")
        self._set = array("i")       # index in _sets
        self._sets: list = [None]
        self._set_ids: dict = {None: 0}

    def append(self, purge) -> None:
        seq, step, tags = purge
        sid = self._set_ids.get(tags)
        if sid is None:
            sid = self._set_ids[tags] = len(self._sets)
            self._sets.append(tags)
        self._seq.append(seq)
        self._step.append(step)
        self._set.append(sid)

    def extend(self, purges) -> None:
        for purge in purges:
            self.append(purge)

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

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(seqs, steps, set ids)`` sorted by read position: views of the log itself when
        its purges were found in that order (as a run read from its start, or joined, has
        them), sorted copies otherwise. The log takes no more purges while they are used."""
        seq, step, sid = (np.frombuffer(a, dtype=t) if len(a) else np.zeros(0, t)
                          for a, t in ((self._seq, np.int64), (self._step, np.int64),
                                       (self._set, np.int32)))
        if len(seq) > 1 and not (seq[1:] > seq[:-1]).all():
            order = np.argsort(seq, kind="stable")
            seq, step, sid = seq[order], step[order], sid[order]
        return seq, step, sid

    def tag_sets(self) -> list:
        """The distinct sets of tags named, by set id (0: None, every tag)."""
        return self._sets


class PurgesByTag:
    """Each tag's :class:`Purges`, made from a run's :class:`PurgeLog` as the tag's series is
    built. A tag that every purge applies to reads the log's own arrays; copies of rows are
    made for one tag at a time (1.8 million purges copied per tag, and sorted, took 90 MB
    beside the log). Those of the tags that no purge names are made once and shared."""

    def __init__(self, log: PurgeLog) -> None:
        self._seq, self._step, self._sid = log.columns()
        sets = log.tag_sets()
        self._sets = len(sets)
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
        if len(sids) == self._sets:
            return Purges(self._seq, self._step)
        wanted = np.zeros(self._sets, dtype=bool)
        wanted[sids] = True
        rows = wanted[self._sid]
        return Purges(self._seq[rows], self._step[rows])


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
