"""Event files are read in bounded blocks, a run's pieces spill to disk, and the result is
exactly what reading each run whole gave: same series, same hidden marks, same archives."""

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, LOGDIRS, blocks_of
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert.errors import CorruptDataError
from tbconvert.formats.tfevents import assemble, records, small_runs, spill
from tbconvert.formats.tfevents.reader import TfeventsReader
from tbconvert.model import ScalarSeries, TensorSeries

ROOT = Path(__file__).resolve().parent.parent


def _snapshot(data):
    """Everything a reading holds, as comparable plain values."""
    out = {}
    for run, series in data.series.items():
        r = data.runs[run]
        out[run] = {"start": r.start_time, "records": r.records}
        for tag, s in series.items():
            item = [type(s).__name__, s.metadata, s.steps.tolist(), s.wall_times.tolist(),
                    None if s.hidden is None else s.hidden.tolist()]
            if isinstance(s, ScalarSeries):
                item += [s.values.dtype.str, s.values.tobytes()]
            elif isinstance(s, TensorSeries):
                item += [s.dtypes.tolist(), [(a.dtype.str, a.shape, a.tobytes() if a.dtype != object
                                              else tuple(a.reshape(-1))) for a in s.tensors]]
            else:
                item += [s.offsets.tolist(), s.blobs]
            out[run][tag] = item
    return out


@pytest.fixture
def tiny_blocks(monkeypatch):
    def use(k, spill_at=0, chunk_points=None):
        monkeypatch.setattr(records, "scan_file", blocks_of(k))
        # every file through scan_file's blocks, not read whole with other small runs'
        monkeypatch.setattr(small_runs, "SMALL_RUN_BYTES", -1)
        monkeypatch.setattr(spill, "SPILL_AT", spill_at)
        monkeypatch.setattr(spill.PieceStore.__init__, "__defaults__", (spill_at, None))
        if chunk_points:
            monkeypatch.setattr(assemble, "CHUNK_POINTS", chunk_points)
    return use


@pytest.mark.parametrize("name", LOGDIRS)
@pytest.mark.parametrize("k", [1, 3, 50])
def test_blocks_and_spill_read_the_same_as_whole_files(name, k, tiny_blocks):
    whole = _snapshot(tbconvert.read(FIXTURES / name, restarts="keep-all"))
    tiny_blocks(k)
    assert _snapshot(tbconvert.read(FIXTURES / name, restarts="keep-all")) == whole


@pytest.mark.parametrize("fmt", ["parquet", "hdf5", "csv", "tfevents"])
def test_blocks_and_spill_write_the_same_archive(fmt, tiny_blocks, tmp_path):
    def digest(out):
        files = sorted(p for p in ([out] if out.is_file() else out.rglob("*")) if p.is_file())
        return [(str(p.relative_to(out)) if out.is_dir() else "",
                 hashlib.sha256(p.read_bytes()).hexdigest()) for p in files]
    suffix = {"parquet": ".parquet", "hdf5": ".h5", "csv": ".csv", "tfevents": ""}[fmt]
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    tbconvert.convert(FIXTURES / "torch_logdir", a, to_format=fmt, restarts="keep-all")
    tiny_blocks(2)
    tbconvert.convert(FIXTURES / "torch_logdir", b, to_format=fmt, restarts="keep-all")
    if fmt == "tfevents":  # file names carry the writer's pid and host
        assert_same_view(tb_view(a), tb_view(b))
    else:
        assert digest(a) == digest(b)


def _events(path: Path, events) -> None:
    from tensorboard.compat.proto import event_pb2
    with open(path, "wb") as f:
        for ev in events:
            f.write(records.frame(event_pb2.Event(**ev).SerializeToString()))


def _scalar(tag, step, value, wall=None):
    from tensorboard.compat.proto import summary_pb2
    return dict(wall_time=wall if wall is not None else 1000.0 + step, step=step,
                summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(
                    tag=tag, simple_value=value)]))


