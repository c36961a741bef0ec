"""``tbconvert sync SRC DST``: keep a run-partitioned Parquet dataset up to date with a logdir.

Each sync reads only what is new in the event-file logdir ``SRC`` (new runs, new event
files, bytes appended to archived files) and adds it to the directory dataset ``DST`` as
new part files, one per changed run (``part-NNNNN-<hint>-gGGGG.parquet``, G the sync's
generation). The dataset then holds what ``convert SRC DST --to parquet`` would write,
hidden flags included: a run whose history changed (a file truncated or rewritten, a
restart that hides archived points) is read whole into a part replacing its earlier ones.
A run's small parts are merged as they pile up (:mod:`tbconvert.incremental.compact`).

The manifest (``_tbconvert.json``, the dataset's marker) lists the parts and keeps each
run's reading state; it is replaced atomically, last, so a sync that is killed leaves the
dataset as it was. A lock file keeps a second sync off the same dataset.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from tbconvert.errors import (
    FormatError,
    OutOfResourcesError,
    OutputError,
    OutputExistsError,
    TbconvertError,
    UsageError,
)
from tbconvert.formats.parquet import MARKER_FILE
from tbconvert.incremental.lock import Lock
from tbconvert.report import Report, given

__all__ = ["SyncReport", "sync"]


@dataclass
class SyncReport(Report):
    """A :class:`~tbconvert.report.Report` with what the sync found new.

    ``runs`` counts the source's runs, changed or not; ``series`` and ``points`` count what
    this sync wrote (as :func:`tbconvert.convert` counts them, hidden points included), so
    they are 0 when nothing was new.
    """

    generation: int = 0
    # an export root: the generation each experiment synced is at (by its dataset's name), and
    # the experiments that could not be synced (name, error), whose counts are left out
    experiments: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    new_bytes: int = 0            # source bytes read (new, or of runs read whole again)
    runs_added: int = 0
    runs_extended: int = 0        # runs that got one more part (new bytes that hold no
                                  # point, such as a record still being written: unchanged)
    runs_rearchived: int = 0      # runs read whole again (their history changed)
    runs_removed: int = 0         # runs gone from the source, taken out of the dataset
    runs_unchanged: int = 0
    parts_written: int = 0
    parts_merged: int = 0         # parts merged into fewer (a run kept by many syncs)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out["sync"] = {k: getattr(self, k) for k in (
            "generation", "new_bytes", "runs_added", "runs_extended", "runs_rearchived",
            "runs_removed", "runs_unchanged", "parts_written", "parts_merged")}
        out["sync"]["experiments"] = dict(self.experiments)
        out["sync"]["failures"] = [{"experiment": name, "error": type(exc).__name__,
                                    "message": str(exc)} for name, exc in self.failures]
        return out

    @property
    def changed_nothing(self) -> bool:
        """Whether the dataset is as it was: no part written or merged, no run removed, nothing
        to tell."""
        return not (self.parts_written or self.parts_merged or self.runs_removed
                    or self.runs_rearchived or self.runs_added or self.issues or self.failures)

    def summary(self) -> str:
        head = f"generation {self.generation}"
        if self.experiments:
            low, high = min(self.experiments.values()), max(self.experiments.values())
            head = (f"{len(self.experiments)} experiment(s) at generation "
                    f"{low if low == high else f'{low}-{high}'}")
        return (f"{head}: {self.runs_added} run(s) added, "
                f"{self.runs_extended} extended, {self.runs_rearchived} read whole again, "
                f"{self.runs_removed} removed, {self.runs_unchanged} unchanged; "
                f"{self.new_bytes} source bytes read, {self.parts_written} part(s) written"
                + (f", {self.parts_merged} merged into fewer" if self.parts_merged else ""))


def sync(src, dst, *, scheduler: str | None = None, break_lock: bool = False,
         report: SyncReport | None = None, storage_options: dict | None = None,
         jobs: int = 1, allow_pickle: bool = False) -> SyncReport:
    """Bring the Parquet directory dataset ``dst`` up to date with the logdir ``src``.

    Example::

        report = tbconvert.sync("logs/", "archive/")     # again whenever logs/ grew
        print(report.summary())

    ``scheduler``: the address of a ``dask.distributed`` scheduler whose workers read the
    runs (they must see ``src`` and ``dst`` at the same paths); None reads them here.
    ``break_lock``: take the dataset's lock even if its holder looks alive.
    ``jobs``: runs with new data are read and written by this many processes (0: one per
    core) when there is much to read (a first sync, a large logdir that grew a lot); the
    dataset is the same for every ``jobs``.
    ``src`` and ``dst`` may be fsspec URLs (``s3://bucket/logs``); ``storage_options`` go
    to the store (see :mod:`tbconvert.incremental.store`).
    A second sync on the same ``dst`` is refused while one runs. ``allow_pickle``: read the
    pickled string tensors of TensorBoard 2.3 exports (unpickling can run code from them).
    """
    from tbconvert.api import check_jobs, check_scheduler
    check_jobs(jobs)
    check_scheduler(scheduler)
    report = given(report, SyncReport)
    start = len(report.issues)
    try:
        return _sync(src, dst, scheduler, break_lock, report, storage_options, jobs,
                     allow_pickle=allow_pickle)
    finally:
        if scheduler is not None:
            from tbconvert import remote
            remote.public_report(report, start)


def _sync(src, dst, scheduler, break_lock: bool, report: SyncReport, storage_options,
          jobs: int, workers=None, allow_pickle: bool = False, sweeps=None,
          committed=None) -> SyncReport:
    """:func:`sync`; ``workers`` (a :class:`~tbconvert.kept.KeptWorkers` pool kept between
    syncs, as :func:`~tbconvert.incremental.watch.sync_watch` keeps one) take a share of
    the runs of a small sync too; ``sweeps`` (a watch's :class:`manifest.Sweeps`) tells when
    the whole dataset is next looked through for garbage; ``committed`` (a watch's
    :class:`manifest.Committed`) keeps the manifest a round commits for the next round."""
    from tbconvert import remote
    src, dst = remote.localize(src), remote.localize(dst)
    if remote.is_remote(src) or remote.is_remote(dst):
        return _sync_url(src, dst, scheduler, break_lock, report, storage_options, jobs,
                         allow_pickle)
    src, dst = Path(remote.for_workers(src, scheduler)), Path(remote.for_workers(dst, scheduler))
    kind = _check_source(src)
    from tbconvert.output import check_destination, made_in_place
    check_destination(src, dst)
    if kind == "tbdev":
        _sync_export(src, dst, report, break_lock, allow_pickle)
        return report
    # A first sync that fails leaves no dataset directory behind: everything it wrote there
    # is gone once its lock is released (a committed dataset is never empty, so it stays).
    with made_in_place(dst):
        _prepare_destination(dst)
        with Lock(dst, report, break_lock=break_lock):
            survey = _survey(src, dst, committed=committed)
            if not _nothing_new(survey, report):
                _sync_locked(src, dst, scheduler, report, survey=survey, jobs=jobs,
                             workers=workers, sweeps=sweeps, committed=committed)
            else:
                from tbconvert.incremental import manifest
                manifest.remove_garbage(dst, {"parts": survey.marker_parts}, left=(),
                                        sweeps=sweeps)
    report.outputs.append(str(dst))
    return report


def _sync_url(src, dst, scheduler, break_lock: bool, report: SyncReport,
              storage_options, jobs: int, allow_pickle: bool = False) -> SyncReport:
    """A sync whose source or dataset is at a URL. A source URL is staged whole first (as
    every remote source is); a dataset URL is kept as :mod:`tbconvert.incremental.store`
    describes."""
    from tbconvert import remote
    if scheduler is not None:
        raise UsageError("--scheduler works with local (or mounted) SRC and DST only; sync "
                         "from or to a URL without it")
    if remote.is_remote(src) and remote.is_remote(dst):
        remote.check_overlap(src, dst)
    stage = None
    try:
        if remote.is_remote(src):
            from tbconvert.remote.source import SourceStage
            stage = SourceStage(src, storage_options, report, None)
            remote.publish(stage.local, src)
            local_src = Path(stage.fetch())
        else:
            local_src = Path(src)
        if not remote.is_remote(dst):
            return sync(local_src, dst, break_lock=break_lock, report=report, jobs=jobs,
                        allow_pickle=allow_pickle)
        _sync_to_store(local_src, str(dst), break_lock, report, storage_options, allow_pickle)
    finally:
        if stage is not None:
            stage.cleanup()
        remote.public_report(report)
    return report


def _sync_to_store(src: Path, url: str, break_lock: bool, report: SyncReport,
                   storage_options, allow_pickle: bool = False) -> None:
    from tbconvert.incremental.store import StoreDataset, StoreLock
    _check_dataset_name(url)
    kind = _check_source(src)
    if kind == "tbdev":
        from tbconvert.incremental import exports
        if exports.experiments(src) != [(src, None)]:
            raise UsageError(f"{src}: an export root syncs into a local directory of datasets; "
                             "sync each experiment_<id>/ to its own URL")
    store = StoreDataset(url, storage_options)
    try:
        with StoreLock(store, report, break_lock=break_lock):
            store.list()
            store.fetch_marker()
            if kind == "tbdev":
                from tbconvert.incremental import exports
                exports.sync_experiment(src, store.stage, report, store=store,
                                        allow_pickle=allow_pickle)
            else:
                survey = _survey(src, store.stage, check_parts=False)
                if not _nothing_new(survey, report):
                    _sync_locked(src, store.stage, None, report, store=store, survey=survey)
                else:      # parts a killed sync uploaded, which listing the prefix shows
                    store.remove_garbage(store.stage, {"parts": survey.marker_parts})
    except BaseException:
        store.abort()
        raise
    finally:
        store.cleanup()
    report.outputs.append(url)


def _sync_export(src: Path, dst: Path, report: SyncReport, break_lock: bool,
                 allow_pickle: bool = False) -> None:
    """A TensorBoard.dev export: one dataset, or one per experiment of an export root."""
    from tbconvert.incremental import exports
    from tbconvert.output import made_in_place
    targets = exports.experiments(src, report)
    if targets == [(src, None)]:
        targets = [(src, dst)]
    else:
        if dst.exists() and (not dst.is_dir() or (dst / MARKER_FILE).exists()):
            raise OutputExistsError(f"{dst}: an export root syncs into a directory of datasets, "
                                    "one per experiment; this is not one (choose another DST)")
        targets = [(path, dst / name) for path, name in targets]
    root = targets != [(src, dst)]
    if not root:
        _sync_experiments(targets, root, report, break_lock, allow_pickle)
        return
    # A second sync of the root is refused whole: experiment by experiment, two syncs would
    # each take the experiments the other had not, and fail on the rest.
    try:
        with made_in_place(dst):
            dst.mkdir(parents=True, exist_ok=True)
            with Lock(dst, report, break_lock=break_lock):
                _sync_experiments(targets, root, report, break_lock, allow_pickle)
                _tell_experiments_gone(dst, {target.name for _, target in targets}, report)
    except BaseException as exc:
        # (what the command says of a sync cut short: experiments synced before it stay)
        exc.aftermath = "; the dataset of each experiment not yet synced was left as it was"
        raise


def _tell_experiments_gone(dst: Path, synced: set, report: SyncReport) -> None:
    """Note the datasets of ``dst`` whose experiment left the export root: they are kept as
    they were (an export root is an archive of experiments; removing one is the user's
    choice)."""
    try:
        entries = sorted(dst.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name not in synced and (entry / MARKER_FILE).is_file():
            report.add("experiment_not_in_source",
                       f"{entry}: experiment {entry.name} is no longer in the source root; its "
                       "dataset is kept as it was (remove the directory to drop it)",
                       path=entry, lost=False)


def _sync_experiments(targets, root: bool, report: SyncReport, break_lock: bool,
                      allow_pickle: bool) -> None:
    from tbconvert.incremental import exports
    from tbconvert.output import made_in_place
    for path, target in targets:
        # an experiment of a root counts apart, so that one that fails adds nothing
        own = SyncReport() if root else report
        try:
            with made_in_place(target):
                _prepare_destination(target)
                with Lock(target, own, break_lock=break_lock):
                    exports.sync_experiment(path, target, own, allow_pickle=allow_pickle)
        except TbconvertError as exc:
            if not root or isinstance(exc, OutOfResourcesError):
                raise     # (no memory or file handles left: every other would fail alike)
            # one broken experiment of a root costs only itself (what it noted before it
            # failed is told; what it had written is gone, so not counted)
            report.extend(own.issues)
            report.failures.append((path.name, exc))
            continue
        if root:
            _add_experiment(report, own, target.name)
        report.outputs.append(str(target))
    if root and report.failures and not report.outputs:
        raise report.failures[0][1]


def _add_experiment(report: SyncReport, own: SyncReport, name: str) -> None:
    """Count the sync of one experiment of an export root in the root's ``report``."""
    report.extend(own.issues)
    report.experiments[name] = own.generation
    for counter in ("runs", "series", "new_bytes", "runs_added", "runs_extended",
                    "runs_rearchived", "runs_removed", "runs_unchanged", "parts_written",
                    "parts_merged"):
        setattr(report, counter, getattr(report, counter) + getattr(own, counter))
    report.points.update(own.points)


def _check_source(src: Path) -> str:
    """``"tfevents"`` or ``"tbdev"``: what kind of source ``src`` is."""
    if not src.exists():
        raise FormatError(f"{src}: no such file or directory")
    from tbconvert import registry
    try:
        fmt = registry.detect_source(src)
    except FormatError:
        if src.is_dir():
            return "tfevents"   # a logdir with no event file yet: nothing to archive so far
        raise
    if fmt.name not in ("tfevents", "tbdev"):
        raise UsageError(f"{src}: sync reads event-file logdirs and TensorBoard.dev exports; "
                         f"this is a {fmt.name} source (use convert for it)")
    return fmt.name


def _check_dataset_name(dst) -> None:
    """A dataset named like a Parquet file would be read as one (or hide one at that URL)."""
    if str(dst).rstrip("/").lower().endswith((".parquet", ".pq")):
        raise UsageError(f"{dst}: sync keeps a directory dataset; choose a name without the "
                         ".parquet suffix")


def _prepare_destination(dst: Path) -> None:
    _check_dataset_name(dst)
    if dst.exists() and not dst.is_dir():
        raise OutputExistsError(f"{dst}: exists and is not a directory; sync needs a "
                                "directory dataset (choose another DST)")
    if dst.is_dir() and not (dst / MARKER_FILE).exists():
        # what a first sync that was killed leaves: its parts, lock and manifest draft
        names = [p.name for p in dst.iterdir()]
        parts = [n for n in names if re.fullmatch(r"part-\d{5}-.*-g[A-Z]?\d{4,}\.parquet", n)]
        foreign = [n for n in names
                   if n not in parts and not n.startswith(("_tbconvert", "_pending-"))]
        if foreign:
            raise OutputExistsError(f"{dst}: exists and is not a tbconvert dataset (it holds "
                                    f"{foreign[0]!r}); choose a new or empty directory")
        from tbconvert.incremental.lock import LOCK_FILE
        if parts and not (dst / LOCK_FILE).exists():
            # Parts are named only once their sync is about to commit, and a killed sync
            # leaves its lock: parts without a lock are a dataset that lost its manifest
            # (or copies of its parts), whose data a sync must not remove.
            raise OutputExistsError(
                f"{dst}: holds {len(parts)} part file(s) of a dataset but not its manifest "
                f"{MARKER_FILE}; sync leaves them alone. Put {MARKER_FILE} back from a copy, "
                "or sync into a new directory (the parts themselves can be read with "
                "tbconvert convert, one at a time)")
    try:
        dst.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from tbconvert.output import describe_os_error
        raise OutputError(describe_os_error(exc, dst)) from None


@dataclass
class _Survey:
    """What the manifest and one listing of the source say, before anything is read."""

    generation: int
    runs: list                  # (name, event files) as the source lists them
    plans: dict                 # per run name: plan_files' answer (why read whole, reads)
    same_runs: bool             # the source's runs are the dataset's
    sidecar: bool               # the source or the dataset has experiment facts (compared on
                                # the full path: a facts file may have come, changed or gone)
    marker_parts: list = ()     # the manifest's parts (what a sync with nothing new keeps)
    marker: dict | None = None  # the manifest, as manifest.load gives it (read once a sync)


def _missing_parts(dst: Path):
    """``mark(name, state)``, which marks an archived run with a part gone from the dataset
    (deleted, lost to a disk) to be read whole again (``reread``, see
    :func:`~tbconvert.incremental.files.plan_files`): its source still holds what the part
    held. Parts that cannot be looked at count as there."""
    import os
    listed: set | None = None
    looked = 0

    def there(part) -> bool:
        # The first parts are looked up one by one, the rest in one listing: a watch's
        # dataset holds thousands of retired parts besides a few named ones.
        nonlocal listed, looked
        if not isinstance(part, str) or "/" in part or os.sep in part:
            return True
        if listed is None and looked < LOOKED_UP_PARTS:
            looked += 1
            try:
                os.lstat(os.path.join(dst, part))
            except FileNotFoundError:
                return False
            except OSError:
                pass
            return True
        if listed is None:
            try:
                listed = set(os.listdir(dst))
            except OSError:
                listed = _ANY
        return listed is _ANY or part in listed

    def mark(name, state) -> None:
        parts = state.get("parts") if isinstance(state, dict) else None
        gone = next((p for p in parts if not there(p)), None) \
            if isinstance(parts, list) else None
        if gone is not None:
            state["reread"] = f"its part {gone} is missing from the dataset"
    return mark


# (a dataset that cannot be listed: every part counts as there)
_ANY: set = set()
# Parts of a sync's runs looked up one by one before the dataset is listed instead.
LOOKED_UP_PARTS = 256


def _survey(src: Path, dst: Path, check_parts: bool = True,
            committed=None) -> _Survey | None:
    """The listing and every run's plan, told from the manifest and the files' sizes and
    checksums alone (no numpy, no pyarrow: a sync run often, finding nothing, stays cheap);
    the sync then neither lists nor checks the files again. None when anything is unusual:
    the full path looks again and reports it. ``check_parts``: a run whose archived part is
    missing from ``dst`` (a local dataset) is read whole again. ``committed``: a watch's
    :class:`~tbconvert.incremental.manifest.Committed`, the manifest its last round wrote."""
    from tbconvert.formats.tfevents import event_files
    from tbconvert.incremental import manifest, manifest_stream
    from tbconvert.incremental.files import plan_files
    try:
        problems = []
        runs = event_files.discover(src, lambda kind, msg: problems.append(kind))
        if problems:
            return None
        stored = [_stored_name(n) for n, _ in runs]
        by_key: dict = {}
        for (name, files), key in zip(runs, stored, strict=True):
            by_key.setdefault(key, []).append((name, files))
        mark = _missing_parts(dst) if check_parts else None
        found = {}

        def plan(key, state) -> None:
            # Planned from the state as parsed: the manifest keeps it as it was (a part
            # found missing is marked again by the sync that reads the run).
            if key in by_key:
                if mark is not None:
                    state = dict(state)
                    mark(key, state)
                for name, files in by_key[key]:
                    found[name] = plan_files(files, state)
        seen = None     # who the manifest file was, when it is read from disk for a watch
        marker = None if committed is None else committed.take(dst)
        if marker is not None:
            for key, state in marker["sync"]["runs"].items():
                plan(key, state.value())
        else:
            seen = None if committed is None else committed.look(dst)
            # (None for a manifest changed since it was written: the full path refuses it,
            # as every reader does)
            marker = manifest_stream.read(dst / MARKER_FILE, each=plan)
        if marker is None or not manifest.well_formed(marker):
            return None
        if seen is not None:    # (read from the file: kept for the watch's next round)
            committed.keep(dst, marker, seen)
        state = marker["sync"]
        known, generation = state["runs"], state["generation"]
        plans = {name: found[name] if name in found else plan_files(files, None)
                 for name, files in runs}
        parts = marker["parts"]
        facts = src.is_dir() and (src / event_files.EXPERIMENT_SIDECAR).exists() \
            or any(marker.get("experiment", {}).values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError):
        return None
    return _Survey(generation, runs, plans, len(set(stored)) == len(stored)
                   and sorted(stored) == sorted(known), facts, parts, marker)


def _nothing_new(survey: _Survey | None, report: SyncReport) -> bool:
    """Whether the dataset is up to date (the survey found no run, file or byte to read)."""
    if survey is None or survey.sidecar or not survey.same_runs or any(
            why is not None or reads for why, reads in survey.plans.values()):
        return False
    report.generation = survey.generation
    report.runs = report.runs_unchanged = len(survey.runs)
    return True


def _sync_locked(src: Path, dst: Path, scheduler, report: SyncReport, store=None,
                 survey: _Survey | None = None, jobs: int = 1, workers=None,
                 sweeps=None, committed=None) -> None:
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet import schema as S
    from tbconvert.formats.parquet.writer import part_name
    from tbconvert.formats.tfevents.reader import TfeventsReader
    from tbconvert.incremental import manifest
    from tbconvert.incremental.files import pending_name
    manifest = manifest if store is None else store      # the dataset's committing side
    from tbconvert.incremental.manifest import usual
    from tbconvert.incremental.runs import RunTask, sync_run
    if survey is not None and survey.marker is not None and usual(dst, survey.marker):
        marker = survey.marker      # (the store's manifest too: it is in the stage)
        survey.marker = None
    else:
        marker = manifest.load(dst, report, each=None if store is not None
                               else _missing_parts(dst))
    if store is not None:
        manifest.remove_garbage(dst, marker)
    # (locally, what a killed sync left goes at the end, with what this sync replaces: every
    # way out of a sync removes what its manifest does not name)
    state = marker["sync"]
    converted = set(state.pop("from_convert", ()))   # runs of a dataset written by convert
    # Of the manifest, only its runs' states are kept (each let go of once its run's new
    # state is made), what it says but for them, and the names of its parts: its parts list
    # took as much room as the states.
    said_before = _said(marker)
    marker = {"named": {p["file"] for p in marker["parts"]}}
    generation = state["generation"] + 1
    report.generation = generation
    source = TfeventsReader(src, Options(), report)
    if survey is not None and survey.generation == state["generation"]:
        runs, plans = survey.runs, survey.plans
    else:
        runs, plans = (source.runs() if src.exists() else []), {}
        source.check_readable()
    known = state["runs"]      # keyed by the name the dataset stores (see _stored_name)
    if not runs and known:
        # Runs that leave the source leave the dataset, but a source with none at all is far
        # more often a share that is not mounted, or a mistyped path, than a wish to empty
        # the archive.
        raise FormatError(f"{src}: holds no event files, so this sync would take all "
                          f"{len(known)} runs out of {dst}; nothing was changed (is SRC "
                          "mounted and spelt right? To empty the dataset, delete it)")
    experiment = S.experiment_to_json(source.experiment())
    indices = {name: s.index for name, s in known.items()}
    next_index = max(indices.values(), default=-1) + 1
    tasks = []
    taken: dict = {}
    logdir, dst_text = str(src), str(dst)     # (one string each for every task)
    for name, files in runs:
        key = _stored_name(name)
        if key in taken:
            # The manifest knows a run by its stored name: two runs of one name would be
            # read in turn into the same place, each sync undoing the last.
            report.add("run_name_taken", f"{key}: two runs of the source are stored under "
                       "this name (one of their names is not valid UTF-8); the run "
                       f"{ascii(name)} is left out of the dataset (rename one of the two "
                       "directories)", run=key)
            continue
        taken[key] = name
        if key not in indices:
            indices[key] = next_index
            next_index += 1
        run_state = known.get(key)
        tasks.append(RunTask(
            name=name, logdir=logdir, files=[str(f) for f in files], dst=dst_text,
            part=part_name(indices[key], key, generation), experiment=experiment,
            state=run_state,
            plan=plans.get(name), merged=store is None))
    # the tasks name every file: the listing's paths go (the reader holds them too)
    runs = taken = source = plans = None
    if survey is not None:
        survey.runs = survey.plans = None
    flusher = None
    try:
        if scheduler is None and store is None:
            # each part flushed to disk while the next runs are read
            flusher = manifest.Flusher(dst)
            same_points: dict = {}
            # (a sync of a few runs holds their states as they are: compressing each one
            # here, and again once its index and parts are added, cost more than a run's
            # reading of a few new points)
            slim_states = len(tasks) > SLIM_RUNS

            def written(k, result) -> None:
                if result.part is not None and result.state is not None and \
                        not result.flushed:
                    finish, result.finish = result.finish, None
                    flusher.add(result.part, finish)
                _slim(result, same_points, slim_states)
                # (what is left of the task is its run's name, for the outcome)
                task = tasks[k]
                task.files = task.plan = task.state = task.part = None
            results = _run_here(tasks, jobs, written, workers)
        else:
            from tbconvert import cluster
            results = cluster.run_tasks(sync_run, tasks, scheduler=scheduler)
        kept = [_parts_after(task, result, known, generation, dst if store is None else None)
                for task, result in zip(tasks, results, strict=True)]
        due = [k for k, after in enumerate(kept) if after is not None and after[2] is not None]
        if due and flusher is not None:
            # A large part whose last row group a flushing thread is still writing is not
            # whole yet: merged now, it would be taken for a damaged one (kept as it is, and
            # its run read whole again by the next sync).
            try:
                flusher.wait()
            except OSError:
                pass        # (told by publish, which waits for the flushes again)
        merged = _merge(dst, [kept[k][2] for k in due], experiment, workers)
        # what this sync may leave behind: the parts it replaces, those it wrote and merged
        left = set(marker["named"]) | {pending_name(name) for name in itertools.chain(
            (r.part for r in results if r.part is not None), (kept[k][2][1] for k in due))}
    except BaseException:
        # interrupted or failed before anything was committed: the parts written so far
        # (merged ones too) go
        if flusher is not None:
            flusher.close()
        manifest.remove_garbage(dst, marker)
        raise
    # (a signal from here to the commit leaves the dataset as it was, too)
    try:
        # (a sync that wrote a part changes the manifest: its runs are not compared)
        compare = not converted and not any(r.part is not None and r.state is not None
                                            for r in results)
        parts, runs_state, merged_away, merged_in, same_runs = _outcome(
            tasks, results, kept, dict(zip(due, merged, strict=True)), known, indices, report,
            converted, compare)
        kept = None
        new_marker = {"format": S.FORMAT_NAME, "schema_version": S.SCHEMA_VERSION,
                      "experiment": experiment, "parts": parts,
                      "sync": {"generation": generation, "runs": runs_state}}
        written = [r.part for r in results if r.part is not None and r.state is not None
                   and r.part not in merged_away] + merged_in
        if not written and compare and same_runs and _said(new_marker) == said_before:
            # Bytes were read but nothing came of them (a record still cut off at the end of
            # a file, read again): the dataset stays as it was, at its generation.
            if flusher is not None:
                flusher.close()
            report.generation = generation - 1
            if store is None:
                # (what a killed sync left, as ever)
                manifest.remove_garbage(dst, marker, left=left, sweeps=sweeps)
            return
        if flusher is not None:
            for name in merged_in:
                flusher.add(name)
            manifest.publish(dst, written, flusher)
        else:    # an object store's manifest publishes in its own way, without a flusher
            manifest.publish(dst, written)
        manifest.commit(dst, new_marker)
        if committed is not None and store is None:
            committed.keep(dst, new_marker)
    except BaseException:
        if flusher is not None:
            flusher.close()
        manifest.remove_garbage(dst, manifest.load(dst, Report()))
        raise
    if store is None:
        manifest.remove_garbage(dst, new_marker, retire=True, left=left, sweeps=sweeps)
    else:
        manifest.remove_garbage(dst, new_marker, retire=True)


def _slim(result, same_points: dict, states: bool = True) -> None:
    """Keep less of a run's result until the sync commits: its state as JSON text (with
    ``states``), and no report of its own when it tells nothing (the first sync of 20,000
    runs held every run's state and report as Python objects, about 5 KB a run)."""
    from tbconvert.incremental.manifest import RunState
    if states and isinstance(result.state, dict):
        result.state = RunState(result.state)
    if not result.report.issues:
        result.report = _TELLS_NOTHING
    # its points by data class (in their order): one tuple for every run of the sync that
    # counts the same (a Counter, and a name of its data class, took 300 bytes a run)
    points = tuple(result.points.items())
    result.points = same_points.setdefault(points, points)
# the report of every result that tells nothing (see _slim): only its issues are read
_TELLS_NOTHING = Report()
# A sync of more runs than this holds their new states compressed until it commits.
SLIM_RUNS = 256


def _said(marker: dict) -> str:
    """The digest of what a manifest says but for its generation and its runs' states (those
    are compared a run at a time, see _outcome): two manifests that say the same of both
    say the same."""
    from tbconvert.incremental.manifest import marker_digest
    return marker_digest(marker | {"sync": {k: v for k, v in marker["sync"].items()
                                            if k not in ("generation", "runs")}})


def _outcome(tasks, results, kept, merged: dict, known: dict, indices: dict,
             report: SyncReport, converted: set,
             compare: bool = False) -> tuple[list, dict, set, list, bool]:
    """The new manifest's parts and runs, from the runs' results and the merges (by task:
    done or not); also the parts merging replaced and those it wrote, and (with ``compare``)
    whether the runs' states are those of ``known``. Counts it all in ``report``;
    ``converted``: the runs of a dataset that ``convert`` wrote, which this first sync
    replaces. Each run's state in ``known`` is let go of once its new one is made."""
    from tbconvert.incremental import compact
    from tbconvert.incremental.manifest import RunState, state_of, state_of_run
    parts, runs_state = [], {}
    merged_away: set = set()
    merged_in: list = []
    kept = list(kept)
    reread: dict = {}
    for k, ok in merged.items():
        run_parts, weights, (start, name, files) = kept[k]
        if not ok:
            # A part that cannot be read whole is damaged, or was: its run's event files
            # still hold its points, so the next sync reads the run whole into a new part.
            reread[k] = "a part of it could not be read whole when its parts were merged"
            report.add("parts_not_merged", f"{tasks[k].name}: its last {len(files)} parts could "
                       "not be merged into one (one could not be read whole); they are kept as "
                       "they are, and the next sync reads the run whole again from its event "
                       "files", run=tasks[k].name, lost=False)
            continue
        report.parts_merged += len(files)
        merged_away.update(run_parts[start:])
        merged_in.append(name)
        kept[k] = (run_parts[:start] + [name], weights[:start] + [sum(weights[start:])], None)
    same = compare
    for k, (task, result, after) in enumerate(zip(tasks, results, kept, strict=True)):
        report.extend(result.report.issues)
        report.new_bytes += result.new_bytes
        key = _stored_name(task.name)
        old = known.get(key)
        if result.state is None:        # a new run that could not be read
            continue
        before = state_of(old) if after is None or same else None
        if after is None:               # its parts as they were
            run_parts = [] if before is None else list(before["parts"])
            weights = [] if before is None else compact.weights_of(before)
        else:
            run_parts, weights, _ = after
        if result.part is not None:
            report.parts_written += 1
        if old is None and key in converted:
            report.runs_rearchived += 1
            report.add("run_read_whole", f"{task.name}: archived by convert, read whole once; "
                       "its new part replaces the earlier one", run=task.name, lost=False)
        elif old is None:
            report.runs_added += 1
        elif result.replaces:
            report.runs_rearchived += 1
            report.add("run_read_whole", f"{key}: read whole again ({result.why}); its "
                       "new part replaces the earlier ones", run=task.name, lost=False)
        elif result.part is not None:
            report.runs_extended += 1
        else:
            report.runs_unchanged += 1
        report.runs += 1
        report.series += result.series
        report.points.update(dict(result.points))
        state = dict(state_of_run(before if result.state is old else result.state),
                     index=indices[key], parts=run_parts, weights=weights)
        if k in reread:
            state["reread"] = reread[k]
        # (the result keeps the entry itself from here on: one copy of it held)
        result.state = runs_state[key] = new = RunState(state)
        if same:
            # (both hold their state's canonical text: equal texts, equal states)
            same = old is not None and new == old
        if old is not None:
            known[key] = None
        parts.extend({"file": p, "run": key} for p in run_parts)
    same = same and runs_state.keys() == known.keys()
    in_source = {_stored_name(t.name) for t in tasks}
    for name in sorted(set(known) | converted):
        if name not in runs_state and name not in in_source:
            report.runs_removed += 1
            report.add("run_removed", f"{name}: no longer in the source; taken out of the "
                       "dataset (as a full conversion would leave it out)", run=name, lost=False)
    return parts, runs_state, merged_away, merged_in, same


def _run_here(tasks: list, jobs: int, on_result, workers=None) -> list:
    """``sync_run`` of every task: in this process, beside ``jobs - 1`` local workers when
    more than one run has new data and there is enough of it to pay for starting them, or
    beside kept ``workers`` whatever there is."""
    import functools
    import os

    from tbconvert import cluster
    from tbconvert.formats.base import processes
    from tbconvert.formats.tfevents.reader import PARALLEL_MIN_BYTES
    from tbconvert.incremental import runs
    # the runs read here leave their parts for the flushing threads to finish
    here = functools.partial(runs.sync_run_here, os.getpid())
    sizes = [_bytes_to_read(task) for task in tasks]
    busy = [k for k, size in enumerate(sizes) if size is not None]
    jobs = min(processes(jobs), len(busy))
    results: list = [None] * len(tasks)

    def arrived(i, result) -> None:
        results[busy[i]] = result
        on_result(busy[i], result)
    # Starting workers costs about 10 ms even forked, and each hand-over waits for the
    # threads that pass results on: a sync of a few MiB gains nothing (measured). Kept
    # workers cost neither, and take their share of the runs in one hand-over.
    if jobs > 1 and sum(sizes[k] for k in busy) >= PARALLEL_MIN_BYTES:
        runs.load_for_workers()
        cluster.run_tasks(runs.sync_run, [tasks[k] for k in busy], jobs=jobs, share=True,
                          sizes=[sizes[k] for k in busy], on_result=arrived,
                          lost=runs.unreadable)
    elif jobs > 1 and workers is not None:
        # Weighed by what a run costs: its new bytes, and a part to write (as much as
        # reading RUN_COST_BYTES). This process also commits the sync, about one run more.
        cluster.run_in_shares(here, [tasks[k] for k in busy],
                              [sizes[k] + RUN_COST_BYTES for k in busy], workers,
                              lost=runs.unreadable, on_result=arrived, ahead=RUN_COST_BYTES,
                              share_fn=runs.sync_share,
                              own_fn=functools.partial(runs.run_share, here))
    # here: every run, or those with nothing new
    left = [k for k, result in enumerate(results) if result is None]
    for k, result in zip(left, runs.run_share(here, [tasks[k] for k in left]), strict=True):
        results[k] = result
        on_result(k, result)
    return results


# About 4 ms a run whatever its size (its new records checked, a part written), as long as
# reading 200 KiB of scalar records takes (measured: 1% new in ten runs).
RUN_COST_BYTES = 200 << 10


def _bytes_to_read(task) -> int | None:
    """How many bytes the task's run reads: None when its plan says nothing is new (or it
    has no plan yet: then its files, as if read whole)."""
    import os
    why, reads = task.plan if task.plan is not None else ("no plan yet", [])
    if why is None and not reads:
        return None
    if why is not None:
        reads = [(f, 0) for f in task.files]
    total = 0
    for path, start in reads:
        try:
            total += max(os.stat(path).st_size - start, 0)
        except OSError:
            pass
    return total


def _parts_after(task, result, known: dict, generation: int, local: Path | None):
    """A run's parts and their weights with this sync's part, and what merging is due
    (``(start, merged name, files)``; None: nothing, or an object store's dataset, whose
    parts are not merged); see :mod:`tbconvert.incremental.compact`."""
    from tbconvert.incremental import compact
    from tbconvert.incremental.files import pending_name
    from tbconvert.incremental.manifest import state_of
    if result.state is None:
        return [], [], None
    if result.part is None:
        return None     # (its parts as they were: see _outcome)
    old = state_of(known.get(_stored_name(task.name)))
    run_parts = [] if old is None else list(old["parts"])
    weights = [] if old is None else compact.weights_of(old)
    if result.replaces:
        run_parts, weights = [], []
    run_parts.append(result.part)
    weights.append(1 if weights else 0)
    start = compact.to_merge(weights) if local is not None else None
    if start is None:
        return run_parts, weights, None
    name = compact.merged_name(run_parts[start], generation)
    files = [local / (pending_name(p) if p == result.part else p) for p in run_parts[start:]]
    return run_parts, weights, (start, name, files)


def _merge(dst: Path, plans: list, experiment: dict, workers) -> list[bool]:
    """Whether each due merge was done: the merged part waits under its pending name, like
    the parts this sync wrote. Kept ``workers`` take a share of them (a long ``--watch``
    merges every run's parts in the same round)."""
    from tbconvert.incremental import compact
    from tbconvert.incremental.files import pending_name
    jobs = [(files, dst / pending_name(name), experiment) for _, name, files in plans]
    if workers is None or len(jobs) < 2:
        return [compact.merge_job(job) for job in jobs]
    from tbconvert import cluster
    return cluster.run_in_shares(compact.merge_job, jobs, [len(job[0]) for job in jobs],
                                 workers, lost=lambda job, why: False)


def _stored_name(name: str) -> str:
    from tbconvert import names
    return names.text(name)
