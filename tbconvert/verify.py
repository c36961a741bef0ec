"""Compare two sources (any formats) through the model, series by series.

Each series is reduced to a fingerprint as it streams past (point count,
metadata, and SHA-256 digests of steps, wall times and values, independent of
how the points were chunked), so two sources of any size compare with memory
bounded by one run. Users run this after archiving and before deleting the
originals.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from tbconvert import api, names
from tbconvert.describe import SeriesStats, scan
from tbconvert.formats.base import Options
from tbconvert.model import BlobSequenceSeries, ScalarSeries, Series, TensorSeries
from tbconvert.report import Report


@dataclass
class _Fingerprint(SeriesStats):
    """The counts of :class:`~tbconvert.describe.SeriesStats`, and digests of the points."""

    metadata: tuple = ()
    keep_walls: bool = False
    steps: hashlib._Hash = field(default_factory=hashlib.sha256)
    walls: hashlib._Hash = field(default_factory=hashlib.sha256)
    values: hashlib._Hash = field(default_factory=hashlib.sha256)
    wall_list: list = field(default_factory=list)

    def add(self, s: Series) -> None:
        super().add(s)
        self.steps.update(s.steps.astype("<i8").tobytes())
        if self.keep_walls:
            self.wall_list.append(s.wall_times.copy())
        else:
            self.walls.update(s.wall_times.astype("<f8").tobytes())
        _hash_values(self.values, s)


def _hash_values(h, s: Series) -> None:
    if isinstance(s, ScalarSeries):
        # Scalars compare by value: a float32 read back from a float64 archive is the same point.
        h.update(s.values.astype("<f8").tobytes())
    elif isinstance(s, BlobSequenceSeries):
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


def fingerprints(path, *, fmt: str | None, options: Options, report: Report, keep_walls: bool):
    """``({run: {tag: fingerprint}}, experiment)`` of a source, streaming."""
    out: dict[str, dict[str, _Fingerprint]] = {}

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
            if not selected:
                out.pop(names.text(run.name), None)
    return out, experiment


_MD_FIELDS = ("plugin name", "plugin content", "display name", "description", "data class")


def compare(a, b, *, from_a=None, from_b=None, options: Options | None = None,
            wall_time_tolerance: float = 0.0, report: Report | None = None) -> list[str]:
    """Differences between sources ``a`` and ``b``; an empty list means they hold the same data.

    Runs with no series are ignored (formats differ in whether they keep empty runs).
    ``wall_time_tolerance`` (seconds) allows for TensorBoard.dev exports, which store wall times
    to about a microsecond.
    """
    options = options or Options()
    report = report if report is not None else Report()
    keep = wall_time_tolerance > 0
    fa, ea = fingerprints(a, fmt=from_a, options=options, report=report, keep_walls=keep)
    fb, eb = fingerprints(b, fmt=from_b, options=options, report=report, keep_walls=keep)
    diffs = []
    if not ea.is_empty() and not eb.is_empty():
        for name in ("name", "description"):
            if getattr(ea, name) != getattr(eb, name):
                diffs.append(f"experiment {name}: {getattr(ea, name)!r} != {getattr(eb, name)!r}")
    runs_a = {r for r, t in fa.items() if t}
    runs_b = {r for r, t in fb.items() if t}
    for run in sorted(runs_a - runs_b):
        diffs.append(f"run {run!r}: only in A ({len(fa[run])} series)")
    for run in sorted(runs_b - runs_a):
        diffs.append(f"run {run!r}: only in B ({len(fb[run])} series)")
    for run in sorted(runs_a & runs_b):
        ta, tb = fa[run], fb[run]
        for tag in sorted(set(ta) - set(tb)):
            diffs.append(f"{run}/{tag}: only in A ({ta[tag].points} points)")
        for tag in sorted(set(tb) - set(ta)):
            diffs.append(f"{run}/{tag}: only in B ({tb[tag].points} points)")
        for tag in sorted(set(ta) & set(tb)):
            diffs.extend(_compare_series(f"{run}/{tag}", ta[tag], tb[tag], wall_time_tolerance))
    return diffs


def _compare_series(where: str, x: _Fingerprint, y: _Fingerprint, tol: float) -> list[str]:
    out = []
    for name, u, v in zip(_MD_FIELDS, x.metadata, y.metadata, strict=True):
        if u != v:
            out.append(f"{where}: {name} differs: {u!r} != {v!r}")
    if x.points != y.points:
        out.append(f"{where}: {x.points} points != {y.points} points "
                   f"(steps {x.step_range} vs {y.step_range})")
        return out
    if x.steps.digest() != y.steps.digest():
        out.append(f"{where}: steps differ (ranges {x.step_range} vs {y.step_range})")
    if tol > 0:
        wa = np.concatenate(x.wall_list) if x.wall_list else np.zeros(0)
        wb = np.concatenate(y.wall_list) if y.wall_list else np.zeros(0)
        worst = float(np.nanmax(np.abs(wa - wb))) if len(wa) else 0.0
        if worst > tol:
            out.append(f"{where}: wall times differ by up to {worst:.3g} s")
    elif x.walls.digest() != y.walls.digest():
        out.append(f"{where}: wall times differ")
    if x.values.digest() != y.values.digest():
        out.append(f"{where}: values differ")
    if x.hidden != y.hidden:
        out.append(f"{where}: {x.hidden} hidden points != {y.hidden}")
    return out
