"""Columns of encoded event pieces waiting to be ordered into one run's file.

An entry is either a ``Summary.Value`` (``kind`` VALUE: values that share step
and wall time may share one ``Event``) or a whole ``Event`` payload (``kind``
EVENT: graphs, tagged run metadata, run records). Entries are ordered by
``(key, tag, idx)``: ``key`` is the running maximum of the tag's wall times,
``tag`` the tag's order of first appearance (-1 for run records) and ``idx``
the point's position in its tag, so each tag keeps its own order and the
file as a whole goes forward in time. The bytes of all entries live in one
uint8 array, so a batch costs a few arrays, not one object per point.
"""

from __future__ import annotations

import numpy as np

from tbconvert.formats.tfevents.windows import windows

EVENT, VALUE = 0, 1
# Bytes of column data per entry (key, tag, idx, step, wall, kind, offset).
COLUMN_BYTES = 8 + 4 + 8 + 8 + 8 + 1 + 8


class Entries:
    __slots__ = ("key", "tag", "idx", "step", "wall", "kind", "offs", "data")

    def __init__(self, key, tag, idx, step, wall, kind, offs, data) -> None:
        self.key = np.asarray(key, np.float64)
        self.tag = np.asarray(tag, np.int32)
        self.idx = np.asarray(idx, np.int64)
        self.step = np.asarray(step, np.int64)
        self.wall = np.asarray(wall, np.float64)
        self.kind = np.asarray(kind, np.uint8)
        self.offs = np.asarray(offs, np.int64)
        self.data = np.asarray(data, np.uint8)

    def __len__(self) -> int:
        return len(self.key)

    @property
    def nbytes(self) -> int:
        return len(self.key) * COLUMN_BYTES + len(self.data)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offs)

    @classmethod
    def empty(cls) -> Entries:
        z = np.zeros(0)
        return cls(z, z, z, z, z, z, np.zeros(1), z)

    @classmethod
    def from_rows(cls, key, tag, idx, step, wall, kind, mat: np.ndarray) -> Entries:
        """Entries whose bytes are the rows of an equal-width uint8 matrix."""
        n, width = mat.shape
        return cls(key, np.full(n, tag, np.int32), idx, step, wall, np.full(n, kind, np.uint8),
                   np.arange(n + 1, dtype=np.int64) * width, mat.reshape(-1))

    @classmethod
    def from_list(cls, key, tag, idx, step, wall, kind, blobs: list) -> Entries:
        lengths = np.fromiter((len(b) for b in blobs), np.int64, len(blobs))
        offs = np.zeros(len(blobs) + 1, np.int64)
        np.cumsum(lengths, out=offs[1:])
        data = np.frombuffer(b"".join(blobs), np.uint8)
        n = len(blobs)
        # (np.full, not np.broadcast_to: a tenth of the cost, for a run of many short tags)
        tags = np.asarray(tag, np.int32)
        kinds = np.asarray(kind, np.uint8)
        return cls(key, np.full(n, tag, np.int32) if tags.ndim == 0 else tags, idx, step, wall,
                   np.full(n, kind, np.uint8) if kinds.ndim == 0 else kinds, offs, data)

    def slice(self, a: int, b: int) -> Entries:
        lo, hi = int(self.offs[a]), int(self.offs[b])
        return Entries(self.key[a:b], self.tag[a:b], self.idx[a:b], self.step[a:b],
                       self.wall[a:b], self.kind[a:b], self.offs[a:b + 1] - lo, self.data[lo:hi])

    def order(self) -> np.ndarray:
        return np.lexsort((self.idx, self.tag, self.key))

    def take(self, order: np.ndarray) -> Entries:
        all_lengths = self.lengths
        width = int(all_lengths[0]) if len(all_lengths) else 0
        if width and (all_lengths == width).all():
            # Equal-width entries (a scalar column) move as fixed-size items in one call.
            data = np.ascontiguousarray(self.data).view(f"V{width}")[order].view(np.uint8)
            offs = np.arange(len(order) + 1, dtype=np.int64) * width
            return Entries(self.key[order], self.tag[order], self.idx[order], self.step[order],
                           self.wall[order], self.kind[order], offs, data)
        lengths = all_lengths[order]
        offs = np.zeros(len(order) + 1, np.int64)
        np.cumsum(lengths, out=offs[1:])
        data = np.empty(int(offs[-1]), np.uint8)
        scatter(self.data, self.offs[:-1][order], lengths, data, offs[:-1])
        return Entries(self.key[order], self.tag[order], self.idx[order], self.step[order],
                       self.wall[order], self.kind[order], offs, data)

    def is_sorted(self) -> bool:
        k, t, i = self.key, self.tag, self.idx
        if len(k) < 2:
            return True
        k0, k1, t0, t1 = k[:-1], k[1:], t[:-1], t[1:]
        ok = (k0 < k1) | ((k0 == k1) & ((t0 < t1) | ((t0 == t1) & (i[:-1] < i[1:]))))
        return bool(ok.all())

    def sorted(self) -> Entries:
        """These entries in order (themselves when they already are)."""
        return self if self.is_sorted() else self.take(self.order())

    @staticmethod
    def concat(parts: list) -> Entries:
        parts = [p for p in parts if len(p)]
        if not parts:
            return Entries.empty()
        if len(parts) == 1:
            return parts[0]
        offs = [np.zeros(1, np.int64)]
        base = 0
        for p in parts:
            offs.append(p.offs[1:] + base)
            base += int(p.offs[-1])
        cat = np.concatenate
        return Entries(cat([p.key for p in parts]), cat([p.tag for p in parts]),
                       cat([p.idx for p in parts]), cat([p.step for p in parts]),
                       cat([p.wall for p in parts]), cat([p.kind for p in parts]),
                       cat(offs), cat([p.data for p in parts]))

    def not_after(self, key: float, tag: int, idx: int) -> int:
        """How many leading entries (of sorted entries) sort at or before ``(key, tag, idx)``."""
        k, t, i = self.key, self.tag, self.idx
        le = (k < key) | ((k == key) & ((t < tag) | ((t == tag) & (i <= idx))))
        return int(np.count_nonzero(le))


# Below this many rows of one length, a Python loop of slice copies beats fancy indexing.
_FEW = 8


def starts_of(lengths: np.ndarray) -> np.ndarray:
    """Where each of consecutive pieces of ``lengths`` starts (int64, the first at 0)."""
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def scatter(src: np.ndarray, src_starts: np.ndarray, lengths: np.ndarray,
            dst: np.ndarray, dst_starts: np.ndarray) -> None:
    """``dst[dst_starts[j]:+lengths[j]] = src[src_starts[j]:+lengths[j]]`` for every j.

    Pieces of one length move as one matrix, so the cost is a few numpy calls
    per distinct length rather than one Python step per piece.
    """
    if not len(lengths):
        return
    uniq, inverse, counts = np.unique(lengths, return_inverse=True, return_counts=True)
    for u, (length, count) in enumerate(zip(uniq.tolist(), counts.tolist(), strict=True)):
        if length == 0:
            continue
        sel = np.flatnonzero(inverse == u) if len(uniq) > 1 else slice(None)
        s, d = src_starts[sel], dst_starts[sel]
        if count < _FEW or length > 4096:
            for a, b in zip(np.atleast_1d(s).tolist(), np.atleast_1d(d).tolist(), strict=True):
                dst[b:b + length] = src[a:a + length]
        else:
            windows(dst, length, writeable=True)[d] = \
                windows(src, length)[s]
