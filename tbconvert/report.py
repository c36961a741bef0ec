"""What a conversion read, wrote and could not keep. Never prints.

Readers and writers record an :class:`Issue` for everything that did not make
it through unchanged (a corrupt record, a lost blob, a renamed run, a point
TensorBoard's restart rule hides...). The command line prints a summary; the
API hands the report back.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from tbconvert import kinds


@dataclass(frozen=True, slots=True)
class Issue:
    """One thing that did not go through unchanged.

    ``kind`` is a short stable identifier (``corrupt_record``,
    ``missing_blob``, ``hidden_points_left_out``...), one of
    :data:`tbconvert.kinds.KINDS`. ``count`` is how many points,
    records or bytes it concerns (see the kind). ``lost`` is False for
    notes that lose no data (a renamed run, hidden points kept and marked).
    """

    kind: str
    message: str
    path: str | None = None
    run: str | None = None
    tag: str | None = None
    count: int = 1
    lost: bool = True


@dataclass
class Report:
    """Counts and issues of one conversion (or reading, table, extraction...).

    The counters say what was read from the source and selected (``runs``, ``tags``,
    restarts), not what the destination holds: ``runs`` and ``series`` (one per run and tag)
    and ``points`` (per data class, ``{"scalar": 317, "tensor": 27, ...}``) count the same for
    every destination. The points TensorBoard's restart rule hides are counted only where
    they are kept (``restarts="keep-all"``, or a destination that stores them marked, such as
    Parquet or HDF5). Whatever the destination could not hold is in ``issues``, with how many
    points each concerns: ``fixtures/torch_logdir`` converted to CSV counts 26 series and
    350 points, and the 33 points of its 15 series that are not scalars (so not in the table)
    are in its ``not_in_table`` issues. A table function such as ``histograms()`` counts
    every point it read, scalars too. ``lost`` is the issues that cost data; ``outputs``
    lists what was written.
    """

    issues: list[Issue] = field(default_factory=list)
    runs: int = 0
    series: int = 0
    points: collections.Counter = field(default_factory=collections.Counter)
    outputs: list[str] = field(default_factory=list)

    def add(self, kind: str, message: str, *, path=None, run=None, tag=None,
            count: int = 1, lost: bool = True) -> Issue:
        """Record one issue; ``kind`` must be in :data:`tbconvert.kinds.KINDS` (ValueError
        otherwise: a new kind belongs in the catalogue, with its meaning)."""
        kinds.check(kind, lost)
        issue = Issue(kind, message, None if path is None else str(path), run, tag, count, lost)
        self.issues.append(issue)
        return issue

    def extend(self, issues: Iterable[Issue]) -> None:
        self.issues.extend(issues)

    @property
    def lost(self) -> list[Issue]:
        """Issues that cost data."""
        return [i for i in self.issues if i.lost]

    def summary_lines(self, limit_per_kind: int = 5) -> list[str]:
        """Human-readable lines: one headline per kind of issue (``warning:`` when it cost
        data, ``note:`` otherwise), then up to ``limit_per_kind`` of its messages."""
        by_kind: dict[str, list[Issue]] = collections.defaultdict(list)
        for issue in self.issues:
            by_kind[issue.kind].append(issue)
        lines = []
        for kind, issues in by_kind.items():
            head = "warning" if any(i.lost for i in issues) else "note"
            lines.append(f"{head}: {headline(kind, issues)}")
            for issue in issues[:limit_per_kind]:
                lines.append(f"  {issue.message}")
            if len(issues) > limit_per_kind:
                lines.append(f"  ... and {len(issues) - limit_per_kind} more like this "
                             "(-v lists them all)")
        return lines

    def to_dict(self) -> dict:
        return {
            "runs": self.runs,
            "series": self.series,
            "points": dict(self.points),
            "outputs": list(self.outputs),
            "issues": [
                {"kind": i.kind, "message": i.message, "path": i.path, "run": i.run,
                 "tag": i.tag, "count": i.count, "lost": i.lost}
                for i in self.issues
            ],
        }


def given(report, cls: type = Report):
    """The ``report`` a caller passed, or a new ``cls()`` for None; a UsageError for anything
    that is not a ``cls`` (it would fail later, half-way through the work)."""
    if report is None:
        return cls()
    if not isinstance(report, cls):
        from tbconvert.errors import UsageError
        raise UsageError(f"report takes a tbconvert.{cls.__name__} (or None), not "
                         f"{type(report).__name__}")
    return report


def plural(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun it counts: ``1 point``, ``2 points``, ``3 series``."""
    if many is None:
        many = one if one.endswith("series") else one + "s"
    return f"{n} {one if n == 1 else many}"


