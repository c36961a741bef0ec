"""TensorBoard's restart rule, worked out block by block as a run is read.

Which points a restart hides depends on events read after them (a session START, or below
file version 2 a step going back), so :class:`RestartRule` records each block's purges in the run's
:class:`~tbconvert.formats.tfevents.purge_log.PurgeLog` as the block ends, from which each
tag's hidden mask is made later. The rule itself is described in docs/format-notes.md.
"""

from __future__ import annotations

import heapq

import numpy as np

from tbconvert.formats.tfevents.purge_log import seq_of


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
                    starts.append((seq, step))
                elif self.detached:       # a purge if the earlier files saw a start
                    self.cond_starts.append((seq, step, True))
                self._seen_start = True
        # in read order, as PurgesByTag reads the log without sorting a copy of it
        if self.legacy_accumulator:
            self.purges.extend(heapq.merge([(seq, step, None) for seq, step in starts],
                                           self._legacy_accumulator_purges(), key=seq_of))
            return
        seqs, steps, sids = self._out_of_order_purges()
        if starts:
            seqs = np.concatenate([np.array([s for s, _ in starts], dtype=np.int64), seqs])
            steps = np.concatenate([np.array([s for _, s in starts], dtype=np.int64), steps])
            sids = np.concatenate([np.zeros(len(starts), dtype=np.int32), sids])
            order = np.argsort(seqs, kind="stable")
            seqs, steps, sids = seqs[order], steps[order], sids[order]
        self.purges.extend_columns(seqs, steps, sids)

    def _out_of_order_purges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The block's purges by steps going back, as ``(seqs, steps, set ids)`` of the purge
        log (a block of old files whose steps go back at every event made as many tuples,
        each with a set of tags, while it ended)."""
        none = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32))
        if self._modern_block():
            return none
        seq_parts = [np.array([r[0] for r in self._summary_rows], dtype=np.int64)]
        step_parts = [np.array([r[1] for r in self._summary_rows], dtype=np.int64)]
        for seqs, steps, _ in self._fast_rows:
            seq_parts.append(seqs)
            step_parts.append(steps)
        seqs = np.concatenate(seq_parts)
        if not len(seqs):
            return none
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
            return none
        if conds:
            at = np.array([i for i, _, _ in conds], dtype=np.int64)
            wanted = np.concatenate([hits, at])
            wanted.sort()
            wanted = wanted[np.concatenate(([True], wanted[1:] != wanted[:-1]))]
        else:
            wanted = hits     # (sorted, distinct: indices of ev_seq)
        sids = self._tag_sets(ev_seq[wanted])
        sets = self.purges.tag_sets()
        for i, needs_prev, legacy_known in conds:
            sid = int(sids[np.searchsorted(wanted, i)])
            self.cond_purges.append((int(ev_seq[i]), int(ev_step[i]), sets[sid],
                                     needs_prev, legacy_known))
        if len(wanted) != len(hits):
            sids = sids[np.searchsorted(wanted, hits)]
        return ev_seq[hits], ev_step[hits], sids

    def _modern_block(self) -> bool:
        """Whether every event of the block (all of them in bulk columns) follows a file
        version record of 2 or more, where steps going back purge nothing: then only the
        block's last step is noted (most blocks of every writer of today)."""
        versions = self.versions
        if self._summary_rows or not self._fast_rows or not versions or \
                any(v < 2 for _, v in versions):
            return False
        parts = self._fast_rows
        seqs = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        if not len(seqs) or int(seqs.min()) <= versions[0][0]:
            return False
        k = int(seqs.argmax())
        self._last_step = int(parts[0][1][k] if len(parts) == 1 else
                              np.concatenate([p[1] for p in parts])[k])
        return True

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
        sets = self.purges.tag_sets()
        sids = self._tag_sets(np.array([seq for seq, _ in hits], dtype=np.int64)).tolist()
        return [(seq, step, sets[sid]) for (seq, step), sid in zip(hits, sids, strict=True)]

    def _tag_set_of(self, seq: int) -> np.ndarray:
        """:meth:`_tag_sets` of one event (a sync's new bytes: their first event, which
        purges whatever the archived ones hold at a later step)."""
        tags = {tag for s, _, tag in self._summary_rows if s == seq and tag is not None}
        for fseqs, _, tag in self._fast_rows:
            hit = fseqs == seq
            if isinstance(tag, str):
                if hit.any():
                    tags.add(tag)
            else:
                tags.update(self._tag_names[t] for t in np.unique(tag[hit]).tolist())
        return np.array([self.purges.set_id(frozenset(tags))], dtype=np.int32)

    def _tag_sets(self, wanted: np.ndarray) -> np.ndarray:
        """The purge log's set id of the tags of each of the block's summary events read at
        ``wanted`` (sorted, distinct)."""
        if len(wanted) == 1:
            return self._tag_set_of(int(wanted[0]))
        return self._tag_sets_of_many(wanted)

    def _tag_sets_of_many(self, wanted: np.ndarray) -> np.ndarray:
        names: list[str] = []         # the tags met, by number (-1: a row without a tag)
        numbers: dict[str, int] = {}

        def number(tag: str) -> int:
            n = numbers.get(tag)
            if n is None:
                n = numbers[tag] = len(names)
                names.append(tag)
            return n

        last = len(wanted) - 1

        def wanted_rows(seqs: np.ndarray) -> np.ndarray:
            return wanted[np.minimum(np.searchsorted(wanted, seqs), last)] == seqs

        seq_parts, num_parts = [], []
        if self._summary_rows:
            rows = self._summary_rows
            rseq = np.array([r[0] for r in rows], dtype=np.int64)
            hit = wanted_rows(rseq)
            seq_parts.append(rseq[hit])
            num_parts.append(np.array([-1 if rows[i][2] is None else number(rows[i][2])
                                       for i in np.flatnonzero(hit).tolist()], dtype=np.int64))
        for fseqs, _, tag in self._fast_rows:
            hit = wanted_rows(fseqs)
            seqs = fseqs[hit]
            if not len(seqs):
                continue
            seq_parts.append(seqs)
            if isinstance(tag, str):
                num_parts.append(np.full(len(seqs), number(tag), dtype=np.int64))
                continue
            # the block's numbers (_fast_columns): the tag of each row by its number
            tids = tag[hit]
            present = np.flatnonzero(np.bincount(tids))
            to_number = np.zeros(int(present[-1]) + 1, dtype=np.int64)
            to_number[present] = [number(self._tag_names[t]) for t in present.tolist()]
            num_parts.append(to_number[tids])
        sids = np.full(len(wanted), -1, dtype=np.int32)
        if seq_parts:
            seqs, nums = np.concatenate(seq_parts), np.concatenate(num_parts)
            order = np.lexsort((nums, seqs))
            seqs, nums = seqs[order], nums[order]
            keep = np.concatenate(([True], (seqs[1:] != seqs[:-1]) | (nums[1:] != nums[:-1])))
            seqs, nums = seqs[keep], nums[keep]
            starts = np.flatnonzero(np.concatenate(([True], seqs[1:] != seqs[:-1])))
            sizes = np.diff(np.append(starts, len(seqs)))
            # an event of one tag (or none: -1), the usual kind, takes its set by number
            log = self.purges
            heads = nums[starts]
            used = np.flatnonzero(np.bincount(heads[sizes == 1] + 1, minlength=len(names) + 1))
            by_number = np.zeros(len(names) + 1, dtype=np.int32)
            by_number[used] = [log.set_id(frozenset(names[n - 1:n]) if n else frozenset())
                               for n in used.tolist()]
            found = by_number[heads + 1]
            several: dict[bytes, int] = {}
            for g in np.flatnonzero(sizes > 1).tolist():
                members = nums[starts[g]:starts[g] + sizes[g]]
                key = members.tobytes()
                sid = several.get(key)
                if sid is None:
                    sid = several[key] = log.set_id(frozenset(
                        names[n] for n in members.tolist() if n >= 0))
                found[g] = sid
            sids[np.searchsorted(wanted, seqs[starts])] = found
        missing = sids < 0
        if missing.any():
            sids[missing] = self.purges.set_id(frozenset())
        return sids