def _restarts_logdir(tmp_path: Path) -> Path:
    """Restarts that hide points read many blocks earlier, in both of TensorBoard's modes."""
    from tensorboard.compat.proto import event_pb2
    logdir = tmp_path / "logs"
    modern, old = logdir / "modern", logdir / "legacy"
    modern.mkdir(parents=True)
    old.mkdir()
    start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    first = [dict(wall_time=999.0, file_version="brain.Event:2"),
             dict(wall_time=999.5, step=0, session_log=start)]
    first += [_scalar(t, s, float(s)) for s in range(400) for t in ("a", "b")]
    _events(modern / "events.out.tfevents.1.x", first)
    second = [dict(wall_time=2000.0, file_version="brain.Event:2"),
              dict(wall_time=2000.5, step=150, session_log=start)]
    second += [_scalar("a", s, -float(s), wall=3000.0 + s) for s in range(150, 200)]
    second += [dict(wall_time=2100.0, step=30, session_log=start)]
    second += [_scalar("b", s, 2.0 * s, wall=4000.0 + s) for s in range(30, 60)]
    _events(modern / "events.out.tfevents.2.x", second)
    # no file_version: a summary event with a lower step purges its own tags only
    legacy_events = [_scalar(t, s, float(s)) for s in range(300) for t in ("a", "b")]
    legacy_events += [_scalar("a", s, 7.0, wall=5000.0 + s) for s in (100, 101, 102)]
    legacy_events += [_scalar("b", s, 9.0, wall=6000.0 + s) for s in range(20, 25)]
    legacy_events += [_scalar("a", 5, 1.0, wall=7000.0)]
    _events(old / "events.out.tfevents.1.x", legacy_events)
    return logdir


@pytest.mark.parametrize("k", [1, 7, 64])
def test_restart_rule_exact_across_blocks(k, tmp_path, tiny_blocks):
    logdir = _restarts_logdir(tmp_path)
    whole = tbconvert.read(logdir, restarts="keep-all")
    tiny_blocks(k, chunk_points=37)
    streamed = tbconvert.read(logdir, restarts="keep-all")
    assert _snapshot(streamed) == _snapshot(whole)
    hidden = streamed.series["modern"]["a"].hidden
    assert hidden is not None and hidden[:60].sum() == 30  # steps 30..59 of the first file
    out = tmp_path / "out"
    tbconvert.convert(logdir, out, to_format="tfevents")
    assert_same_view(tb_view(out), tb_view(logdir))


@pytest.mark.parametrize("k", [1, 2, 64])
def test_an_empty_summary_sets_the_step_the_legacy_rule_compares_with(k, tmp_path, tiny_blocks):
    """No file_version: a summary event with a lower step purges its own tags, and any summary
    event, an empty one too, is the step the next one is compared with (TensorBoard shows
    ``a`` at 10 and at 7 here, and ``b`` at 3 only: its 20 goes, purged by ``b`` at 3)."""
    from tensorboard.compat.proto import summary_pb2
    logdir = tmp_path / "logs"
    (logdir / "r").mkdir(parents=True)
    _events(logdir / "r" / "events.out.tfevents.1.x", [
        _scalar("a", 10, 1.0), _scalar("b", 20, 1.0),
        dict(wall_time=1100.0, step=5, summary=summary_pb2.Summary()),
        _scalar("a", 7, 2.0, wall=1200.0),
        _scalar("b", 3, 3.0, wall=1300.0)])
    tiny_blocks(k, chunk_points=37)
    out = tmp_path / "out"
    tbconvert.convert(logdir, out, to_format="tfevents")
    view = tb_view(logdir)
    assert_same_view(tb_view(out), view)
    data = tbconvert.read(logdir, restarts="keep-all")
    assert data.series["r"]["a"].hidden is None or not data.series["r"]["a"].hidden.any()
    assert data.series["r"]["b"].hidden.tolist() == [True, False]


@pytest.mark.parametrize("version", ["brain.Event:nan", "brain.Event:-nan", "brain.Event:0"])
def test_a_version_that_is_not_a_number_above_two_keeps_the_legacy_rule(version, tmp_path):
    """TensorBoard reads such a version as "below 2": a lower step purges its tags."""
    logdir = tmp_path / "logs"
    (logdir / "r").mkdir(parents=True)
    _events(logdir / "r" / "events.out.tfevents.1.x",
            [dict(wall_time=999.0, file_version=version)]
            + [_scalar("a", s, float(s)) for s in range(6)] + [_scalar("a", 2, 22.0, wall=1010.0)])
    data = tbconvert.read(logdir, restarts="keep-all")
    assert data.series["r"]["a"].hidden.tolist() == [False, False, True, True, True, True, False]
    out = tmp_path / "out"
    tbconvert.convert(logdir, out, to_format="tfevents")
    assert_same_view(tb_view(out), tb_view(logdir))


