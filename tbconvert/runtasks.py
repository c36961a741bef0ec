"""A run's whole conversion, read and write, done by one task in a worker.

An event-file logdir converts run by run, and a run's output does not depend on
the others', so a directory destination of one part per run (a Parquet dataset,
an event-file logdir) is written by tasks, one per run: each reads its run's
files and writes its part straight into the destination's temporary directory,
under a temporary name renamed when complete (a task that runs twice, or whose
worker died half-way, never leaves a broken or a second part). This process
plans the tasks, merges their reports in run order and, last, writes the
dataset's marker and renames the output into place, so it appears whole or not
at all. The tasks run in local processes (``--jobs N``) or on a Dask cluster
(``--scheduler``, :mod:`tbconvert.cluster`); the output is the same as a
conversion in one process, byte for byte.

Locally, consecutive small runs (a sweep's) make one task, a :class:`RunGroup`: their
files are read together, as one process reads them, and a single-file destination gets
their rows in one staging file. A group whose process keeps dying is given out again a
run at a time, so that only the run that kills its process is lost.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tbconvert.errors import NOT_A_RUNS_FAULT, OutputError, UsageError, raise_if_exhausted
from tbconvert.formats.base import Options, processes, source_size
from tbconvert.report import Issue, Report


@dataclass
class RunTask:
    """Everything a worker needs to convert one run (picklable, paths as text)."""

    root: str                 # the logdir
    name: str                 # the run
    files: list[str]          # its event files, in reading order
    index: int                # its place among the runs converted
    options: Options
    kind: str                 # how a run is written apart: the writer's run_parts
    out: str                  # the destination's temporary directory (staged: the staging one)
    writer: type = None       # the destination's writer class
    experiment: object = None  # parquet: the facts every part's footer holds
    part: str = ""            # parquet, staged: the part's file name
    dest: str = ""            # staged: the output (named in errors; its staging files are not)
    run_dir: str = ""         # tfevents: the run's directory, relative to ``out``
    renamed: bool = False     # tfevents: the directory name differs from the run's
    host: str = ""            # tfevents: names the event file as this process would
    pid: int = 0


@dataclass
class RunResult:
    index: int
    name: str = ""            # the run's name as written (None: the run could not be read)
    written: bool = False
    file: str = ""            # tfevents: the event file written, relative to the output
    issues: list[Issue] = field(default_factory=list)
    runs: int = 0
    series: int = 0
    points: collections.Counter = field(default_factory=collections.Counter)
    counters: tuple = (0, 0, 0)   # files with bytes, valid records, damaged event files
    tags_seen: set = field(default_factory=set)
    tags_matched: int = 0
    sent: int = 0             # source bytes its progress counted
    staged: object = None     # staged: what the writer's stage_run returned


def _progress():
    """In a local worker process, its progress goes back to the leading process."""
    from tbconvert import workers
    from tbconvert.formats.tfevents.reader import RunProgress
    return RunProgress(workers.progress())


@dataclass
class RunGroup:
    """Small runs converted by one task: their files are read together (see
    :mod:`tbconvert.formats.tfevents.small_runs`), each run then written as its own task
    would write it. A task per run of a few tens of kilobytes cost its worker more than the
    run (a sweep of 500 such runs took five times as long in two processes as in one)."""

    tasks: list[RunTask]

    @property
    def name(self) -> str:
        first, more = self.tasks[0].name, len(self.tasks) - 1
        return f"{first} (and {more} more runs read with it)" if more else first


def convert_run(task: RunTask) -> RunResult:
    """In a worker: read one run and write its part. A run that cannot be read is reported
    (as one process reading the logdir would); only output failures raise."""
    from tbconvert import malloc
    with malloc.roomy():
        return _convert_run(task)


def convert_group(group: RunGroup) -> list[RunResult]:
    """In a worker: :func:`convert_run` of each of the group's runs, their files read
    together."""
    from tbconvert import malloc
    from tbconvert.formats.tfevents import small_runs
    from tbconvert.formats.tfevents.reader import TfeventsReader
    tasks = group.tasks
    first = tasks[0]
    stage = None
    if first.kind == "staged" and hasattr(first.writer, "group_stage"):
        name = f"{first.index:05d}.group"
        stage = first.writer.group_stage(Path(first.out) / name, Path(first.out) / _tmp_name(name))
    with malloc.roomy():
        reader = TfeventsReader(Path(first.root), first.options, Report())
        together = small_runs.together(reader, [(t.name, [Path(f) for f in t.files])
                                                for t in tasks])
        try:
            results = [_convert_run(task, together, j, stage) for j, task in enumerate(tasks)]
            if stage is not None:
                stage.finish()
        except BaseException:
            if stage is not None:
                stage.discard()
            raise
        return results


def _convert_item(item) -> list[RunResult]:
    """A task's results: one run's, or a group's."""
    if isinstance(item, RunGroup):
        return convert_group(item)
    return [convert_run(item)]


