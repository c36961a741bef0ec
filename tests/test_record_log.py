"""A run's run-level events kept as compact bytes (RecordLog), and the archives' JSON of them
made a piece at a time: the same records, the same bytes as when they were held whole."""

from __future__ import annotations

import pickle

import h5py
import pytest
from tensorboard.compat.proto import event_pb2

import tbconvert
from tbconvert.api import open_reader, open_writer
from tbconvert.formats import recordlog
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet import spool
from tbconvert.formats.recordlog import RecordLog
from tbconvert.formats.tfevents.records import frame
from tbconvert.model import Run, RunRecord


def _records(n: int) -> list[RunRecord]:
    out = []
    for k in range(n):
        if k % 3 == 0:
            msg = event_pb2.SessionLog(status=event_pb2.SessionLog.CHECKPOINT,
                                       checkpoint_path=f"/ckpt/model-{k}")
            out.append(RunRecord("session_log", k, 1.7e9 + k / 7, msg.SerializeToString()))
        elif k % 3 == 1:
            msg = event_pb2.LogMessage(level=event_pb2.LogMessage.INFO, message=f"step {k} é")
            out.append(RunRecord("log_message", -k, 1.7e9 + k, msg.SerializeToString()))
        else:
            out.append(RunRecord("meta_graph_def", k, 1.7e9, bytes(range(256)) * (k % 5)))
    return out


def test_records_come_back_in_order_from_memory_and_from_the_file(monkeypatch):
    monkeypatch.setattr(recordlog, "SPILL_AT", 300)
    recs = _records(50) + [RunRecord("no such kind \udcff", 1, 2.0, b"")]
    log = RecordLog(recs)
    assert len(log) == len(recs) and log._chunks, "some went to the file"
    for _ in range(2):      # read as often as wanted
        got = list(log)
        assert [r.kind for r in got] == [r.kind for r in recs]
        assert [(r.step, r.payload) for r in got] == [(r.step, r.payload) for r in recs]
    assert log == tuple(recs[:4]) + tuple(log)[4:]
    assert log[-1] == recs[-1] and log[3] == recs[3] and log[2:4] == tuple(recs[2:4])
    assert log != tuple(recs[:-1]) and RecordLog() == () and not RecordLog()


def test_a_log_extended_by_logs_holds_their_records_in_order(monkeypatch):
    """Logs joined (a run read in parallel parts) take each other's bytes as they are."""
    monkeypatch.setattr(recordlog, "SPILL_AT", 300)
    recs = _records(60)
    parts = [RecordLog(recs[:25]), RecordLog(recs[25:26]), RecordLog(), RecordLog(recs[26:])]
    assert parts[0]._chunks and not parts[1]._chunks, "from the file and from memory"
    joined = RecordLog(recs[:0])
    for part in parts:
        joined.extend(part)
    assert len(joined) == 60 and joined._chunks
    assert list(joined) == recs


def test_a_log_pickles_its_records_or_once_handed_over_its_file(monkeypatch):
    monkeypatch.setattr(recordlog, "SPILL_AT", 300)
    recs = _records(40)
    log = RecordLog(recs)
    assert pickle.loads(pickle.dumps(log)) == log and log.path is None
    log.hand_over()
    copy = pickle.loads(pickle.dumps(log))
    del log
    assert list(copy) == list(RecordLog(recs)) and copy.path is not None
    path = copy.path
    copy.close()
    import os
    assert not os.path.exists(path)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 30])
def test_a_runs_json_text_is_the_json_of_the_run(monkeypatch, n):
    monkeypatch.setattr(S, "_RECORDS_SLICE", 8)
    run = Run("trainé", None if n == 1 else 1.7e9, tuple(_records(n)))
    assert b"".join(S.run_text(run)) == S.dumps(S.run_to_json(run))


def _logdir(path, runs: int = 2, n: int = 300):
    for r in range(runs):
        run_dir = path / f"run{r}"
        run_dir.mkdir(parents=True)
        data = []
        for rec in _records(n):
            ev = event_pb2.Event(wall_time=rec.wall_time, step=rec.step)
            if rec.kind == "meta_graph_def":
                ev.meta_graph_def = rec.payload
            else:
                getattr(ev, rec.kind).ParseFromString(rec.payload)
            data.append(frame(ev.SerializeToString()))
            point = event_pb2.Event(wall_time=1.7e9 + rec.step, step=abs(rec.step))
            point.summary.value.add(tag="loss", simple_value=0.5)
            data.append(frame(point.SerializeToString()))
        (run_dir / "events.out.tfevents.1.host").write_bytes(b"".join(data))
    return path