@pytest.mark.parametrize("via", ["tfevents", "parquet", "hdf5"])
def test_a_run_keeps_its_start_when_a_point_was_logged_earlier(via, tmp_path):
    """A replayed history logs points with older wall times than the run's first event:
    TensorBoard still starts (orders and colours) the run at its first event."""
    logdir = tmp_path / "logs"
    for name, start in (("early", 2000.0), ("late", 3000.0)):
        (logdir / name).mkdir(parents=True)
        _events(logdir / name / "events.out.tfevents.1.x",
                [dict(wall_time=start, file_version="brain.Event:2"),
                 _scalar("a", 0, 1.0, wall=1500.0), _scalar("a", 1, 2.0, wall=start + 1)])
    src = logdir
    if via != "tfevents":
        src = tmp_path / f"archive.{'h5' if via == 'hdf5' else via}"
        tbconvert.convert(logdir, src)
    out = tmp_path / "out"
    tbconvert.convert(src, out, to_format="tfevents")
    view = tb_view(out)
    assert (view["early"]["first_event"], view["late"]["first_event"]) == (2000.0, 3000.0)
    assert_same_view(view, tb_view(logdir))


def test_chunks_are_bounded_and_in_order(tmp_path, tiny_blocks):
    logdir = _restarts_logdir(tmp_path)
    tiny_blocks(5, chunk_points=64)
    report = tbconvert.Report() if hasattr(tbconvert, "Report") else None
    from tbconvert.formats.base import Options
    from tbconvert.report import Report
    reader = TfeventsReader(logdir, Options(), report or Report())
    for run_data in reader.iter_runs():
        tags = []
        for chunk in run_data.series:
            assert 0 < len(chunk) <= 64 + 5
            if not tags or tags[-1] != chunk.tag:
                assert chunk.tag not in tags  # a tag's chunks come together
                tags.append(chunk.tag)


