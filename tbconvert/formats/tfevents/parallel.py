"""Reading the runs of a logdir in worker processes, handing them over in order.

(A destination written one part per run has its runs read *and written* in the
workers instead: :mod:`tbconvert.runtasks`. What is here serves single-file
destinations and the files of one large run.)

The work is cut into *parts*: a run, or, for a run whose files are large
enough to share, consecutive files of it (a single file is never cut). Each
worker reads one part at a time, by path, into a
:class:`~tbconvert.formats.tfevents.assemble.RunAssembler` whose pieces go to a
spill file in a temporary directory of this process; the assembler (small: the
run's facts, its purges and the pieces' places) comes back by pickle and this
process builds the series from it exactly as if it had read the run itself. So
the output does not depend on the number of workers, and only one writer, in
this process, ever writes. Workers report issues and progress; both are merged
here in run order. The parts of a run are joined in file order
(:meth:`~tbconvert.formats.tfevents.assemble.RunAssembler.joined`), which
settles TensorBoard's restart rule across the files exactly as one reader
going through them all would.

How workers start and stop: :mod:`tbconvert.workers`.
"""

from __future__ import annotations

import collections
import dataclasses
import queue as queue_module
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import NamedTuple

from tbconvert import scratch, workers
from tbconvert.errors import OutputError, in_words
from tbconvert.formats.base import source_size
from tbconvert.formats.tfevents.spill import PieceStore
from tbconvert.model import RunData
from tbconvert.report import Report

# A worker keeps at most this much of a run in memory; the rest waits in its spill file.
WORKER_SPILL_AT = 8 << 20
# A run's files are shared among workers only in parts of at least this many bytes: each
# part costs a pickled hand-over and a join.
PART_MIN_BYTES = 8 << 20
_WAIT = 0.2
# How many times a part is read again after its process died (killed, out of memory) while
# it read alone, before its run is given up.
RETRIES = 2

class Part(NamedTuple):
    """Consecutive files of one run, read by one worker."""

    run: int              # index of the run in reading order
    name: str
    files: list[Path]
    first: bool           # holds the run's first file
    last: bool            # holds the run's last file

    @property
    def key(self) -> tuple[int, str]:
        return self.run, str(self.files[0]) if self.files else ""


def plan(runs, jobs: int) -> list[Part]:
    """The parts to read ``runs`` in: a run of several files large enough for it is cut into
    up to ``2 * jobs`` parts of consecutive files (files differ in how long they take to
    read; a worker done early takes the next part)."""
    parts: list[Part] = []
    for index, (name, files) in enumerate(runs):
        sizes = [source_size(f) for f in files] if len(files) > 1 else [0] * len(files)
        target = max(PART_MIN_BYTES, sum(sizes) / (2 * jobs))
        groups: list[list[Path]] = [[]]
        held = 0
        for path, size in zip(files, sizes, strict=True):
            if groups[-1] and held >= target:
                groups.append([])
                held = 0
            groups[-1].append(path)
            held += size
        for k, group in enumerate(groups):
            parts.append(Part(index, name, group, k == 0, k == len(groups) - 1))
    return parts


def _read(root, options, name, files, spill_dir, detached=False):
    """In a worker: read one part of a run. Returns (assembler or error text, issues,
    counters)."""
    from tbconvert.formats.tfevents.reader import RunProgress, TfeventsReader
    report = Report()
    reader = TfeventsReader(root, options, report)
    progress = RunProgress(workers.progress())
    try:
        asm = reader.read_run(name, files, PieceStore(WORKER_SPILL_AT, spill_dir), progress,
                              detached=detached)
        asm.store.spill()
        asm.records.hand_over()     # (its file goes with the pieces' to this process)
        result = asm
    except MemoryError:
        raise
    except OutputError as exc:   # no room for temporary files: the conversion fails
        result = exc
    except Exception as exc:  # noqa: BLE001 - reported as this run's failure
        result = in_words(exc)
    counters = (reader.files_with_bytes, reader.valid_records, reader.damaged_event_files,
                progress.size, progress.sent)
    return result, report.issues, counters


