"""TbdevReader: a TensorBoard.dev export (any generation) -> the model.

Two passes. The index pass reads each JSON-lines file once and records, per
run, where its lines are (byte offset, length, line number), runs in order of
first appearance. Then each run's lines are parsed, grouped by tag (chunks of
one tag in file order) and handed over one run at a time; npz archives and
blob files are only opened while their chunk is produced.

Everything the export lost or the reader could not use (null paths, missing
files, bad lines, count mismatches) is recorded in the report and never
crashes the conversion. Pickled npz members are refused unless
``options.allow_pickle``.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Iterator

import numpy as np

from tbconvert.errors import FormatError, UsageError
from tbconvert.formats.base import Options, Reader
from tbconvert.formats.tbdev import fastparse, layout
from tbconvert.formats.tbdev.payloads import _BadLine, _Chunk, _Entry, PayloadMixin
from tbconvert.model import DataClass, Experiment, Metadata, Run, RunData, ScalarSeries
from tbconvert.report import Report
from tbconvert import sourcefiles

_CLASS_OF_KIND = {"scalars": DataClass.SCALAR, "tensors": DataClass.TENSOR,
                  "blobs": DataClass.BLOB_SEQUENCE}
_RUN_KEY = b'"run": '


def _peek_run(raw: bytes) -> str | None:
    """The ``run`` value of a line without parsing its (possibly huge) points."""
    pos = raw.rfind(_RUN_KEY)
    if pos < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(raw[pos + len(_RUN_KEY):].decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


def _column(points: dict, key: str, kinds: str, dtype, what: str) -> np.ndarray:
    if key not in points:
        raise _BadLine(f"points has no {key!r}")
    values = points[key]
    if not isinstance(values, list):
        raise _BadLine(f"points.{key} is not a list")
    if not values:
        return np.zeros(0, dtype)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError, OverflowError):
        raise _BadLine(f"points.{key} holds values that are not {what}") from None
    if arr.ndim != 1 or arr.dtype.kind not in kinds:
        raise _BadLine(f"points.{key} holds values that are not {what}")
    try:
        return arr.astype(dtype)
    except (ValueError, OverflowError):
        raise _BadLine(f"points.{key} holds values out of range") from None


def decode_metadata(b64: str) -> Metadata:
    """``summary_metadata`` (standard base64 of a SummaryMetadata proto) -> Metadata."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import summary_pb2

    try:
        raw = base64.b64decode(b64.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise _BadLine("summary_metadata is not valid base64") from None
    try:
        md = summary_pb2.SummaryMetadata.FromString(raw)
    except DecodeError:
        raise _BadLine("summary_metadata is not a SummaryMetadata proto") from None
    try:
        data_class = DataClass(int(md.data_class))
    except ValueError:
        data_class = DataClass.UNKNOWN
    return Metadata(plugin_name=md.plugin_data.plugin_name,
                    plugin_content=bytes(md.plugin_data.content),
                    display_name=md.display_name, description=md.summary_description,
                    data_class=data_class)


class TbdevReader(PayloadMixin, Reader):
    """Reads one experiment of a TensorBoard.dev export (directory or old scalars file)."""

    def __init__(self, path: Path, options: Options, report: Report, *,
                 source: layout.Source | None = None) -> None:
        super().__init__(path, options, report)
        if source is None:
            sources, _ = layout.find_experiments(self.path)
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
        if path is None or not path.is_file():
            return Experiment(experiment_id=exp_id)
        try:
            data = json.loads(sourcefiles.read_bytes(path))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (ValueError, OSError) as exc:
            self.report.add("bad_metadata", f"{path}: unreadable ({exc}); experiment name, "
                            "description and times are lost", path=path)
            return Experiment(experiment_id=exp_id)
        facts = {}
        for key in layout.METADATA_KEYS:
            value = data.get(key, "")
            if value is None:
                value = ""
            if not isinstance(value, str):
                self.report.add("bad_metadata", f"{path}: {key!r} is not a string; kept as text",
                                path=path, lost=False)
                value = json.dumps(value)
            facts[key] = value
        extra = {k: v for k, v in data.items() if k not in layout.METADATA_KEYS}
        return Experiment(experiment_id=exp_id, extra=extra, **facts)

    # -- index pass ---------------------------------------------------------------------

    def _index(self) -> dict[str, list[_Entry]]:
        runs: dict[str, list[_Entry]] = {}
        renamed: set[str] = set()
        for kind in layout.KINDS:
            path = self.source.json_file(kind)
            if path is None or not path.is_file():
                continue
            try:
                f = sourcefiles.open_binary(path)
            except OSError as exc:
                self.report.add("unreadable_file", f"{path}: cannot read ({exc.strerror or exc})",
                                path=path)
                continue
            with f:
                offset = 0
                for line_no, raw in enumerate(f, 1):
                    start, offset = offset, offset + len(raw)
                    if not raw.strip():
                        continue
                    run = _peek_run(raw)
                    if run is None:
                        self._report_bad_raw(path, line_no, raw)
                        continue
                    name = run.replace("\\", "/")
                    if name != run and run not in renamed:
                        renamed.add(run)
                        self.report.add("run_renamed", f"{path}:{line_no}: run {run!r} uses "
                                        f"Windows separators; read as {name!r}", path=path,
                                        run=name, lost=False)
                    runs.setdefault(name, []).append(_Entry(kind, path, line_no, start, len(raw)))
        return runs

    def _report_bad_raw(self, path: Path, line_no: int, raw: bytes) -> None:
        truncated = not raw.endswith(b"\n")
        try:
            obj = json.loads(raw)
            reason = "has no string 'run'" if isinstance(obj, dict) else "is not a JSON object"
        except ValueError as exc:  # UnicodeDecodeError has no .msg
            reason = f"is not valid JSON ({getattr(exc, 'msg', exc)})"
        if truncated:
            self.report.add("truncated_line", f"{path}:{line_no}: the last line is cut off "
                            "(interrupted export); the series on it is lost, the rest is kept",
                            path=path)
        else:
            self.report.add("bad_line", f"{path}:{line_no}: line {reason}; skipped", path=path)

    # -- run pass -----------------------------------------------------------------------

    def iter_runs(self) -> Iterator[RunData]:
        index = self._index()
        open_files: dict[Path, object] = {}
        try:
            for run, entries in index.items():
                if not self.options.wants_run(run):
                    yield RunData(Run(run), iter(()))
                    continue
                tags = self._parse_run(run, entries, open_files)
                walls = [c.wall_times.min() for chunks in tags.values() for c in chunks
                         if len(c.wall_times)]
                start = float(min(walls)) if walls else None
                yield RunData(Run(run, start_time=start), self._iter_series(run, tags))
        finally:
            for f in open_files.values():
                f.close()

    def _parse_run(self, run: str, entries: list[_Entry], open_files) -> dict[str, list[_Chunk]]:
        tags: dict[str, list[_Chunk]] = {}
        for entry in entries:
            f = open_files.get(entry.file)
            if f is None:
                f = open_files[entry.file] = sourcefiles.open_binary(entry.file)
            f.seek(entry.offset)
            raw = f.read(entry.length)
            try:
                chunk = self._parse_line(entry, raw)
            except _BadLine as exc:
                if not raw.endswith(b"\n"):
                    self.report.add("truncated_line", f"{entry.file}:{entry.line_no}: the last "
                                    f"line is cut off ({exc}); its series is lost, the rest is "
                                    "kept", path=entry.file, run=run)
                else:
                    self.report.add("bad_line", f"{entry.file}:{entry.line_no}: {exc}; line "
                                    "skipped", path=entry.file, run=run)
                continue
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
        return tags

    def _parse_line(self, entry: _Entry, raw: bytes) -> _Chunk | None:
        fast = fastparse.scalar_line(raw) if entry.kind == "scalars" else None
        if fast is not None:
            obj, steps, values, walls = fast
            points = {"steps": [], "values": [], "wall_times": []}  # checked below, then replaced
        else:
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise _BadLine(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
            if not isinstance(obj, dict):
                raise _BadLine("not a JSON object")
            points = obj.get("points")
        tag, b64 = obj.get("tag"), obj.get("summary_metadata")
        if not isinstance(tag, str):
            raise _BadLine("'tag' is missing or not a string")
        if not isinstance(b64, str):
            raise _BadLine("'summary_metadata' is missing or not a string")
        if not isinstance(points, dict):
            raise _BadLine("'points' is missing or not an object")
        metadata = self._metadata(b64, entry, obj.get("run", ""), tag)
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
        md = decode_metadata(b64)
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

    def _iter_series(self, run: str, tags: dict[str, list[_Chunk]]):
        for tag, chunks in tags.items():
            kind = chunks[0].entry.kind
            if kind == "scalars":
                yield from self._scalars(run, tag, chunks)
            elif kind == "tensors":
                for chunk in chunks:
                    series = self._tensors(run, chunk)
                    if series is not None:
                        yield series
            else:
                for chunk in chunks:
                    yield self._blobs(run, chunk)

    def _scalars(self, run: str, tag: str, chunks: list[_Chunk]):
        exact = True
        for c in chunks:
            with np.errstate(over="ignore", invalid="ignore"):
                v32 = c.payload.astype(np.float32)
            if not np.array_equal(v32.astype(np.float64), c.payload, equal_nan=True):
                exact = False
                break
        if not exact:
            self.report.add("float64_scalars", f"{chunks[0].where}: {run}/{tag}: values are not "
                            "all float32-exact; kept as float64", path=chunks[0].entry.file,
                            run=run, tag=tag, lost=False)
        for c in chunks:
            values = c.payload.astype(np.float32) if exact else c.payload
            yield ScalarSeries(run=run, tag=tag, metadata=c.metadata, steps=c.steps,
                               wall_times=c.wall_times, hidden=None, values=values)
