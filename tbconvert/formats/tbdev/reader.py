"""TbdevReader: a TensorBoard.dev export (any generation) -> the model.

Two passes. The index pass reads each JSON-lines file once and records, per
run, where its lines are (byte offset, length, line number), runs in order of
first appearance. Then each run's lines are parsed, grouped by tag (chunks of
one tag in file order) and handed over one run at a time; npz archives and
blob files are only opened while their chunk is produced. A line longer than
``lines.LONG_LINE_BYTES`` (a series of millions of points) is never held: the
index pass reads its run from its end, and a scalars line is parsed a block at
a time into a temporary file, its points handed on in chunks.

Everything the export lost or the reader could not use (null paths, missing
files, bad lines, count mismatches) is recorded in the report and never
crashes the conversion. Pickled npz members are refused unless
``options.allow_pickle``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from tbconvert import budget
from tbconvert.arrayfile import ArrayFile
from tbconvert.errors import CorruptDataError, FormatError, UsageError, raise_if_exhausted
from tbconvert.formats.base import Options, Reader
from tbconvert.formats.tbdev import export_dir, lines, regular, scalar_lines, text, wire
from tbconvert.formats.tbdev.payloads import PayloadMixin, _BadLine, _Chunk, _Entry
from tbconvert.formats.tbdev.spill import MeasuredColumn, series_file
from tbconvert.model import DataClass, Experiment, Metadata, Run, RunData, ScalarSeries
from tbconvert.report import Report

_CLASS_OF_KIND = {"scalars": DataClass.SCALAR, "tensors": DataClass.TENSOR,
                  "blobs": DataClass.BLOB_SEQUENCE}
# The end of a line as the exporter wrote it: sorted keys, so the top-level "run",
# "summary_metadata" and "tag" follow the points object. Only strings sit between its
# first "}" and the closing one, so in a valid line this "run" is the top-level one.
_EXPORTER_TAIL = re.compile(
    rb'\}, "run": ("(?:[^"\\\x00-\x1f]|\\.)*"), "summary_metadata": "[A-Za-z0-9+/=]*", '
    rb'"tag": "(?:[^"\\\x00-\x1f]|\\.)*"\}\r?\n?\Z', re.S)
_TAIL_START = b'}, "run": '
_LINE_START = b'{"points": '
# The longest tail the pattern above is tried on: two names of the longest length read, each
# character escaped, and summary metadata of 64 KiB. Python's re keeps an entry per character
# of such a name (gigabytes for a name of millions), so a longer tail is parsed as JSON,
# whose name is then refused for its length.
_MAX_TAIL = 2 * (6 * budget.MAX_NAME_CHARS + 2) + (64 << 10) + 64


def _tail_run(tail: bytes, whole: bool) -> str | None:
    """The ``run`` of a line in the exporter's shape, from the line's end: ``tail`` is the
    whole line, or (``whole`` false) its last :data:`_MAX_TAIL` bytes or more. None when
    the end is not the exporter's."""
    pos = tail.rfind(_TAIL_START)
    if pos < 0 or (whole and pos == 0) or len(tail) - pos > _MAX_TAIL:
        return None
    m = _EXPORTER_TAIL.match(tail, pos)
    if m is None:
        return None
    try:
        return json.loads(m.group(1))
    except (ValueError, RecursionError):
        return None


def _line_run(raw: bytes, where: str) -> str:
    """The top-level ``run`` of a line, without parsing its points when it has the exporter's
    shape; otherwise the whole line is parsed. Raises :class:`_BadLine` saying why not."""
    if raw.startswith(_LINE_START):
        run = _tail_run(raw, True)
        if run is not None:
            return run
    obj = _loads_line(raw, where)
    run = obj.get("run")
    if not isinstance(run, str):
        raise _BadLine("line has no string 'run'")
    return run


def _loads_line(raw: bytes, where: str) -> dict:
    try:
        obj = budget.loads_json(raw, where)
    except CorruptDataError as exc:
        raise _BadLine(str(exc)[len(where) + 2:]) from None
    if not isinstance(obj, dict):
        raise _BadLine("line is not a JSON object")
    return obj


