"""Compare two sources (any formats) through the model, series by series.

Each series is reduced to a fingerprint as it streams past (point count,
metadata, and SHA-256 digests of steps, wall times and values, independent of
how the points were chunked); beside the digests, a sketch of at most 64 buckets
of steps per series tells where a difference is (:mod:`tbconvert.verify.sketch`).
A fingerprint takes a few KB: a source of many series keeps a digest row of a
few dozen bytes per series instead (:mod:`tbconvert.verify.digest`), and is read
again for the fingerprints of the series whose rows differ, so two sources of any
size compare with memory bounded by one run and their series' names. Each run's
run-level events (meta graphs, session logs, log messages) are compared as well,
and so are runs without series wherever both formats can hold them. Users run
this after archiving and before deleting the originals.
"""

from __future__ import annotations

import collections
import gc
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from tbconvert import api, malloc, names
from tbconvert.describe import scan
from tbconvert.errors import FormatError
from tbconvert.formats.base import Options
from tbconvert.model import Experiment, Series
from tbconvert.report import Report, given, plural
from tbconvert.verify.digest import Digests, Tags
from tbconvert.verify.fingerprint import Fingerprint, metadata_key, record_key
from tbconvert.verify.sketch import MASK, Batch, Place, locate

# A source of at most HELD series keeps their fingerprints as it is read; a source of more
# keeps digests only, and the series whose digests differ are read again, GROUP at a time,
# for fingerprints that tell where (a fingerprint takes a few KB).
HELD = 4096
GROUP = 4096


@dataclass
class _Source:
    """What one source holds, reduced for comparing."""

    digests: Digests                                # of every series of the selected runs
    series: dict[str, dict[str, Fingerprint]] | None   # {run: {tag: fingerprint}}, if held
    records: dict[str, collections.Counter]         # {run: Counter of record keys}
    experiment: Experiment
    # A TensorBoard.dev export knows a run only by the lines of its series: it holds neither
    # runs without series nor run-level events, nor start times (its runs start at their
    # first point).
    tbdev: bool = False
    starts: dict = field(default_factory=dict)      # {run: start time, or None}
    # An event-file logdir's files of TensorBoard's plugins (plugin_copy's source of them;
    # None: a format that holds none), read only to be compared with another logdir's.
    plugin_files: object = None

    @property
    def runs(self) -> dict[str, Tags]:
        """The tags of every selected run, and their digest rows."""
        return self.digests.numbers

    def scalar_dtypes(self, run: str, tag: str, i: int) -> list:
        """Those of series ``i``, ``tag`` of ``run``."""
        if self.series is not None:
            return self.series[run][tag].scalar_dtypes
        return self.digests.scalar_dtypes(i)


class _Reduced:
    """The stats :func:`scan` adds a chunk to: its series' digest row, and its fingerprint
    while the source has at most :data:`HELD` series."""

    def __init__(self, keep_walls: bool):
        self.keep_walls = keep_walls
        self.digests = Digests()
        self.held: dict[str, dict[str, Fingerprint]] | None = {}
        self.batch = Batch()
        self._row = 0
        self._fp: Fingerprint | None = None

    def __call__(self, run, s: Series) -> _Reduced:
        # names as conversions store them (odd bytes %XX), so a round trip compares equal
        name, tag = names.text(run.name), names.text(s.tag)
        self._row = self.digests.row(name, tag, s)
        self._fp = None
        if self.held is not None:
            tags = self.held.setdefault(name, {})
            self._fp = tags.get(tag)
            if self._fp is None and self.digests.used > HELD:
                self._let_go()
            elif self._fp is None:
                self._fp = tags[tag] = _new_fingerprint(s, self.keep_walls, self.batch)
        return self

    def add(self, s: Series) -> None:
        self.digests.add(self._row, s, None if self._fp is None else self._fp.add(s))

    def _let_go(self) -> None:
        """Too many series to keep fingerprints of: digests only, from now on."""
        for run, tags in self.held.items():
            rows = self.digests.numbers.get(run, {})
            for tag, fp in tags.items():
                if tag in rows:
                    self.digests.set_dtypes(rows[tag], fp.scalar_dtypes)
        self.held = None
        self.batch = Batch()

    def drop(self, run: str) -> None:
        self.digests.numbers.pop(run, None)
        if self.held is not None:
            self.held.pop(run, None)

    def finish(self) -> None:
        self.batch.flush()
        self.digests.finish()