def _convert_run(task: RunTask, together=None, j: int = 0, stage=None) -> RunResult:
    from tbconvert import api, names
    from tbconvert.formats.tfevents.reader import TfeventsReader
    report = Report()
    options = dataclasses.replace(task.options, progress=None, jobs=1)
    reader = TfeventsReader(Path(task.root), options, report)
    result = RunResult(task.index)
    progress = _progress()
    try:
        if together is not None and together.has(j):
            asm = together.read_run(j, progress, reader)
        else:
            asm = reader.read_run(task.name, [Path(f) for f in task.files], progress=progress)
    except NOT_A_RUNS_FAULT:
        raise
    except Exception as exc:  # noqa: BLE001 - one bad run must not cost the others
        raise_if_exhausted(exc)
        reader.report_unreadable_run(task.name, exc)
        progress.done()
        asm = None
    if asm is not None:
        run, series = asm.build()
        series = progress.follow(series, asm.points_read)
        report.runs += 1
        # what the copy loop would hand the destination's writer (its declared contract)
        writer = task.writer
        chunks = api.select(series, options, report, writer.keeps_hidden,
                            writer.takes_hidden_witness)
        run, chunks = names.storable(run, chunks, report, keep_bytes=writer.keeps_byte_names)
        out = Path(task.out)
        if not out.is_dir():   # the conversion was given up meanwhile: write nothing
            raise OutputError(f"{out}: the output is gone; the conversion was stopped")
        result.file, result.staged = _write(task, out, run, chunks, report, stage)
        for _ in chunks:
            pass
        result.name, result.written = run.name, True
    result.issues = report.issues
    result.runs, result.series, result.points = report.runs, report.series, report.points
    result.sent = progress.sent
    result.counters = (reader.files_with_bytes, reader.valid_records, reader.damaged_event_files)
    result.tags_seen = getattr(options, "tags_seen", set())
    result.tags_matched = getattr(options, "tags_matched", 0)
    return result


def _write(task: RunTask, out: Path, run, chunks, report: Report,
           stage=None) -> tuple[str | None, object]:
    from tbconvert.output import removed_on_failure
    if task.kind == "staged":
        extra = {} if stage is None else {"group": stage}
        info = _part_file(out, task.part, task.dest, lambda tmp: task.writer.stage_run(
            tmp, run, chunks, report, task.options, **extra))
        return task.part, info
    if task.kind == "parquet":
        from tbconvert.formats.parquet.writer import write_part
        _part_file(out, task.part, out / task.part,
                   lambda tmp: write_part(tmp, task.experiment, run, chunks))
        return task.part, None
    from tbconvert.formats.tfevents.writer import write_run_file

    def guard(fn):
        with removed_on_failure(lambda: None, out / task.run_dir):
            return fn()
    path = write_run_file(out, task.run_dir, task.renamed, run, chunks, report, task.index,
                          guard, keep_all=task.options.restarts == "keep-all", host=task.host,
                          pid=task.pid, skip_empty=task.options.tags is not None)
    return (None if path is None else path.relative_to(out).as_posix()), None


def _part_file(out: Path, part: str, named, write):
    """``write(path)`` into a temporary name in ``out``, renamed ``part`` once complete (a task
    run twice, or whose worker died half-way, never leaves a broken part); what it returned.
    A failure removes the temporary file and names ``named``."""
    from tbconvert.output import removed_on_failure
    tmp = out / _tmp_name(part)
    with removed_on_failure(lambda: tmp.unlink(missing_ok=True), named, also=BaseException):
        done = write(tmp)
        if not (isinstance(done, dict) and "group" in done):   # (a run staged in its group's file)
            os.replace(tmp, out / part)
    return done


_TMP = ".tbconvert-part-"


def _tmp_name(name: str) -> str:
    return f".{name}{_TMP}{uuid.uuid4().hex[:12]}"


# -- the leading process --------------------------------------------------------------------

def splits(reader, writer) -> bool:
    """Whether this conversion can be cut into one task per run."""
    from tbconvert.formats.tfevents.reader import TfeventsReader
    return type(reader) is TfeventsReader and reader.path.is_dir() and writer.run_parts is not None


def worth_splitting(reader, writer, jobs: int) -> bool:
    """Locally, tasks pay off for several runs with enough to do."""
    from tbconvert.formats.tfevents import reader as tfevents_reader
    jobs = processes(jobs)
    return (jobs > 1 and splits(reader, writer) and len(reader.runs()) > 1
            and reader.task_size() >= tfevents_reader.PARALLEL_MIN_BYTES)


