"""One run of an event-file logdir brought up to date: the work of one sync task.

A run's state in the manifest says, per event file, how far it was archived (``end``:
the end of the last complete record), what the file looked like then (its size, a
CRC32C of its first bytes and of its last archived record) and, per run, what
TensorBoard's restart rule needs to go on reading (the last step, the file version in
force, whether a session start was seen) plus, per tag, its first metadata, the kinds
of its points and the highest step of its visible points.

When bytes were only appended to the run's last file, or new files follow it, only
those bytes are read, as a detached part of the run (see
:meth:`RunAssembler.joined`), and written as one more part. Anything else re-reads the
run whole into a part that replaces its earlier ones: a file truncated, replaced or
rewritten, a file that grew but is not the run's last, a new file that sorts before an
archived one, a restart that hides points already archived, or a tag whose new points
change the container its series needs.
"""

from __future__ import annotations

import base64
import collections
import time
from dataclasses import dataclass, field
from pathlib import Path

from tbconvert import dtypes as dt
from tbconvert import names
from tbconvert.errors import NOT_A_RUNS_FAULT, in_words, raise_if_exhausted
from tbconvert.formats.base import Options
from tbconvert.formats.tfevents import event_files
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.formats.tfevents.tagkinds import tag_container
from tbconvert.incremental.files import file_entry as _file_entry
from tbconvert.incremental.files import pending_name, plan_files
from tbconvert.incremental.manifest import RunState, state_of_run
from tbconvert.model import DataClass, Metadata, Run
from tbconvert.report import Report


@dataclass(slots=True)
class RunTask:
    """A picklable unit of work: bring run ``name`` of ``logdir`` into ``dst``."""

    name: str
    logdir: str
    files: list[str]        # the run's event files, in reading order
    dst: str
    part: str               # the part file this task may write (no manifest names it yet)
    experiment: dict        # for the part's own metadata
    state: dict | None      # the run's state in the manifest (None: a new run)
    plan: tuple | None = None   # plan_files' answer for files and state, when already known
    merged: bool = True         # the dataset merges small parts (an object store's does not)


@dataclass(slots=True)
class RunResult:
    name: str
    state: dict
    part: str | None = None         # the part written, if any
    replaces: bool = False          # the part replaces the run's earlier parts
    why: str | None = None          # why the run was read whole again
    new_bytes: int = 0
    series: int = 0                 # series of the part written (as convert counts them)
    points: collections.Counter = field(default_factory=collections.Counter)
    report: Report = field(default_factory=Report)
    flushed: bool = False           # the part is on disk already (see sync_share)
    # What is left of writing the part, when sync_run was asked to leave it (see write_part's
    # ``later``): a call for the flushing thread. Never set in a result that travels: a
    # worker answers with its parts complete.
    finish: object = field(default=None, repr=False, compare=False)


def load_for_workers() -> None:
    """Import what a sync task needs before workers are forked, or each would load it again
    (the leading process needs it for its own share of the runs too)."""
    import tbconvert.formats.parquet.writer
    import tbconvert.formats.tfevents.reader  # noqa: F401


def sync_run(task: RunTask, later: bool = False, held: dict | None = None) -> RunResult:
    """Read what is new in one run and write it as a part; never raises for bad input.
    ``later``: the part may be left to finish in the result's ``finish`` (Arrow then writes
    it in another thread while this one reads the next run). ``held``: the records of its
    new bytes, read with other runs' (see :func:`held_tails`)."""
    report = Report()
    try:
        return _sync_run(task, report, later, held)
    except NOT_A_RUNS_FAULT:
        raise
    except Exception as exc:  # noqa: BLE001 - one bad run must not cost the others
        raise_if_exhausted(exc)
        why = in_words(exc)
        return unreadable(task, f"could not be read ({why})", report)


def sync_run_here(leader: int, task: RunTask, held: dict | None = None) -> RunResult:
    """``sync_run`` for the process ``leader``, which finishes the parts it is left;
    anywhere else (a worker running the task again) the part is complete."""
    import os
    return sync_run(task, later=os.getpid() == leader, held=held)


def sync_share(tasks: list[RunTask]) -> list[RunResult]:
    """``sync_run`` of each task, as a kept worker runs its share of a round: each part is
    flushed to disk by a thread of this process while the next run is read. Flushed by the
    leading process instead, the parts of a share that arrive together would be flushed one
    after another at the end of the round, when nothing else is left to do (after a pause
    a flush takes 1-2 ms on a common disk). The answer does not wait for the flushes still
    going on (the last part's, mostly): those parts go back as not flushed, and the leading
    process flushes them beside its own last ones (a flush that failed here, too, and is
    then told)."""
    from tbconvert.incremental.manifest import Flusher
    if not tasks:
        return []
    flusher = Flusher(Path(tasks[0].dst))
    results, flushes = [], []
    try:
        for result in run_share(sync_run, tasks):
            if result.part is not None and result.state is not None:
                flushes.append((result, flusher.add(result.part)))
            results.append(result)
        for result, future in flushes:
            result.flushed = future.done() and not future.cancelled() and \
                future.exception() is None
    finally:
        flusher.close(wait=False)
    return results


