"""Compare two sources (any formats) through the model, series by series.

Each series is reduced to a fingerprint as it streams past (point count,
metadata, and SHA-256 digests of steps, wall times and values, independent of
how the points were chunked), so two sources of any size compare with memory
bounded by one run. Each run's run-level events (meta graphs, session logs, log
messages) are compared as well, and so are runs without series wherever both
formats can hold them. Users run this after archiving and before deleting the
originals.
"""

from __future__ import annotations

import collections
import hashlib
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from tbconvert import api, names
from tbconvert.columns import rounded_in_float64
from tbconvert.describe import SeriesStats, scan
from tbconvert.formats.base import Options
from tbconvert.model import (
    BlobSequenceSeries,
    Experiment,
    RunRecord,
    ScalarSeries,
    Series,
    TensorSeries,
    as_scalar_series,
)
from tbconvert.report import Report, given, plural

# One integer that float64 cannot hold: its position in the series, then its value as a
# 128-bit two's complement number, so that an int64 and a uint64 of one value are equal.
_BIG_INT = np.dtype([("at", "<i8"), ("high", "<i8"), ("low", "<u8")])


@dataclass
class _Fingerprint(SeriesStats):
    """The counts of :class:`~tbconvert.describe.SeriesStats`, and digests of the points."""

    metadata: tuple = ()
    keep_walls: bool = False
    steps: hashlib._Hash = field(default_factory=hashlib.sha256)
    walls: hashlib._Hash = field(default_factory=hashlib.sha256)
    values: hashlib._Hash = field(default_factory=hashlib.sha256)
    big_ints: hashlib._Hash = field(default_factory=hashlib.sha256)
    nans: hashlib._Hash = field(default_factory=hashlib.sha256)
    hidden_at: hashlib._Hash = field(default_factory=hashlib.sha256)   # which points are hidden
    wall_list: list = field(default_factory=list)
    scalar_dtypes: list = field(default_factory=list)   # [dtype name, points] in point order

    def add(self, s: Series) -> None:
        first = self.points
        super().add(s)
        if s.hidden is not None and s.hidden.any():
            self.hidden_at.update((first + np.flatnonzero(s.hidden)).astype("<i8").tobytes())
        self.steps.update(s.steps.astype("<i8").tobytes())
        if self.keep_walls:
            self.wall_list.append(s.wall_times.copy())
        else:
            self.walls.update(s.wall_times.astype("<f8").tobytes())
        scalars = as_scalar_series(s)
        if scalars is not None:
            self._add_scalars(scalars, first)
        else:
            _hash_values(self.values, s)

    def _add_scalars(self, s: ScalarSeries, first: int) -> None:
        # Scalars compare by value: a float32 read back from a float64 archive is the same point,
        # and so is an integer kept as a double where the double is that integer.
        with np.errstate(invalid="ignore"):     # (a signaling NaN is quieted: see _nans)
            self.values.update(s.values.astype("<f8").tobytes())
        nan = np.flatnonzero(np.isnan(s.values)) if s.values.dtype.kind == "f" else ()
        if len(nan):
            marks = np.zeros(len(nan), [("at", "<i8"), ("bits", "<u4")])
            marks["at"] = first + nan
            marks["bits"] = _nan_bits(s.values[nan])
            self.nans.update(marks.tobytes())
        at = np.flatnonzero(rounded_in_float64(s.values))
        if len(at):
            big = np.zeros(len(at), _BIG_INT)
            big["at"] = first + at
            v = s.values[at].astype(s.values.dtype.kind + "8")
            big["low"] = v.view(np.uint64)
            big["high"] = np.where(v < 0, -1, 0)
            self.big_ints.update(big.tobytes())
        if len(s):
            name = s.values.dtype.name
            if self.scalar_dtypes and self.scalar_dtypes[-1][0] == name:
                self.scalar_dtypes[-1][1] += len(s)
            else:
                self.scalar_dtypes.append([name, len(s)])


