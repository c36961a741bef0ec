"""Reads event-file logdirs into the model, every record, no sampling.

Runs, file order and naming follow TensorBoard's loader (docs/format-notes.md);
legacy summaries are migrated as TensorBoard does (``legacy``); plain scalar
events are decoded in bulk (``summary_templates``), everything else through
TensorBoard's protobuf classes. Damaged records cost only themselves
(``records.scan``), and every skipped byte is reported.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tbconvert import dtypes as dt
from tbconvert import sourcefiles
from tbconvert.errors import (
    NOT_A_RUNS_FAULT,
    CorruptDataError,
    FormatError,
    in_words,
    raise_if_exhausted,
)
from tbconvert.formats.base import Progress, Reader, dependency, processes, source_size
from tbconvert.formats.mismatch import not_this_format
from tbconvert.formats.tfevents import (
    blob_templates,
    event_files,
    histo_records,
    large_records,
    legacy,
    records,
    small_messages,
    summary_templates,
)
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.formats.tfevents.spill import PieceStore
from tbconvert.model import DataClass, Experiment, Metadata, Run, RunData, RunRecord
from tbconvert.report import plural

_GRAPH_MD = Metadata(legacy.GRAPHS_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_TRM_MD = Metadata(legacy.TAGGED_RUN_METADATA_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_NONE = (0, Metadata("", b"", "", "", DataClass.UNKNOWN))   # a tag of no metadata yet
_SESSION_START = 1
_NOT_A_HEADER = "bad length checksum"


def _protobuf():
    """protobuf's Event class and the errors its decoding raises (costly to import: only for
    what the decoders without protobuf leave)."""
    message = dependency("google.protobuf.message", "tfevents")
    event_pb2 = dependency("tensorboard.compat.proto.event_pb2", "tfevents")
    return event_pb2.Event, (message.DecodeError, RuntimeError, ValueError)


class FileState:
    """What reading one file found; ``end`` and ``last`` let a later read resume after it."""

    __slots__ = ("records", "first_done", "reported", "damaged_records", "size", "end", "last",
                 "partial_tail", "failed", "learnt", "stopped")

    def __init__(self, start: int = 0, size: int = 0) -> None:
        self.records = 0        # valid records so far
        self.first_done = False
        self.reported = start   # bytes already counted as read
        self.damaged_records = False
        self.size = size
        self.end = start        # end of the last valid record
        self.last = None        # (offset, length) of the last valid record, frame included
        self.partial_tail = False   # the file ends inside a record still being written
        self.failed = False     # reading it failed (an I/O error) after ``end``
        # field maps of its wide records (merge_all of a summary per layer), for later blocks
        self.learnt = summary_templates.Learnt()
        self.stopped = start    # where reading stopped (a segment's end, see read_segments)


class Segments(NamedTuple):
    """Consecutive segments of one event file (see :func:`records.segment_starts`), read as
    :meth:`TfeventsReader.read_segments` reads them: from ``start``, where one begins, to
    the end of each segment in ``stops`` in turn (None: the end of the file)."""

    path: Path
    start: int
    stops: tuple


# Records a block's bulk decoders may leave that are still tried with templates learnt from one
# record each (tens of microseconds apiece) before protobuf, whose import takes 15-20 ms; and
# the largest record tried so (learning copies it).
FEW_LEFT = 64
FEW_LEFT_BYTES = 1 << 20
LET_GO_BYTES = 1 << 20      # a record this large, alone in its block, lets the block go once parsed

# Below this much input, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 32 << 20
# An event file of at least SEGMENT_MIN_BYTES is read in segments of about SEGMENT_BYTES,
# whatever the number of processes (so that the run is the same, byte for byte), which
# processes may read apart.
SEGMENT_BYTES = 16 << 20
SEGMENT_MIN_BYTES = 64 << 20


def segments_of(path: Path, size: int) -> list[tuple[int, int | None]]:
    """The segments ``(start, stop)`` the event file ``path`` of ``size`` bytes is read in
    (one, ``(0, None)``, for a file under SEGMENT_MIN_BYTES)."""
    starts = [0]
    if size >= SEGMENT_MIN_BYTES:
        try:
            starts = records.segment_starts(path, size, SEGMENT_BYTES)
        except OSError as exc:      # (read whole: reading it tells what is wrong)
            raise_if_exhausted(exc)
    return list(zip(starts, [*starts[1:], None], strict=True))


class RunProgress:
    """A run's share of the progress: its bytes count half when read, half as its chunks
    are written (the two passes take about as long)."""

    def __init__(self, progress: Progress | None, sent: int = 0, size: int = 0) -> None:
        self.progress = progress
        self.size = size      # source bytes of the run read so far
        self.sent = sent      # bytes already passed on

    def _to(self, target: int) -> None:
        if target > self.sent:
            if self.progress is not None:
                self.progress.advance(target - self.sent)
            self.sent = target

    def read(self, n: int) -> None:
        self.size += n
        self._to(self.size // 2)

    def done(self) -> None:
        self._to(self.size)

    def follow(self, series, points: int, tick=None):
        """``series``, advancing the second half as its points go by."""
        done = 0
        half = self.size // 2
        for chunk in series:
            yield chunk
            done += len(chunk)
            self._to(half + (self.size - half) * min(done, points) // max(points, 1))
            if tick is not None:
                tick()
        self.done()


@dataclass
class PositionedRun:
    """A run read by :meth:`TfeventsReader.read_positioned`.

    Every record has a read position, increasing through the files in order:
    ``starts[i]`` is the first position of file ``i`` (so the file of a point
    is ``searchsorted(starts, position, "right") - 1``) and every position is
    below ``end``. ``chunks`` yields ``(chunk, positions)``, the read position
    of each of the chunk's points; it must be consumed once, before the reader
    reads another run.
    """

    run: Run
    starts: np.ndarray
    end: int
    chunks: Iterator


class _PositionedAssembler(RunAssembler):
    """Keeps, for the chunk it built last, its points' read positions (the pieces' first
    column), which chunks themselves do not carry."""

    positions: np.ndarray | None = None

    def _chunk(self, tag, md, shape, pieces, purges):
        self.positions = np.concatenate([p[0] for p in pieces])
        return super()._chunk(tag, md, shape, pieces, purges)

    def positioned(self, series):
        # through map: no local of this generator holds a chunk the caller has let go
        yield from map(self._with_positions, series)

    def _with_positions(self, chunk):
        positions, self.positions = self.positions, None
        return chunk, positions


def decode(buf, starts, lengths, learnt=None, files: int = 1):
    """``(columns, blob columns, rest)``: the records decoded in bulk, and the indices of
    those left to decode one by one. ``files``: how many files the records are of."""
    columns, rest = summary_templates.decode(buf, starts, lengths, learnt=learnt)
    blob_columns, rest = blob_templates.decode(buf, starts, lengths, rest)
    if 0 < len(rest) <= FEW_LEFT * files:
        # A few records left, such as a file's first step (written without its step
        # field) or the short groups of a small file: templates learnt from them alone
        # read them exactly and spare a short reading protobuf's import. Not a large one
        # (a model's graph): learning copies the record, and there is nothing to gain.
        small = lengths[rest] <= FEW_LEFT_BYTES
        more, left = summary_templates.decode(buf, starts, lengths, only=rest[small],
                                              min_group=1)
        more_blobs, left = blob_templates.decode(buf, starts, lengths, left, min_group=1)
        columns += more
        blob_columns += more_blobs
        rest = np.sort(np.concatenate((left, rest[~small])))
    return columns, blob_columns, rest


class TfeventsReader(Reader):
    """An event-file logdir (or a single event file) as runs of series."""

    # Bytes of event records decoded at a time; smaller blocks hold fewer temporaries.
    block_size = records.BLOCK_SIZE

    value_hook: Callable | None = None
    """Called as ``value_hook(position, value)`` with every ``Summary.Value`` decoded
    one at a time (values decoded in bulk do not pass here), before it is migrated,
    with the read position of its event (see :meth:`read_positioned`). It may clear
    fields of ``value`` it has taken, so that they are not decoded twice."""

    def __init__(self, path, options, report) -> None:
        super().__init__(path, options, report)
        self.files_with_bytes = 0
        self.damaged_event_files = 0
        self.valid_records = 0
        self._runs: list | None = None
        self._run_sizes: list | None = None
        self.plugin_places: dict = {}     # {where: plugin_files.Place}, filled by runs()
        self._no_event_files = False
        self._unread: list[str] = []
        self._run_progress = RunProgress(None)
        # A record cut off by the end of the file is one still being written: when set, it
        # is left for a later read (FileState.partial_tail) instead of reported as lost.
        self.defer_partial_tail = False
        # files of the run being read whose records were read with others' (see small_runs):
        # {path: (size, start, blocks, decoded)}, what read_blocks takes
        self.held: dict = {}
        # where the last segments read (read_segments) ended: a part of a run read in
        # another process tells its leader where the segments after its own must begin
        self.stopped: int | None = None

    def experiment(self) -> Experiment:
        sidecar = self.path / event_files.EXPERIMENT_SIDECAR
        try:
            # (is_file raises where the directory may not be searched: a logdir of mode 0444)
            if not self.path.is_dir():
                return Experiment()
            if not sidecar.is_file():
                sidecar = self._nested_sidecar()
                if sidecar is None:
                    return Experiment()
        except OSError as exc:
            raise_if_exhausted(exc)
            self.report.add("bad_sidecar", f"{sidecar}: cannot be looked at ({exc.strerror}); "
                            "no experiment facts read", path=sidecar)
            return Experiment()
        from tbconvert import budget
        try:
            facts = budget.loads_json(sourcefiles.read_text(sidecar), str(sidecar))
            if not isinstance(facts, dict):
                raise CorruptDataError(f"{sidecar}: not a JSON object")
        except (OSError, ValueError, CorruptDataError) as exc:
            why = str(exc).removeprefix(f"{sidecar}: ")
            self.report.add("bad_sidecar", f"{sidecar}: unreadable experiment facts ({why}); "
                            "ignored", path=sidecar)
            return Experiment()
        from tbconvert.formats.facts import experiment_from
        return experiment_from(facts, ("experiment_id", "name", "description", "create_time",
                                       "update_time"), sidecar, self.report, "bad_sidecar")

    def _nested_sidecar(self) -> Path | None:
        """The experiment facts in a directory of the logdir (``tbdev-export -o logs/``
        writes one per experiment, ``logs/<id>/``) when nothing else in the logdir may hold
        runs: they are this experiment's. Facts of several experiments read as one cannot all
        be kept: that is reported. (One level only, and no walk of the runs: a sync asks for
        the facts every time.)"""
        found, others = [], False
        for entry in sorted(sourcefiles.listdir(self.path)):   # (the listing leaves no trace)
            if entry.name.startswith("."):
                continue
            try:
                if not entry.is_dir():      # (a link that leads nowhere, or round: not one)
                    others = others or "tfevents" in entry.name
                elif (entry / event_files.EXPERIMENT_SIDECAR).is_file():
                    found.append(entry.name)
                else:
                    others = True
            except OSError:                 # cannot be looked into: it may hold runs
                others = True
        if len(found) == 1 and not others:
            return self.path / found[0] / event_files.EXPERIMENT_SIDECAR
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3
                                            else "")
            self.report.add("experiment_facts_not_kept",
                            f"{self.path}: the experiment facts (name, description, times) in "
                            f"{shown} were not kept: each describes only the runs below it, and "
                            "an output holds the facts of one experiment (convert each such "
                            "directory on its own to keep them)", path=self.path)
        return None

    def iter_runs(self) -> Iterator[RunData]:
        runs = self.runs()
        jobs = processes(self.options.jobs)
        parts = None
        if jobs > 1 and self.parallel_size() >= PARALLEL_MIN_BYTES:
            from tbconvert.formats.tfevents import parallel
            parts = parallel.plan(runs, jobs)
        if parts is not None and len(parts) > 1:
            yield from parallel.read_runs(self, parts, jobs)
        else:
            for name, read in self._reading(runs):
                progress = RunProgress(self.options.progress)
                try:
                    asm = read(progress)
                except NOT_A_RUNS_FAULT:
                    raise
                except Exception as exc:  # noqa: BLE001 - one bad run must not cost the others
                    raise_if_exhausted(exc)
                    self.report_unreadable_run(name, exc)
                    progress.done()
                    continue
                run, series = asm.build()
                yield RunData(run, progress.follow(series, asm.points_read))
        self.check_something_read()

    def _reading(self, runs: list):
        """``(name, read)`` of each run, ``read(progress)`` reading it: small runs
        together (see :mod:`.small_runs`) unless their values go through a hook, or a
        record still being written is left for later."""
        if self.value_hook is None and not self.defer_partial_tail and len(runs) > 1:
            from tbconvert.formats.tfevents import small_runs
            yield from small_runs.plan(self, runs, self.run_sizes())
            return
        for name, files in runs:
            yield name, lambda progress, name=name, files=files: \
                self.read_run(name, files, progress=progress)

    def runs(self) -> list[tuple[str, list[Path]]]:
        """``(run name, event files)`` of every run the options select, in reading order."""
        if self._runs is None:
            problems = []

            def on_problem(kind: str, msg: str) -> None:
                problems.append(msg)
                self.report.add(kind, msg, path=self.path)

            def on_note(kind: str, msg: str, run: str | None = None):
                return self.report.add(kind, msg, path=self.path, run=run, lost=False)
            runs = event_files.discover(self.path, on_problem, on_note,
                                        wants_run=self.options.wants_run,
                                        places=self.plugin_places)
            # (a directory that could not all be looked at may hide its event files: the
            # report says why nothing was found, and an error says nothing could be read)
            self._no_event_files = not runs and not problems
            self._unread = problems if not runs else []
            self._runs = [(name, files) for name, files in runs if self.options.wants_run(name)]
        return self._runs

    def source_size(self) -> int:
        return sum(self.run_sizes())

    def run_sizes(self) -> list[int]:
        """The bytes of each run's event files, in the order of :meth:`runs`, as they were
        when first asked: the progress bar's total, the choice of worker processes and the
        plan of runs read together all look at them (20,000 runs: 40 ms of ``stat`` a look)."""
        if self._run_sizes is None:
            self._run_sizes = [sum(source_size(f) for f in files) for _, files in self.runs()]
        return self._run_sizes

    def parallel_size(self) -> int:
        """The bytes worth reading in worker processes: those of runs too large to be read
        with others (see :mod:`.small_runs`). Small runs cost less read together in one
        process than a task each (a sweep of 2,000 runs of 27 KB took twice the CPU time
        in two processes, and longer)."""
        from tbconvert.formats.tfevents.small_runs import SMALL_RUN_BYTES
        return sum(size for size in self.run_sizes() if size > SMALL_RUN_BYTES)

    def task_size(self) -> int:
        """What converting the runs in tasks has to do (:mod:`tbconvert.runtasks`, which
        gives small runs out in groups), in bytes of a large run's reading: a small run
        costs its bytes and :data:`.small_runs.SMALL_RUN_COST` more."""
        from tbconvert.formats.tfevents.small_runs import SMALL_RUN_BYTES, SMALL_RUN_COST
        return sum(size + (SMALL_RUN_COST if size <= SMALL_RUN_BYTES else 0)
                   for size in self.run_sizes())

    def plugin_source(self):
        """The files of TensorBoard's plugins beside the runs read (see
        :mod:`.plugin_copy`)."""
        from tbconvert.formats.tfevents.plugin_copy import LocalFiles
        self.runs()
        return LocalFiles(self.path, self.plugin_places)

    def report_unreadable_run(self, name: str, exc: Exception) -> None:
        """A run that failed as a whole: reported, and the other runs go on."""
        why = in_words(exc)
        self.report.add("unreadable_run", f"{name}: could not be read ({why}); skipped, the "
                        "other runs were read", run=name)

    def check_something_read(self) -> None:
        """A directory without a single event file, or a source whose files have bytes but not
        one valid record (nor a damaged one), is not event data: an error, rather than an empty
        output. (Sync, which takes a logdir that has no event file yet, asks for runs only.)"""
        if self._no_event_files:
            raise not_this_format(self.path, "tfevents", "holds no event files (no file named "
                                                         "*tfevents* in it or below)")
        self.check_readable()
        if self.path.is_file() and not self.files_with_bytes and \
                event_files.EVENT_MARK not in self.path.name:
            # (an empty file named as an event file is one its writer has only opened)
            raise CorruptDataError(f"{self.path}: an empty file (0 bytes); there is nothing in "
                                   "it to read")
        if self.files_with_bytes and not self.valid_records and not self.damaged_event_files:
            raise CorruptDataError(
                f"{self.path}: no valid event record in {self.files_with_bytes} file(s); is it "
                "really an event file or logdir? (check --from)")

    def check_readable(self) -> None:
        """No run found, and places under the source that could not be looked at (a logdir
        listed but not searchable): an error, not an empty output (or dataset)."""
        if self._unread:
            raise FormatError(f"{self.path}: no run could be read; "
                              f"{plural(len(self._unread), 'place')} under it could not be "
                              f"looked at, such as {self._unread[0].removesuffix('; skipped')}")

    def read_run(self, name: str, files: list[Path], store: PieceStore | None = None,
                 progress: RunProgress | None = None, detached: bool = False) -> RunAssembler:
        """Read every file of a run (its pieces go to ``store``); build it with ``.build()``.
        ``detached``: ``files`` are a later part of the run (see ``RunAssembler.joined``)."""
        asm = RunAssembler(name, store, detached=detached)
        self._run_progress = progress if progress is not None else RunProgress(None)
        self._read_files(asm, files)
        return asm

    def _read_files(self, asm: RunAssembler, files: list[Path]) -> list[int]:
        """Read ``files`` in order into ``asm``; the read position at the start of each (the
        assembler's store is closed if reading fails)."""
        starts = []
        try:
            for path in files:
                starts.append(asm.next_seq)
                if isinstance(path, Segments):
                    self._read_given_segments(path, asm)
                    continue
                if path.name.endswith(event_files.PROFILE_EMPTY):
                    continue  # TensorBoard skips these placeholders when reading data
                self._read_file(path, asm)
        except BaseException:
            asm.store.close()
            raise
        return starts

    def read_positioned(self, name: str, files: list[Path], *, store: PieceStore | None = None,
                        first_position: int = 0,
                        every_start_purges: bool = False) -> PositionedRun:
        """Read ``files`` as one run, keeping where each point was read (which file it
        came from), with TensorBoard's restart rule as hidden masks. Positions start at
        ``first_position``. ``every_start_purges``: every ``SessionLog.START`` purges, and
        steps out of order purge, as TensorBoard's legacy event accumulator does (its
        dashboards only purge from a run's second START on, and compare steps otherwise)."""
        asm = _PositionedAssembler(name, store)
        asm.next_seq = first_position
        if every_start_purges:
            # as if a START had been seen already: the next one purges, and every later one
            asm._seen_start = True
            asm.legacy_accumulator = True
        self._run_progress = RunProgress(None)
        starts = self._read_files(asm, files)
        try:
            run, series = asm.build()
        except BaseException:
            asm.store.close()
            raise
        return PositionedRun(run, np.array(starts, dtype=np.int64), asm.next_seq,
                             asm.positioned(series))

    def _read_file(self, path: Path, asm: RunAssembler) -> None:
        held = self.held.pop(path, None)
        if held is not None:
            self.read_blocks(path, asm, *held)
        else:
            self.read_file(path, asm)

    def _size_of(self, path: Path, asm: RunAssembler) -> int | None:
        """The size of the event file ``path`` (None: it is not read, and that is told)."""
        try:
            st = os.stat(path)
            # Only regular files: a FIFO would block forever and /dev/zero never ends.
            if not stat.S_ISREG(st.st_mode):
                self.report.add("not_a_regular_file",
                                f"{path}: not a regular file (a pipe, device or socket); skipped",
                                path=path, run=asm.name)
                return None
            return st.st_size
        except OSError as exc:
            raise_if_exhausted(exc)
            self.report.add("unreadable_file", f"{path}: cannot be read ({exc.strerror}); skipped",
                            path=path, run=asm.name)
            return None

    def read_file(self, path: Path, asm: RunAssembler, start: int = 0) -> FileState | None:
        """Read the records of ``path`` from byte ``start`` (a record boundary) into ``asm``
        (from its start: in segments, when it is large); None when the file could not be
        opened."""
        size = self._size_of(path, asm)
        if size is None:
            return None
        cuts = segments_of(path, size) if start == 0 else ()
        if len(cuts) > 1:
            return self.read_segments(path, asm, size, 0, [stop for _, stop in cuts])
        return self.read_blocks(path, asm, size, start)

    def _read_given_segments(self, item: Segments, asm: RunAssembler) -> None:
        size = self._size_of(item.path, asm)
        if size is not None:
            self.read_segments(item.path, asm, size, item.start, item.stops)

    def read_segments(self, path: Path, asm: RunAssembler, size: int, start: int,
                      stops) -> FileState:
        """Read ``path`` from ``start`` to the end of each segment in ``stops`` (None: the
        end of the file) as :meth:`read_blocks` reads a file of its own: the points it holds
        over are stored at the segment's end, and the next segment's sequence numbers follow
        on. So segments read in other processes and joined in order
        (``RunAssembler.joined``) give the same run. A segment that ends past the next cut
        (a record runs across it, or damage) has the next one start where it ended.
        ``self.stopped``: where the last one ended."""
        whole = FileState(start, size)
        told = len(self.report.issues)
        pos = start
        for stop in stops:
            if stop is not None and pos >= stop:
                continue
            state = self.read_blocks(path, asm, size, pos, stop=stop, whole=False)
            whole.records += state.records
            whole.damaged_records |= state.damaged_records
            if state.records:
                whole.end, whole.last = state.end, state.last
            whole.partial_tail, whole.failed = state.partial_tail, state.failed
            pos = whole.stopped = state.stopped
            if state.failed or pos >= size:
                break
        self.stopped = pos
        # (a file whose segments several processes read counts once: where it begins)
        self._counted(path, asm, size, start, whole, told, counts_file=start == 0)
        return whole

    def read_blocks(self, path: Path, asm: RunAssembler, size: int, start: int, blocks=None,
                    decoded=None, stop: int | None = None, whole: bool = True) -> FileState:
        """Read the records of ``path`` (of ``size`` bytes) from byte ``start`` into ``asm``:
        its ``blocks`` when they were read already, with ``decoded``, what :meth:`decode`
        gave for the one block there is when its records were decoded with others' (see
        :mod:`.small_runs`). ``stop``: the records that begin before it (a segment, see
        :meth:`read_segments`; ``whole`` False: the caller counts the file)."""
        seq_base = asm.next_seq
        state = FileState(start, size)
        told = len(self.report.issues)
        try:
            if blocks is None:
                blocks = records.scan_file(path, block_size=self.block_size, start=start,
                                           stop=stop)
            for block in blocks:
                # (a segment counts its own bytes only: the next one's are read ahead here)
                end = block.offset + len(block.buf)
                if stop is not None:
                    end = min(end, stop)
                if block.end is not None:
                    state.stopped = block.end
                self._read_block(path, asm, block, seq_base, state, decoded)
                del block     # (not held while the next one is read)
                asm.end_block(last=False)
                if end > state.reported:
                    self._run_progress.read(end - state.reported)
                    state.reported = end
        except OSError as exc:
            raise_if_exhausted(exc)
            state.failed = True
            self.report.add("unreadable_file", f"{path}: cannot be read ({exc.strerror}); skipped "
                            "the rest of it", path=path, run=asm.name)
        asm.end_file()
        done = size if stop is None else min(max(stop, state.stopped), size)
        if done > state.reported:
            self._run_progress.read(done - state.reported)
            state.reported = done
        if whole:
            self._counted(path, asm, size, start, state, told)
        if not state.records:
            return state
        asm.next_seq = seq_base + 2 * state.records + 2
        return state

    def _counted(self, path: Path, asm: RunAssembler, size: int, start: int,
                 state: FileState, told: int, counts_file: bool = True) -> None:
        """Count the file read (from ``start``) in the reader's totals, and tell when none
        of its bytes were records (``told``: the issues there were before it was read;
        ``counts_file`` False: the file is counted by whoever read its start)."""
        if size and counts_file:
            self.files_with_bytes += 1
        self.damaged_event_files += state.damaged_records
        self.valid_records += state.records
        if size > start and not state.records:
            if not start and not state.partial_tail and not state.failed:
                if not state.damaged_records:
                    # no record header checked out: what its blocks told of their bytes
                    # says the same of the whole file
                    self.report.issues[told:] = [
                        i for i in self.report.issues[told:] if i.path != str(path)
                        or i.kind not in ("corrupt_record", "truncated_record")]
                self.report.add("not_an_event_file",
                                f"{path}: not an event file (no valid record in {size} bytes); "
                                "skipped", path=path, run=asm.name)

    def _read_block(self, path: Path, asm: RunAssembler, block, seq_base: int,
                    state: FileState, decoded=None) -> None:
        for d in block.damage:
            if self.defer_partial_tail and d.reason == "truncated record" and \
                    d.offset + d.length >= state.size:
                state.partial_tail = True
                continue
            # a record whose header checks out: the file is event data, only damaged. Fewer
            # bytes than a header check nothing: a record being begun in a file named as an
            # event file, but "hello\n" in notes.txt read with --from tfevents.
            state.damaged_records |= d.reason != _NOT_A_HEADER and (
                d.length >= records.HEADER or event_files.EVENT_MARK in path.name)
            kind = "truncated_record" if d.reason == "truncated record" else "corrupt_record"
            # what follows the damage is kept, where TensorBoard's own reader gives up
            after = ("" if d.offset + d.length >= state.size else
                     ", reading went on after them (TensorBoard stops reading the file there, "
                     "so it showed none of the records after this)")
            self.report.add(kind, f"{path}: bytes {d.offset}-{d.offset + d.length}: {d.reason}; "
                                  f"skipped {d.length} bytes{after}",
                            path=path, run=asm.name)
        buf, starts, lengths = block.buf, block.starts, block.lengths
        base = seq_base + 2 * state.records
        state.records += len(starts)
        if not len(starts):
            return
        state.last = (block.offset + int(starts[-1]) - records.HEADER,
                      int(lengths[-1]) + records.HEADER + records.FOOTER)
        state.end = sum(state.last)
        columns, blob_columns, rest = decoded if decoded is not None else \
            decode(buf, starts, lengths, state.learnt)
        event_cls = decode_errors = None
        first = (np.inf, 0.0)   # (record index, wall time) of the first record that decoded
        histograms = self.value_hook is None     # a hook wants every value as protobuf's
        for i in rest.tolist():
            s, n = int(starts[i]), int(lengths[i])
            version = small_messages.file_version(buf, s, s + n)
            if version is not None:
                if i < first[0]:
                    first = (i, version[0])
                asm.file_version(base + 2 * i, version[1])
                continue
            histogram = histo_records.parse(buf, s, s + n) if histograms else None
            if histogram is not None:
                if i < first[0]:
                    first = (i, histogram[0])
                self._histogram(asm, base + 2 * i, histogram)
                continue
            if event_cls is None:
                event_cls, decode_errors = _protobuf()
            where = f"{path}: record at byte {block.offset + s - records.HEADER}"
            decoded = None
            if histograms and len(starts) == 1 and n >= large_records.PAYLOAD_BYTES and \
                    block.read_at is not None:
                large = large_records.prepare(buf, s, n, event_cls)
                if large is not None:
                    # the payload is read again on its own once the block's bytes are gone
                    block.buf = buf = b""
                    point = large.point(block.read_at, block.offset)
                    if point is not None:
                        decoded = {large.spot.value: point}
                        event = large.event
                    else:
                        buf, s = large.record(block.read_at, block.offset), 0
                        if buf is None:
                            self.report.add("corrupt_record", f"{where}: changed while it was "
                                            "read; skipped", path=path, run=asm.name)
                            continue
            if decoded is None:
                try:
                    # (a view: a slice would copy the record, which may be a large image)
                    event = event_cls.FromString(memoryview(buf)[s:s + n])
                    if len(starts) == 1 and n >= LET_GO_BYTES:
                        # A large record alone in its block (a model's graph) is in the
                        # parsed event now: the block's copy goes before the value is
                        # decoded, which makes a third.
                        block.buf = buf = b""
                except decode_errors:
                    self.report.add("corrupt_record",
                                    f"{where}: checksums fine but not an Event; skipped",
                                    path=path, run=asm.name)
                    continue
            if i < first[0]:
                first = (i, event.wall_time)
            self._event(asm, base + 2 * i, event, path, decoded)
        asm.fast_columns(base, columns)
        for cols in columns:
            if len(cols.index) and cols.index[0] < first[0]:
                first = (int(cols.index[0]), float(cols.wall_times[0]))
        for blobs in blob_columns:
            asm.fast_blobs(base + 2 * blobs.index, blobs)
            if len(blobs.index) and blobs.index[0] < first[0]:
                first = (int(blobs.index[0]), float(blobs.wall_times[0]))
        if not state.first_done and first[0] != np.inf:
            # TensorBoard's clock starts at the first record of the file that decodes
            asm.first_wall_time(first[1])
            state.first_done = True

    @staticmethod
    def _histogram(asm: RunAssembler, seq: int, histogram) -> None:
        """A legacy histogram event read by :mod:`histo_records`, as :meth:`_event` takes it."""
        wall, step, values = histogram
        several = len(values) > 1
        tags = []
        for pos, value in enumerate(values):
            kind, tag = value[:2]
            if kind == histo_records.HISTOGRAM:
                _, _, lo, hi, limits, counts = value
                md = legacy.legacy_value_metadata("histograms", tag)
                point = (dt.DT_FLOAT, legacy.migrated_histogram(limits, counts, lo, hi))
            elif kind == histo_records.SCALAR:   # merge_all's scalars beside the histograms
                md = legacy.legacy_value_metadata("scalars", tag)
                point = (dt.DT_FLOAT, np.array(value[2], dtype=np.float32))
            else:
                _, _, width, height, image = value
                md = legacy.legacy_value_metadata("images", tag, legacy.IMAGE_CONTENT)
                point = (dt.DT_STRING, dt.string_array([str(width).encode(),
                                                        str(height).encode(), image]))
            asm.metadata(seq, tag, md)
            asm.point(seq, step, wall, tag, point, pos if several else None)
            tags.append(tag)
        asm.summary_event(seq, step, tags)

    def _event(self, asm: RunAssembler, seq: int, event, path: Path,
               decoded: dict | None = None) -> None:
        """``decoded``: points of its values already decoded, by their index (a large one)."""
        what = event.WhichOneof("what")
        step, wall = int(event.step), float(event.wall_time)
        if what == "summary":
            tags = []
            for pos, value in enumerate(event.summary.value):
                if self.value_hook is not None:
                    self.value_hook(seq, value)
                # As TensorBoard's loader: metadata is filed under ``tag`` even when it is
                # empty; only a tensor value's data falls back to the old ``node_name``
                # (legacy values are migrated under ``tag`` and lose it).
                md_tag = value.tag
                tag = (value.tag or value.node_name) if value.HasField("tensor") else value.tag
                where = f"{path}: {asm.name}/{tag} step {step}"
                try:
                    md, point = decoded[pos] if decoded and pos in decoded else \
                        legacy.migrate_value(value, where)
                except dt.TensorDecodeError as exc:
                    self.report.add("undecodable_tensor", f"{where}: {exc}; kept as raw bytes",
                                    path=path, run=asm.name, tag=tag, lost=False)
                    md = legacy.metadata_from_proto(value.metadata) if value.HasField("metadata") else None
                    point = (dt.DT_RAW_PROTO, np.frombuffer(value.tensor.SerializeToString(), np.uint8))
                except CorruptDataError as exc:
                    self.report.add("corrupt_record", f"{exc}; value skipped",
                                    path=path, run=asm.name, tag=tag)
                    continue
                tags.append(md_tag)    # TensorBoard purges by the value's own tag
                if md is not None:
                    asm.metadata(seq, md_tag, md)
                if point is None and asm.first_metadata.get(md_tag, _NONE)[1].plugin_name \
                        != "hparams":    # (an hparams value without one is an empty tensor)
                    self.report.add("value_without_data", f"{where}: a value that holds "
                                    "metadata but no data (no tensor and no legacy value); "
                                    "skipped (TensorBoard's default loader shows it as an "
                                    "empty point, --load_fast=false lists the tag without "
                                    "points)", path=path, run=asm.name, tag=tag)
                asm.point(seq, step, wall, tag, point, pos)
            asm.summary_event(seq, step, tags)
        elif what == "file_version":
            asm.file_version(seq, event.file_version)
        elif what == "graph_def":
            tag = legacy.RUN_GRAPH_TAG
            asm.metadata(seq + 1, tag, _GRAPH_MD)
            asm.point(seq + 1, step, wall, tag, (dt.DT_STRING, dt.string_array([event.graph_def])))
            if asm.legacy_accumulator:
                asm.other_event(seq + 1, step)
            else:
                asm.summary_event(seq + 1, step, [tag])
        elif what == "tagged_run_metadata":
            trm = event.tagged_run_metadata
            asm.metadata(seq, trm.tag, _TRM_MD)
            asm.point(seq, step, wall, trm.tag,
                      (dt.DT_STRING, dt.string_array([trm.run_metadata])))
            if asm.legacy_accumulator:
                asm.other_event(seq, step)
            else:
                asm.summary_event(seq, step, [trm.tag])
        elif what == "meta_graph_def":
            asm.record(seq, RunRecord("meta_graph_def", step, wall, bytes(event.meta_graph_def)))
        elif what == "session_log":
            asm.record(seq, RunRecord("session_log", step, wall, event.session_log.SerializeToString()))
            if event.session_log.status == _SESSION_START:
                asm.session_start(seq, step)
        elif what == "log_message":
            asm.record(seq, RunRecord("log_message", step, wall, event.log_message.SerializeToString()))

