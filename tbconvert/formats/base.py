"""The contract between the copy loop and each format's reader and writer.

A format lives in ``tbconvert/formats/<name>/`` and exposes one
:class:`Format` subclass, found through its record in :mod:`tbconvert.registry`
(docs/architecture.md has the checklist for a new format). Its reader hands over one run at a time
(:class:`~tbconvert.model.RunData`: the run, then all of its series chunks),
so peak memory is bounded by a run, not by the whole source (the event-file
reader bounds it further: its chunks are of bounded size whatever the run's). Its writer takes
runs in that order, writes to a temporary name, and only :meth:`Writer.close`
makes the output appear under its final name; :meth:`Writer.abort` removes
every partial file.

Readers and writers never print and never exit: they raise
:class:`~tbconvert.errors.TbconvertError` subclasses for failures and record
:class:`~tbconvert.report.Issue` objects for everything they skip or change.
"""

from __future__ import annotations

import abc
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from tbconvert.errors import CorruptDataError, MissingDependencyError, UsageError
from tbconvert.report import Report
from tbconvert.restarts import Restarts

if TYPE_CHECKING:  # numpy loads with the model, only once data is read or written
    from tbconvert.model import Experiment, Run, RunData, Series


@dataclass
class Options:
    """Choices that readers and writers honour.

    Attributes:
      runs, tags: keep only runs / tags matching these regexes (``re.search``).
      allow_pickle: let readers unpickle input (TensorBoard 2.3 exports). Off:
        pickled data is refused with a message naming ``--allow-pickle``.
      force: replace an existing destination (only once the new output is complete).
      restarts: ``"visible"`` writes what TensorBoard shows (points its restart
        rule hides are left out and counted); ``"keep-all"`` keeps them.
        Archives (Parquet, HDF5) always keep them, marked.
      wide: tables only: one row per (run, step), one column per tag.
      ignore_checksum: read a Parquet or HDF5 archive whose checksum is missing or does
        not match (what can still be read is read and the damage is reported; HDF5 may
        hang or crash on a damaged file).
      progress: a :class:`Progress` told how many source bytes the work covers and
        how far it got (the CLI draws a bar); None: nobody is watching.
      jobs: processes that read runs side by side (0: one per core; 1, the default of
        the Python API: all in this process, so a script needs no ``__main__`` guard).
        The output is the same whatever the number.
      storage_options: keyword arguments for the fsspec file system of a source or
        destination given as a URL (``s3://``...): ``{"anon": True}``, ``{"profile": "x"}``.
    """

    runs: re.Pattern | None = None
    tags: re.Pattern | None = None
    allow_pickle: bool = False
    force: bool = False
    restarts: Restarts = "visible"
    wide: bool = False
    ignore_checksum: bool = False
    progress: Progress | None = None
    jobs: int = 1
    storage_options: dict | None = None

    def __post_init__(self) -> None:
        # Checked as the keyword arguments are, whoever builds it: a misspelt ``restarts``
        # taken as the default would drop the points the caller asked to keep.
        from tbconvert.restarts import check
        for what in ("runs", "tags"):
            value = getattr(self, what)
            if isinstance(value, str):
                try:
                    setattr(self, what, re.compile(value))
                except re.error as exc:
                    raise UsageError(f"--{what} {value!r} is not a valid regular expression: "
                                     f"{exc}") from None
            elif value is not None and not isinstance(value, re.Pattern):
                raise UsageError(f"--{what} takes one regular expression (a str such as "
                                 f"'loss|accuracy'), not {type(value).__name__}")
        check(self.restarts)
        for what in ("allow_pickle", "force", "wide", "ignore_checksum"):
            if not isinstance(getattr(self, what), bool):
                raise UsageError(f"{what} takes True or False, not "
                                 f"{getattr(self, what)!r}")
        check_jobs_value(self.jobs)
        if self.progress is not None and not all(
                callable(getattr(self.progress, m, None)) for m in ("start", "advance", "finish")):
            raise UsageError(f"progress takes a tbconvert Progress (with start, advance and "
                             f"finish) or None, not {type(self.progress).__name__}")
        if self.storage_options is not None and not isinstance(self.storage_options, dict):
            raise UsageError(f"storage_options takes a dict (such as {{'anon': True}}), not "
                             f"{type(self.storage_options).__name__} {self.storage_options!r}")

    # Set while one experiment of an export root is read: its runs answer to ``<id>/<run>`` too,
    # the name TensorBoard shows for them. Not a field: no caller gives it.
    run_prefix = ""

    def wants_run(self, run: str) -> bool:
        return self.runs is None or self.runs.search(run) is not None or (
            bool(self.run_prefix) and self.runs.search(self.run_prefix + run) is not None)

    def wants_tag(self, tag: str) -> bool:
        return self.tags is None or self.tags.search(tag) is not None

    def wants_tag_of(self, *names: str) -> bool:
        """Whether the tag that goes by any of ``names`` (its tag, a column's name) is kept."""
        return self.tags is None or any(self.tags.search(n) is not None for n in names)