_I64_MAX = np.iinfo(np.int64).max


def _column(points: dict, key: str, kinds: str, dtype, what: str) -> np.ndarray:
    if key not in points:
        raise _BadLine(f"points has no {key!r}")
    values = points[key]
    if not isinstance(values, list):
        raise _BadLine(f"points.{key} is not a list")
    if not values:
        return np.zeros(0, dtype)
    if any(v is True or v is False for v in values):
        # numpy would read them as 1 and 0 beside numbers; JSON's booleans are no numbers
        raise _BadLine(f"points.{key} holds true or false, not {what}")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        raise _BadLine(f"points.{key} holds values that are not {what}") from None
    if dtype is np.int64 and arr.ndim == 1 and arr.dtype.kind in "uO":
        # numpy reads 2**63 .. 2**64-1 as uint64 and larger ones as objects; casting would
        # wrap them to negative numbers, so they are refused with their value named
        bad = [v for v in values if type(v) is int and not -_I64_MAX - 1 <= v <= _I64_MAX]
        if bad:
            raise _BadLine(f"points.{key} holds {bad[0]}, outside the 64-bit range "
                           f"TensorBoard keeps ({len(bad)} such value(s))")
    if arr.ndim != 1 or arr.dtype.kind not in kinds:
        raise _BadLine(f"points.{key} holds values that are not {what}")
    try:
        return arr.astype(dtype)
    except (ValueError, OverflowError):
        raise _BadLine(f"points.{key} holds values out of range") from None


def _least_finite(walls) -> float | None:
    if isinstance(walls, MeasuredColumn):
        return walls.finite_min
    finite = walls[np.isfinite(walls)]
    return float(finite.min()) if len(finite) else None


def decode_metadata(b64: str) -> Metadata:
    """``summary_metadata`` (standard base64 of a SummaryMetadata proto) -> Metadata."""
    return _decode_metadata(b64)[0]