def _new_fingerprint(s: Series, keep_walls: bool, batch: Batch) -> Fingerprint:
    return Fingerprint(s.metadata.plugin_name, s.data_class.name, metadata=metadata_key(s),
                       keep_walls=keep_walls, batch=batch)


def fingerprints(path, *, fmt: str | None, options: Options, report: Report,
                 keep_walls: bool) -> _Source:
    """The digests of a source's series (and, for a source of at most :data:`HELD` series,
    their fingerprints), and its runs' records, streaming."""
    records: dict[str, collections.Counter] = {}
    starts: dict = {}
    reduced = _Reduced(keep_walls)
    with api.open_reader(path, format=fmt, options=options, report=report) as reader:
        experiment = reader.experiment()
        for run, selected in scan(reader, options, reduced, visible_only=True):
            name = names.text(run.name)
            if not selected:
                reduced.drop(name)
                continue
            reduced.digests.numbers.setdefault(name, {})
            if reduced.held is not None:
                reduced.held.setdefault(name, {})
            starts[name] = run.start_time
            # A restart marker is TensorBoard's only to hide points, and which points are
            # hidden is compared with the points; event files written from any source hold
            # the points, not the markers.
            records.setdefault(name, collections.Counter()).update(
                record_key(r) for r in run.records if not r.is_restart_marker())
        reduced.finish()
        tbdev = _is_tbdev(reader)
        plugin_files = getattr(reader, "plugin_source", lambda: None)()
    _give_back()
    return _Source(reduced.digests, reduced.held, records, experiment, tbdev, starts,
                   plugin_files)


def _give_back() -> None:
    """Once a source is read: what its reader freed handed back, before the next reading.
    (Its reader's objects are collected first: some are in reference cycles, which would
    keep them until Python's collector runs by itself, perhaps while the next source is
    read.)"""
    gc.collect()
    malloc.give_back_free_heap()


def _fingerprints_of(path, *, fmt: str | None, options: Options, keep_walls: bool,
                     wanted: dict[str, set[str]]) -> dict[str, dict[str, Fingerprint]]:
    """The fingerprints of the ``wanted`` series ({run: tags}) of a source read again."""
    out: dict[str, dict[str, Fingerprint]] = {}
    batch = Batch()

    def fingerprint_of(run, s: Series):
        name, tag = names.text(run.name), names.text(s.tag)
        if tag not in wanted.get(name, ()):
            return _UNWANTED
        tags = out.setdefault(name, {})
        fp = tags.get(tag)
        if fp is None:
            fp = tags[tag] = _new_fingerprint(s, keep_walls, batch)
        return fp

    # (what reading finds was reported the first time)
    with api.open_reader(path, format=fmt, options=options, report=Report()) as reader:
        for run, selected in scan(reader, options, fingerprint_of, visible_only=True):
            if not selected:
                out.pop(names.text(run.name), None)
        batch.flush()
    _give_back()
    for run, tags in wanted.items():
        lost = sorted(set(tags) - set(out.get(run, ())))
        if lost:
            raise FormatError(f"{path}: the series {run}/{lost[0]} was not there when read "
                              "again: the source changed while it was compared; compare "
                              "it again once nothing writes to it")
    return out


class _Unwanted:
    @staticmethod
    def add(s: Series) -> None:
        return None


_UNWANTED = _Unwanted()


def _is_tbdev(reader) -> bool:
    # Only a loaded module makes readers: sources of other formats need not import this one.
    module = sys.modules.get("tbconvert.formats.tbdev.reader")
    inner = getattr(reader, "_inner", reader)   # a remote source's reader of its staged copy
    return module is not None and isinstance(inner, module.TbdevReader)


_MD_FIELDS = ("plugin name", "plugin content", "display name", "description", "data class")


