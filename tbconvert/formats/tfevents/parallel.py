"""Reading the runs of a logdir in worker processes, handing them over in order.

(A destination written one part per run has its runs read *and written* in the
workers instead: :mod:`tbconvert.runtasks`. What is here serves single-file
destinations and the files of one large run.)

The work is cut into *parts*: a run, or, for a run whose files are large
enough to share, consecutive files of it; an event file large enough is read in
segments (see :func:`~tbconvert.formats.tfevents.records.segment_starts`),
which parts may share out, in one process as in several. Each
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
going through them all would (each segment of a file is read as a file of its
own, by one process too). A part that begins at a cut must begin where the part
before it ended: a cut that fell inside a record (event records held as data in
a record, say) is found so, and the run is then read again in this process.

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
from tbconvert.formats.tfevents.reader import RunProgress, Segments, TfeventsReader, segments_of
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
    """Consecutive files of one run, or segments of a large one (see
    :class:`~tbconvert.formats.tfevents.reader.Segments`), read by one worker."""

    run: int              # index of the run in reading order
    name: str
    files: list           # paths, and Segments
    first: bool           # holds the run's first file
    last: bool            # holds the run's last file

    @property
    def key(self) -> tuple[int, str]:
        if not self.files:
            return self.run, ""
        head = self.files[0]
        return self.run, (f"{head.path}@{head.start}" if isinstance(head, Segments)
                          else str(head))


def plan(runs, jobs: int) -> list[Part]:
    """The parts to read ``runs`` in: a run of several files, or of a file large enough to
    be read in segments, is cut into up to ``2 * jobs`` parts of consecutive files and
    segments (they differ in how long they take to read; a worker done early takes the next
    part)."""
    parts: list[Part] = []
    for index, (name, files) in enumerate(runs):
        pieces = _pieces(files)
        target = max(PART_MIN_BYTES, sum(size for _, size in pieces) / (2 * jobs))
        groups: list[list] = [[]]
        held = 0
        for piece, size in pieces:
            if groups[-1] and held >= target:
                groups.append([])
                held = 0
            groups[-1].append(piece)
            held += size
        for k, group in enumerate(groups):
            parts.append(Part(index, name, _joined_segments(group), k == 0,
                              k == len(groups) - 1))
    return parts


def _pieces(files: list[Path]) -> list[tuple]:
    """``(file or segment, bytes)`` of a run's files in order, each large file's segments
    apart."""
    pieces: list[tuple] = []
    for path in files:
        size = source_size(path)
        cuts = segments_of(path, size)
        if len(cuts) < 2:
            pieces.append((path, size))
            continue
        for start, stop in cuts:
            pieces.append((Segments(path, start, (stop,)),
                           (size if stop is None else stop) - start))
    return pieces


def _joined_segments(group: list) -> list:
    """A part's pieces, the consecutive segments of one file as one :class:`Segments`."""
    out: list = []
    for piece in group:
        if isinstance(piece, Segments) and out and isinstance(out[-1], Segments) and \
                out[-1].path == piece.path:
            out[-1] = out[-1]._replace(stops=out[-1].stops + piece.stops)
        else:
            out.append(piece)
    return out


def _landed(parts: list[Part], ends: list) -> bool:
    """Whether each part that begins inside a file begins where the part before it ended
    (else a record ran across the cut, and the run is read again in one go)."""
    for k in range(1, len(parts)):
        head = parts[k].files[0] if parts[k].files else None
        if isinstance(head, Segments) and head.start and ends[k - 1] != head.start:
            return False
    return True


def _read(root, options, name, files, spill_dir, detached=False):
    """In a worker: read one part of a run. Returns (assembler or error text, issues,
    counters)."""
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
    return result, report.issues, counters, reader.stopped


def read_runs(reader, parts: list[Part], jobs: int) -> Iterator[RunData]:
    """``reader.iter_runs()`` for the runs ``parts`` cut up, read by ``jobs`` processes."""
    from tbconvert.formats.tfevents.assemble import RunAssembler
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
        for result, *_ in results:
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
            done_parts: list = []      # and those parts
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
                        done, done_parts = [], []
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
                done_parts.append(part)
                if not part.last:
                    continue
                results, done = done, []
                run_parts, done_parts = done_parts, []
                failed = [k for k, (r, *_) in enumerate(results) if isinstance(r, str)]
                if not failed and not _landed(run_parts, [r[3] for r in results]):
                    # a record ran across a cut: read in one go here, as one process reads
                    discard(results)
                    yield _read_here(reader, part.name, run_parts, progress, drain,
                                     sum(counters[4] for _, _, counters, _ in results))
                    continue
                if failed:
                    # one reader would have stopped at the failing part: what the parts after
                    # it found is not reported
                    discard(results)
                    results = results[:failed[0] + 1]
                files_with_bytes, valid, damaged, size, run_sent = (sum(c) for c in zip(
                    *(counters for _, _, counters, _ in results), strict=True))
                for _, issues, *_ in results:
                    reader.report.extend(issues)
                reader.files_with_bytes += files_with_bytes
                reader.valid_records += valid
                reader.damaged_event_files += damaged
                run_progress = RunProgress(progress, sent=run_sent, size=size)
                for result, *_ in results:
                    if isinstance(result, OutputError):
                        discard(results)
                        raise OutputError(str(result))
                if failed:
                    reader.report.add("unreadable_run", f"{part.name}: could not be read "
                                      f"({results[-1][0]}); skipped, the other runs were read",
                                      run=part.name)
                    run_progress.done()
                    continue
                asms = [r for r, *_ in results]
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


def _read_here(reader, name: str, parts: list[Part], progress, tick, sent: int) -> RunData:
    """The run whose ``parts`` were read apart, read again in this process from its first
    file to its last, as one process reads it (what its parts told is let go of; the
    progress they ``sent`` is not told again)."""
    files: list[Path] = []
    for part in parts:
        for item in part.files:
            path = item.path if isinstance(item, Segments) else item
            if not files or files[-1] != path:
                files.append(path)
    run_progress = RunProgress(progress, sent=sent)
    asm = reader.read_run(name, files, progress=run_progress)
    run, series = asm.build()
    return RunData(run, run_progress.follow(series, asm.points_read, tick=tick))