def check_jobs_value(jobs) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise UsageError(f"--jobs must be a whole number of processes (0: one per core), "
                         f"not {jobs!r}")


@dataclass
class WatchedOptions(Options):
    """Options that remember whether ``runs`` / ``tags`` ever matched, so that a regex that
    selects nothing is said out loud instead of giving an empty result silently."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.runs_seen: set[str] = set()
        self.runs_matched = 0
        self.tags_seen: set[str] = set()
        self.tags_matched = 0

    def wants_run(self, run: str) -> bool:
        wanted = super().wants_run(run)
        self.runs_seen.add(run)
        self.runs_matched += wanted
        return wanted

    def wants_tag(self, tag: str) -> bool:
        wanted = super().wants_tag(tag)
        self.tags_seen.add(tag)
        self.tags_matched += wanted
        return wanted

    def wants_tag_of(self, *names: str) -> bool:
        wanted = super().wants_tag_of(*names)
        self.tags_seen.add(names[0])
        self.tags_matched += wanted
        return wanted

    def unmatched(self, tags_are: str = "tag(s) in the source",
                  no_tags: str = "the result holds no data",
                  runs_are: str = "run(s) in the source") -> list[str]:
        """One line for each of ``--runs`` / ``--tags`` that matched nothing in the source,
        with what that leaves out. ``tags_are`` / ``runs_are``: what ``--tags`` / ``--runs``
        choose among; ``no_tags``: what is left when ``--tags`` chooses nothing."""
        lines = []
        if self.runs is not None and self.runs_seen and not self.runs_matched:
            lines.append(f"--runs {self.runs.pattern!r} matched none of the "
                         f"{len(self.runs_seen)} {runs_are}; the result holds no data")
        if self.tags is not None and self.tags_seen and not self.tags_matched:
            lines.append(f"--tags {self.tags.pattern!r} matched none of the "
                         f"{len(self.tags_seen)} {tags_are}; {no_tags}")
        return lines


def cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def processes(jobs: int) -> int:
    """The processes ``--jobs`` asks for here (0: one per core), never more than the cores:
    more would only take turns on them, each with its own memory (``-j 999`` on two cores
    once started 500 workers)."""
    n = cores()
    return min(jobs, n) if jobs else n


class Progress:
    """How far a conversion got, in source bytes (the sum of the source files' sizes).

    The copy loop calls :meth:`start` with the total before the first run and
    :meth:`finish` after the last; readers call :meth:`advance` as they get
    through their input. This base class ignores everything.
    """

    def start(self, total: int) -> None:
        """The work covers ``total`` source bytes."""

    def advance(self, n: int) -> None:
        """``n`` more source bytes are done."""

    def finish(self) -> None:
        """All done (whatever was not counted yet is)."""


def source_size(path: Path) -> int:
    """Bytes of the files at or under ``path``, links followed as the readers follow them
    (:func:`tbconvert.sourcefiles.walk`); errors count 0."""
    path = Path(path)
    try:
        if not path.is_dir():
            return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0
    total = 0
    from tbconvert import sourcefiles
    for dirpath, _dirs, files in sourcefiles.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


# What a refused archive's message ends with (a sync, which has no such option, says its own).
CHECKSUM_ADVICE = ("; restore it from a copy, or pass --ignore-checksum to read what can still "
                   "be read")


def checksum_failed(what: str, options: Options, report: Report, *, path,
                    refused_because: str = "") -> None:
    """An archive whose checksum is missing or wrong: refused, unless ``ignore_checksum``
    (then read, and reported as ``damaged_archive``)."""
    if not options.ignore_checksum:
        raise CorruptDataError(f"{what}{refused_because}{CHECKSUM_ADVICE}")
    report.add("damaged_archive", f"{what}; read anyway (--ignore-checksum): parts may be "
               "missing or wrong", path=path)


class Reader(abc.ABC):
    """Reads one source. Use as a context manager."""

    def __init__(self, path: Path, options: Options, report: Report) -> None:
        self.path = Path(path)
        self.options = options
        self.report = report

    def experiment(self) -> Experiment:
        """Experiment facts the source holds (empty for event files)."""
        from tbconvert.model import Experiment
        return Experiment()

    def source_size(self) -> int:
        """Source bytes the progress total counts (the files' sizes)."""
        return source_size(self.path)

    @abc.abstractmethod
    def iter_runs(self) -> Iterator[RunData]:
        """Yield each run with its series chunks, one run at a time.

        Chunks of one (run, tag) come in point order with equal metadata.
        Runs filtered out by ``options.runs`` may be skipped without reading.
        """

    def close(self) -> None:  # noqa: B027 - nothing to release unless a reader holds files
        """Release open files."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Writer(abc.ABC):
    """Writes one destination atomically. Use as a context manager.

    Leaving the ``with`` block normally calls :meth:`close`; leaving it by an
    exception calls :meth:`abort`.

    What the copy loop hands over depends on three class attributes, and a fourth says
    whether runs may be written apart:

    * ``keeps_hidden``: the format stores the points TensorBoard's restart rule hides,
      marked as such, so they arrive whatever ``Options.restarts`` says. Otherwise they
      arrive only with ``restarts="keep-all"``, and are left out (and counted) by default.
    * ``keeps_byte_names``: run names that are not valid UTF-8 arrive as they were read (lone
      surrogates: the format spells them itself, as event files spell a run's directory
      name); otherwise as text, with the odd bytes written ``%XX``.
    * ``takes_hidden_witness``: when hidden points are left out, a tag's first hidden point
      still arrives (marked hidden) while the tag has shown nothing else, so that a
      format TensorBoard reads can keep listing a tag all of whose points are hidden.
    * ``run_parts``: how a worker writes one run of this output on its own, into the
      temporary directory of the writer's ``out`` (an :class:`~tbconvert.output.AtomicOutput`;
      :mod:`tbconvert.runtasks`): ``"parquet"`` (a part of
      a dataset), ``"tfevents"`` (a run directory), ``"staged"`` (a single-file output:
      each run is written on its own by ``stage_run(path, run, series, report, options)``, a
      static method a worker calls, into a file of a staging directory; this writer's
      ``append_staged(path, info, run_name)`` then adds it, in run order, given what
      ``stage_run`` returned; both ways give the bytes :meth:`write_run` gives), or None:
      every run goes through this writer.
    * ``staged_on_cluster``: a ``"staged"`` writer whose runs may be staged by the workers of
      a Dask cluster (``--scheduler``).
    * ``writes_wide``: the format has a wide form (``Options.wide``); the others refuse it
      rather than quietly write their one form.
    """

    keeps_hidden: ClassVar[bool] = False
    keeps_byte_names: ClassVar[bool] = False
    takes_hidden_witness: ClassVar[bool] = False
    run_parts: str | None = None
    staged_on_cluster: ClassVar[bool] = True
    writes_wide: ClassVar[bool] = False

    def __init__(self, path: Path, options: Options, report: Report) -> None:
        if options.wide and not self.writes_wide:
            raise UsageError(f"{path}: --wide is a form of CSV tables only; this format keeps "
                             "one row per point (leave out --wide)")
        self.path = Path(path)
        self.options = options
        self.report = report

    def write_experiment(self, experiment: Experiment) -> None:
        """Record experiment facts; formats that cannot hold them report it."""
        if not experiment.is_empty():
            self.report.add("experiment_facts_dropped",
                            f"{self.path}: this format cannot hold the experiment's name, "
                            "description and times", count=1)

    def guard(self, fn):
        """Run ``fn``; an OS error (disk full, size limit...) aborts and becomes one clear error.
        An interrupt aborts too, so that no partial output outlives it."""
        from tbconvert.output import removed_on_failure
        with removed_on_failure(self.abort, self.path):
            return fn()

    @abc.abstractmethod
    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        """Write one run and all of its chunks (consumed here, in order)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Finish and move the output to its final name."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove all partial output."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


# The package to install for a module whose name differs from it.
DISTRIBUTIONS = {"google": "protobuf", "PIL": "pillow", "markdown_it": "markdown-it-py"}


class deferred:
    """A format's reader or writer class named as ``"module:Class"``, imported on first use.

    Telling a source's format imports every format package; only the reader and writer
    actually used should load their libraries (pyarrow, h5py, protobuf), which cost
    start-up time and tens of MiB of memory each.
    """

    def __init__(self, target: str) -> None:
        self.target = target

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner):
        # Only the format that needs a library fails without it: telling a logdir's
        # format, or converting it to event files, never asks for pyarrow or h5py.
        module, cls = self.target.split(":")
        value = getattr(dependency(module, owner.name), cls)
        setattr(owner, self.name, value)
        return value


