"""Writes event-file logdirs that TensorBoard reads exactly as the source.

One file per run, named ``events.out.tfevents.<secs>.<host>.<pid>.<n>.tbconvert``
after the run's first wall time. The file starts with the ``file_version``
event stamped with the run's start time (never "now", so runs keep their
order and relative times), then every point in wall-time order with each
tag's points in their original order, full metadata (with an explicit data
class) on each tag's first point. Graphs go back to ``graph_def`` events and
tagged run metadata to ``tagged_run_metadata`` events, as their writers made them.
"""

from __future__ import annotations

import json
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tbconvert import dtypes as dt
from tbconvert.formats.base import Writer
from tbconvert.formats.tfevents import encode, layout, legacy, records
from tbconvert.model import (BlobSequenceSeries, DataClass, Experiment, Metadata, Run,
                             ScalarSeries, Series, concat)
from tbconvert.names import run_dir
from tbconvert.output import AtomicOutput

_GRAPH_MD = Metadata(legacy.GRAPHS_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_TRM_MD = Metadata(legacy.TAGGED_RUN_METADATA_PLUGIN, b"", "", "", DataClass.BLOB_SEQUENCE)
_SESSION_START = 1


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    return event_pb2, summary_pb2, tensor_pb2


class TfeventsWriter(Writer):
    keeps_hidden = False
    keeps_byte_names = True    # run directories keep the bytes of their names

    def __init__(self, path, options, report) -> None:
        super().__init__(path, options, report)
        self.out = AtomicOutput(self.path, force=options.force, directory=True)
        self._counter = 0
        self._dirs: set[str] = set()

    def write_experiment(self, experiment: Experiment) -> None:
        if experiment.is_empty():
            return
        facts = dict(experiment.extra)
        facts.update(experiment_id=experiment.experiment_id, name=experiment.name,
                     description=experiment.description, create_time=experiment.create_time,
                     update_time=experiment.update_time)
        self.guard(lambda: (self.out.tmp / layout.EXPERIMENT_SIDECAR).write_text(
            json.dumps(facts, sort_keys=True, indent=1) + "\n", encoding="utf-8"))
        self.report.add("experiment_facts_sidecar",
                        f"experiment name, description and times kept in {layout.EXPERIMENT_SIDECAR} "
                        "(TensorBoard does not show them)", lost=False)

    def write_run(self, run: Run, series) -> None:
        by_tag: dict[str, list[Series]] = {}
        for chunk in series:
            by_tag.setdefault(chunk.tag, []).append(chunk)
        merged = [concat(chunks) for chunks in by_tag.values()]
        directory, changed = run_dir(self.out.tmp, run.name, self._dirs)
        if changed:
            rel = directory.relative_to(self.out.tmp).as_posix()
            self.report.add("run_renamed", f"run {run.name!r} written as directory {rel!r} "
                                           "(the name is not a safe path)", run=run.name, lost=False)
        data = _RunEncoder(run, merged, self.report).encode()
        name = layout.event_file_name(data.start, self._counter)
        self._counter += 1

        def write():
            directory.mkdir(parents=True, exist_ok=True)
            with open(directory / name, "xb") as f:
                f.write(data.payload)
        self.guard(write)


    def close(self) -> None:
        self.guard(self.out.commit)

    def abort(self) -> None:
        self.out.abort()


class _Encoded:
    def __init__(self, start: float, payload: bytes) -> None:
        self.start = start
        self.payload = payload


class _RunEncoder:
    """Orders a run's points and encodes them into one file's bytes."""

    def __init__(self, run: Run, series: list[Series], report) -> None:
        self.run = run
        self.series = series
        self.report = report
        self.keys: list[np.ndarray] = []     # sort key per record (wall-time running max)
        self.tag_ord: list[np.ndarray] = []
        self.idx: list[np.ndarray] = []
        self.blocks: list = []               # ("mat", matrix) or ("list", [bytes])

    def _add(self, key, tag_ord, idx, block) -> None:
        self.keys.append(np.asarray(key, np.float64))
        self.tag_ord.append(np.full(len(idx), tag_ord, np.int64))
        self.idx.append(np.asarray(idx, np.int64))
        self.blocks.append(block)

    def encode(self) -> _Encoded:
        event_pb2, summary_pb2, tensor_pb2 = _pb()
        walls = [s.wall_times for s in self.series if len(s)]
        walls += [np.array([r.wall_time for r in self.run.records], np.float64)]
        flat = np.concatenate(walls) if walls else np.zeros(0)
        finite = flat[np.isfinite(flat)]
        candidates = [float(finite.min())] if len(finite) else []
        if self.run.start_time is not None and math.isfinite(self.run.start_time):
            candidates.append(self.run.start_time)
        start = min(candidates) if candidates else 0.0
        first = event_pb2.Event(wall_time=start, file_version=layout.FILE_VERSION)
        head = records.frame(first.SerializeToString())
        for ord_, s in enumerate(self.series):
            self._series(ord_, s, event_pb2, summary_pb2, tensor_pb2)
        self._records(event_pb2)
        return _Encoded(start, head + self._join())

    def _clean_walls(self, s: Series) -> np.ndarray:
        walls = s.wall_times
        bad = ~np.isfinite(walls)
        if bad.any():
            # A NaN wall time makes TensorBoard's fast loader drop the rest of the file.
            fixed = walls.copy()
            fixed[bad] = self.run.start_time if self.run.start_time is not None else 0.0
            self.report.add("wall_time_replaced",
                            f"{s.run}/{s.tag}: {int(bad.sum())} non-finite wall times written as the "
                            "run's start time", run=s.run, tag=s.tag, count=int(bad.sum()))
            return fixed
        return walls

    def _series(self, ord_, s: Series, event_pb2, summary_pb2, tensor_pb2) -> None:
        n = len(s)
        if not n:
            return
        walls = self._clean_walls(s)
        keys = np.maximum.accumulate(walls)
        tag = s.tag.encode("utf-8")
        fast_ok = isinstance(s, ScalarSeries) and s.values.dtype in (np.float32, np.float64)
        if fast_ok and n > 1:
            code = dt.DT_FLOAT if s.values.dtype == np.float32 else dt.DT_DOUBLE
            for idx, mat in encode.scalar_records(tag, code, s.steps[1:], walls[1:], s.values[1:]):
                self._add(keys[1:][idx], ord_, idx + 1, ("mat", mat))
            slow = [0]
        else:
            slow = range(n)
        special = self._special_kind(s)
        md_proto = _metadata_proto(s.metadata, summary_pb2)
        out = []
        tensors = None
        for i in slow:
            ev = event_pb2.Event(wall_time=float(walls[i]), step=int(s.steps[i]))
            if special is not None:
                blob = s.blobs[s.offsets[i]]
                if special == "graph":
                    ev.graph_def = blob
                else:
                    ev.tagged_run_metadata.tag = s.tag
                    ev.tagged_run_metadata.run_metadata = blob
            else:
                value = ev.summary.value.add(tag=s.tag)
                if i == 0:
                    value.metadata.CopyFrom(md_proto)
                if isinstance(s, ScalarSeries):
                    code, arr = dt.tf_dtype_of(s.values.dtype), s.values[i]
                elif isinstance(s, BlobSequenceSeries):
                    code, arr = dt.DT_STRING, self._blob_array(s, i)
                else:
                    tensors = tensors or s
                    code, arr = int(s.dtypes[i]), s.tensors[i]
                value.tensor.CopyFrom(dt.array_to_proto(code, arr, tensor_pb2.TensorProto))
            out.append(records.frame(ev.SerializeToString()))
        slow_idx = np.fromiter(slow, dtype=np.int64, count=len(slow))
        self._add(keys[slow_idx], ord_, slow_idx, ("list", out))

    def _blob_array(self, s: BlobSequenceSeries, i: int) -> np.ndarray:
        seq = s.sequence(i)
        missing = sum(1 for b in seq if b is None)
        if missing:
            self.report.add("missing_blob_written_empty",
                            f"{s.run}/{s.tag} step {int(s.steps[i])}: {missing} lost blob(s) written "
                            "as empty in place, so the others keep their positions",
                            run=s.run, tag=s.tag, count=missing)
        return dt.string_array([b"" if b is None else b for b in seq])

    @staticmethod
    def _special_kind(s: Series):
        """Graphs and tagged run metadata go back to the event fields their writers used."""
        if not isinstance(s, BlobSequenceSeries):
            return None
        single = (np.diff(s.offsets) == 1).all() and all(b is not None for b in s.blobs)
        if not single:
            return None
        if s.tag == legacy.RUN_GRAPH_TAG and s.metadata == _GRAPH_MD:
            return "graph"
        if s.metadata == _TRM_MD:
            return "trm"
        return None

    def _records(self, event_pb2) -> None:
        out, keys = [], []
        skipped = 0
        for rec in self.run.records:
            ev = event_pb2.Event(wall_time=rec.wall_time, step=rec.step)
            if rec.kind == "meta_graph_def":
                ev.meta_graph_def = rec.payload
            elif rec.kind == "log_message":
                ev.log_message.ParseFromString(rec.payload)
            elif rec.kind == "session_log":
                ev.session_log.ParseFromString(rec.payload)
                if ev.session_log.status == _SESSION_START:
                    skipped += 1  # the restart's effect is already in which points are written
                    continue
            else:
                continue
            out.append(records.frame(ev.SerializeToString()))
            keys.append(rec.wall_time if math.isfinite(rec.wall_time) else 0.0)
        if skipped:
            self.report.add("restart_markers_not_written",
                            f"run {self.run.name!r}: {skipped} SessionLog START marker(s) not written; "
                            "the points they hid are left out instead", run=self.run.name,
                            count=skipped, lost=False)
        if out:
            self._add(keys, -1, np.arange(len(out)), ("list", out))

    def _join(self) -> bytes:
        if not self.blocks:
            return b""
        keys = np.concatenate(self.keys)
        order = np.lexsort((np.concatenate(self.idx), np.concatenate(self.tag_ord), keys))
        sizes = np.concatenate([
            np.full(b[1].shape[0], b[1].shape[1], np.int64) if b[0] == "mat"
            else np.array([len(r) for r in b[1]], np.int64) for b in self.blocks])
        block_of = np.concatenate([np.full(len(i), k, np.int64) for k, i in enumerate(self.idx)])
        row_of = np.concatenate([np.arange(len(i), dtype=np.int64) for i in self.idx])
        sorted_sizes = sizes[order]
        offsets = np.empty(len(order), np.int64)
        offsets[order] = np.concatenate(([0], np.cumsum(sorted_sizes)[:-1]))
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        for k, (kind, block) in enumerate(self.blocks):
            mine = np.flatnonzero(block_of == k) if len(self.blocks) > 1 else np.arange(len(order))
            offs = offsets[mine][np.argsort(row_of[mine])]
            if kind == "mat":
                sliding_window_view(buf, block.shape[1], writeable=True)[offs] = block
            else:
                for off, rec in zip(offs.tolist(), block):
                    buf[off:off + len(rec)] = np.frombuffer(rec, np.uint8)
        return buf.tobytes()


def _metadata_proto(md: Metadata, summary_pb2):
    proto = summary_pb2.SummaryMetadata()
    proto.plugin_data.plugin_name = md.plugin_name
    proto.plugin_data.content = md.plugin_content
    proto.display_name = md.display_name
    proto.summary_description = md.description
    proto.data_class = int(md.data_class)
    return proto