def run_share(run, tasks: list[RunTask]):
    """``run(task, held=...)`` of each task in turn, yielded as it is done, the new bytes of
    their runs read together (see :func:`held_tails`)."""
    for task, held in zip(tasks, held_tails(tasks), strict=True):
        yield run(task, held=held)


def held_tails(tasks: list[RunTask]):
    """For each task in order, the records of its run's new bytes when they were read with
    those of the tasks around it (None: its run reads them itself). The new bytes of each
    sync's runs are mostly a few kilobytes, whose framing and decoding cost more a run than
    the bytes themselves: read as one buffer (see :mod:`~tbconvert.formats.tfevents.small_runs`),
    a group at a time, when its first task comes up."""
    from tbconvert.formats.tfevents.small_runs import GROUP_BYTES, GROUP_FILES
    group: list[list] = []
    held = files = 0

    def flush():
        nonlocal group, held, files
        found = _read_together(group) if len(group) > 1 else {}
        for k in range(len(group)):
            yield found.get(k)
        group, held, files = [], 0, 0

    for task in tasks:
        reads = _tail_reads(task)
        size = None if reads is None else sum(n for _, _, n in reads)
        if size is None or size > SMALL_PART_BYTES:
            yield from flush()
            yield None
            continue
        if group and (held + size > GROUP_BYTES or files + len(reads) > GROUP_FILES):
            yield from flush()
        group.append(reads)
        held += size
        files += len(reads)
    yield from flush()


def _tail_reads(task: RunTask) -> list | None:
    """``[(file, start, new bytes)]`` of a task whose plan reads only the new bytes of its
    run; None for any other (its run may be read whole)."""
    import os
    if task.plan is None or task.plan[0] is not None or not task.plan[1]:
        return None
    reads = []
    for path, start in task.plan[1]:
        if Path(path).name.endswith(event_files.PROFILE_EMPTY):
            continue
        try:
            reads.append((Path(path), start, max(os.stat(path).st_size - start, 0)))
        except OSError:
            return None
    return reads


def _read_together(group: list[list]) -> dict:
    """:func:`~tbconvert.formats.tfevents.small_runs.held_records` of the reads of each run
    of ``group`` (by its index); nothing when they are not read together, so that each run
    reads, and tells, as usual."""
    from tbconvert.formats.tfevents import small_runs
    try:
        return small_runs.held_records([(k, path, start) for k, reads in enumerate(group)
                                        for path, start, _ in reads], apart=True)
    except small_runs.Apart:
        return {}
    except Exception as exc:  # noqa: BLE001 - each run then reads alone, and tells its fault
        raise_if_exhausted(exc)
        return {}


def unreadable(task: RunTask, why: str, report: Report | None = None) -> RunResult:
    """The result of a run that could not be synced: reported, its archived data kept."""
    report = report if report is not None else Report()
    report.add("unreadable_run", f"{task.name}: {why}; its archived data was kept as it was",
               run=task.name)
    return RunResult(task.name, task.state, report=report)


# -- metadata and tag state as JSON ----------------------------------------------------------

def _md_to_json(md: Metadata) -> list:
    return [md.plugin_name, base64.b64encode(md.plugin_content).decode("ascii"),
            md.display_name, md.description, int(md.data_class)]


def _md_from_json(obj: list) -> Metadata:
    return Metadata(obj[0], base64.b64decode(obj[1]), obj[2], obj[3], DataClass(obj[4]))


# -- reading ---------------------------------------------------------------------------------

def _reader(task: RunTask, report: Report):
    from tbconvert.formats.tfevents.reader import TfeventsReader
    return TfeventsReader(Path(task.logdir), Options(), report)


# A record cut off at the end of an event file that a newer one follows, and that no writer
# touched for this long, is lost: its writer died mid-record and training went on in a new
# file. (Writers flush at most every two minutes; two may write one run at once, as
# TensorFlow 2 does, so a recent cut may still be finished.)
ABANDONED_SECONDS = 600


def _defer_tail(path: Path, last_file) -> bool:
    """Whether a record cut off at the end of ``path`` may still be finished by its writer:
    left for a later sync rather than told as lost."""
    if Path(path) == Path(last_file):
        return True
    try:
        return time.time() - path.stat().st_mtime < ABANDONED_SECONDS
    except OSError:
        return True