def read_runs(reader, parts: list[Part], jobs: int) -> Iterator[RunData]:
    """``reader.iter_runs()`` for the runs ``parts`` cut up, read by ``jobs`` processes."""
    from tbconvert.formats.tfevents.assemble import RunAssembler
    from tbconvert.formats.tfevents.reader import RunProgress
    progress = reader.options.progress
    options = dataclasses.replace(reader.options, progress=None, jobs=1)
    ctx = workers.context()
    progress_queue = workers.ProgressQueues()

    received = sent = 0

    def drain() -> None:
        nonlocal received
        while True:
            try:
                n = progress_queue.get_nowait()
            except (queue_module.Empty, OSError, ValueError):
                return
            received += n
            if progress is not None:
                progress.advance(n)

    def discard(results) -> None:
        for result, _, _ in results:
            if isinstance(result, RunAssembler):
                result.store.close()

    with scratch.directory(scratch.JOBS) as spill_path:
        spill_dir = str(spill_path)
        pool = workers.Workers(ctx, min(jobs, len(parts)), progress_queue)
        try:
            pending: collections.deque = collections.deque()
            todo = collections.deque(parts)
            lost: set[int] = set()     # runs whose reading process died
            done: list = []            # results of the current run's parts so far
            # After a worker died, the parts its pool held are read again one at a time: the
            # pool cannot tell which one it was reading, and only a part read alone can be
            # blamed (a kill from outside costs a rereading, not a run).
            suspects: set = set()
            deaths: collections.Counter = collections.Counter()
            several = len({part.run for part in parts}) > 1

            def submit() -> None:
                while todo and todo[0].run in lost:
                    todo.popleft()
                if todo and not (suspects and pending):
                    part = todo.popleft()
                    args = (reader.path, options, part.name, part.files, spill_dir, not part.first)
                    try:
                        job = pool.submit(_read, *args)
                    except BrokenProcessPool as exc:
                        # a worker died since the last look: told where results are waited
                        # for, as if this part had been taken (it is read again from there)
                        job = Future()
                        job.set_exception(exc)
                    pending.append((part, job))

            def fill() -> None:
                for _ in range(2 * jobs - len(pending)):
                    submit()

            fill()
            while pending:
                part, job = pending.popleft()
                if part.run in lost:
                    continue
                try:
                    while True:
                        try:
                            outcome = job.result(timeout=_WAIT)
                            break
                        except FutureTimeout:
                            drain()
                except BrokenProcessPool:
                    pool.stop()
                    held = [part] + [p for p, _ in pending if p.run not in lost]
                    pending.clear()
                    if part.key in suspects and len(held) == 1:
                        deaths[part.key] += 1
                    if deaths[part.key] > RETRIES:
                        workers.killed_for_memory(pool, part.name, deaths[part.key])
                        # it killed its process every time it was read alone
                        others = ", the other runs were read" if several else ""
                        reader.report.add(
                            "unreadable_run", f"{part.name}: the process reading it died "
                            f"{deaths[part.key]} times (crashed, or killed); skipped{others}",
                            run=part.name)
                        lost.add(part.run)
                        discard(done)
                        done = []
                        suspects.discard(part.key)
                        held = held[1:]
                    suspects.update(p.key for p in held)
                    todo.extendleft(reversed(held))
                    fill()
                    continue
                suspects.discard(part.key)
                drain()
                fill()
                sent += outcome[2][4]
                done.append(outcome)
                if not part.last:
                    continue
                results, done = done, []
                failed = [k for k, (r, _, _) in enumerate(results) if isinstance(r, str)]
                if failed:
                    # one reader would have stopped at the failing part: what the parts after
                    # it found is not reported
                    discard(results)
                    results = results[:failed[0] + 1]
                files_with_bytes, valid, damaged, size, sent = (sum(c) for c in zip(
                    *(counters for _, _, counters in results), strict=True))
                for _, issues, _ in results:
                    reader.report.extend(issues)
                reader.files_with_bytes += files_with_bytes
                reader.valid_records += valid
                reader.damaged_event_files += damaged
                run_progress = RunProgress(progress, sent=sent, size=size)
                for result, _, _ in results:
                    if isinstance(result, OutputError):
                        discard(results)
                        raise OutputError(str(result))
                if failed:
                    reader.report.add("unreadable_run", f"{part.name}: could not be read "
                                      f"({results[-1][0]}); skipped, the other runs were read",
                                      run=part.name)
                    run_progress.done()
                    continue
                asms = [r for r, _, _ in results]
                asm = asms[0] if len(asms) == 1 else RunAssembler.joined(part.name, asms)
                run, series = asm.build()
                yield RunData(run, run_progress.follow(series, asm.points_read, tick=drain))
        finally:
            pool.stop()
            drain()
            progress_queue.close()
            progress_queue.join_thread()
            # A worker's queue sends from a thread of its own: what it put just before its
            # result went back can still be on its way when the worker is stopped, and lost.
            if progress is not None and sent > received:
                progress.advance(sent - received)