def dependency(module: str, fmt: str):
    """``module`` imported for the format named ``fmt``; a library of tbconvert's that does not
    import is a :class:`MissingDependencyError` naming the package to install."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        library = (exc.name or "").split(".")[0]
        if not library or library == "tbconvert":
            raise
        raise MissingDependencyError(
            _missing(fmt, DISTRIBUTIONS.get(library, library), exc)) from None


def _missing(fmt: str, library: str, exc: ImportError) -> str:
    """What to tell when ``library``, a dependency of tbconvert, does not import. It names
    the Python that runs tbconvert (a ``pip`` on the PATH may belong to another one), every
    other dependency missing there too (an install made without them, ``--no-deps`` say,
    lacks them all), or, for a package that is installed but fails to import, its version."""
    import importlib.metadata
    import sys
    python = sys.executable or "python3"
    head = (f"the {fmt} format needs {library}, which tbconvert depends on but which does not "
            f"import here ({exc})")
    try:
        version = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        version = None
    except Exception:  # noqa: BLE001 - damaged metadata: say what is known
        version = None
    if version is not None:
        return (f"{head}: {library} {version} is installed for {python} but its import fails; "
                f"reinstall it: {python} -m pip uninstall -y {library} && {python} -m pip "
                f"install {library}, or reinstall tbconvert")
    missing = [library] + [d for d in _dependencies() if d != library and not _importable(d)]
    also = f" (nor are {', '.join(missing[1:])})" if len(missing) > 1 else ""
    tree = _source_tree()
    # An installed copy without its dependencies (``pip install --no-deps`` or ``--target``,
    # a copy on PYTHONPATH) is named, so that the user sees which install lacks them.
    where = "" if tree is not None else \
        f", which runs the tbconvert installed in {Path(__file__).resolve().parents[2]}"
    said = (f"{head}: it is not installed for {python}{also}{where}: {python} -m pip install "
            f"{' '.join(missing)}, or reinstall tbconvert with its dependencies")
    if tree is not None:
        said += (f"; this tbconvert is the source tree in {tree}, which Python takes before an "
                 "installed copy when it runs there: run the tbconvert command of the "
                 f"environment it was installed into, or {python} -m pip install {tree}")
    return said


def _source_tree():
    """The checkout tbconvert runs from (``python -m tbconvert`` in it imports the package
    from the current directory, whatever is installed), or None for an installed copy."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "tbconvert").is_dir() else None