def _read(reader, asm: RunAssembler, reads, last_file,
          held: dict | None = None) -> tuple[dict, int]:
    """Read ``reads`` into ``asm``: per file, ``(size, end, last)``; and the bytes read.
    ``end`` is where a later sync reads on: a record cut off at the end that may still be
    finished (see _defer_tail) is read again then; one told as lost is not. ``held``: the
    records of some of the files, read already (see :func:`held_tails`)."""
    found, total = {}, 0
    try:
        for path, start in reads:
            reader.defer_partial_tail = _defer_tail(path, last_file)
            taken = held.get(path) if held else None
            if taken is not None and taken[1] == start:
                size = taken[0]
                st = reader.read_blocks(path, asm, *taken)
                total += size - start
                found[path] = (st.size, max(st.end, st.size), st.last)
                continue
            try:
                size = path.stat().st_size
            except OSError:
                size = start
            if path.name.endswith(event_files.PROFILE_EMPTY):
                found[path] = (size, start, None)
                continue
            st = reader.read_file(path, asm, start)
            if st is None or st.failed:
                # It could not be read (to its end): noted as no larger than what was read,
                # so that the next sync sees it grow and reads on from there.
                end, last = (start, None) if st is None else (st.end, st.last)
                found[path] = (end, end, last)
                continue
            total += max(size - start, 0)
            found[path] = (st.size, st.end if st.partial_tail else max(st.end, st.size), st.last)
    except BaseException:
        asm.store.close()
        raise
    return found, total


def _watched(series, tags: dict, counts: list):
    """``series`` passed on, noting per tag the highest step of a visible point, and in
    ``counts`` the tags written and the points per data class."""
    import numpy as np
    for chunk in series:
        counts[0].add(chunk.tag)
        counts[1][chunk.data_class.name.lower()] += len(chunk)
        if len(chunk):
            steps = chunk.steps if chunk.hidden is None else chunk.steps[~chunk.hidden]
            if len(steps):
                top = int(np.max(steps))
                info = tags.setdefault(chunk.tag, {})
                old = info.get("max_step")
                info["max_step"] = top if old is None else max(old, top)
        yield chunk


# A part of fewer new bytes than this is written uncompressed where parts are merged:
# compression's set-up costs such a part more than its writing, and merging (compact) soon
# folds it into a compressed part.
SMALL_PART_BYTES = 256 << 10


def _write(task: RunTask, run: Run, series, report: Report, tags: dict,
           compress: bool = True, later: bool = False) -> tuple[int, collections.Counter, object]:
    """Write the part; how many series it holds, its points per data class, and what is
    left to finish it (None: nothing, unless ``later``)."""
    from tbconvert.formats.parquet import schema as S
    from tbconvert.formats.parquet.writer import write_part
    counts = [set(), collections.Counter()]
    run_out, chunks = names.storable(run, _watched(series, tags, counts), report)
    # flushed to disk by the sync, all parts at once, before it commits
    finish = write_part(Path(task.dst) / pending_name(task.part),
                        S.experiment_from_json(task.experiment), run_out, chunks,
                        compress=compress, later=later)
    return len(counts[0]), counts[1], finish


# What a run's state says about the rules its parts were written by. 2: bfloat16 scalars are
# kept as bfloat16 tensors (before, as scalars of their bit patterns).
RULES = 2


def _stale(state: dict | None) -> bool:
    """Whether the run's parts hold what earlier rules wrote otherwise: read it whole again."""
    return state is not None and state.get("rules", 1) < RULES and any(
        code == dt.DT_BFLOAT16 for tag in state["tags"].values() for code, _ in tag["kinds"])


def _rules(state) -> int:
    """The rules a run's state (a dict or a RunState, not None) says its parts follow."""
    return state.rules if isinstance(state, RunState) else state.get("rules", 1)


def _sync_run(task: RunTask, report: Report, later: bool = False,
              held: dict | None = None) -> RunResult:
    if task.plan == (None, []) and (task.state is None or _rules(task.state) >= RULES):
        # nothing new: the state goes back as it came (a sync of many runs decodes none
        # of those it leaves alone)
        return RunResult(task.name, task.state, report=report)
    state = state_of_run(task.state)
    why, reads = task.plan if task.plan is not None else plan_files(task.files, state)
    if why is None and _stale(state):
        why = "an earlier tbconvert archived its bfloat16 scalars as their bit patterns"
        reads = [(Path(f), 0) for f in task.files]
    if why is None and not reads:
        return RunResult(task.name, state, report=report)
    reader = _reader(task, report)
    if why is None:
        result = _tail(task, state, reader, reads, report, later, held)
        if result is not None:
            return result
        why = "a restart hides points already archived, or new points change a series' form"
        reads = [(Path(f), 0) for f in task.files]
        reader = _reader(task, report)
    return _whole(task, reader, reads, why, report, later)


