"""Merging a run's small parts, so that a dataset kept up to date stays a few files per run.

Every sync that finds new points in a run adds a part for it: a run followed by
``sync --watch`` would gain a part per round, and the dataset thousands of small files
(slow for every reader, and a manifest that grows each round). Parts are therefore
merged like the digits of a counter in base :data:`FANOUT`: a part's *weight* is the
number of sync parts it holds; when the last parts of a run reach ``FANOUT`` of the same
order of weight, they become one part. A run then has at most about ``FANOUT`` parts per
power of ``FANOUT`` of its syncs, and each point is rewritten that many times at most.

A run's first part (written when the run was read whole) is never merged: it holds most
of the run, and rewriting it would cost as much as reading the run again. A merged part
holds what its parts held, in their order: a reader gets the same run from it
(:func:`tbconvert.formats.parquet.writer.merge_parts`).
"""

from __future__ import annotations

import re
from pathlib import Path

FANOUT = 16

_MERGED = re.compile(r"\.m[A-Z]?\d+$")


def _order(weight: int) -> int:
    order = 0
    while weight >= FANOUT:
        weight //= FANOUT
        order += 1
    return order


def weights_of(run_state: dict) -> list[int]:
    """The weight of each of a run's parts (0 for its first, never merged)."""
    parts = run_state.get("parts", [])
    weights = run_state.get("weights")
    if isinstance(weights, list) and len(weights) == len(parts) and \
            all(isinstance(w, int) and w >= 0 for w in weights):
        return list(weights)
    return [0] + [1] * (len(parts) - 1)    # a manifest of before merging: one sync a part


def to_merge(weights: list[int]) -> int | None:
    """Where the parts to merge begin (they go on to the last), None when none are due."""
    w = list(weights)
    start = None
    while len(w) > FANOUT:
        order = _order(w[-1])
        k = len(w) - 1
        while k >= 1 and _order(w[k]) == order:
            k -= 1
        if len(w) - 1 - k < FANOUT:
            break
        w[k + 1:] = [sum(w[k + 1:])]     # and the merged part may complete the next order
        start = k + 1
    return start


def merged_name(first: str, generation: int) -> str:
    """The merged part's name: the first merged part's, marked with the generation that
    merged them (``part-00003-run-g0002.m0041.parquet``: names still sort in the dataset's
    order, and a run's name hint never holds a dot, so no other part has such a name)."""
    from tbconvert.formats.parquet.writer import sortable
    stem = _MERGED.sub("", first[:-len(".parquet")])
    return f"{stem}.m{sortable(generation)}.parquet"


def merge(files: list[Path], out: Path, experiment: dict) -> bool:
    """Write the parts ``files`` of one run as the one part ``out``. False (and nothing
    written) when a part cannot be read whole: the parts are then kept as they are."""
    from tbconvert.errors import TbconvertError
    from tbconvert.formats.parquet import schema as S
    from tbconvert.formats.parquet.writer import merge_parts
    from tbconvert.report import Report

    found = Report()
    try:
        merge_parts(files, out, S.experiment_from_json(experiment), found)
        if not found.issues:
            return True
    except (TbconvertError, OSError):
        pass
    out.unlink(missing_ok=True)
    return False


def merge_job(job: tuple) -> bool:
    """:func:`merge` of ``(files, out, experiment)``: a task for a worker."""
    return merge(*job)