def compare(a, b, *, from_a=None, from_b=None, options: Options | None = None,
            wall_time_tolerance: float = 0.0, report: Report | None = None,
            plugin_files: bool = True) -> list[str]:
    """Differences between sources ``a`` and ``b``; an empty list means they hold the same data.

    A series whose steps, wall times, values or hidden points differ is named with the first
    step where they do ("values differ at step 3"), or else the narrowest range of steps
    that holds it ("at steps 300 to 363 (first differing range)").

    Scalars compare by value, integers exactly; scalars of other dtypes but equal values
    (a float32 read back from a float64 archive, integers kept as an export's doubles) are
    the same points, and their dtypes are noted in ``report`` (``scalar_dtypes_differ``).
    Experiment facts (id, name, description, times, other facts) are compared field by field,
    one held by a single source included. With ``restarts="keep-all"`` in ``options``, which
    points TensorBoard's restart rule hides is compared too. Runs' start times are compared,
    one lost included (but with a TensorBoard.dev export, which has none), and
    their run-level events (meta graphs, session logs, log messages) as a
    multiset of (kind, step, wall time, bytes) per run, except restart markers (SessionLog
    START), whose effect is in which points are hidden. A TensorBoard.dev export holds no
    run-level events, so those of the other source are differences; it holds no runs without
    series either, so these are compared only between other formats.
    ``wall_time_tolerance`` (seconds) allows for TensorBoard.dev exports, which store wall times
    to about a microsecond. Between two event-file logdirs, the files of TensorBoard's plugins
    beside the event files (those an event-file output carries) are compared byte for byte,
    unless ``plugin_files`` is False (a logdir rebuilt from an archive, which holds none).
    """
    if not (isinstance(wall_time_tolerance, (int, float)) and 0 <= wall_time_tolerance < math.inf):
        from tbconvert.errors import UsageError
        raise UsageError(f"the wall-time tolerance must be a number of seconds, 0 or more, "
                         f"not {wall_time_tolerance!r}")
    options = options or Options()
    report = given(report)
    keep = wall_time_tolerance > 0
    sa = fingerprints(a, fmt=from_a, options=options, report=report, keep_walls=keep)
    sb = fingerprints(b, fmt=from_b, options=options, report=report, keep_walls=keep)
    ea, eb = sa.experiment, sb.experiment
    diffs = []
    for name in ("experiment_id", "name", "description", "create_time", "update_time"):
        if getattr(ea, name) != getattr(eb, name):
            diffs.append(f"experiment {name.replace('_', ' ')}: {getattr(ea, name)!r} in A, "
                         f"{getattr(eb, name)!r} in B")
    for key in sorted(set(ea.extra) | set(eb.extra)):
        if ea.extra.get(key) != eb.extra.get(key):
            diffs.append(f"experiment fact {key!r}: {ea.extra.get(key)!r} in A, "
                         f"{eb.extra.get(key)!r} in B")
    empty_runs = not (sa.tbdev or sb.tbdev)

    def listed(src: _Source) -> set[str]:
        return {r for r, tags in src.runs.items() if tags or src.records[r] or empty_runs}

    runs_a, runs_b = listed(sa), listed(sb)
    for run in sorted(runs_a - runs_b):
        diffs.append(f"run {run!r}: only in A ({_run_contents(sa, run, sb)})")
    for run in sorted(runs_b - runs_a):
        diffs.append(f"run {run!r}: only in B ({_run_contents(sb, run, sa)})")
    shared = sorted(runs_a & runs_b)
    differing = []      # (run, tag, row in A, row in B)
    for run in shared:
        ta, tb = dict(sa.runs[run].items()), dict(sb.runs[run].items())
        differing.extend((run, tag, ta[tag], tb[tag]) for tag in sorted(ta.keys() & tb.keys())
                         if not sa.digests.same(ta[tag], sb.digests, tb[tag]))
    # what each differing series' differences are (in the order of ``differing``: a line, or
    # a tuple of them), and the notes about those with any
    told: list[str | tuple | None] = [None] * len(differing)
    notes: dict[int, list] = {}
    _counts_differ(differing, sa, sb, told)
    _compare_differing(differing, [(a, from_a, sa), (b, from_b, sb)], options,
                       wall_time_tolerance, told, notes)
    k = 0
    for run in shared:
        ta, tb = dict(sa.runs[run].items()), dict(sb.runs[run].items())
        for tag in sorted(set(ta) - set(tb)):
            diffs.append(f"{run}/{tag}: only in A "
                         f"({plural(sa.digests.points(ta[tag]), 'point')})")
        for tag in sorted(set(tb) - set(ta)):
            diffs.append(f"{run}/{tag}: only in B "
                         f"({plural(sb.digests.points(tb[tag]), 'point')})")
        for tag in sorted(set(ta) & set(tb)):
            if k < len(differing) and differing[k][:2] == (run, tag):
                diffs.extend((told[k],) if isinstance(told[k], str) else told[k])
                report.extend(notes.pop(k, ()))
                told[k] = None
                k += 1
            else:
                _note_dtypes(run, tag, sa.scalar_dtypes(run, tag, ta[tag]),
                             sb.scalar_dtypes(run, tag, tb[tag]), report)
        start_a, start_b = sa.starts.get(run), sb.starts.get(run)
        if empty_runs and (start_a is None) != (start_b is None):
            diffs.append(f"run {run!r}: start time {start_a!r} in A, {start_b!r} in B (a run "
                         "without one shows TensorBoard no start)")
        elif empty_runs and start_a is not None and \
                not _same_wall(start_a, start_b, wall_time_tolerance):
            diffs.append(f"run {run!r}: start time {start_a!r} in A, {start_b!r} in B")
        for side, mine, other in (("A", sa, sb), ("B", sb, sa)):
            extra = mine.records[run] - other.records[run]
            if extra:
                n = sum(extra.values())
                diffs.append(f"run {run!r}: {plural(n, 'run-level event')} only in {side} "
                             f"({_records_text(extra)}){_no_place(other)}")
    if sa.plugin_files is not None and sb.plugin_files is not None:
        if plugin_files:
            diffs.extend(_compare_plugin_files(sa, sb, report))
        _take_back_notes(sa, sb, report)    # (compared, or left out on purpose)
    return diffs