def _dependencies() -> list[str]:
    """The distributions tbconvert itself requires, as its installed metadata lists them
    (none known when it runs from a source tree)."""
    import importlib.metadata
    try:
        requires = importlib.metadata.requires("tbconvert") or []
    except Exception:  # noqa: BLE001 - no metadata: nothing more to name
        return []
    return [re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in requires if "extra ==" not in r]


def _importable(distribution: str) -> bool:
    import importlib.util
    modules = {dist: module for module, dist in DISTRIBUTIONS.items()}
    module = "google.protobuf" if distribution == "protobuf" else \
        modules.get(distribution, distribution)
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def classes_on_demand(fmt: type[Format], module: str):
    """A module ``__getattr__`` that hands out ``fmt``'s reader and writer classes under
    their own names (``from tbconvert.formats.parquet import ParquetWriter``), imported only
    then. A format package ends with ``__getattr__ = classes_on_demand(TheFormat, __name__)``.
    """
    import inspect
    roles = {}
    for role in ("reader", "writer"):
        target = inspect.getattr_static(fmt, role)
        if isinstance(target, deferred):
            roles[target.target.split(":")[1]] = role
        elif target is not None:
            roles[target.__name__] = role

    def __getattr__(name: str):
        role = roles.get(name)
        if role is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(fmt, role)
    return __getattr__