def _nan_bits(values: np.ndarray) -> np.ndarray:
    """NaNs' sign, quiet bit and payload as the bits of a float32 NaN, whatever their width: a
    NaN widened exactly (float32 to float64) keeps them, one quieted on the way does not."""
    if values.dtype.itemsize == 4:
        return values.view("<u4")
    if values.dtype.itemsize == 8:
        b = values.view("<u8")
        return (((b >> np.uint64(32)) & np.uint64(0x80000000)) | np.uint64(0x7F800000)
                | ((b >> np.uint64(29)) & np.uint64(0x7FFFFF))).astype("<u4")
    h = values.astype("<f2").view("<u2").astype("<u4")
    return ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13)


def _hash_values(h, s: Series) -> None:
    if isinstance(s, BlobSequenceSeries):
        for seq in s.sequences():
            h.update(len(seq).to_bytes(8, "little"))
            for blob in seq:
                h.update(b"\x00" if blob is None else b"\x01" + len(blob).to_bytes(8, "little") + blob)
    elif isinstance(s, TensorSeries):
        for code, arr in zip(s.dtypes.tolist(), s.tensors, strict=True):
            arr = np.asarray(arr)
            h.update(code.to_bytes(4, "little", signed=True) + repr(arr.shape).encode())
            if arr.dtype == object:
                for x in arr.reshape(-1):
                    h.update(len(x).to_bytes(8, "little") + bytes(x))
            else:
                h.update(np.ascontiguousarray(arr).tobytes())


def _metadata_key(s: Series) -> tuple:
    md = s.metadata
    return (md.plugin_name, md.plugin_content, md.display_name, md.description, int(md.data_class))


def _record_key(rec: RunRecord) -> tuple:
    wall = rec.wall_time if not math.isnan(rec.wall_time) else None   # NaN equals no NaN
    return rec.step, rec.kind, wall, hashlib.sha256(rec.payload).digest()


@dataclass
class _Source:
    """What one source holds, reduced for comparing."""

    series: dict[str, dict[str, _Fingerprint]]     # {run: {tag: fingerprint}}, every selected run
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


def fingerprints(path, *, fmt: str | None, options: Options, report: Report,
                 keep_walls: bool) -> _Source:
    """The fingerprints of a source's series, and its runs' records, streaming."""
    out: dict[str, dict[str, _Fingerprint]] = {}
    records: dict[str, collections.Counter] = {}
    starts: dict = {}

    def fingerprint_of(run, s: Series) -> _Fingerprint:
        # names as conversions store them (odd bytes %XX), so a round trip compares equal
        tags = out.setdefault(names.text(run.name), {})
        tag = names.text(s.tag)
        fp = tags.get(tag)
        if fp is None:
            fp = tags[tag] = _Fingerprint(s.metadata.plugin_name, s.data_class.name,
                                          metadata=_metadata_key(s), keep_walls=keep_walls)
        return fp

    with api.open_reader(path, format=fmt, options=options, report=report) as reader:
        experiment = reader.experiment()
        for run, selected in scan(reader, options, fingerprint_of, visible_only=True):
            name = names.text(run.name)
            if not selected:
                out.pop(name, None)
                continue
            out.setdefault(name, {})
            starts[name] = run.start_time
            # A restart marker is TensorBoard's only to hide points, and which points are
            # hidden is compared with the points; event files written from any source hold
            # the points, not the markers.
            records.setdefault(name, collections.Counter()).update(
                _record_key(r) for r in run.records if not r.is_restart_marker())
        tbdev = _is_tbdev(reader)
        plugin_files = getattr(reader, "plugin_source", lambda: None)()
    return _Source(out, records, experiment, tbdev, starts, plugin_files)


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
        return {r for r, tags in src.series.items() if tags or src.records[r] or empty_runs}

    runs_a, runs_b = listed(sa), listed(sb)
    for run in sorted(runs_a - runs_b):
        diffs.append(f"run {run!r}: only in A ({_run_contents(sa, run, sb)})")
    for run in sorted(runs_b - runs_a):
        diffs.append(f"run {run!r}: only in B ({_run_contents(sb, run, sa)})")
    for run in sorted(runs_a & runs_b):
        ta, tb = sa.series[run], sb.series[run]
        for tag in sorted(set(ta) - set(tb)):
            diffs.append(f"{run}/{tag}: only in A ({plural(ta[tag].points, 'point')})")
        for tag in sorted(set(tb) - set(ta)):
            diffs.append(f"{run}/{tag}: only in B ({plural(tb[tag].points, 'point')})")
        for tag in sorted(set(ta) & set(tb)):
            diffs.extend(_compare_series(run, tag, ta[tag], tb[tag], wall_time_tolerance, report))
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
    n, records = len(src.series[run]), src.records[run]
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


