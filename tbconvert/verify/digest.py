"""Every series of a source in a few dozen bytes: enough to tell whether two series are the
same, not where they differ.

A source of many series cannot keep a full :class:`~tbconvert.verify.fingerprint.Fingerprint`
(a few KB) for each; it keeps a row of :data:`ROW` per series instead, and only the series
whose rows differ are read again for the fingerprints that tell where (see
:func:`tbconvert.verify.compare`). The row's hash is a sum over the points of a hash of each
point with its position in the series: it depends on the order of the points, as the
fingerprints' digests do, but not on how a reader cut the series into chunks, nor on where
the chunks of a series lie in the source.
"""

from __future__ import annotations

import hashlib

import numpy as np

from tbconvert.model import Series
from tbconvert.verify.fingerprint import Fingerprint, metadata_key
from tbconvert.verify.sketch import SLICE, mix

ROW = np.dtype([
    ("points", "<i8"),
    ("steps", "<i8", 2),         # the least and the greatest
    ("hash", "<u8", 2),         # sums of two hashes of each point, mod 2**64
    ("metadata", "<u8"),        # a hash of the first chunk's metadata, as fingerprints keep
    # the dtypes of the series' scalars, for the note where they differ: how many runs of one
    # dtype, the last one's dtype (a number in Digests.dtype_names) and length
    ("dtype_runs", "<i4"),
    ("dtype", "<i2"),
    ("dtype_points", "<i8"),
])
_K = [np.uint64(k) for k in (0x8EBC6AF09C88C6E3, 0x589965CC75374CC3, 0x1D8E4E27C47D124F,
                             0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x6A09E667F3BCC909)]


class _Unkept:
    """A digest that keeps nothing: the words of a series' points are wanted, not the
    fingerprint's digests of its values."""

    @staticmethod
    def update(data) -> None:
        return None


class Tags:
    """A run's tags and their rows, sorted, in a few arrays: the tags' UTF-8 bytes and 16
    bytes a tag. (A dict of as many strings, made while a source was read, is strewn over
    the pages its reader freed, and keeps them from being handed back.)"""

    def __init__(self, rows: dict[str, int]):
        tags = sorted(rows)
        encoded = [t.encode("utf-8", "surrogatepass") for t in tags]
        self._text = b"".join(encoded)
        self._ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        self._rows = np.array([rows[t] for t in tags], np.int64)

    def __len__(self) -> int:
        return len(self._rows)

    def items(self):
        """``(tag, row)`` in the order of the tags."""
        start = 0
        for end, row in zip(self._ends.tolist(), self._rows.tolist(), strict=True):
            yield self._text[start:end].decode("utf-8", "surrogatepass"), row
            start = end