def test_a_parquet_footer_of_many_records_is_the_same_from_a_spool(tmp_path, monkeypatch):
    """Spooled run JSON (also handed from a run written on its own, as --jobs does) gives the
    bytes the JSON held in memory gives, and reads back as the same records."""
    from tbconvert import runtasks
    src = _logdir(tmp_path / "logs")
    tbconvert.convert(src, tmp_path / "held.parquet")
    monkeypatch.setattr(spool, "TEXT_HELD", 512)
    monkeypatch.setattr(recordlog, "SPILL_AT", 512)
    tbconvert.convert(src, tmp_path / "spooled.parquet")
    report = tbconvert.Report()
    with open_reader(src, report=report) as reader, \
            open_writer(tmp_path / "staged.parquet", report=report,
                        options=reader.options) as writer:
        assert writer.run_parts == "staged"
        runtasks.copy_in_tasks(reader, writer, report)
    held = (tmp_path / "held.parquet").read_bytes()
    assert (tmp_path / "spooled.parquet").read_bytes() == held
    assert (tmp_path / "staged.parquet").read_bytes() == held
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "held.parquet", "logs", "spooled.parquet", "staged.parquet"]
    back = tbconvert.read(tmp_path / "staged.parquet")
    whole = tbconvert.read(src)
    assert back.runs["run1"].records == whole.runs["run1"].records
    assert len(whole.runs["run1"].records) == 300


def test_hdf5_records_are_written_and_read_a_slice_at_a_time(tmp_path, monkeypatch):
    from tbconvert.formats.hdf5 import schema
    src = _logdir(tmp_path / "logs", runs=1, n=50)
    tbconvert.convert(src, tmp_path / "whole.h5")
    monkeypatch.setattr(schema, "RECORD_ROWS", 7)
    tbconvert.convert(src, tmp_path / "sliced.h5")
    with h5py.File(tmp_path / "whole.h5") as a, h5py.File(tmp_path / "sliced.h5") as b:
        for name in ("kind", "step", "wall_time", "payload"):
            x, y = a[f"runs/0/records/{name}"][()], b[f"runs/0/records/{name}"][()]
            assert len(x) == len(y) == 50
            assert [bytes(memoryview(v)) if not isinstance(v, bytes) else v for v in x] == \
                [bytes(memoryview(v)) if not isinstance(v, bytes) else v for v in y]
    back = tbconvert.read(tmp_path / "sliced.h5").runs["run0"].records
    assert back == tbconvert.read(src).runs["run0"].records
    assert back == tuple(_records(50))


@pytest.mark.slow
def test_a_runs_records_read_in_parallel_parts_are_the_run_read_whole(tmp_path, monkeypatch):
    # (each part holds more than a worker keeps in memory: its file goes to this process)
    from tbconvert.formats.tfevents import parallel
    from tbconvert.formats.tfevents import reader as tfevents_reader
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    run_dir = tmp_path / "logs" / "train"
    run_dir.mkdir(parents=True)
    recs = _records(3 * 9000)
    for part in range(3):
        data = []
        for rec in recs[part::3]:
            if rec.kind == "session_log":
                ev = event_pb2.Event(wall_time=rec.wall_time, step=rec.step)
                ev.session_log.ParseFromString(rec.payload)
            else:
                ev = event_pb2.Event(wall_time=rec.wall_time, step=rec.step,
                                     meta_graph_def=rec.payload + bytes(200))
            data.append(frame(ev.SerializeToString()))
        (run_dir / f"events.out.tfevents.{1700000000 + part}.host").write_bytes(b"".join(data))
    files = sorted(run_dir.iterdir())
    assert len(parallel.plan([("train", files)], 3)) > 1
    whole = tbconvert.read(tmp_path / "logs", jobs=1).runs["train"].records
    assert len(whole) == 3 * 9000 and sum(len(r.payload) for r in whole) > 3 * recordlog.SPILL_AT
    assert tbconvert.read(tmp_path / "logs", jobs=3).runs["train"].records == whole
    for jobs in (1, 3):
        tbconvert.convert(tmp_path / "logs", tmp_path / f"{jobs}.parquet", jobs=jobs)
    assert (tmp_path / "1.parquet").read_bytes() == (tmp_path / "3.parquet").read_bytes()


def test_arrows_limit_on_footer_strings_is_raised_to_the_footers_length(tmp_path, monkeypatch):
    # (a run of 650,000 records passes Arrow's 100 MB: read, where Arrow refused it)
    from tbconvert.formats.parquet import reader
    tbconvert.convert(_logdir(tmp_path / "logs"), tmp_path / "a.parquet")
    data = (tmp_path / "a.parquet").read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    monkeypatch.setattr(reader, "_ARROW_FOOTER_STRINGS", 1000)
    with open(tmp_path / "a.parquet", "rb") as fh:
        assert reader._strings_limit(reader._footer_length(fh)) == length > 1000 and \
            fh.tell() == 0
    (tmp_path / "b.parquet").write_bytes(b"not parquet")
    with open(tmp_path / "b.parquet", "rb") as fh:
        assert reader._strings_limit(reader._footer_length(fh)) == 1000
    assert len(tbconvert.read(tmp_path / "a.parquet").runs["run0"].records) == 300