def _counts_differ(differing: list[tuple[str, str, int, int]], sa: _Source, sb: _Source,
                   told: list) -> None:
    """In ``told``, the differing series told by their digest rows alone, as
    :func:`_compare_series` tells them: those of the same metadata and other point counts
    (a source cut short), whose fingerprints would tell no more."""
    x, y = sa.digests, sb.digests
    for k, (run, tag, i, j) in enumerate(differing):
        if x.points(i) != y.points(j) and x.same_metadata(i, y, j):
            told[k] = _counts_text(f"{run}/{tag}", (x.points(i), y.points(j)),
                                   (x.step_range(i), y.step_range(j)))


def _counts_text(where: str, points: tuple, ranges: tuple) -> str:
    return f"{where}: {points[0]} points != {points[1]} points (steps {ranges[0]} vs {ranges[1]})"


def _compare_differing(differing: list[tuple[str, str, int, int]], sides: list,
                       options: Options, tol: float, told: list, notes: dict) -> None:
    """In ``told`` and ``notes``, the differences of the ``differing`` series not told yet,
    and the notes about them, from fingerprints: those kept while reading, else made
    reading the source again (at most :data:`GROUP` series at a time)."""
    rest = [k for k, lines in enumerate(told) if lines is None]
    for g in range(0, len(rest), GROUP):
        group = rest[g:g + GROUP]
        wanted: dict[str, set[str]] = {}     # the group's series, to read again
        for k in group:
            wanted.setdefault(differing[k][0], set()).add(differing[k][1])
        fingerprints_ab = []
        for path, fmt, src in sides:
            if src.series is not None:
                fingerprints_ab.append(src.series)
                continue
            fingerprints_ab.append(_fingerprints_of(path, fmt=fmt, options=options,
                                                    keep_walls=tol > 0, wanted=wanted))
        fa, fb = fingerprints_ab
        for k in group:
            run, tag = differing[k][:2]
            report = Report()
            lines = _compare_series(run, tag, fa[run][tag], fb[run][tag], tol, report)
            told[k] = lines[0] if len(lines) == 1 else tuple(lines)
            if report.issues:
                notes[k] = report.issues