def copy_in_tasks(reader, writer, report: Report, *, scheduler: str | None = None) -> None:
    """:func:`tbconvert.api.copy`, one task per run, in local processes (``reader.options.jobs``)
    or on the Dask cluster at ``scheduler``."""
    if not splits(reader, writer) or (scheduler is not None and writer.run_parts == "staged"
                                      and not writer.staged_on_cluster):
        raise UsageError("--scheduler converts an event-file logdir, one run per task (to a "
                         "Parquet dataset or file, event files or long-form CSV); convert this "
                         "source or destination without --scheduler")
    kind = writer.run_parts
    options = reader.options
    progress = options.progress
    experiment = reader.experiment()
    writer.write_experiment(experiment)
    runs = reader.runs()
    if progress is not None:
        progress.start(reader.source_size())
    scratch = None
    if kind == "staged":
        from tbconvert.output import ScratchDir
        scratch = ScratchDir(writer.path)
        out = scratch.path
    else:
        out = writer.out.tmp
    try:
        _run(reader, writer, report, scheduler, kind, experiment, runs, out)
    finally:
        if scratch is not None:
            scratch.remove()
    reader.check_something_read()
    if progress is not None:
        progress.finish()


def _run(reader, writer, report, scheduler, kind, experiment, runs, out) -> None:
    from tbconvert import cluster
    options = reader.options
    progress = options.progress
    task_options = dataclasses.replace(options, progress=None, jobs=1)
    tasks = []
    for index, (name, files) in enumerate(runs):
        task = RunTask(str(reader.path), name, [str(f) for f in files], index, task_options,
                       kind, str(out), type(writer))
        if kind == "parquet":
            from tbconvert.formats.parquet.writer import part_name
            task.experiment, task.part = experiment, part_name(index, name)
        elif kind == "staged":
            task.part, task.dest = f"{index:05d}.run", str(writer.path)
        else:
            task.run_dir, task.renamed = writer.claim_dir(name)
            task.host, task.pid = _host(), os.getpid()
        tasks.append(task)
    sizes = [sum(source_size(Path(f)) for f in t.files) for t in tasks]

    def lost(task: RunTask, why: str) -> RunResult:
        result = RunResult(task.index)
        result.issues = [Issue("unreadable_run", f"{task.name}: {why}; skipped, the other runs "
                               "were read", run=task.name)]
        return result

    counted = _Counting(progress) if progress is not None else None
    appender = _Appender(writer, tasks) if kind == "staged" else None

    def arrived(_k: int, results: list[RunResult] | None) -> None:
        if appender is not None and results is not None:
            for result in results:
                appender.arrived(result.index, result)

    items = _items(tasks, sizes, scheduler, options.jobs)
    # This process converts runs beside its workers, unless it adds a sweep's staged runs to
    # the output as they come: in one process, the two took turns at the interpreter's lock,
    # and groups of small runs took 1.8 times the CPU time here that they took in a worker
    # (large runs, few and each mostly Arrow's or h5py's work, went as fast either way).
    share = appender is None or not any(isinstance(item, RunGroup) for item in items)

    def run(items: list) -> list:
        return cluster.run_tasks(
            _convert_item, items, scheduler=scheduler, jobs=options.jobs, progress=counted,
            sizes=[sum(sizes[t.index] for t in _tasks_of(item)) for item in items],
            lost=lambda item, why: None if isinstance(item, RunGroup) else [lost(item, why)],
            share=share, on_result=arrived)

    try:
        found = run(items)
        # a group whose processes kept dying: its runs again, each alone, so that only the
        # one that kills its process is lost
        again = [t for item, r in zip(items, found, strict=True) if r is None
                 for t in item.tasks]
        if again:
            found += run(again)
        if appender is not None:
            appender.finish()
    except BaseException:
        if appender is not None:
            appender.stop()
        raise
    results = sorted((r for rs in found if rs is not None for r in rs), key=lambda r: r.index)
    if counted is not None and scheduler is None:
        # what a worker reported just before it was stopped may never have arrived
        missing = sum(r.sent for r in results) - counted.done
        if missing > 0:
            progress.advance(missing)
    _merge(reader, writer, report, kind, tasks, results)
    _tidy(out)


def _tasks_of(item) -> list[RunTask]:
    return item.tasks if isinstance(item, RunGroup) else [item]


