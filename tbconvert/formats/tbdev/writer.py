"""TbdevWriter: the model -> one experiment directory laid out as the exporter wrote it.

``metadata.json`` (sorted keys), ``scalars.json`` / ``tensors.json`` /
``blob_sequences.json`` (one JSON line per series, sorted keys, columnar
points, NaN tokens), one uncompressed npz per tensor series named by its
first wall time (``tensors/<%.6f>[_N].npz``, members ``arr_0``...), and one
``blobs/blob_<id>.bin`` per blob. The directory appears under its final name
only when the writer closes.

Chunks of one (run, tag) are merged into one line while a run is written; if
a run's buffered tensors pass ``max_buffer_bytes`` the pending series are
written out and later chunks start new lines (the exporter's format allows
several lines per series). Scalar columns beyond ``SCALARS_HELD_BYTES`` wait
in a temporary file, and a scalars line is written a block of numbers at a
time (:mod:`.pending_scalars`). Blob bytes go to their files at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tbconvert import budget
from tbconvert import dtypes as dt
from tbconvert.columns import rounded_in_float64
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.tbdev import export_dir, text
from tbconvert.formats.tbdev.pending_scalars import PendingScalars
from tbconvert.formats.tbdev.spill import series_file
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    Series,
    as_scalar_series,
)
from tbconvert.output import AtomicOutput
from tbconvert.report import Report, plural, were

# Scalar columns held in memory for pending lines, all series together (the rest is spilled).
SCALARS_HELD_BYTES = 32 << 20

_NUMPY_EXACT = {dt.DT_FLOAT, dt.DT_DOUBLE, dt.DT_INT32, dt.DT_UINT8, dt.DT_INT16,
                dt.DT_INT8, dt.DT_STRING, dt.DT_COMPLEX64, dt.DT_INT64, dt.DT_BOOL,
                dt.DT_UINT16, dt.DT_COMPLEX128, dt.DT_HALF, dt.DT_UINT32,
                dt.DT_UINT64}


def encode_metadata(md: Metadata) -> str:
    """Metadata -> ``summary_metadata`` (standard base64 of the SummaryMetadata proto)."""
    from tensorboard.compat.proto import summary_pb2

    proto = summary_pb2.SummaryMetadata(display_name=md.display_name,
                                        summary_description=md.description,
                                        data_class=int(md.data_class))
    if md.plugin_name or md.plugin_content:   # (see the event-file writer's metadata)
        proto.plugin_data.plugin_name = md.plugin_name
        proto.plugin_data.content = md.plugin_content
    return export_dir.b64encode(proto.SerializeToString())


@dataclass
class _Pending:
    """One line being collected: a series' chunks merged."""

    kind: str
    tag: str
    metadata: Metadata
    steps: list = field(default_factory=list)
    wall_times: list = field(default_factory=list)
    payload: list = field(default_factory=list)  # (code, array) / path lists
    scalars: PendingScalars | None = None        # scalars keep all three columns here