class Digests:
    """The rows of a source's series, by run and tag, added to chunk by chunk."""

    def __init__(self):
        # {run: {tag: row}} while the source is read, then {run: Tags}
        self.numbers: dict[str, dict[str, int] | Tags] = {}
        self.rows = np.zeros(1024, ROW)
        self.used = 0
        self.dtype_names: list[str] = []
        self.dtype_lists: dict[int, list] = {}  # series of several runs of dtypes: all of them
        # points not yet hashed: a source of many short series gives many small chunks
        self._pending: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_points = 0
        unkept = _Unkept()
        self._words = Fingerprint("", "", values=unkept, big_ints=unkept, nans=unkept)

    def row(self, run: str, tag: str, s: Series) -> int:
        """The row of a series, made for a new one from its first chunk ``s``."""
        tags = self.numbers.setdefault(run, {})
        i = tags.get(tag)
        if i is None:
            if self.used == len(self.rows):
                self.rows = np.concatenate([self.rows, np.zeros(len(self.rows), ROW)])
            i = tags[tag] = self.used
            self.used += 1
            key = hashlib.blake2b(repr(metadata_key(s)).encode(), digest_size=8).digest()
            self.rows[i]["metadata"] = int.from_bytes(key, "little")
        return i

    def add(self, i: int, s: Series, words: np.ndarray | None = None) -> None:
        """Add a chunk to row ``i``; ``words``: the chunk's words, where a fingerprint of the
        series made them already (which then keeps the scalars' dtypes: see
        :meth:`set_dtypes`)."""
        row = self.rows[i]
        first = int(row["points"])
        if words is None:
            self._words.scalar_dtypes = []
            words = self._words.value_words(s, first)[0]
            self._add_dtypes(i, self._words.scalar_dtypes)
        row["points"] = first + len(s)
        if not len(s):
            return
        lo, hi = int(s.steps.min()), int(s.steps.max())
        row["steps"] = (lo, hi) if not first else (min(lo, int(row["steps"][0])),
                                                    max(hi, int(row["steps"][1])))
        # (wall times compared with a tolerance are hashed too: the same bits are within it)
        walls = s.wall_times.astype("<f8").view(np.uint64)
        hidden = np.zeros(len(s), np.uint64) if s.hidden is None else \
            s.hidden.astype(np.uint64)
        # (copies: a reader may reuse the arrays of a chunk for the next)
        self._pending.append((i, first, np.array(s.steps, np.int64).view(np.uint64),
                              np.array(words, np.uint64), walls, hidden))
        self._pending_points += len(s)
        if self._pending_points >= SLICE:
            self.flush()

    def finish(self) -> None:
        """Once the source is read: the last points hashed, and the tags kept compact."""
        self.flush()
        self.numbers = {run: Tags(tags) for run, tags in self.numbers.items()}

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending, self._pending_points = self._pending, [], 0
        lengths = np.array([len(p[2]) for p in pending], np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        # each point's position in its series
        firsts = np.array([p[1] for p in pending], np.int64)
        pos = (np.arange(lengths.sum(), dtype=np.int64) - np.repeat(starts - firsts, lengths))
        steps, words, walls, hidden = (np.concatenate([p[k] for p in pending])
                                       for k in range(2, 6))
        t = mix(steps ^ _K[0])
        for x, k in ((pos.view(np.uint64), _K[1]), (words, _K[2]), (walls, _K[3]),
                     (hidden, _K[4])):
            t += x * k
            mix(t)
        rows = np.array([p[0] for p in pending], np.int64)
        for lane, h in enumerate((t, mix(t ^ _K[5]))):
            np.add.at(self.rows["hash"][:, lane], rows, np.add.reduceat(h, starts))

    def _add_dtypes(self, i: int, dtypes: list) -> None:
        row = self.rows[i]
        for name, n in dtypes:
            if name not in self.dtype_names:
                self.dtype_names.append(name)
            code = self.dtype_names.index(name)
            runs = int(row["dtype_runs"])
            if runs and int(row["dtype"]) == code:
                row["dtype_points"] += n
                if runs > 1:
                    self.dtype_lists[i][-1][1] += n
                continue
            if runs == 1:
                self.dtype_lists[i] = self.scalar_dtypes(i)
            if runs >= 1:
                self.dtype_lists[i].append([name, n])
            row["dtype_runs"], row["dtype"], row["dtype_points"] = runs + 1, code, n

    def set_dtypes(self, i: int, dtypes: list) -> None:
        """Row ``i``'s dtypes from a fingerprint's ``scalar_dtypes``."""
        self.rows[i]["dtype_runs"] = 0
        self.dtype_lists.pop(i, None)
        self._add_dtypes(i, dtypes)

    def scalar_dtypes(self, i: int) -> list:
        """The series' ``[dtype name, points]`` runs, as its fingerprint's ``scalar_dtypes``."""
        row = self.rows[i]
        runs = int(row["dtype_runs"])
        if runs > 1:
            return self.dtype_lists[i]
        return [[self.dtype_names[int(row["dtype"])], int(row["dtype_points"])]] if runs else []

    def points(self, i: int) -> int:
        return int(self.rows[i]["points"])

    def step_range(self, i: int) -> tuple[int, int] | None:
        row = self.rows[i]
        return (int(row["steps"][0]), int(row["steps"][1])) if row["points"] else None

    def same_metadata(self, i: int, other: Digests, j: int) -> bool:
        return bool(self.rows[i]["metadata"] == other.rows[j]["metadata"])

    def same(self, i: int, other: Digests, j: int) -> bool:
        """Whether series ``i`` here and ``j`` in ``other`` hold the same points and metadata
        (the scalars' dtypes aside, which tell no difference)."""
        a, b = self.rows[i], other.rows[j]
        return bool(a["points"] == b["points"] and a["metadata"] == b["metadata"]
                    and (a["hash"] == b["hash"]).all())
