"""Syncing again and again in one process: ``tbconvert sync SRC DST --watch SECONDS``.

A training job's archive keeps up without paying the interpreter's start-up and the
imports on every sync. Each round is one complete :func:`~tbconvert.incremental.sync`: it
takes the dataset's lock and releases it, so another sync (or a reader following the
manifest) sees the dataset between rounds exactly as after a single sync. A round whose
lock is held elsewhere is skipped; a round that fails on its input (the logdir not there
yet, a damaged manifest being repaired) is reported and the next round tries again.
Errors that waiting cannot cure (a destination that is not a dataset, a missing package)
end the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tbconvert.errors import (
    MissingDependencyError,
    OutputExistsError,
    TbconvertError,
    UnsupportedError,
    UsageError,
)
from tbconvert.incremental.lock import SyncLocked

__all__ = ["Round", "sync_watch"]


@dataclass
class Round:
    """What one round of :func:`sync_watch` did."""

    number: int
    seconds: float                      # how long the round took
    report: object | None = None        # its SyncReport, when the round ran
    skipped: str | None = None          # why it did not run (another sync holds the dataset)
    error: TbconvertError | None = None  # why it failed (the loop goes on)


def _lasting(exc: TbconvertError) -> bool:
    """Whether the error stays whatever the next round finds (the loop then ends). A held
    lock (a UsageError too) is no such error: the round is skipped before this is asked."""
    return isinstance(exc, (UsageError, OutputExistsError, MissingDependencyError,
                            UnsupportedError))


def sync_watch(src, dst, every: float, *, on_round: Callable[[Round], None] | None = None,
               rounds: int | None = None, break_lock: bool = False,
               sleep: Callable[[float], None] = time.sleep, **options) -> int:
    """Sync ``src`` into ``dst`` every ``every`` seconds; the number of rounds run.

    Example::

        def told(r):
            print(r.number, r.skipped or r.error or r.report.summary())
        tbconvert.sync_watch("logs/", "archive/", 60, on_round=told)   # until Ctrl-C

    ``every`` counts from the end of one round to the start of the next. ``on_round``
    hears every round (a :class:`Round`). ``rounds``: stop after that many (None: until
    ``KeyboardInterrupt``, which ends it as it ends a single sync: the dataset is as the
    last complete round left it). ``break_lock`` holds for the first round only: a lock
    found later belongs to another sync that started meanwhile. ``options``
    (``scheduler``, ``storage_options``, ``jobs``) go to :func:`~tbconvert.incremental.sync`;
    with ``jobs`` other than 1 the worker processes are started once, before the first
    round, and take a share of every round's runs, however little is new.
    Errors that no later round can cure (a usage error, a destination that is not a
    dataset, a missing package) are raised; other errors of a round are handed to
    ``on_round`` and the next round runs.
    """
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= 0:
        raise UsageError(f"{every!r}: the pause between sync rounds must be 0 seconds or more")
    if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)
                               or rounds < 1):
        raise UsageError(f"rounds={rounds!r}: the rounds to run must be 1 or more (None: until "
                         "stopped)")
    unknown = sorted(set(options) - {"scheduler", "storage_options", "jobs", "allow_pickle"})
    if unknown:
        raise TypeError(f"sync_watch() got an unexpected keyword argument {unknown[0]!r}")
    from tbconvert.api import check_jobs
    check_jobs(options.get("jobs", 1))
    pool = _kept_workers(src, dst, options)
    try:
        return _rounds(src, dst, every, on_round, rounds, break_lock, sleep, pool, options)
    finally:
        if pool is not None:
            pool.stop()


def _kept_workers(src, dst, options: dict):
    """The workers that take a share of every round's runs (None: the rounds run here).
    Started once: a round then pays no start-up for them, and a small round gains too."""
    from tbconvert import remote
    from tbconvert.formats.base import processes
    from tbconvert.kept import KeptWorkers
    jobs = processes(options.get("jobs", 1))
    if jobs <= 1 or options.get("scheduler") is not None or any(
            remote.is_remote(p) for p in (src, dst)):
        return None     # (a sync with a URL stages and publishes in its own way, here)
    from tbconvert.incremental.runs import load_for_workers
    load_for_workers()
    pool = KeptWorkers(jobs - 1)
    pool.start()      # forked here, in the command's main thread, before any round
    return pool


def _rounds(src, dst, every, on_round, rounds, break_lock, sleep, pool, options) -> int:
    from tbconvert.incremental import SyncReport, _sync
    from tbconvert.incremental.manifest import Committed, Sweeps
    sweeps, committed = Sweeps(), Committed()
    number = 0
    while rounds is None or number < rounds:
        number += 1
        t0 = time.perf_counter()
        done = Round(number, 0.0)
        try:
            done.report = _sync(src, dst, options.get("scheduler"),
                                break_lock and number == 1, SyncReport(),
                                options.get("storage_options"), options.get("jobs", 1), pool,
                                allow_pickle=options.get("allow_pickle", False), sweeps=sweeps,
                                committed=committed)
        except SyncLocked as exc:
            done.skipped = str(exc)
        except TbconvertError as exc:
            if _lasting(exc):
                raise
            done.error = exc
        done.seconds = time.perf_counter() - t0
        if on_round is not None:
            on_round(done)
        if rounds is not None and number >= rounds:
            break
        sleep(every)
    return number