def _whole(task: RunTask, reader, reads, why: str, report: Report,
           later: bool = False) -> RunResult:
    asm = RunAssembler(task.name)
    found, total = _read(reader, asm, reads, task.files[-1])
    run, series = asm.build()
    tags: dict = {}
    for tag, info in asm.info.items():
        tags[tag] = {"kinds": sorted([int(c), int(n)] for c, n in info.kinds),
                     "has_none": info.has_none, "max_step": None}
    n_series, points, finish = _write(task, run, series, report, tags, later=later)
    state = {
        "rules": RULES,
        "files": [_file_entry(p, *found[p]) for p, _ in reads],
        "start_time": run.start_time,
        **asm.restart_state(),
        "metadata": {tag: _md_to_json(md) for tag, (_, md) in asm.first_metadata.items()},
        "tags": tags,
    }
    return RunResult(task.name, state, part=task.part, replaces=True,
                     why=None if task.state is None else why, new_bytes=total,
                     series=n_series, points=points, report=report, finish=finish)


def _tail(task: RunTask, state: dict, reader, reads, report: Report,
          later: bool = False, held: dict | None = None) -> RunResult | None:
    """The new bytes as one more part (``state``: the run's, as archived); None when the run
    must be read whole instead."""
    part = RunAssembler(task.name, detached=True)
    scratch = Report()
    reader.report = scratch
    found, total = _read(reader, part, reads, task.files[-1], held)
    # What the archived files ended with settles the conditions of the new part's first events.
    before = RunAssembler.resumed(task.name, state)
    run = RunAssembler.joined(task.name, [before, part])
    archived_tags = state["tags"]
    archived_md = {tag: _md_from_json(v) for tag, v in state["metadata"].items()}

    def visible_top(tag):
        info = archived_tags.get(tag)
        return None if info is None else info.get("max_step")

    for _, step, tags in run.purges:
        hit = archived_tags if tags is None else tags
        if any((top := visible_top(t)) is not None and top >= step for t in hit):
            run.store.close()
            return None
    if any(tag in archived_tags and tag not in archived_md for tag in run.first_metadata):
        # the tag's first metadata arrives only now: its archived points were stored without it
        run.store.close()
        return None
    for tag, md in archived_md.items():
        run.first_metadata[tag] = (-1, md)
    for tag, info in run.info.items():
        old = archived_tags.get(tag)
        if old is None:
            continue
        old_kinds = {(c, n) for c, n in old["kinds"]}
        md = run.first_metadata.get(tag, (0, Metadata()))[1]
        union = old_kinds | info.kinds
        has_none = old["has_none"] or info.has_none
        if tag_container(md, union, has_none) != tag_container(md, old_kinds, old["has_none"]):
            run.store.close()
            return None
        info.kinds, info.has_none = union, has_none
    report.extend(scratch.issues)
    built, series = run.build()
    new_run = Run(task.name, state["start_time"], built.records)
    tags = {tag: dict(info) for tag, info in archived_tags.items()}
    for tag, info in run.info.items():
        entry = tags.setdefault(tag, {"kinds": [], "has_none": False, "max_step": None})
        entry["kinds"] = sorted([int(c), int(n)] for c, n in info.kinds)
        entry["has_none"] = bool(info.has_none)
    metadata = dict(state["metadata"])
    for tag, (_, md) in run.first_metadata.items():
        metadata.setdefault(tag, _md_to_json(md))
    files = list(state["files"])
    for path, _ in reads:
        size, end, last = found[path]
        i = next((k for k, e in enumerate(files) if e["name"] == path.name), None)
        if last is None and i is not None:
            # nothing complete was added: the file stays as archived, only its size (and so its
            # modification time: a later sync must not take it as changed in place) is new, and
            # its end where a cut record at its end was told as lost
            old = files[i]
            files[i] = _file_entry(path, size, end, old["last"][:2] if old.get("last") else None)
            continue
        entry = _file_entry(path, size, end, last)
        if i is None:
            files.append(entry)
        else:
            files[i] = entry
    # (a run reaches here only when its parts follow today's rules: see _stale)
    new_state = dict(state, rules=RULES, files=files, tags=tags, metadata=metadata,
                     **run.restart_state())
    has_points = any(info.pieces for info in run.info.values())
    if not has_points and not built.records:
        run.store.close()
        return RunResult(task.name, new_state, new_bytes=total, report=report)
    small = total < SMALL_PART_BYTES
    # A small part is finished here: handed to another thread, Arrow's writing and closing
    # of it took twice the CPU (0.5 ms more a part, measured), which a round of many runs
    # on busy cores pays in full; only a large part's last row group is worth the overlap.
    n_series, points, finish = _write(task, new_run, series, report, tags,
                                      compress=not small or not task.merged,
                                      later=later and not small)
    return RunResult(task.name, new_state, part=task.part, new_bytes=total, series=n_series,
                     points=points, report=report, finish=finish)
