"""Reads event-file logdirs into the model, every record, no sampling.

Runs, file order and naming follow TensorBoard's loader (spec 4.1-4.2);
legacy summaries are migrated as TensorBoard does (``legacy``); plain scalar
events are decoded in bulk (``fastscalars``), everything else through
TensorBoard's protobuf classes. Damaged records cost only themselves
(``records.scan``), and every skipped byte is reported.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator

import numpy as np
from google.protobuf.message import DecodeError

from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError
from tbconvert.formats.base import Reader
from tbconvert.formats.tfevents import fastblobs, fastscalars, layout, legacy, records
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.model import DataClass, Experiment, Metadata, RunData, RunRecord
from tbconvert import sourcefiles

_GRAPH_MD = Metadata(legacy.GRAPHS_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_TRM_MD = Metadata(legacy.TAGGED_RUN_METADATA_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_SESSION_START = 1


def _event_class():
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event


class TfeventsReader(Reader):
    """An event-file logdir (or a single event file) as runs of series."""

    def experiment(self) -> Experiment:
        sidecar = self.path / layout.EXPERIMENT_SIDECAR
        if not self.path.is_dir() or not sidecar.is_file():
            return Experiment()
        try:
            facts = json.loads(sourcefiles.read_text(sidecar))
            known = {k: str(facts.pop(k, "")) for k in
                     ("experiment_id", "name", "description", "create_time", "update_time")}
            return Experiment(**known, extra=facts if isinstance(facts, dict) else {})
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            self.report.add("bad_sidecar", f"{sidecar}: unreadable experiment facts ({exc}); ignored",
                            path=sidecar)
            return Experiment()

    def iter_runs(self) -> Iterator[RunData]:
        runs = layout.discover(self.path, lambda kind, msg: self.report.add(kind, msg, path=self.path))
        for name, files in runs:
            if not self.options.wants_run(name):
                continue
            run, series = self.read_run(name, files)
            yield RunData(run, series)

    def read_run(self, name: str, files: list[Path]):
        asm = RunAssembler(name)
        seq_base = 0
        for path in files:
            if path.name.endswith(layout.PROFILE_EMPTY):
                continue  # TensorBoard skips these placeholders when reading data
            seq_base = self._read_file(path, asm, seq_base)
        return asm.build()

    def _read_file(self, path: Path, asm: RunAssembler, seq_base: int) -> int:
        try:
            # Only regular files: a FIFO would block forever and /dev/zero never ends.
            if not stat.S_ISREG(os.stat(path).st_mode):
                self.report.add("not_a_regular_file",
                                f"{path}: not a regular file (a pipe, device or socket); skipped",
                                path=path, run=asm.name)
                return seq_base
            buf = sourcefiles.read_bytes(path)
        except OSError as exc:
            self.report.add("unreadable_file", f"{path}: cannot be read ({exc.strerror}); skipped",
                            path=path, run=asm.name)
            return seq_base
        starts, lengths, damage = records.scan(buf)
        if buf and not len(starts):
            self.report.add("not_an_event_file",
                            f"{path}: not an event file (no valid record in {len(buf)} bytes); skipped",
                            path=path, run=asm.name)
            return seq_base
        for d in damage:
            kind = "truncated_record" if d.reason == "truncated record" else "corrupt_record"
            self.report.add(kind, f"{path}: bytes {d.offset}-{d.offset + d.length}: {d.reason}; "
                                  f"skipped {d.length} bytes, reading went on after them",
                            path=path, run=asm.name)
        event_cls = _event_class()
        columns, rest = fastscalars.decode(buf, starts, lengths)
        blob_columns, rest = fastblobs.decode(buf, starts, lengths, rest)
        first_done = False
        for i in rest.tolist():
            s, n = int(starts[i]), int(lengths[i])
            try:
                event = event_cls.FromString(buf[s:s + n])
            except (DecodeError, RuntimeError, ValueError):
                self.report.add("corrupt_record", f"{path}: record at byte {s - records.HEADER}: "
                                                  "checksums fine but not an Event; skipped",
                                path=path, run=asm.name)
                continue
            if i == 0:
                asm.first_wall_time(event.wall_time)
                first_done = True
            self._event(asm, seq_base + 2 * i, event, path)
        for cols in columns:
            asm.fast(seq_base + 2 * cols.index, cols)
            if not first_done and len(cols.index) and cols.index[0] == 0:
                asm.first_wall_time(float(cols.wall_times[0]))
                first_done = True
        for blobs in blob_columns:
            asm.fast_blobs(seq_base + 2 * blobs.index, blobs)
            if not first_done and len(blobs.index) and blobs.index[0] == 0:
                asm.first_wall_time(float(blobs.wall_times[0]))
                first_done = True
        if not first_done and len(rest):
            # the first record did not parse; TensorBoard's clock starts at the next one
            asm.first_wall_time(self._first_wall(buf, starts, lengths, rest, columns + blob_columns,
                                                 event_cls))
        return seq_base + 2 * len(starts) + 2

    @staticmethod
    def _first_wall(buf, starts, lengths, rest, columns, event_cls):
        best = (np.inf, 0.0)
        for cols in columns:
            if len(cols.index):
                best = min(best, (int(cols.index[0]), float(cols.wall_times[0])))
        for i in rest.tolist():
            if i >= best[0]:
                break
            try:
                ev = event_cls.FromString(buf[int(starts[i]):int(starts[i] + lengths[i])])
                return ev.wall_time
            except (DecodeError, RuntimeError, ValueError):
                continue
        return best[1]

    def _event(self, asm: RunAssembler, seq: int, event, path: Path) -> None:
        what = event.WhichOneof("what")
        step, wall = int(event.step), float(event.wall_time)
        if what == "summary":
            tags = []
            for value in event.summary.value:
                # As TensorBoard's loader: metadata is filed under ``tag`` even when it is
                # empty; only a tensor value's data falls back to the old ``node_name``
                # (legacy values are migrated under ``tag`` and lose it).
                md_tag = value.tag
                tag = (value.tag or value.node_name) if value.HasField("tensor") else value.tag
                where = f"{path}: {asm.name}/{tag} step {step}"
                try:
                    md, point = legacy.migrate_value(value, where)
                except dt.TensorDecodeError as exc:
                    self.report.add("undecodable_tensor", f"{where}: {exc}; kept as raw bytes",
                                    path=path, run=asm.name, tag=tag, lost=False)
                    md = legacy.metadata_from_proto(value.metadata) if value.HasField("metadata") else None
                    point = (dt.DT_RAW_PROTO, np.frombuffer(value.tensor.SerializeToString(), np.uint8))
                except CorruptDataError as exc:
                    self.report.add("corrupt_record", f"{exc}; value skipped",
                                    path=path, run=asm.name, tag=tag)
                    continue
                tags.append(tag)
                if md is not None:
                    asm.metadata(seq, md_tag, md)
                asm.point(seq, step, wall, tag, point)
            asm.summary_event(seq, step, tags)
        elif what == "file_version":
            asm.file_version(seq, event.file_version)
        elif what == "graph_def":
            tag = legacy.RUN_GRAPH_TAG
            asm.metadata(seq + 1, tag, _GRAPH_MD)
            asm.point(seq + 1, step, wall, tag, (dt.DT_STRING, dt.string_array([event.graph_def])))
            asm.summary_event(seq + 1, step, [tag])
        elif what == "tagged_run_metadata":
            trm = event.tagged_run_metadata
            asm.metadata(seq, trm.tag, _TRM_MD)
            asm.point(seq, step, wall, trm.tag,
                      (dt.DT_STRING, dt.string_array([trm.run_metadata])))
            asm.summary_event(seq, step, [trm.tag])
        elif what == "meta_graph_def":
            asm.record(seq, RunRecord("meta_graph_def", step, wall, bytes(event.meta_graph_def)))
        elif what == "session_log":
            asm.record(seq, RunRecord("session_log", step, wall, event.session_log.SerializeToString()))
            if event.session_log.status == _SESSION_START:
                asm.session_start(seq, step)
        elif what == "log_message":
            asm.record(seq, RunRecord("log_message", step, wall, event.log_message.SerializeToString()))