def _items(tasks: list[RunTask], sizes: list[int], scheduler, jobs: int) -> list:
    """The tasks to hand out: consecutive small runs in groups (locally; a cluster gets a
    task per run), each group at most an eighth of the small runs' bytes a process, so
    that every process gets several."""
    if scheduler is not None:
        return list(tasks)
    from tbconvert.formats.tfevents import small_runs
    small = sum(size for size in sizes if size <= small_runs.SMALL_RUN_BYTES)
    cap = max(small_runs.SMALL_RUN_BYTES, small // (8 * processes(jobs)))
    return [tasks[g[0]] if len(g) == 1 else RunGroup([tasks[k] for k in g])
            for g in small_runs.groups(sizes, [len(t.files) for t in tasks], cap)]


class _Appender:
    """Adds staged runs to a single-file output in run order, in a thread of its own, as
    their tasks finish: the writing overlaps the reading of later runs (the work of such a
    writer, Arrow or HDF5 calls, mostly runs outside Python's lock).

    No lock is shared with the calling thread: Ctrl-C can strike that thread anywhere, also
    between taking a lock and the block that would release it, and this thread must still
    be able to stop. Results are handed over in a dict (one item set at a time, which Python
    does whole) and the thread looks for the next one every few milliseconds."""

    POLL = 0.005

    def __init__(self, writer, tasks) -> None:
        from tbconvert.interrupts import Thread
        self.writer, self.tasks = writer, tasks
        self.ready: dict = {}
        self.error: BaseException | None = None
        self.stopping = False
        self.thread = Thread(target=self._work, name="tbconvert-append")
        self.thread.start()

    def arrived(self, k: int, result: RunResult) -> None:
        if self.error is not None:
            raise self.error
        self.ready[k] = result

    def _work(self) -> None:
        import time
        try:
            for k, task in enumerate(self.tasks):
                while k not in self.ready:
                    if self.stopping:
                        return
                    time.sleep(self.POLL)
                if self.stopping:
                    return
                self._append(task, self.ready.pop(k))
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            self.error = exc

    def _append(self, task: RunTask, result: RunResult) -> None:
        path = Path(task.out) / task.part
        try:
            if result.written:
                self.writer.append_staged(path, result.staged, result.name)
        finally:
            path.unlink(missing_ok=True)

    def stop(self) -> None:
        """Stop after the run being added (the output is then given up)."""
        self.stopping = True
        self.thread.wait_held()

    def finish(self) -> None:
        self.thread.wait()
        if self.error is not None:
            raise self.error


def _merge(reader, writer, report: Report, kind: str, tasks, results) -> None:
    options = reader.options
    written = 0
    for task, result in zip(tasks, results, strict=True):
        report.extend(result.issues)
        report.runs += result.runs
        report.series += result.series
        report.points.update(result.points)
        files_with_bytes, valid, damaged = result.counters
        reader.files_with_bytes += files_with_bytes
        reader.valid_records += valid
        reader.damaged_event_files += damaged
        if hasattr(options, "tags_seen"):
            options.tags_seen |= result.tags_seen
            options.tags_matched += result.tags_matched
        if not result.written:
            _remove_stale(task)
            continue
        if kind == "staged":
            pass   # added to the output as it arrived
        elif kind == "parquet":
            # a run that could not be read has no part: the later parts move up one place,
            # as one process would have numbered them
            name = writer.next_part(result.name)
            if name != task.part:
                os.replace(Path(task.out) / task.part, Path(task.out) / name)
            writer.adopt_part(name, result.name)
        else:
            # as above: the event file's number counts the runs written before it, a run that
            # --tags left without a file among them (as in one process)
            if result.file is not None:
                from tbconvert.formats.tfevents.event_files import WRITER_SUFFIX
                stem, _, _ = result.file[:-len(WRITER_SUFFIX)].rpartition(".")
                name = f"{stem}.{written}{WRITER_SUFFIX}"
                if name != result.file:
                    os.replace(Path(task.out) / result.file, Path(task.out) / name)
            writer.skip_counter()
        written += 1


class _Counting:
    def __init__(self, progress) -> None:
        self.progress, self.done = progress, 0

    def advance(self, n: int) -> None:
        self.done += n
        self.progress.advance(n)


def _remove_stale(task: RunTask) -> None:
    """A run given up (its workers kept dying) may still have had its part written by an
    attempt whose worker died just after: it goes, so the output holds no run twice or
    unlisted."""
    out = Path(task.out)
    if task.kind in ("parquet", "staged"):
        (out / task.part).unlink(missing_ok=True)
        return
    from tbconvert.formats.tfevents.event_files import WRITER_SUFFIX
    directory = out / task.run_dir if task.run_dir != "." else out
    if directory.is_dir():
        for f in directory.glob(f"*.{task.host}.{task.pid}.{task.index}{WRITER_SUFFIX}"):
            f.unlink(missing_ok=True)


def _tidy(out: Path) -> None:
    """Remove what tasks whose workers died left half-written."""
    from tbconvert.formats.tfevents.writer import PART_TMP
    for dirpath, _dirs, files in os.walk(out):
        for f in files:
            if _TMP in f or f.startswith(PART_TMP):
                try:
                    os.unlink(os.path.join(dirpath, f))
                except OSError:
                    pass


def _host() -> str:
    from tbconvert.formats.tfevents import event_files
    return event_files.host_name() or socket.gethostname()