def _decode_metadata(b64: str) -> tuple[Metadata, bool]:
    """The Metadata, and whether strings that were not UTF-8 had to be escaped."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import summary_pb2

    try:
        raw = base64.b64decode(b64.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _BadLine("summary_metadata is not valid base64") from None
    try:
        md = summary_pb2.SummaryMetadata.FromString(raw)
        fields = (md.plugin_data.plugin_name, bytes(md.plugin_data.content), md.display_name,
                  md.summary_description, int(md.data_class))
        escaped = False
    except DecodeError:
        escaped = True
        try:
            fields = wire.summary_metadata(raw)   # strings that are not UTF-8: kept escaped
        except wire.WireError:
            raise _BadLine("summary_metadata is not a SummaryMetadata proto") from None
    try:
        data_class = DataClass(fields[4])
    except ValueError:
        data_class = DataClass.UNKNOWN
    return Metadata(plugin_name=fields[0], plugin_content=fields[1], display_name=fields[2],
                    description=fields[3], data_class=data_class), escaped


class TbdevReader(PayloadMixin, Reader):
    """Reads one experiment of a TensorBoard.dev export (directory or old scalars file)."""

    def __init__(self, path: Path, options: Options, report: Report, *,
                 source: export_dir.Source | None = None) -> None:
        super().__init__(path, options, report)
        if source is None:
            sources, _ = export_dir.find_experiments(self.path)
            if not sources:
                raise FormatError(
                    f"{self.path}: not a TensorBoard.dev export (no metadata.json, scalars.json, "
                    "experiment_* directories or scalars_<id>.json files)")
            if len(sources) > 1:
                raise UsageError(
                    f"{self.path} holds {len(sources)} experiments; convert them all with "
                    f"'tbconvert tbdev-export {self.path} -o OUTDIR' (one logdir per experiment) "
                    "or name one experiment directory")
            source = sources[0]
        self.source = source
        self._experiment: Experiment | None = None
        self._metadata_cache: dict[str, Metadata] = {}

    # -- experiment facts ---------------------------------------------------------------

    def experiment(self) -> Experiment:
        if self._experiment is None:
            self._experiment = self._read_metadata()
        return self._experiment

    def _read_metadata(self) -> Experiment:
        exp_id = self.source.experiment_id
        path = self.source.metadata_file
        if path is None or not regular.exists(path):
            return Experiment(experiment_id=exp_id)
        try:
            data = budget.loads_json(regular.read_regular(path), str(path))
            if not isinstance(data, dict):
                raise CorruptDataError(f"{path}: not a JSON object")
        except (CorruptDataError, OSError) as exc:
            raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
            why = (str(exc)[len(str(path)) + 2:] if isinstance(exc, CorruptDataError)
                   else regular.reason(exc))
            self.report.add("bad_metadata", f"{path}: unreadable ({why}); experiment name, "
                            "description and times are lost", path=path)
            return Experiment(experiment_id=exp_id)
        from tbconvert.formats.facts import experiment_from
        return experiment_from(data, export_dir.METADATA_KEYS, path, self.report, "bad_metadata",
                               experiment_id=exp_id)

    # -- index pass ---------------------------------------------------------------------

    def _index(self) -> dict[str, list[_Entry]]:
        by_raw: dict[str, list[_Entry]] = {}     # keyed by the export's run names
        for kind in export_dir.KINDS:
            path = self.source.json_file(kind)
            if path is None or not regular.exists(path):
                continue
            try:
                f = regular.open_regular(path)
            except OSError as exc:
                raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
                self.report.add("unreadable_file", f"{path}: cannot read ({regular.reason(exc)}); "
                                "the series it holds are lost", path=path)
                continue
            with f:
                for line in lines.lines(f):
                    line_no, start, raw = line.line_no, line.offset, line.raw
                    run = self._long_line_run(f, line) if raw is None else None
                    if run is None:
                        if raw is None:       # not the exporter's shape: read as json reads it
                            f.seek(start)
                            raw = f.read(line.length)
                        if not raw.strip():
                            continue
                        try:
                            run = _line_run(raw, f"{path}:{line_no}")
                        except _BadLine as exc:
                            self._report_bad_raw(path, line_no, line.ends, str(exc))
                            continue
                    if len(run) > budget.MAX_NAME_CHARS:
                        self.report.add("bad_line", f"{path}:{line_no}: a run name of {len(run)} "
                                        f"characters (at most {budget.MAX_NAME_CHARS} are read); "
                                        "line skipped", path=path)
                        continue
                    by_raw.setdefault(run, []).append(
                        _Entry(kind, path, line_no, start, line.length, run))
        names = self._run_names(list(by_raw))
        return {names[raw]: entries for raw, entries in by_raw.items()}

    def _run_names(self, exported: list[str]) -> dict[str, str]:
        """The model's name of each exported run: ``\\`` read as ``/`` (an export made on
        Windows), unless that is the name of another run of the export, which keeps its own
        (the renamed one then gets a ``~N`` suffix). Lone surrogates stay: the copy loop
        escapes names for every writer alike."""
        names = {run: run for run in exported if "\\" not in run}
        taken = set(names.values())
        for run in exported:
            if run in names:
                continue
            name = wanted = run.replace("\\", "/")
            n = 1
            while name in taken:
                n += 1
                name = f"{wanted}~{n}"
            names[run] = name
            taken.add(name)
            if self.options.wants_run(name):
                why = "" if n == 1 else f" (the export names a run {text.escape(wanted)!r} too)"
                self.report.add("run_renamed", f"run {text.escape(run)!r} uses Windows "
                                f"separators; read as {text.escape(name)!r}{why}",
                                run=text.escape(name), lost=False)
        return names

    @staticmethod
    def _long_line_run(f, line: lines.Line) -> str | None:
        """The run of a line too long to hold, read from its end; None when the line is
        not in the exporter's shape."""
        if not line.head.startswith(_LINE_START):
            return None
        start = max(line.offset, line.offset + line.length - _MAX_TAIL)
        f.seek(start)
        return _tail_run(f.read(line.offset + line.length - start), start == line.offset)

    def _report_bad_raw(self, path: Path, line_no: int, ends: bool, reason: str) -> None:
        if not ends:
            self.report.add("truncated_line", f"{path}:{line_no}: the last line is cut off "
                            "(interrupted export); the series on it is lost, the rest is kept",
                            path=path)
        else:
            self.report.add("bad_line", f"{path}:{line_no}: {reason}; skipped", path=path)

    # -- run pass -----------------------------------------------------------------------

    def iter_runs(self) -> Iterator[RunData]:
        index = self._index()
        open_files: dict[Path, object] = {}
        try:
            for run, entries in index.items():
                if not self.options.wants_run(run):
                    yield RunData(Run(run), iter(()))
                    continue
                spill = series_file()     # the long lines of the run, read into a temporary file
                tags, read = self._parse_run(run, entries, open_files, spill)
                if not read:
                    spill.close()
                    # every line of the run was skipped, and told: no run of nothing for it
                    continue
                # (a hand-edited export may hold NaN or infinite times: they start nothing)
                walls = [w for chunks in tags.values() for c in chunks
                         if (w := _least_finite(c.wall_times)) is not None]
                start = min(walls) if walls else None
                yield RunData(Run(run, start_time=start), self._iter_series(run, tags, spill))
        finally:
            for f in open_files.values():
                f.close()

    def _parse_run(self, run: str, entries: list[_Entry], open_files,
                   spill: ArrayFile) -> tuple[dict[str, list[_Chunk]], bool]:
        """The run's series (chunks by tag), and whether any of its lines could be read."""
        tags: dict[str, list[_Chunk]] = {}
        read = False
        held = 0      # bytes of scalar columns in memory
        for entry in entries:
            f = open_files.get(entry.file)
            if f is None:
                try:
                    f = open_files[entry.file] = regular.open_regular(entry.file)
                except OSError as exc:   # replaced since the index pass
                    raise_if_exhausted(exc)   # (out of memory or file handles: no damage)
                    self.report.add("unreadable_file", f"{entry.file}: cannot read again "
                                    f"({regular.reason(exc)}); run {run!r} loses its lines "
                                    "there", path=entry.file, run=run)
                    return tags, read
            streamed = None
            if entry.kind == "scalars" and entry.length > lines.LONG_LINE_BYTES:
                streamed = scalar_lines.streamed_scalar_line(f, entry.offset, entry.length,
                                                             spill)
            raw = b""
            if streamed is None:
                f.seek(entry.offset)
                raw = f.read(entry.length)
            try:
                chunk = self._parse_line(entry, raw, run, streamed)
            except _BadLine as exc:
                if streamed is not None:
                    f.seek(entry.offset + entry.length - 1)
                    raw = f.read(1)
                if not raw.endswith(b"\n"):
                    self.report.add("truncated_line", f"{entry.file}:{entry.line_no}: the last "
                                    f"line is cut off ({exc}); its series is lost, the rest is "
                                    "kept", path=entry.file, run=run)
                else:
                    self.report.add("bad_line", f"{entry.file}:{entry.line_no}: {exc}; line "
                                    "skipped", path=entry.file, run=run)
                continue
            read = True
            if chunk is None or not self.options.wants_tag(chunk.tag):
                continue
            chunks = tags.setdefault(chunk.tag, [])
            if chunks and chunks[0].entry.kind != entry.kind:
                self.report.add(
                    "conflicting_series", f"{chunk.where}: {run}/{chunk.tag} also appears in "
                    f"{chunks[0].entry.file.name} with another data class; this line is skipped",
                    path=entry.file, run=run, tag=chunk.tag, count=len(chunk.steps))
                continue
            if chunks and chunk.metadata_b64 != chunks[0].metadata_b64:
                self.report.add(
                    "metadata_differs", f"{chunk.where}: {run}/{chunk.tag}: summary metadata "
                    "differs from the series' first line; the first line's is kept",
                    path=entry.file, run=run, tag=chunk.tag)
                chunk.metadata = chunks[0].metadata
            chunks.append(chunk)
            if entry.kind == "scalars" and not isinstance(chunk.payload, MeasuredColumn):
                held += 24 * len(chunk.steps)
                if held > RUN_HELD_BYTES:
                    # many short lines of one run: their columns wait with the long lines'
                    for c in (c for chunks in tags.values() for c in chunks):
                        _spill_chunk(c, spill)
                    held = 0
        return tags, read

    def _parse_line(self, entry: _Entry, raw: bytes, run: str, fast=None) -> _Chunk | None:
        """``fast``: what :func:`scalar_lines.streamed_scalar_line` read of a long line."""
        if fast is None and entry.kind == "scalars":
            fast = scalar_lines.scalar_line(raw)
        if fast is not None:
            obj, steps, values, walls = fast
            points = {"steps": [], "values": [], "wall_times": []}  # checked below, then replaced
        else:
            obj = _loads_line(raw, f"{entry.file}:{entry.line_no}")
            points = obj.get("points")
        if obj.get("run") != entry.run:
            raise _BadLine("the line's 'run' reads differently when the whole line is parsed "
                           "(a malformed line)")
        tag, b64 = obj.get("tag"), obj.get("summary_metadata")
        if not isinstance(tag, str):
            raise _BadLine("'tag' is missing or not a string")
        if len(tag) > budget.MAX_NAME_CHARS:
            raise _BadLine(f"a tag of {len(tag)} characters (at most {budget.MAX_NAME_CHARS} "
                           "are read)")
        if not isinstance(b64, str):
            raise _BadLine("'summary_metadata' is missing or not a string")
        if not isinstance(points, dict):
            raise _BadLine("'points' is missing or not an object")
        metadata = self._metadata(b64, entry, run, tag)
        if fast is not None:
            if not (len(steps) == len(values) == len(walls)):
                raise _BadLine(f"{len(steps)} steps, {len(values)} values and {len(walls)} "
                               "wall_times")
            return _Chunk(entry, tag, metadata, b64, steps, walls, values)
        steps = _column(points, "steps", "iu", np.int64, "integers")
        wall_times = _column(points, "wall_times", "iuf", np.float64, "numbers")
        n = len(steps)
        if len(wall_times) != n:
            raise _BadLine(f"{n} steps but {len(wall_times)} wall_times")
        if entry.kind == "scalars":
            payload = _column(points, "values", "iuf", np.float64, "numbers")
            if len(payload) != n:
                raise _BadLine(f"{n} steps but {len(payload)} values")
            rounded = sum(1 for v in points["values"]
                          if type(v) is int and abs(v) > 2**53 and int(float(v)) != v)
            if rounded:
                self.report.add("inexact_value", f"{entry.file}:{entry.line_no}: {run}/{tag}: "
                                f"{rounded} integer value(s) beyond 2**53 rounded to the nearest "
                                "float64", path=entry.file, run=run, tag=tag, count=rounded)
        elif entry.kind == "tensors":
            payload = points.get("tensors_file_path")
            if payload is not None and not isinstance(payload, str):
                raise _BadLine("tensors_file_path is not a string or null")
        else:
            payload = points.get("blob_file_paths")
            if not isinstance(payload, list) or not all(
                    isinstance(seq, list) and all(p is None or isinstance(p, str) for p in seq)
                    for seq in payload):
                raise _BadLine("blob_file_paths is not a list of lists of paths")
            if len(payload) != n:
                raise _BadLine(f"{n} steps but {len(payload)} blob sequences")
        return _Chunk(entry, tag, metadata, b64, steps, wall_times, payload)

    def _metadata(self, b64: str, entry: _Entry, run, tag: str) -> Metadata:
        key = (entry.kind, b64)
        md = self._metadata_cache.get(key)
        if md is not None:
            return md
        md, escaped = _decode_metadata(b64)
        if escaped:
            self.report.add("text_escaped", f"{entry.file}:{entry.line_no}: {run}/{tag}: summary "
                            "metadata holds text that is not UTF-8; kept with the bad bytes "
                            "percent-escaped (%FF)", path=entry.file, run=run, tag=tag,
                            lost=False)
        expected = _CLASS_OF_KIND[entry.kind]
        if md.data_class != expected:
            if md.data_class != DataClass.UNKNOWN:
                self.report.add("data_class_changed", f"{entry.file}:{entry.line_no}: {run}/{tag}: "
                                f"metadata says {md.data_class.name} but the series is in "
                                f"{entry.file.name}; read as {expected.name}", path=entry.file,
                                run=run, tag=tag, lost=False)
            md = Metadata(md.plugin_name, md.plugin_content, md.display_name, md.description,
                          expected)
        if entry.kind == "scalars" and not md.plugin_name:
            md = Metadata("scalars", md.plugin_content, md.display_name, md.description,
                          md.data_class)
        self._metadata_cache[key] = md
        return md

    # -- producing series -------------------------------------------------------------

    def _iter_series(self, run: str, tags: dict[str, list[_Chunk]], spill: ArrayFile):
        try:
            for tag, chunks in tags.items():
                kind = chunks[0].entry.kind
                if kind == "scalars":
                    yield from self._scalars(run, tag, chunks)
                elif kind == "tensors":
                    for chunk in chunks:
                        yield from self._tensors(run, chunk)
                else:
                    for chunk in chunks:
                        yield from self._blobs(run, chunk)
        finally:
            spill.close()

    def _scalars(self, run: str, tag: str, chunks: list[_Chunk]):
        exact = True
        for c in chunks:
            if isinstance(c.payload, MeasuredColumn):
                exact = c.payload.float32_exact
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    v32 = c.payload.astype(np.float32)
                exact = np.array_equal(v32.astype(np.float64), c.payload, equal_nan=True)
            if not exact:
                break
        if not exact:
            self.report.add("float64_scalars", f"{chunks[0].where}: {run}/{tag}: values are not "
                            "all float32-exact; kept as float64 (archives and tables keep them so; "
                            "event files hold float32, and say which they round)",
                            path=chunks[0].entry.file,
                            run=run, tag=tag, lost=False)
        for c in chunks:
            if isinstance(c.payload, MeasuredColumn):
                yield from _spilled_scalars(run, tag, c, exact)
                continue
            values = c.payload.astype(np.float32) if exact else c.payload
            yield ScalarSeries(run=run, tag=tag, metadata=c.metadata, steps=c.steps,
                               wall_times=c.wall_times, hidden=None, values=values)


# A long line's points are handed on in series of this many (24 MiB of columns).
SPILLED_CHUNK_POINTS = 1 << 20
# The scalar columns of a run's short lines held in memory until its series are handed on;
# beyond this they wait in the run's temporary file.
RUN_HELD_BYTES = 48 << 20


def _spill_chunk(c: _Chunk, spill: ArrayFile) -> None:
    if c.entry.kind != "scalars" or isinstance(c.payload, MeasuredColumn):
        return
    columns = []
    for arr in (c.steps, c.wall_times, c.payload):
        column = MeasuredColumn(spill, arr.dtype)
        column.add(arr)
        columns.append(column)
    c.steps, c.wall_times, c.payload = columns


def _spilled_scalars(run: str, tag: str, c: _Chunk, exact: bool):
    # (a line of no points is still a series, as a line read whole is)
    for start in range(0, max(len(c.steps), 1), SPILLED_CHUNK_POINTS):
        stop = start + SPILLED_CHUNK_POINTS
        values = c.payload.read(start, stop)
        yield ScalarSeries(run=run, tag=tag, metadata=c.metadata, steps=c.steps.read(start, stop),
                           wall_times=c.wall_times.read(start, stop), hidden=None,
                           values=values.astype(np.float32) if exact else values)
