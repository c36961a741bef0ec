"""The purge log and the hidden masks made from it, checked against the restart rule's
definition (a point is hidden by a later purge of its tag at or below its step), with
segments of a few purges so that every path through the log's temporary file is taken."""

import pickle

import numpy as np
import pytest

from tbconvert.formats.tfevents import purge_log
from tbconvert.formats.tfevents.purge_log import PurgeLog, PurgesByTag

TAGS = ("a", "b", "c", "d")


def _purges(rng, n: int, in_order: bool = True):
    """``n`` purges of random steps, each of every tag (None), of no tag, or of some tags."""
    seqs = np.sort(rng.choice(10 * n, n, replace=False)) if in_order else \
        rng.permutation(10 * n)[:n]
    choices = [None, frozenset(), frozenset("a"), frozenset("ab"), frozenset("bcd")]
    return [(int(s), int(rng.integers(0, 50)), choices[int(rng.integers(0, len(choices)))])
            for s in seqs]


def _expected(purges, tag, seq, steps):
    hidden = np.zeros(len(seq), dtype=bool)
    for pseq, pstep, tags in purges:
        if tags is None or tag in tags:
            hidden |= (seq < pseq) & (steps >= pstep)
    return hidden


def _check(log: PurgeLog, purges, rng) -> None:
    seq = rng.integers(0, 10 * len(purges) + 10, 300)
    steps = rng.integers(0, 50, 300)
    by_tag = PurgesByTag(log)
    try:
        for tag in (*TAGS, "e"):
            hidden = by_tag(tag).hidden(seq, steps)
            applies = [p for p in purges if p[2] is None or tag in p[2]]
            if not applies:
                assert hidden is None, tag
            else:
                assert np.array_equal(hidden, _expected(purges, tag, seq, steps)), tag
    finally:
        by_tag.close()


@pytest.mark.parametrize("segment", [3, 1 << 16])
@pytest.mark.parametrize("in_order", [True, False])
@pytest.mark.parametrize("n", [0, 1, 40])
def test_hidden_masks_follow_the_rule(monkeypatch, segment, in_order, n):
    monkeypatch.setattr(purge_log, "SEGMENT", segment)
    rng = np.random.default_rng(n)
    purges = _purges(rng, n, in_order)
    log = PurgeLog()
    log.extend(purges[:n // 2])
    rest = purges[n // 2:]
    log.extend_columns(np.array([p[0] for p in rest], dtype=np.int64),
                       np.array([p[1] for p in rest], dtype=np.int64),
                       np.array([log.set_id(p[2]) for p in rest], dtype=np.int32))
    assert list(log) == purges and len(log) == n
    assert log.in_order == (in_order or n < 2)
    _check(log, purges, rng)


def test_a_log_taken_shifted_and_handed_to_another_process(monkeypatch):
    monkeypatch.setattr(purge_log, "SEGMENT", 3)
    rng = np.random.default_rng(7)
    first, second = _purges(rng, 20), _purges(rng, 25)
    part = PurgeLog()
    part.extend(second)
    part = pickle.loads(pickle.dumps(part))
    assert list(part) == second
    log = PurgeLog()
    log.extend(first)
    offset = 10 * 20
    log.extend_shifted(part, offset)
    shifted = [(s + offset, step, tags) for s, step, tags in second]
    assert list(log) == first + shifted
    assert list(part.shifted(offset)) == shifted
    _check(log, first + shifted, rng)