@pytest.mark.parametrize("form", ["legacy", "tensor"])
def test_a_run_of_images_spills_and_comes_in_chunks_of_bounded_bytes(tmp_path, monkeypatch,
                                                                     form):
    """Blob bytes count toward the store's budget and a chunk's size: counted as a pointer
    each, a run of images was held whole, and then handed on as one chunk (a 238 MB run of
    20,000 images peaked at 595 MB)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.util import tensor_util

    from tbconvert.formats.base import Options
    from tbconvert.report import Report
    monkeypatch.setattr(records, "scan_file", blocks_of(10))     # blocks of 0.5 MB
    monkeypatch.setattr(assemble, "CHUNK_BYTES", 1 << 20)
    monkeypatch.setattr(spill.PieceStore.__init__, "__defaults__", (2 << 20, None))
    rng = np.random.default_rng(0)
    events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = "images"
    for step in range(200):
        png = rng.integers(0, 256, 50_000, dtype=np.uint8).tobytes()   # any bytes: a blob
        ev = event_pb2.Event(wall_time=2.0 + step, step=step)
        if form == "legacy":
            ev.summary.value.add(tag="img", image=summary_pb2.Summary.Image(
                height=8, width=8, colorspace=3, encoded_image_string=png))
        else:
            ev.summary.value.add(tag="img", metadata=md, tensor=tensor_util.make_tensor_proto(
                np.array([b"8", b"8", png], dtype=object)))
        events.append(ev)
    path = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    spilled = []
    real_put = spill.PieceStore.put

    def put(self, piece, size):
        key = real_put(self, piece, size)
        spilled.append(self._file is not None)
        return key
    monkeypatch.setattr(spill.PieceStore, "put", put)
    reader = TfeventsReader(tmp_path / "logs", Options(), Report())
    sizes = []
    for run_data in reader.iter_runs():
        for chunk in run_data.series:
            sizes.append(sum(len(b) for b in chunk.blobs if b is not None))
    assert any(spilled)
    # a chunk ends once it holds CHUNK_BYTES: at most one block's points beyond them
    assert sum(sizes) >= 200 * 50_000 and len(sizes) >= 6 and max(sizes) <= 1.6e6, sizes


def test_spill_file_is_removed(tmp_path, tiny_blocks, monkeypatch):
    spill_dir = tmp_path / "spill"
    spill_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_dir))
    tiny_blocks(3)
    seen = []
    real_put = spill.PieceStore.put

    def put(self, piece, size):
        key = real_put(self, piece, size)
        # an unnamed file (Linux) shows where it lies through the descriptor's link
        seen.append(self.path or os.readlink(f"/proc/self/fd/{self._file.fileno()}"))
        return key
    monkeypatch.setattr(spill.PieceStore, "put", put)
    tbconvert.convert(FIXTURES / "tensorboardx_logdir", tmp_path / "o.parquet")
    assert seen and all(p.startswith(str(spill_dir)) for p in seen)
    assert list(spill_dir.iterdir()) == []


_SPILL_AND_WAIT = """
import sys, time
from tbconvert.formats.tfevents.spill import PieceStore
store = PieceStore(limit=0, directory=sys.argv[1])
store.put(b"x" * 100_000, 100_000)
assert store._file is not None
print("spilled", store.path, flush=True)
time.sleep(120)
"""


def _unnamed_files_here(directory) -> bool:
    file = spill._unnamed_file(str(directory))
    if file is None:
        return False
    file.close()
    return True


def test_a_killed_process_leaves_no_spill_file(tmp_path):
    """Killed with SIGKILL (the OOM killer's way), a process can clean nothing up: its spill
    file has no name, so nothing of it stays in the temporary directory."""
    import signal
    if not _unnamed_files_here(tmp_path):
        pytest.skip("no unnamed temporary files on this system")
    proc = subprocess.Popen([sys.executable, "-c", _SPILL_AND_WAIT, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().split() == ["spilled", "None"]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["unnamed", "named", "copied"])
def test_a_store_handed_to_another_process_names_its_file(tmp_path, monkeypatch, how):
    """A store crosses to another process by its file's path: an unnamed file gets a name
    then (linked, or copied where it cannot be), and the receiver reads every piece back
    and removes it."""
    import pickle
    if how == "named":
        monkeypatch.setattr(spill, "_unnamed_file", lambda directory: None)
    elif how == "copied":
        def no_link(*a, **k):
            raise OSError(18, "Invalid cross-device link")
        monkeypatch.setattr(os, "link", no_link)
    store = spill.PieceStore(limit=1000, directory=str(tmp_path))
    pieces = [np.arange(k * 100, dtype=np.float64) for k in range(1, 6)]
    keys = [store.put(p, p.nbytes) for p in pieces]
    assert store._file is not None
    if how != "named" and store.path is None:
        assert list(tmp_path.iterdir()) == []
    handed = pickle.dumps(store)
    (name,) = list(tmp_path.iterdir())
    assert name.name.startswith("tbconvert-run-") and name.name.endswith(".spill")
    store._file.close()     # the sender is done with it
    received = pickle.loads(handed)
    assert received.path == str(name)
    for key, piece in zip(keys, pieces, strict=True):
        assert np.array_equal(received.take(key), piece)
    received.close()
    assert list(tmp_path.iterdir()) == []


def test_not_event_data_is_an_error(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello, these are my notes\n" * 20)
    with pytest.raises(CorruptDataError, match="notes.txt"):
        tbconvert.convert(notes, tmp_path / "out.h5", from_format="tfevents")
    assert not (tmp_path / "out.h5").exists()
    proc = subprocess.run([sys.executable, "-m", "tbconvert", "convert", str(notes),
                           str(tmp_path / "out.h5"), "--from", "tfevents"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and "notes.txt" in proc.stderr


def test_an_empty_file_given_as_the_source_is_an_error(tmp_path):
    empty = tmp_path / "notes.txt"
    empty.write_bytes(b"")
    with pytest.raises(CorruptDataError, match="an empty file"):
        tbconvert.convert(empty, tmp_path / "out.csv", from_format="tfevents")
    assert not (tmp_path / "out.csv").exists()
    # named as an event file, alone or in a logdir: one its writer has only opened
    opened = tmp_path / "events.out.tfevents.1.host"
    opened.write_bytes(b"")
    tbconvert.convert(opened, tmp_path / "one.parquet")
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    (run / opened.name).write_bytes(b"")
    tbconvert.convert(tmp_path / "logs", tmp_path / "out.parquet")


@pytest.mark.parametrize("size", [1, 6, 11])
def test_a_file_shorter_than_a_record_header_is_no_event_data_either(tmp_path, size):
    # bytes too few for a record's header check nothing: not a damaged event file, unless
    # the file's name says it is one
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"hello, world"[:size])
    with pytest.raises(CorruptDataError, match="no valid event record in 1 file"):
        tbconvert.convert(notes, tmp_path / "out.h5", from_format="tfevents")
    assert not (tmp_path / "out.h5").exists()
    # named as an event file, they may be a record its writer has only begun
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1.host").write_bytes(notes.read_bytes())
    report = tbconvert.convert(tmp_path / "logs", tmp_path / "out.h5")
    assert [i.kind for i in report.issues] == ["truncated_record", "not_an_event_file"]


def test_one_bad_run_costs_only_itself(tmp_path, monkeypatch):
    real = TfeventsReader._read_file

    def read_file(self, path, asm):
        if asm.name == "run_a":
            raise ValueError("decoder fell over")
        return real(self, path, asm)
    monkeypatch.setattr(TfeventsReader, "_read_file", read_file)
    data = tbconvert.read(FIXTURES / "tensorboardx_logdir", restarts="keep-all")
    everything = tbconvert.read(FIXTURES / "tensorboardx_logdir", runs="^(?!run_a$)", restarts="keep-all")
    assert "run_a" not in data.runs and sorted(data.runs) == sorted(everything.runs)
    assert _snapshot(data) == _snapshot(everything)
    bad = [i for i in data.report.issues if i.kind == "unreadable_run"]
    assert len(bad) == 1 and "run_a" in bad[0].message and "decoder fell over" in bad[0].message


def _big_run(path: Path, files: int, per_file: int) -> None:
    """One run of ``files`` event files of ``per_file`` scalar points each."""
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    path.mkdir()
    for f in range(files):
        steps = np.arange(f * per_file, (f + 1) * per_file, dtype=np.int64)
        chunk = ScalarSeries(run=".", tag="loss", metadata=md, steps=steps,
                             wall_times=1e9 + steps, hidden=None,
                             values=np.sin(steps).astype(np.float32))
        part = path.parent / f"{path.name}.part{f}"
        with open_writer(part, format="tfevents") as w:
            w.write_run(Run(".", 1e9), [chunk])
        (event_file,) = [p for p in part.rglob("*tfevents*") if p.is_file()]
        event_file.rename(path / f"events.out.tfevents.{f:04d}.x")


_PEAK = """
import sys, tracemalloc, tbconvert
from tbconvert.formats.tfevents import spill
from tbconvert.formats.tfevents import assemble
spill.PieceStore.__init__.__defaults__ = (4 << 20, None)
from tbconvert.formats.csv import writer as csv_writer
assemble.CHUNK_POINTS = csv_writer.FLUSH_ROWS = 50_000
tracemalloc.start()
tbconvert.convert(sys.argv[1], sys.argv[2])
print(tracemalloc.get_traced_memory()[1])
"""


@pytest.mark.slow
def test_memory_does_not_grow_with_the_run(tmp_path):
    """Peak traced memory of a 600k-point run is about that of a 150k-point run."""
    peaks = []
    for n in (150_000, 600_000):
        src = tmp_path / f"src{n}"
        _big_run(src, n // 50_000, 50_000)
        out = tmp_path / f"out{n}.csv"
        proc = subprocess.run([sys.executable, "-c", _PEAK, str(src), str(out)],
                              capture_output=True, text=True, cwd=ROOT, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        peaks.append(int(proc.stdout.split()[-1]))
        assert out.read_text().count("\n") == n + 1
    assert peaks[1] < 1.6 * peaks[0], peaks


def test_no_room_to_spill_is_an_output_error_not_a_skipped_run(tmp_path, tiny_blocks, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no" / "such" / "dir"))
    tiny_blocks(3)
    with pytest.raises(tbconvert.errors.OutputError, match="temporary file"):
        tbconvert.convert(FIXTURES / "tensorboardx_logdir", tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_tensors_of_varying_length_spill_as_one_array(tiny_blocks, monkeypatch):
    """Legacy histograms (``[k, 3]``, ``k`` varying) go to the spill file as one array per
    piece and come back as the same points."""
    whole = _snapshot(tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all"))
    packed = []
    real = assemble._ragged

    def counted(points):
        out = real(points)
        if out is not None:
            packed.append(len(points))
        return out
    monkeypatch.setattr(assemble, "_ragged", counted)
    tiny_blocks(50)
    assert _snapshot(tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")) == whole
    assert packed


def test_only_tensors_of_one_dtype_and_inner_shape_are_packed():
    f32 = np.float32
    pts = [(1, np.zeros((k, 3), f32)) for k in (0, 2, 5)]
    kind, code, (array, lengths) = assemble._ragged(pts)
    assert (kind, code, array.shape, lengths.tolist()) == ("ragged", 1, (7, 3), [0, 2, 5])
    back = assemble._unragged(code, array, lengths)
    assert [(c, a.shape) for c, a in back] == [(1, (0, 3)), (1, (2, 3)), (1, (5, 3))]
    for other in ([(1, np.zeros((2, 4), f32))], [(1, np.zeros((2, 3), np.float64))],
                  [(2, np.zeros((2, 3), f32))], [None], [(1, np.float32(1))],
                  [(1, np.array([b"x"], dtype=object))]):
        assert assemble._ragged(pts + other) is None


def _spilled_store(directory: str):
    """In a worker process: a store whose pieces went to its file, returned to the caller."""
    store = spill.PieceStore(limit=0, directory=directory)
    for k in range(3):
        store.put(np.full(1000, k, dtype=np.int64), 8000)
    return store


def test_a_spilled_store_comes_back_from_a_worker_process(tmp_path):
    """What parallel reading does with a large run's files: the store a worker filled is
    returned to the leading process, which reads its pieces and removes the file."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        store = pool.submit(_spilled_store, str(tmp_path)).result(timeout=120)
    (name,) = list(tmp_path.iterdir())          # named to be handed over, and only that
    assert store.path == str(name)
    assert [int(store.take(k)[0]) for k in range(3)] == [0, 1, 2]
    store.close()
    assert list(tmp_path.iterdir()) == []


def test_spilled_pieces_come_back_as_they_went(tmp_path):
    """Pieces spilled raw (arrays' bytes in the file, the rest kept) or pickled (whatever
    raw cannot hold) come back equal, of the same types, dtypes and shapes, and writable."""
    rng = np.random.default_rng(5)
    pieces = [
        (np.arange(10, dtype=np.int64), rng.random(10), "ragged", 1,
         (rng.random((6, 3)).astype(np.float32), np.arange(3, dtype=np.int64))),
        (np.zeros(0, np.int64), 2.5, None, [b"x" * 300, b"y", 7.5, True]),
        (np.zeros(3), np.float64(2.5), "a numpy scalar: pickled"),
        rng.random((2, 3, 4)).astype(">f8"),
        (np.arange(12).reshape(3, 4)[:, 1], "not contiguous: pickled"),
        (np.array([b"a", None], dtype=object), "objects: pickled"),
        (np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]), "fields: pickled"),
        (b"z" * (spill._LOAD_FROM_FILE + 1), {"a dict": "pickled"}),
        (np.array(3.0), ()),
        "a bare string",
    ]
    store = spill.PieceStore(limit=0, directory=str(tmp_path))
    keys = [store.put(p, 1) for p in pieces]
    assert store.spilled()
    raw = [w for w in store._where.values() if isinstance(w, spill._Raw)]
    assert len(raw) == 5    # the first three, the 0-d array's and the bare string

    def same(a, b):
        assert type(a) is type(b)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and b.flags.writeable
            assert a.tolist() == b.tolist() if a.dtype.hasobject else a.tobytes() == b.tobytes()
        elif isinstance(a, (tuple, list)):
            assert len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                same(x, y)
        else:
            assert a == b
    for key, piece in zip(keys, pieces, strict=True):
        same(piece, store.take(key))
    store.close()
