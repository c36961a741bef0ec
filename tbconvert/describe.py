"""What a source holds: runs, tags, and per series its plugin, data class, point count,
step range and wall-time span, streamed with memory bounded by one run.

:func:`info` is what ``tbconvert info`` prints; :func:`scan` and :class:`SeriesStats` are
the reading and counting it shares with :mod:`tbconvert.verify`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tbconvert.formats.base import Options, Reader
from tbconvert.report import Report, given

if TYPE_CHECKING:
    from tbconvert.model import Run, Series


@dataclass(slots=True)     # one per tag of a run: a run may have 100,000
class SeriesStats:
    """Counts of one series (one run and tag), added to chunk by chunk.

    ``missing``: blobs the source lost (TensorBoard.dev exports); ``step_min``... are None
    for a series with no points, ``wall_min``/``wall_max`` also when every wall time is NaN.
    """

    plugin: str
    data_class: str
    points: int = 0
    hidden: int = 0
    missing: int = 0
    step_min: int | None = None
    step_max: int | None = None
    wall_min: float | None = None
    wall_max: float | None = None

    @classmethod
    def of(cls, s: Series) -> SeriesStats:
        return cls(s.metadata.plugin_name, s.data_class.name)

    def add(self, s: Series) -> None:
        self.points += len(s)
        self.hidden += s.hidden_count
        self.missing += getattr(s, "missing_count", 0)
        if len(s):
            lo, hi = int(s.steps.min()), int(s.steps.max())
            self.step_min = lo if self.step_min is None else min(lo, self.step_min)
            self.step_max = hi if self.step_max is None else max(hi, self.step_max)
            w = s.wall_times[s.wall_times == s.wall_times]
            if len(w):
                lo_w, hi_w = float(w.min()), float(w.max())
                self.wall_min = lo_w if self.wall_min is None else min(lo_w, self.wall_min)
                self.wall_max = hi_w if self.wall_max is None else max(hi_w, self.wall_max)

    def to_dict(self) -> dict:
        """The fields as a dict (``dataclasses.asdict``, without its deep copies: the
        fields are plain values)."""
        return {"plugin": self.plugin, "data_class": self.data_class, "points": self.points,
                "hidden": self.hidden, "missing": self.missing, "step_min": self.step_min,
                "step_max": self.step_max, "wall_min": self.wall_min, "wall_max": self.wall_max}

    @property
    def step_range(self) -> tuple[int, int] | None:
        return None if self.step_min is None else (self.step_min, self.step_max)


def scan(reader: Reader, options: Options, stats_of: Callable[[Run, Series], SeriesStats], *,
         visible_only: bool = False,
         left_out: Callable[[str], None] | None = None) -> Iterator[tuple[Run, bool]]:
    """Read every run of ``reader``, adding each chunk of a selected tag to
    ``stats_of(run, chunk)``; then yield ``(run, selected)``.

    Every run is read, selected or not, so that ``--runs``/``--tags`` are matched against
    every name the source holds. With ``visible_only``, the points TensorBoard's restart rule
    hides are left out unless ``options.restarts`` is ``"keep-all"``. ``left_out(tag)`` hears
    of each chunk of a tag that ``--tags`` leaves out.
    """
    drop_hidden = visible_only and options.restarts != "keep-all"
    for run_data in reader.iter_runs():
        for s in run_data.series:
            if not options.wants_tag(s.tag):
                if left_out is not None:
                    left_out(s.tag)
                continue
            if drop_hidden:
                s = s.visible()
            stats_of(run_data.run, s).add(s)
        yield run_data.run, options.wants_run(run_data.run.name)


@dataclass
class RunInfo:
    """One run: its name, start time (None if unknown), its series by tag, and how many of its
    tags ``tags=`` left out."""

    run: str
    start_time: float | None
    tags: dict[str, SeriesStats] = field(default_factory=dict)
    tags_left_out: int = 0


@dataclass
class SourceInfo:
    """What :func:`info` found: the experiment's id, name and description (None for sources
    that hold none), the selected runs in source order, and the report of the read."""

    experiment: dict | None
    runs: list[RunInfo]
    report: Report

    @property
    def series(self) -> int:
        return sum(len(r.tags) for r in self.runs)

    @property
    def points(self) -> int:
        return sum(st.points for r in self.runs for st in r.tags.values())

    def to_dict(self) -> dict:
        """Plain values (what ``tbconvert info --json`` prints)."""
        return {"experiment": self.experiment,
                "runs": [{"run": r.run, "start_time": r.start_time,
                          "tags": {t: st.to_dict() for t, st in r.tags.items()},
                          "tags_left_out": r.tags_left_out}
                         for r in self.runs]}


def info(src, *, format: str | None = None, runs=None, tags=None, allow_pickle: bool = False,
         jobs: int = 1, storage_options: dict | None = None, options: Options | None = None,
         report: Report | None = None, from_format: str | None = None,
         **kwargs) -> SourceInfo:
    """Runs and tags of ``src`` (any readable source, or an fsspec URL) with their counts.

    Example::

        >>> found = tbconvert.info("fixtures/torch_logdir", runs="^train$", tags="^loss$")
        >>> st = found.runs[0].tags["loss"]
        >>> st.points, st.step_range
        (50, (0, 49))

    ``runs`` and ``tags`` are regexes; the other keyword arguments are those of
    :func:`tbconvert.convert` that apply to reading. Hidden points are counted, not left out.
    ``format`` (or ``from_format``) names the source's format when it cannot be told.
    """
    from tbconvert import api
    format = api.source_format(format, from_format)
    report = given(report)
    options = api.options_from(options, runs=runs, tags=tags, allow_pickle=allow_pickle,
                               jobs=jobs, storage_options=storage_options, **kwargs)
    runs: list[RunInfo] = []
    with api.open_reader(src, format=format, options=options, report=report) as reader:
        exp = reader.experiment()
        experiment = None if exp.is_empty() else {
            "id": exp.experiment_id, "name": exp.name, "description": exp.description}
        current: dict[str, SeriesStats] = {}
        left_out: set[str] = set()

        def stats_of(run, s):
            st = current.get(s.tag)
            if st is None:
                st = current[s.tag] = SeriesStats.of(s)
            return st

        for run, selected in scan(reader, options, stats_of, left_out=left_out.add):
            if selected:
                runs.append(RunInfo(run.name, run.start_time, current, len(left_out)))
            current = {}
            left_out.clear()     # (in place: scan holds its add)
    return SourceInfo(experiment, runs, report)