def _dtypes_text(fp: _Fingerprint) -> str:
    if len(fp.scalar_dtypes) == 1:
        return fp.scalar_dtypes[0][0]
    return ", ".join(f"{name} ({plural(n, 'point')})" for name, n in fp.scalar_dtypes)


def _compare_series(run: str, tag: str, x: _Fingerprint, y: _Fingerprint, tol: float,
                    report: Report) -> list[str]:
    where = f"{run}/{tag}"
    out = []
    for name, u, v in zip(_MD_FIELDS, x.metadata, y.metadata, strict=True):
        if u != v:
            out.append(f"{where}: {name} differs: {u!r} != {v!r}")
    if x.points != y.points:
        out.append(f"{where}: {x.points} points != {y.points} points "
                   f"(steps {x.step_range} vs {y.step_range})")
        return out
    if x.steps.digest() != y.steps.digest():
        if x.step_range == y.step_range:
            low, high = x.step_range
            out.append(f"{where}: steps differ within the same range, {low} to {high} "
                       f"({plural(x.points, 'point')} each)")
        else:
            out.append(f"{where}: steps differ (ranges {x.step_range} vs {y.step_range})")
    if tol > 0:
        wa = np.concatenate(x.wall_list) if x.wall_list else np.zeros(0)
        wb = np.concatenate(y.wall_list) if y.wall_list else np.zeros(0)
        nan_a, nan_b = np.isnan(wa), np.isnan(wb)
        worst = float(np.max(np.abs(wa - wb)[~nan_a & ~nan_b], initial=0.0))
        if (nan_a != nan_b).any():
            out.append(f"{where}: wall times differ (NaN in one, a time in the other, at "
                       f"{plural(int((nan_a != nan_b).sum()), 'point')})")
        elif worst > tol:
            out.append(f"{where}: wall times differ by up to {worst:.3g} s")
    elif x.walls.digest() != y.walls.digest():
        out.append(f"{where}: wall times differ")
    if x.values.digest() != y.values.digest() or x.big_ints.digest() != y.big_ints.digest() \
            or x.nans.digest() != y.nans.digest():
        out.append(f"{where}: values differ")
    if x.scalar_dtypes and y.scalar_dtypes and x.scalar_dtypes != y.scalar_dtypes:
        # Not a difference: values are compared exactly, and a format that stores scalars as
        # doubles holds every value but integers beyond 2**53, which then differ as values.
        report.add("scalar_dtypes_differ", f"{where}: scalars are {_dtypes_text(x)} in A and "
                   f"{_dtypes_text(y)} in B", run=run, tag=tag, lost=False)
    if x.hidden != y.hidden:
        out.append(f"{where}: {x.hidden} hidden points != {y.hidden}")
    elif x.hidden_at.digest() != y.hidden_at.digest():
        out.append(f"{where}: other points hidden by the restart rule ({x.hidden} each)")
    return out