def has_reader(fmt: type[Format]) -> bool:
    """Whether ``fmt`` reads, without importing its reader."""
    import inspect
    return inspect.getattr_static(fmt, "reader") is not None


def missing_packages(fmt: type[Format], writing: bool) -> list[str]:
    """The packages to install for ``fmt`` to read (or write) here, found without importing
    any: those not installed, as ``pip`` names them."""
    import importlib.util
    missing = []
    for module in ("numpy", *fmt.requires, *(fmt.writer_requires if writing else ())):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):     # a parent package missing, or broken
            found = False
        if not found:
            top = module.split(".")[0]
            missing.append(DISTRIBUTIONS.get(top, top))
    return missing


def has_writer(fmt: type[Format]) -> bool:
    """Whether ``fmt`` writes, without importing its writer."""
    import inspect
    return inspect.getattr_static(fmt, "writer") is not None


class _Recorded:
    """A fact of the format's registry record, read through its class: the record is the
    one place that says it."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner):
        from tbconvert import registry
        return getattr(registry.record(owner.name), self.name)


class Format:
    """A format: its name, how to recognise it, and its reader and writer.

    A format is found through its :class:`~tbconvert.registry.FormatRecord`, which also
    holds the facts known without importing it: ``suffixes`` and ``directory_output`` are
    read from there. See docs/architecture.md for the checklist of a new format.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    suffixes = _Recorded()
    directory_output = _Recorded()
    reader: ClassVar[type[Reader] | None] = None
    writer: ClassVar[type[Writer] | None] = None
    # The modules (beyond numpy) its reader and writer import, and those of its writer alone:
    # what `tbconvert formats` looks for, without importing them.
    requires: ClassVar[tuple[str, ...]] = ()
    writer_requires: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def sniff(cls, path: Path) -> bool:
        """Cheap and side-effect free: does ``path`` look like this format?

        Returns False for foreign input; never raises.
        """
        return False
