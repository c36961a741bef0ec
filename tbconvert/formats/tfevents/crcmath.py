"""CRC-32C of any stretch of a buffer in constant time, in bulk.

Searching damage means asking, for many candidate records, whether the CRC
of their claimed payload matches. Computing each one from scratch costs its
length, and a crafted file can hold a candidate every 12 bytes, each claiming
most of the file: time growing with the square of the size. CRCs combine
instead: with ``P(i)`` the CRC of the first ``i`` bytes,
``crc(buf[s:e]) = P(e) ^ P(s) * x^(8(e-s)) mod poly`` (the identity behind
zlib's ``crc32_combine``). ``P`` is kept at checkpoints every
:data:`GRANULE` bytes, so each query costs at most a granule of checksumming
plus a vectorised multiplication.
"""

from __future__ import annotations

import numpy as np

from tbconvert.checksum import crc32c

POLY = 0x82F63B78          # reflected Castagnoli polynomial
GRANULE = 1024


def multmodp(a: int, b: int) -> int:
    """``a * b mod POLY`` in the reflected bit order CRCs use."""
    m, p = 1 << 31, 0
    while m:
        if a & m:
            p ^= b
        b = (b >> 1) ^ POLY if b & 1 else b >> 1
        m >>= 1
    return p


_X2N: list[int] = []          # x^(2^k) mod POLY
_MUL_TABLES: list[np.ndarray] = []   # per k: byte tables of multiplication by x^(2^k)


def _mul_table(k: int) -> np.ndarray:
    while len(_X2N) <= k:
        _X2N.append(1 << 30 if not _X2N else multmodp(_X2N[-1], _X2N[-1]))
    while len(_MUL_TABLES) <= k:
        c = _X2N[len(_MUL_TABLES)]
        images = [multmodp(c, 1 << j) for j in range(32)]
        tables = np.zeros((4, 256), dtype=np.uint32)
        for byte in range(4):
            t = np.zeros(1, dtype=np.uint32)
            for bit in range(8):
                t = np.concatenate([t, t ^ np.uint32(images[8 * byte + bit])])
            tables[byte] = t
        _MUL_TABLES.append(tables)
    return _MUL_TABLES[k]


def shift(crc: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """``crc * x^(8 * nbytes) mod POLY`` element-wise (uint32 crcs, int64 byte counts)."""
    out = np.asarray(crc, dtype=np.uint32).copy()
    nbytes = np.asarray(nbytes, dtype=np.int64)
    if not len(out):
        return out
    top = int(nbytes.max()).bit_length()
    ff = np.uint32(0xFF)
    for k in range(top):
        sel = np.flatnonzero((nbytes >> k) & 1)
        if not len(sel):
            continue
        t = _mul_table(k + 3)
        v = out[sel]
        out[sel] = (t[0][v & ff] ^ t[1][(v >> np.uint32(8)) & ff]
                    ^ t[2][(v >> np.uint32(16)) & ff] ^ t[3][v >> np.uint32(24)])
    return out


class Prefix:
    """CRCs of the prefixes of one buffer, computed lazily as far as asked."""

    def __init__(self, buf) -> None:
        self.mv = memoryview(buf)
        self.checkpoints = [0]    # checkpoints[i] = crc of buf[:i * GRANULE]

    def _upto(self, k: int) -> None:
        cps, mv = self.checkpoints, self.mv
        i = len(cps) - 1
        while i < k:
            cps.append(crc32c(mv[i * GRANULE:(i + 1) * GRANULE], cps[i]))
            i += 1

    def at(self, positions: np.ndarray) -> np.ndarray:
        """``P(x)`` for every ``x`` in ``positions`` (any order, repeats allowed)."""
        positions = np.asarray(positions, dtype=np.int64)
        if not len(positions):
            return np.zeros(0, dtype=np.uint32)
        uniq, inverse = np.unique(positions, return_inverse=True)
        self._upto(int(uniq[-1]) // GRANULE)
        cps, mv = self.checkpoints, self.mv
        vals = np.empty(len(uniq), dtype=np.uint32)
        prev_x, prev_v = -1, 0
        for j, x in enumerate(uniq.tolist()):
            base = x - x % GRANULE
            if prev_x < base:
                prev_x, prev_v = base, cps[base // GRANULE]
            prev_v = crc32c(mv[prev_x:x], prev_v)
            prev_x = x
            vals[j] = prev_v
        return vals[inverse.reshape(-1)]

    def crcs(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Raw CRC-32C of ``buf[s:s + k]`` for each start ``s`` and length ``k``."""
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        p = self.at(np.concatenate([starts, starts + lengths]))
        m = len(starts)
        return p[m:] ^ shift(p[:m], lengths)