def _note_dtypes(run: str, tag: str, x: list, y: list, report: Report) -> None:
    if x and y and x != y:
        # Not a difference: values are compared exactly, and a format that stores scalars as
        # doubles holds every value but integers beyond 2**53, which then differ as values.
        report.add("scalar_dtypes_differ", f"{run}/{tag}: scalars are {_dtypes_text(x)} in A "
                   f"and {_dtypes_text(y)} in B", run=run, tag=tag, lost=False)


def _take_back_notes(sa: _Source, sb: _Source, report: Report) -> None:
    from tbconvert.formats.tfevents.plugin_files import take_back
    take_back(report, [*sa.plugin_files.places.values(), *sb.plugin_files.places.values()])


def _compare_plugin_files(sa: _Source, sb: _Source, report: Report) -> list[str]:
    """Two event-file logdirs: their plugins' files compared byte for byte."""
    from tbconvert.formats.tfevents.plugin_copy import digests
    # by the text spelling of their paths, as runs are compared: a run directory whose name
    # is not UTF-8 is written spelled %XX
    fa, fb = ({names.text(rel): v for rel, v in digests(side.plugin_files).items()}
              for side in (sa, sb))
    diffs = [f"plugin file {rel}: only in {side}" for side, mine, other in
             (("A", fa, fb), ("B", fb, fa)) for rel in sorted(set(mine) - set(other))]
    same = 0
    for rel in sorted(set(fa) & set(fb)):
        unread = [f"{v} in {side}" for side, v in (("A", fa[rel]), ("B", fb[rel]))
                  if v.startswith("cannot")]
        if unread:
            diffs.append(f"plugin file {rel}: {unread[0]}")
        elif fa[rel] != fb[rel]:
            diffs.append(f"plugin file {rel}: other bytes in B than in A")
        else:
            same += 1
    if fa or fb:
        report.add("plugin_files_compared", f"{plural(same, 'file')} of TensorBoard's plugins "
                   f"the same, byte for byte, in both (of {len(fa)} in A and {len(fb)} in B)",
                   count=same, lost=False)
    return diffs


