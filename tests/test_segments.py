"""A large event file read in segments: the same run whatever the number of processes.

A file of at least ``SEGMENT_MIN_BYTES`` is cut at the first record after each multiple of
``SEGMENT_BYTES`` (``records.segment_starts``), and its segments are read as files of their
own, in one process or several: the output is byte for byte that of ``--jobs 1``, and
TensorBoard sees in it what it sees in the file. Here the sizes are made small.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import counting_progress
from oracle import assert_same_view, tb_view
from test_jobs import _contents, _event_bytes, _series_facts

import tbconvert
from tbconvert.formats.base import Options
from tbconvert.formats.tfevents import reader as tfevents_reader
from tbconvert.formats.tfevents import records
from tbconvert.report import Report

EVERY = 2048


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(tfevents_reader, "SEGMENT_BYTES", EVERY)
    monkeypatch.setattr(tfevents_reader, "SEGMENT_MIN_BYTES", 2 * EVERY)


def _record_starts(path: Path) -> set:
    starts, _, _ = records.scan(path.read_bytes())
    return {int(s) - records.HEADER for s in starts}


def _restart_file(path: Path, seed: int, events: int = 400, damage: bool = False,
                  doubles: bool = True) -> Path:
    """One event file whose steps go back here and there, with session starts, file
    versions, several kinds of values (bulk-decoded and not), maybe a damaged record.
    ``doubles``: some values are DT_DOUBLE scalar tensors (which event files written back
    hold as float32, the one scalar type both of TensorBoard's loaders show)."""
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(seed)
    out = [event_pb2.Event(file_version="brain.Event:2").SerializeToString()]
    step = 0
    for i in range(events):
        step = int(step + rng.integers(-6, 4)) if rng.random() < 0.1 else step + 1
        kind = rng.choice(["fast", "fast", "two", "tensor" if doubles else "two", "image",
                           "fast"] + (["start"] if i % 97 == 50 else []))
        out.append(_event_bytes(rng, step, kind))
    data = bytearray(b"".join(records.frame(e) for e in out))
    if damage:
        for where in (len(data) // 3, len(data) // 3 + 7, 2 * len(data) // 3):
            data[where] ^= 0x55
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path


def test_cuts_fall_where_records_begin(tmp_path):
    path = _restart_file(tmp_path / "run" / "events.out.tfevents.1.host", 3, events=600)
    size = path.stat().st_size
    cuts = records.segment_starts(path, size, EVERY)
    assert cuts[0] == 0 and len(cuts) >= size // EVERY - 1
    assert cuts == sorted(set(cuts))
    assert set(cuts) <= _record_starts(path)
    assert all(c >= k * EVERY for k, c in enumerate(cuts))
    assert records.segment_starts(path, size, size // 2 + 1) == [0]     # under twice: uncut


def test_a_cut_is_searched_past_damage_and_skipped_inside_a_large_record(tmp_path):
    """Damage at a cut's place moves the cut to the next good record; a record longer than
    the search that runs across it leaves the file uncut there."""
    good = records.frame(b"x" * 100)
    big = records.frame(b"y" * (records._CUT_WINDOW + 10_000))
    data = bytearray(good * 30 + big + good * 40)
    every = 1000
    data[every:every + 20] = b"\xff" * 20        # damage where the first cut would be
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(bytes(data))
    cuts = records.segment_starts(path, len(data), every)
    starts = _record_starts(path)
    assert set(cuts) <= starts and cuts[1] > every + 20
    big_start, big_end = 30 * len(good), 30 * len(good) + len(big)
    assert not any(big_start < c < big_end for c in cuts)


def test_records_larger_than_the_search_are_hopped_over_to_a_cut(tmp_path):
    """(a TF1 merge_all of a histogram per layer writes records of MiBs)"""
    rng = np.random.default_rng(0)
    big = [records.frame(rng.bytes(int(n))) for n in rng.integers(300_000, 900_000, 12)]
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(b"".join(big))
    size = path.stat().st_size
    every = 1 << 20
    cuts = records.segment_starts(path, size, every)
    assert len(cuts) >= size // every - 1 and set(cuts) <= _record_starts(path)
    assert all(c >= k * every for k, c in enumerate(cuts))


def test_a_file_that_cannot_be_looked_into_is_not_cut(tmp_path, small_segments):
    """(reading it then tells what is wrong, as for any file)"""
    assert tfevents_reader.segments_of(tmp_path / "gone", 10 * EVERY) == [(0, None)]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert tfevents_reader.segments_of(fifo, 10 * EVERY) == [(0, None)]


def _read(path: Path, **kwargs):
    reader = tfevents_reader.TfeventsReader(path.parent.parent, Options(), Report())
    asm = reader.read_run("run", [path], **kwargs)
    return reader, _series_facts(asm)


@pytest.mark.parametrize("seed", range(12))
def test_a_file_read_in_segments_is_the_file_read_whole(seed, tmp_path, monkeypatch):
    """Segments read in one go, or in parts joined as workers' parts are, give the run read
    whole: TensorBoard's restart rule across the cuts, damage inside a segment."""
    from tbconvert.formats.tfevents import blob_templates, parallel, summary_templates
    from tbconvert.formats.tfevents.assemble import RunAssembler
    monkeypatch.setattr(blob_templates, "MIN_GROUP", 2)
    monkeypatch.setattr(summary_templates, "MIN_GROUP", 2)
    path = _restart_file(tmp_path / "run" / "events.out.tfevents.1.host", seed,
                         damage=seed % 3 == 0)
    whole_reader, whole = _read(path)
    monkeypatch.setattr(tfevents_reader, "SEGMENT_BYTES", EVERY)
    monkeypatch.setattr(tfevents_reader, "SEGMENT_MIN_BYTES", 2 * EVERY)
    cut_reader, cut = _read(path)
    assert cut == whole
    assert [i.message for i in cut_reader.report.issues] == \
        [i.message for i in whole_reader.report.issues]
    assert cut_reader.valid_records == whole_reader.valid_records
    assert cut_reader.files_with_bytes == whole_reader.files_with_bytes == 1
    # in parts, as the workers of --jobs read them, joined
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    parts = parallel.plan([("run", [path])], 2)
    assert len(parts) > 1
    asms, ends = [], []
    for k, part in enumerate(parts):
        reader = tfevents_reader.TfeventsReader(tmp_path, Options(), Report())
        asms.append(reader.read_run("run", part.files, detached=k > 0))
        ends.append(reader.stopped)
    assert parallel._landed(parts, ends)
    assert _series_facts(RunAssembler.joined("run", asms)) == whole


def _record_across_a_cut(path: Path) -> Path:
    """A file whose one record holds framed event records as data, right after where a
    cut is searched: the cut falls inside that record, which the segment before it finds.
    (A record before it is damaged: else the cut is found by hopping from record to record,
    which steps over the one holding the others.)"""
    from tensorboard.compat.proto import event_pb2, tensor_pb2
    rng = np.random.default_rng(1)
    fill = [records.frame(_event_bytes(rng, s, "fast")) for s in range(200)]
    inner = b"".join(records.frame(_event_bytes(rng, 10_000 + s, "fast")) for s in range(6))
    ev = event_pb2.Event(wall_time=1.7e9 + 300, step=300)
    ev.summary.value.add(tag="blob", tensor=tensor_pb2.TensorProto(
        dtype=7, string_val=[inner], tensor_shape={"dim": [{"size": 1}]}))
    holder = records.frame(ev.SerializeToString())
    head = records.frame(event_pb2.Event(file_version="brain.Event:2").SerializeToString())
    data = head
    for k, piece in enumerate(fill):
        if k == 5:
            piece = piece[:8] + bytes([piece[8] ^ 1]) + piece[9:]   # its length's checksum
        data += piece
        if len(data) > EVERY - 80:
            break
    data += holder
    for s in range(400):
        if len(data) > 3.5 * EVERY:
            break
        data += records.frame(_event_bytes(rng, 400 + s, "fast"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    inside = data.find(inner)
    assert inside < EVERY + 200 < inside + len(inner)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("case", ["clean", "damaged", "record_across_a_cut"])
def test_jobs_read_a_large_file_in_segments_byte_for_byte(case, tmp_path, small_segments,
                                                            monkeypatch):
    """``--jobs 2`` reads one large event file's segments in two processes: the Parquet file
    is byte for byte that of ``--jobs 1``, with the same report and every byte of progress
    counted once, and TensorBoard sees in it what it sees in the event file. A cut that
    falls inside a record (found when the parts are joined) has the run read again here."""
    from tbconvert.formats.tfevents import parallel
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    src = tmp_path / "logs"
    path = src / "run" / "events.out.tfevents.1.host"
    if case == "record_across_a_cut":
        _record_across_a_cut(path)
    else:
        _restart_file(path, 7, events=1500, damage=case == "damaged", doubles=False)
    cuts = records.segment_starts(path, path.stat().st_size, EVERY)
    parts = parallel.plan([("run", [path])], 2)
    assert len(cuts) > 2 and len(parts) > 1
    again = []
    if case == "record_across_a_cut":
        assert not set(cuts) <= _record_starts(path)
        # each segment a part of its own: the cut inside the record is between two parts
        assert [p.files[0].start for p in parts] == cuts
        real = parallel._read_here
        monkeypatch.setattr(parallel, "_read_here", lambda *a: again.append(a) or real(*a))
    outs, reports = [], []
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}.parquet"
        progress = counting_progress()
        reports.append(tbconvert.convert(src, out, jobs=jobs, progress=progress))
        outs.append(_contents(out))
        # (read twice across a cut: the parts', then whole; its bytes are counted once)
        assert progress.total == progress.done == path.stat().st_size
    assert outs[0] == outs[1]
    assert len(again) == (case == "record_across_a_cut")
    one, two = reports
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert (case != "clean") == any(i.kind == "corrupt_record" for i in one.issues)
    assert (one.runs, one.series, one.points) == (two.runs, two.series, two.points)
    if case == "clean":     # (TensorBoard stops reading a file at its first damage)
        back = tmp_path / "back"
        tbconvert.convert(tmp_path / "j2.parquet", back, to_format="tfevents")
        assert_same_view(tb_view(back), tb_view(src))