class TbdevWriter(Writer):
    """Writes one experiment directory (``DST`` is whatever name the user gave)."""

    keeps_hidden = False

    def __init__(self, path: Path, options: Options, report: Report, *,
                 max_buffer_bytes: int = 256 << 20) -> None:
        super().__init__(path, options, report)
        self.max_buffer_bytes = max_buffer_bytes
        # Scalar columns of the pending lines beyond this go to a temporary file. (Whatever
        # that budget, a series still starts a new line after max_buffer_bytes.)
        self.max_held_scalar_bytes = SCALARS_HELD_BYTES
        self._spill = series_file()
        self._held_scalars = 0
        self._out = AtomicOutput(self.path, force=options.force, directory=True)
        self._tmp = self._out.tmp
        self._files: dict[str, object] = {}
        self._experiment_written = False
        self._tensor_names: set[str] = set()
        self._blob_ids: set[str] = set()
        self._seed = hashlib.sha256(
            str(self.path.name).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        def start():
            for kind in export_dir.KINDS:
                self._files[kind] = open(self._tmp / export_dir.FILE_OF[kind], "w",
                                         encoding="ascii", newline="\n")
            (self._tmp / export_dir.TENSORS_DIR).mkdir()
            (self._tmp / export_dir.BLOBS_DIR).mkdir()
        self.guard(start)

    # -- experiment -----------------------------------------------------------------------

    def write_experiment(self, experiment: Experiment) -> None:
        data = {k: v for k, v in experiment.extra.items() if k not in export_dir.METADATA_KEYS}
        data.update(create_time=experiment.create_time, description=experiment.description,
                    name=experiment.name, update_time=experiment.update_time)
        if experiment.experiment_id:
            self._seed = experiment.experiment_id
            named = export_dir.experiment_id_from_name(self.path.name)
            if named != experiment.experiment_id:
                self.report.add(
                    "experiment_id_not_kept",
                    f"{self.path}: an export keeps the experiment id only in the directory name; "
                    f"name the destination experiment_{experiment.experiment_id} to keep "
                    f"{experiment.experiment_id!r}", path=self.path, lost=False)
        self.guard(lambda: (self._tmp / export_dir.METADATA).write_text(
            export_dir.dumps_line(data), encoding="ascii"))
        self._experiment_written = True

    # -- runs -------------------------------------------------------------------------------

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        if len(run.name) > budget.MAX_NAME_CHARS:
            # an export's reader refuses such a name as hostile: the run would be lost there
            chunks = 0
            for chunk in series:
                chunks += 1
                self._unsupported(chunk, f"a run name of {len(run.name)} characters, more "
                                         f"than an export's readers take ({budget.MAX_NAME_CHARS})")
            if not chunks:
                self._without_data(run)
            return
        if "\\" in run.name:
            # an export's reader takes ``\`` for the separator of a run written on Windows
            self.report.add("run_renamed", f"run {run.name!r}: an export's reader takes its "
                            "backslashes for the '/' of a run exported on Windows: it reads "
                            f"back as {run.name.replace(chr(92), '/')!r}", run=run.name,
                            lost=False)
        pending: dict[str, _Pending] = {}
        points_seen: dict[str, int] = {}
        buffered = 0
        first_wall = None
        for chunk in series:
            routed = self._route(chunk)
            if routed is None:
                continue
            kind, chunk = routed
            finite = chunk.wall_times[np.isfinite(chunk.wall_times)]
            if len(finite):
                wall = float(finite.min())
                first_wall = wall if first_wall is None else min(first_wall, wall)
            p = pending.get(chunk.tag)
            if p is not None and (p.kind != kind or p.metadata != chunk.metadata):
                self._flush(run.name, p)
                p = None
            if p is None:
                p = pending[chunk.tag] = _Pending(kind, chunk.tag, chunk.metadata)
            start = points_seen.get(chunk.tag, 0)
            points_seen[chunk.tag] = start + len(chunk)
            buffered += self._add(run.name, p, chunk, start)
            if buffered > self.max_buffer_bytes:
                for q in pending.values():
                    self._flush(run.name, q)
                pending.clear()
                buffered = 0
                self.guard(self._spill.truncate)
            elif self._held_scalars > self.max_held_scalar_bytes:
                self._spill_scalars(pending.values())
        for p in pending.values():
            self._flush(run.name, p)
        self.guard(self._spill.truncate)
        if run.start_time is not None and first_wall is not None and \
                run.start_time != first_wall:
            # An export has no run start time: read back, the run starts at its first point.
            start = run.start_time
            how = ("comes before" if start < first_wall else "comes after"
                   if start > first_wall else "is not that of")
            self.report.add("run_start_time_dropped",
                            f"{_shown(run.name)}: the run's start time ({start}) {how} its "
                            f"first point ({first_wall}) and has no place in the export "
                            "layout; read back, the run starts at its first point",
                            run=run.name, lost=False)
        # (counted, not listed: a run may hold millions of records)
        markers, dropped, kinds = 0, 0, set()
        for r in run.records:
            if r.is_restart_marker():
                markers += 1
            else:
                dropped += 1
                kinds.add(r.kind)
        if markers:
            # their effect is in which points were written, as for event files
            self.report.add("restart_markers_not_written",
                            f"run {run.name!r}: {plural(markers, 'SessionLog START marker')} "
                            f"not written; the points {'it' if markers == 1 else 'they'} "
                            "hid, if any, are left out instead (written and shown with "
                            "--restarts keep-all)", run=run.name,
                            count=markers, lost=False)
        if dropped:
            self.report.add("run_records_dropped",
                            f"{run.name}: {dropped} run-level event(s) ({', '.join(sorted(kinds))}) "
                            "have no place in the export layout", run=run.name,
                            count=dropped)
        if not points_seen:
            self._without_data(run)

    def _without_data(self, run: Run) -> None:
        # An export names its runs only on series lines: a run that wrote none is gone.
        self.report.add("run_without_data_left_out",
                        f"{_shown(run.name)}: the run holds no data the export layout can hold, "
                        "and an export knows a run only by its series; the run (its name and "
                        "start time) is left out", run=run.name, lost=False)

    def _unsupported(self, chunk: Series, why: str) -> None:
        self.report.add("unsupported_series",
                        f"{_shown(chunk.run)}/{_shown(chunk.tag)}: {why}; the export layout "
                        f"cannot hold it ({len(chunk)} point(s) left out)", run=chunk.run,
                        tag=chunk.tag, count=len(chunk))

    def _route(self, chunk: Series):
        """Which JSON file a chunk belongs in, converting shapes the layout needs."""
        if len(chunk.tag) > budget.MAX_NAME_CHARS:
            self._unsupported(chunk, f"a tag of {len(chunk.tag)} characters, more than an "
                                     f"export's readers take ({budget.MAX_NAME_CHARS})")
            return None
        scalars = as_scalar_series(chunk, self.report)   # bfloat16 and changed dtypes too
        if scalars is not None:
            return "scalars", scalars
        if isinstance(chunk, BlobSequenceSeries):
            return "blobs", chunk
        dc = chunk.data_class
        if dc == DataClass.TENSOR:
            if any(int(c) == dt.DT_RAW_PROTO for c in chunk.dtypes):
                self._unsupported(chunk, "tensors of a type numpy cannot hold")
                return None
            return "tensors", chunk
        if dc == DataClass.SCALAR:
            self._unsupported(chunk, "SCALAR series whose points are not single numbers")
            return None
        if dc == DataClass.BLOB_SEQUENCE:
            if all(int(c) == dt.DT_STRING and np.ndim(t) == 1
                   for c, t in zip(chunk.dtypes, chunk.tensors, strict=True)):
                return "blobs", BlobSequenceSeries.from_sequences(
                    run=chunk.run, tag=chunk.tag, metadata=chunk.metadata, steps=chunk.steps,
                    wall_times=chunk.wall_times, hidden=None,
                    sequences=[list(t) for t in chunk.tensors])
            self._unsupported(chunk, "BLOB_SEQUENCE series whose points are not rank-1 strings")
            return None
        self._unsupported(chunk, "data class UNKNOWN (TensorBoard.dev never stored these)")
        return None

    def _add(self, run: str, p: _Pending, chunk: Series, first_point: int) -> int:
        """Append a chunk to a pending line; returns the bytes it adds to the line's buffer
        (scalar columns count there even once spilled: when a series starts a new line
        does not depend on where its columns wait)."""
        if p.kind == "scalars":
            values = chunk.values
            self._rounded(run, chunk.tag, int(np.count_nonzero(rounded_in_float64(values))))
            self._nan_payloads(run, chunk.tag, values)
            with np.errstate(invalid="ignore"):      # (a signaling NaN, told just above)
                values = values.astype(np.float64)
            if p.scalars is None:
                p.scalars = PendingScalars()
            before = p.scalars.held_bytes
            p.scalars.add(chunk.steps, values, chunk.wall_times)
            self._held_scalars += p.scalars.held_bytes - before
            return 24 * len(chunk)
        p.steps.append(chunk.steps)
        p.wall_times.append(chunk.wall_times)
        if p.kind == "tensors":
            nbytes = 0
            for code, arr in zip(chunk.dtypes, chunk.tensors, strict=True):
                p.payload.append((int(code), arr))
                nbytes += getattr(arr, "nbytes", 0) + 64
            return nbytes
        for i, seq in enumerate(chunk.sequences()):
            paths = []
            for j, blob in enumerate(seq):
                if blob is None:
                    paths.append(None)
                    continue
                bid = export_dir.blob_id(self._seed, run, chunk.tag, first_point + i, j)
                while bid in self._blob_ids:
                    bid = export_dir.blob_id(self._seed + bid, run, chunk.tag, first_point + i, j)
                self._blob_ids.add(bid)
                rel = f"{export_dir.BLOBS_DIR}/blob_{bid}.bin"
                self.guard(lambda rel=rel, blob=blob: (self._tmp / rel).write_bytes(bytes(blob)))
                paths.append(rel)
            p.payload.append(paths)
        return 0

    def _rounded(self, run: str, tag: str, n: int) -> None:
        if n:
            self.report.add("scalar_rounded", f"{run}/{tag}: {plural(n, 'integer value')} beyond "
                            f"2**53 {were(n)} rounded to the export's doubles",
                            run=run, tag=tag, count=n)

    def _nan_payloads(self, run: str, tag: str, values: np.ndarray) -> None:
        """Tell the NaNs other than the plain one: an export's JSON spells every NaN ``NaN``,
        which reads back as the plain quiet NaN, so their sign and payload bits are lost."""
        if values.dtype.kind != "f":
            return
        nan = np.isnan(values)
        if not nan.any():
            return
        bits = values[nan].view(f"<u{values.dtype.itemsize}")
        plain = np.array(np.nan, values.dtype).view(bits.dtype)
        n = int(np.count_nonzero(bits != plain))
        if n:
            self.report.add("nan_payload_dropped",
                            f"{run}/{tag}: {plural(n, 'NaN')} with a sign or payload of "
                            f"{'its' if n == 1 else 'their'} own {were(n)} written as the "
                            "export's plain NaN", run=run, tag=tag, count=n)

    def _spill_scalars(self, pending) -> None:
        """Move the pending scalar columns to the temporary file, the largest first, until
        at most half the budget is held."""
        for p in sorted((p for p in pending if p.scalars is not None),
                        key=lambda p: p.scalars.held_bytes, reverse=True):
            if self._held_scalars <= self.max_held_scalar_bytes // 2:
                break
            self._held_scalars -= p.scalars.held_bytes
            self.guard(lambda p=p: p.scalars.spill(self._spill))

    def _flush(self, run: str, p: _Pending) -> None:
        if p.kind == "scalars":
            columns, p.scalars = p.scalars or PendingScalars(), None
            self._held_scalars -= columns.held_bytes
            metadata = self._encode_metadata(run, p)
            self.guard(lambda: columns.write_line(self._files[p.kind].write, run, metadata,
                                                  p.tag))
            return
        steps = np.concatenate(p.steps) if p.steps else np.zeros(0, np.int64)
        walls = np.concatenate(p.wall_times) if p.wall_times else np.zeros(0)
        points = {"steps": steps.tolist(), "wall_times": walls.tolist()}
        if p.kind == "tensors":
            points["tensors_file_path"] = self._write_npz(run, p, walls)
        else:
            points["blob_file_paths"] = p.payload
        line = export_dir.dumps_line({"points": points, "run": run,
                                  "summary_metadata": self._encode_metadata(run, p),
                                  "tag": p.tag})
        self.guard(lambda: self._files[p.kind].write(line))
        p.steps, p.wall_times, p.payload = [], [], []

    def _encode_metadata(self, run: str, p: _Pending) -> str:
        md = p.metadata
        display, description = text.escape(md.display_name), text.escape(md.description)
        if (display, description) != (md.display_name, md.description):
            # a protobuf string must be UTF-8; a lone surrogate (from JSON or a lenient reader)
            # is not, so it is kept spelled out instead of failing the whole run
            self.report.add("text_escaped", f"{run}/{p.tag}: display name or description holds "
                            "lone UTF-16 surrogates; written spelled as their UTF-8 bytes "
                            "(%ED%A0%80)", run=run, tag=p.tag, lost=False)
            md = Metadata(md.plugin_name, md.plugin_content, display, description, md.data_class)
        return encode_metadata(md)

    def _write_npz(self, run: str, p: _Pending, walls: np.ndarray) -> str | None:
        if not p.payload:
            return None
        arrays, nul_lost, changed = [], 0, set()
        for code, arr in p.payload:
            if code == dt.DT_STRING:
                flat = [bytes(x) for x in np.asarray(arr, dtype=object).reshape(-1)]
                nul_lost += sum(1 for b in flat if b.endswith(b"\x00"))
                out = np.array(flat, dtype=np.bytes_) if flat else np.zeros(0, "S1")
                arrays.append(out.reshape(np.shape(arr)))
            else:
                if code not in _NUMPY_EXACT:
                    changed.add(dt.NAMES.get(code, str(code)))
                # (np.ascontiguousarray would make a rank-0 tensor one of shape [1])
                arrays.append(np.asarray(arr, dtype=dt.numpy_dtype(code), order="C"))
        if nul_lost:
            self.report.add("string_nul_stripped",
                            f"{run}/{p.tag}: {nul_lost} string(s) end in NUL bytes, which the "
                            "export's fixed-width byte arrays cannot keep", run=run, tag=p.tag,
                            count=nul_lost)
        if changed:
            self.report.add("tensor_dtype_changed",
                            f"{run}/{p.tag}: {', '.join(sorted(changed))} tensors are stored as "
                            "their unsigned storage integers (numpy has no such type)",
                            run=run, tag=p.tag, count=len(arrays))
        name = export_dir.tensor_file_name(float(walls[0]), self._tensor_names)
        if not export_dir.tensor_file_base(float(walls[0]))[1]:
            self.report.add("tensor_file_renamed",
                            f"{run}/{p.tag}: first wall time {float(walls[0])!r} is too long to "
                            f"spell as %.6f in a file name; written as {export_dir.TENSORS_DIR}/"
                            f"{name}", run=run, tag=p.tag, lost=False)
        rel = f"{export_dir.TENSORS_DIR}/{name}"
        self.guard(lambda: np.savez(self._tmp / rel, *arrays))
        return rel

    # -- finishing ----------------------------------------------------------------------------

    def _close_files(self) -> None:
        for f in self._files.values():
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        if not self._experiment_written:
            self.write_experiment(Experiment())
        def finish():
            self._spill.close()
            for f in self._files.values():
                f.close()
            self._out.commit()
        self.guard(finish)

    def abort(self) -> None:
        self._close_files()
        self._spill.close()
        self._out.abort()


def _shown(name: str) -> str:
    """A name as a message shows it: one too long to read is cut, with its length told."""
    return name if len(name) <= 200 else f"{name[:100]}... ({len(name)} characters)"