def _same_wall(a: float, b: float, tol: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _run_contents(src: _Source, run: str, other: _Source) -> str:
    n, records = len(src.runs[run]), src.records[run]
    if not records:
        return f"{n} series" if n else "no series"
    events = sum(records.values())
    return (f"{n or 'no'} series, {plural(events, 'run-level event')}: "
            f"{_records_text(records)}{_no_place(other)}")


def _no_place(src: _Source) -> str:
    return "; a TensorBoard.dev export has no place for them" if src.tbdev else ""


def _records_text(records: collections.Counter, shown: int = 3) -> str:
    keys = sorted(records.elements(), key=lambda k: k[:2])
    text = ", ".join(f"{kind} at step {step}" for step, kind, *_ in keys[:shown])
    return text + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def _dtypes_text(dtypes: list) -> str:
    if len(dtypes) == 1:
        return dtypes[0][0]
    return ", ".join(f"{name} ({plural(n, 'point')})" for name, n in dtypes)


def _holes_text(place: Place, columns: dict[str, int]) -> str:
    """Whether the bucket's points differ only where a blob missing on one side is empty on
    the other (then the sums as if missing blobs were empty agree)."""
    if "missing" not in columns or place.row_a is None:
        return ""
    values, as_empty, missing = (columns[k] for k in ("values", "as_empty", "missing"))
    a, b = place.row_a, place.row_b
    if (int(a[values]) + int(a[as_empty]) - int(b[values]) - int(b[as_empty])) & MASK:
        return ""
    lost_a, lost_b = int(a[missing]), int(b[missing])
    if lost_a and not lost_b:
        n, side, other = lost_a, "A", "B"
    elif lost_b and not lost_a:
        n, side, other = lost_b, "B", "A"
    else:
        return " (blobs missing on one side where the other has empty ones)"
    blobs = "a blob" if n == 1 else f"{n} blobs"
    return f" ({blobs} missing in {side}, empty in {other})"


def _differs(what: str, place: Place | None, columns=None) -> str:
    """``what`` differ, and where: "values differ at step 3"."""
    if place is None:
        return f"{what} differ"
    if place.low is None:
        return f"{what} differ (the same points, in another order)"
    return f"{what} differ {place.at()}" + (_holes_text(place, columns) if columns else "")


def _step_of(steps_a: np.ndarray, steps_b: np.ndarray, i: int) -> str:
    if steps_a[i] == steps_b[i]:
        return f"step {steps_a[i]}"
    return f"point {i + 1} (step {steps_a[i]} in A, {steps_b[i]} in B)"


def _compare_series(run: str, tag: str, x: Fingerprint, y: Fingerprint, tol: float,
                    report: Report) -> list[str]:
    where = f"{run}/{tag}"
    out = []
    for name, u, v in zip(_MD_FIELDS, x.metadata, y.metadata, strict=True):
        if u != v:
            out.append(f"{where}: {name} differs: {u!r} != {v!r}")
    if x.points != y.points:
        out.append(_counts_text(where, (x.points, y.points), (x.step_range, y.step_range)))
        return out
    same_steps = x.steps.digest() == y.steps.digest()
    if not same_steps:
        place = locate(x, y, "steps")
        first = ("" if place is None else ", the same steps in another order"
                 if place.low is None else place.first())
        if x.step_range == y.step_range:
            low, high = x.step_range
            out.append(f"{where}: steps differ within the same range, {low} to {high} "
                       f"({plural(x.points, 'point')} each){first}")
        else:
            out.append(f"{where}: steps differ (ranges {x.step_range} vs {y.step_range})"
                       f"{first}")
    if tol > 0:
        wa = np.concatenate(x.wall_list) if x.wall_list else np.zeros(0)
        wb = np.concatenate(y.wall_list) if y.wall_list else np.zeros(0)
        nan_a, nan_b = np.isnan(wa), np.isnan(wb)
        gap = np.abs(wa - wb)
        worst = float(np.max(gap[~nan_a & ~nan_b], initial=0.0))
        if (nan_a != nan_b).any() or worst > tol:
            steps_a, steps_b = (np.concatenate(f.step_list) for f in (x, y))
        if (nan_a != nan_b).any():
            i = int(np.flatnonzero(nan_a != nan_b)[0])
            out.append(f"{where}: wall times differ (NaN in one, a time in the other, at "
                       f"{plural(int((nan_a != nan_b).sum()), 'point')}, the first at "
                       f"{_step_of(steps_a, steps_b, i)})")
        elif worst > tol:
            i = int(np.flatnonzero(~nan_a & ~nan_b & (gap > tol))[0])
            out.append(f"{where}: wall times differ by up to {worst:.3g} s (the first beyond "
                       f"the tolerance at {_step_of(steps_a, steps_b, i)})")
    elif x.walls.digest() != y.walls.digest():
        # (values and wall times are placed by their steps: with other steps, the first
        # place they differ would be where the steps do, already told)
        out.append(f"{where}: {_differs('wall times', locate(x, y, 'walls') if same_steps else None)}")
    if x.values.digest() != y.values.digest() or x.big_ints.digest() != y.big_ints.digest() \
            or x.nans.digest() != y.nans.digest():
        place = locate(x, y, "values") if same_steps else None
        columns = x.sketch.columns if x.sketch is not None else None
        out.append(f"{where}: {_differs('values', place, columns)}")
    _note_dtypes(run, tag, x.scalar_dtypes, y.scalar_dtypes, report)
    if x.hidden != y.hidden:
        out.append(f"{where}: {x.hidden} hidden points != {y.hidden}")
    elif x.hidden_at.digest() != y.hidden_at.digest():
        place = locate(x, y, "steps", hidden=True)
        first = "" if place is None or place.low is None else place.first()
        out.append(f"{where}: other points hidden by the restart rule ({x.hidden} each){first}")
    return out