def were(n: int) -> str:
    """The verb that agrees with ``n`` things: "was" or "were"."""
    return "was" if n == 1 else "were"


def are(n: int) -> str:
    """The verb that agrees with ``n`` things: "is" or "are"."""
    return "is" if n == 1 else "are"


# Headlines of the common kinds, from (the issues' counts added up, issues); ``count`` means
# what the kind counts (:data:`tbconvert.kinds.KINDS`). Other kinds read "<kind in words>",
# "<kind in words>: N <what it counts>" or "<kind in words>: N times".
_HEADLINES = {
    "not_in_table": lambda n, k: f"{plural(n, 'point')} of {plural(k, 'series')} {were(n)} "
                                 "not written to the table (not scalars; the hparams, "
                                 "histograms and media commands write those)",
    "not_media": lambda n, k: f"{plural(n, 'point')} {were(n)} not extracted (not images, "
                              "audio or text)",
    "hidden_points_left_out": lambda n, k: f"{plural(n, 'point')} that TensorBoard's restart "
                                           f"rule hides {were(n)} left out",
    "missing_blob": lambda n, k: f"{plural(n, 'missing blob')} (lost by the source)",
    "missing_blob_written_empty": lambda n, k: f"{plural(n, 'lost blob')} written as empty "
                                               "blobs, so the others keep their positions",
    "unsupported_series": lambda n, k: f"{plural(n, 'point')} of {plural(k, 'series')} "
                                       f"the destination cannot hold {were(n)} left out",
    "experiment_facts_sidecar": lambda n, k: "the experiment's name, description and times "
                                             "were kept in a file beside the runs",
    "plugin_files_not_read": lambda n, k: "files that TensorBoard's plugins read beside event "
                                          "files were not read (not event data)",
    "parts_not_listed": lambda n, k: f"{plural(n, 'part file')} of a Parquet dataset not "
                                     "listed in its _tbconvert.json, not read",
    "plugin_files_compared": lambda n, k: f"{plural(n, 'file')} of TensorBoard's plugins "
                                          "compared byte for byte",
    "plugin_files_copied": lambda n, k: f"{plural(n, 'file')} of TensorBoard's plugins copied "
                                        "beside the runs",
    "unreadable_file": lambda n, k: f"{plural(k, 'file')} could not be read",
    # a series whose damage left nothing to count its points by adds none to ``n``
    "damaged_series": lambda n, k: f"{plural(k, 'series')} of an archive skipped for damage"
                                   + (f" ({plural(n, 'point')} counted)" if n else ""),
    "run_renamed": lambda n, k: f"{plural(k, 'run')} renamed",
    "run_without_data_left_out": lambda n, k: f"{plural(k, 'run')} without data left out",
    "name_made_safe": lambda n, k: f"{plural(k, 'name')} made safe to use as a path",
    # one issue per run
    "restart_markers_not_written": lambda n, k: f"{plural(n, 'restart marker')} of "
                                                f"{plural(k, 'run')} not written (their effect "
                                                "is in which points were)",
    "scalar_rounded_to_float32": lambda n, k: f"{plural(n, 'scalar value')} of "
                                              f"{plural(k, 'series')} that float32 cannot hold "
                                              f"{were(n)} rounded to float32 (the only scalar "
                                              "type TensorBoard shows with both loaders)",
    "histograms_as_tensors": lambda n, k: f"{plural(n, 'histogram point')} of "
                                          f"{plural(k, 'tag')} written in the tensor form both "
                                          "TensorBoard loaders show alike (the default loader "
                                          "showed legacy histo values with every bucket)",
    "steps_not_increasing": lambda n, k: f"{plural(n, 'point')} of {plural(k, 'tag')} that a "
                                         "later point at the same or an earlier step follows "
                                         f"{were(n)} written, but TensorBoard's default loader "
                                         "does not show them (--load_fast=false does)",
    "run_records_dropped": lambda n, k: f"{plural(n, 'run-level event')} of {plural(k, 'run')} "
                                        "dropped (the destination has no place for them)",
}


def headline(kind: str, issues: list[Issue]) -> str:
    """What the issues of one kind amount to, in words."""
    phrase = _HEADLINES.get(kind)
    n = sum(i.count for i in issues)
    if phrase is not None:
        return phrase(n, len(issues))
    words = kind.replace("_", " ")
    entry = kinds.KINDS.get(kind)
    if entry is not None and entry.counts is not None:
        return f"{words}: {plural(n, entry.counts)}"
    return words if len(issues) == 1 else f"{words}: {len(issues)} times"
