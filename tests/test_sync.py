"""``tbconvert sync``: a growing logdir kept in a Parquet dataset, checked after every step
against TensorBoard's own view and against one full conversion."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pytest
from helpers import cli_argv, cli_env, out_of_memory, parquet_codecs, run_tbconvert
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert.errors import UsageError
from tbconvert.formats.tfevents import records
from tbconvert.incremental.lock import LOCK_FILE

WALL0 = 1_700_000_000.0


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return event_pb2, summary_pb2


class Events:
    """An event file written the way training writes it: opened, appended to, maybe cut."""

    def __init__(self, path: Path, version: str = "brain.Event:2", wall: float = WALL0) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        event_pb2, _ = _pb()
        self.write(event_pb2.Event(wall_time=wall, file_version=version))

    @classmethod
    def existing(cls, path: Path) -> Events:
        """A file written elsewhere, appended to from now on."""
        self = cls.__new__(cls)
        self.path = path
        return self

    def write(self, event, cut: int | None = None) -> None:
        data = records.frame(event.SerializeToString())
        with open(self.path, "ab") as fh:
            fh.write(data if cut is None else data[:cut])

    def write_many(self, events) -> None:
        with open(self.path, "ab") as fh:
            fh.write(b"".join(records.frame(e.SerializeToString()) for e in events))

    def finish_cut(self, event, cut: int) -> None:
        """Write the rest of an event whose first ``cut`` bytes were written."""
        with open(self.path, "ab") as fh:
            fh.write(records.frame(event.SerializeToString())[cut:])


def scalar(step: int, tags=("loss", "acc")):
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=WALL0 + step, step=step)
    for i, tag in enumerate(tags):
        ev.summary.value.add(tag=tag, simple_value=float(np.float32(step * 0.5 + i)))
    return ev


def tf2_tensor(step: int, tag="hist", first=False):
    """A TF2-style tensor summary: metadata only with the tag's first event."""
    event_pb2, summary_pb2 = _pb()
    ev = event_pb2.Event(wall_time=WALL0 + step, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.dtype = 2          # DT_DOUBLE
    arr = np.arange(6, dtype=np.float64).reshape(2, 3) + step
    v.tensor.tensor_shape.dim.add(size=2)
    v.tensor.tensor_shape.dim.add(size=3)
    v.tensor.tensor_content = arr.tobytes()
    if first:
        v.metadata.plugin_data.plugin_name = "histograms"
        v.metadata.data_class = summary_pb2.DATA_CLASS_TENSOR
    return ev


def session_start(step: int):
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=WALL0 + step + 0.5, step=step)
    ev.session_log.status = 1
    return ev


def full_rows(path: Path) -> list:
    cols = ["run", "tag", "step", "wall_time", "value", "hidden", "data_class", "plugin_name",
            "tensor_dtype", "tensor_shape", "tensor_content", "tensor_strings", "blobs"]
    # the files the manifest names (what every reader following it sees)
    parts = json.loads((path / "_tbconvert.json").read_text())["parts"]
    table = pads.dataset([str(path / p["file"]) for p in parts], format="parquet").to_table(
        columns=cols)
    return sorted(map(repr, zip(*(table.column(c).to_pylist() for c in cols), strict=True)))


def check(src: Path, dst: Path, tmp: Path, ignore_first_event: bool = False,
          view: bool = True) -> None:
    """DST holds what one full conversion of SRC holds, and TensorBoard sees SRC in it."""
    full = tmp / "full"
    back = tmp / "back"
    shutil.rmtree(full, ignore_errors=True)
    shutil.rmtree(back, ignore_errors=True)
    tbconvert.convert(src, full, to_format="parquet")
    assert full_rows(dst) == full_rows(full)
    ours, theirs = tbconvert.read(dst, restarts="keep-all"), tbconvert.read(full, restarts="keep-all")
    assert ours.runs == theirs.runs
    for run, tags in theirs.series.items():
        assert sorted(ours.series[run]) == sorted(tags)
        for tag, s in tags.items():
            o = ours.series[run][tag]
            assert o.metadata == s.metadata and type(o) is type(s), (run, tag)
    if not view:
        return
    tbconvert.convert(dst, back, to_format="tfevents")
    assert_same_view(tb_view(back), tb_view(src), ignore_first_event=ignore_first_event)


JOBS = 1     # test_growing_logdir's processes (see its parameters)


def sync(src, dst):
    return tbconvert.sync(src, dst, jobs=JOBS)


@pytest.fixture(params=[1, pytest.param(2, marks=pytest.mark.slow)], ids=["here", "jobs2"])
def jobs(request, monkeypatch):
    """1: every run synced in this process; 2: runs with new data in two processes, however
    little they read (spawned here: the command forks them, see test_sync_command_jobs...)."""
    if request.param > 1:
        from tbconvert.formats.tfevents import reader
        monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(sys.modules[__name__], "JOBS", request.param)
    return request.param


def test_growing_logdir(tmp_path, jobs):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write(session_start(0))       # a later start then purges (the first one does not)
    for step in range(50):
        a.write(scalar(step))
    b = Events(src / "b" / "events.out.tfevents.1.host")
    b.write(tf2_tensor(0, first=True))
    for step in range(1, 20):
        b.write(tf2_tensor(step))
    r = sync(src, dst)
    assert r.runs_added == 2 and r.parts_written == 2
    check(src, dst, tmp_path)

    # appended bytes, the last record only half written
    for step in range(50, 80):
        a.write(scalar(step))
    a.write(scalar(80), cut=17)
    r = sync(src, dst)
    assert r.runs_extended == 1 and r.runs_rearchived == 0 and r.runs_unchanged == 1
    assert not r.lost
    check(src, dst, tmp_path)

    # the half record completed, more points, a new run, a new tag in b
    a.finish_cut(scalar(80), 17)
    for step in range(81, 100):
        a.write(scalar(step))
    for step in range(20, 30):
        b.write(tf2_tensor(step))
    b.write(tf2_tensor(20, tag="new_hist", first=True))
    c = Events(src / "c" / "events.out.tfevents.5.host")
    for step in range(10):
        c.write(scalar(step, tags=("x",)))
    r = sync(src, dst)
    assert (r.runs_added, r.runs_extended, r.runs_rearchived) == (1, 2, 0)
    assert len([p for p in dst.iterdir() if p.name.startswith("part-")]) == 6
    check(src, dst, tmp_path)

    # a restart: a new file whose session start hides archived steps 90 and later
    a2 = Events(src / "a" / "events.out.tfevents.2.host", wall=WALL0 + 200)
    a2.write(session_start(90))
    for step in range(90, 120):
        a2.write(scalar(step))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)
    hidden = pads.dataset(str(dst), format="parquet").to_table(
        filter=pads.field("hidden")).num_rows
    assert hidden == 2 * 10

    # a restart that hides nothing archived: one more part, not a rewrite
    a2.write(session_start(200))
    for step in range(200, 210):
        a2.write(scalar(step))
    r = sync(src, dst)
    assert r.runs_extended == 1 and r.runs_rearchived == 0
    check(src, dst, tmp_path)

    # a truncated file is found and its run read whole again
    path = src / "b" / "events.out.tfevents.1.host"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)

    # a file rewritten in place with other content, then grown past its old size
    path = src / "c" / "events.out.tfevents.5.host"
    path.unlink()
    c = Events(path)
    for step in range(15):
        c.write(scalar(step, tags=("y",)))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)

    # a run removed from the source leaves the dataset
    shutil.rmtree(src / "c")
    r = sync(src, dst)
    assert r.runs_removed == 1
    check(src, dst, tmp_path)
    # (its parts retired: under names bare-directory readers skip, for readers that took the
    # manifest before the commit)
    assert not [p for p in dst.iterdir() if "-c-" in p.name and not p.name.startswith("_retired-")]


def test_legacy_out_of_order_purge_and_new_file_order(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    old = Events(src / "run" / "events.out.tfevents.3.host", version="brain.Event:1")
    for step in range(30):
        old.write(scalar(step))
    sync(src, dst)
    check(src, dst, tmp_path)
    # an older-style file: a step going back purges the points after it, per tag
    old.write(scalar(10, tags=("loss",)))
    old.write(scalar(11, tags=("loss",)))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)
    # a step going back that hides nothing archived (the tag is new)
    old.write(scalar(5, tags=("fresh",)))
    old.write(scalar(3, tags=("fresh",)))
    r = sync(src, dst)
    check(src, dst, tmp_path)
    # a new file that sorts before the archived one: read whole again
    early = Events(src / "run" / "events.out.tfevents.1.host")
    early.write(scalar(1000))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)
    # bytes appended to a file that is not the run's last one
    early.write(scalar(1001))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path)


def test_the_tags_of_one_purging_event_are_those_the_general_rule_finds(tmp_path, monkeypatch,
                                                                       fixtures_dir):
    """A sync's new bytes start with an event that may purge archived points: the set of its
    tags is found on its own, and is the set the rule for many events finds."""
    from tbconvert.formats.tfevents.purges import RestartRule
    general = RestartRule._tag_sets
    asked = []

    def both(self, wanted):
        for seq in wanted[:20].tolist():
            sets = self.purges.tag_sets()
            one = sets[int(self._tag_set_of(seq)[0])]
            many = sets[int(self._tag_sets_of_many(np.array([seq], np.int64))[0])]
            assert one == many, (seq, one, many)
            asked.append(one)
        return general(self, wanted)
    monkeypatch.setattr(RestartRule, "_tag_sets", both)
    test_legacy_out_of_order_purge_and_new_file_order(tmp_path / "legacy")
    src, dst = tmp_path / "logs", tmp_path / "archive"
    for name in ("torch_logdir", "tf2_logdir"):
        shutil.copytree(fixtures_dir / name, src / name)
    files = sorted(f for f in src.rglob("*tfevents*") if f.is_file())
    whole = [f.read_bytes() for f in files]
    for f, data in zip(files, whole, strict=True):
        f.write_bytes(data[:len(data) // 3])
    sync(src, dst)
    for f, data in zip(files, whole, strict=True):
        f.write_bytes(data)
    sync(src, dst)
    check(src, dst, tmp_path)
    assert any(len(tags) > 1 for tags in asked)


def test_fixture_logdirs_sync_to_what_convert_writes(tmp_path, fixtures_dir):
    for name in ("torch_logdir", "tensorboardx_logdir", "tf2_logdir"):
        dst = tmp_path / name
        sync(fixtures_dir / name, dst)
        r = sync(fixtures_dir / name, dst)
        assert r.runs_unchanged == r.runs and r.parts_written == 0
        check(fixtures_dir / name, dst, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch_logdir", "tensorboardx_logdir", "tf2_logdir"])
def test_fixture_files_grown_byte_by_byte(tmp_path, fixtures_dir, name):
    """Real writers' files appear a few bytes at a time, records cut anywhere (summary
    metadata only in a tag's first event, graphs, hparams, resumed runs): after each sync
    the dataset is what convert writes, and TensorBoard sees the source in it."""
    base = fixtures_dir / name
    src, dst = tmp_path / "logs", tmp_path / "archive"
    files = [(src / f.relative_to(base), f.read_bytes()) for f in sorted(base.rglob("*"))
             if f.is_file()]
    rng = random.Random(name)
    rounds = 0
    while True:
        grew = False
        for target, data in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            have = target.stat().st_size if target.exists() else 0
            if have == len(data) or (rounds and rng.random() < 0.3):
                continue
            k = rng.randint(1, max(1, len(data) // 3))
            with open(target, "ab") as fh:
                fh.write(data[have:have + k])
            grew = True
        if not grew:
            break
        rounds += 1
        r = sync(src, dst)
        assert not r.lost, [i.message for i in r.lost]
        # start times are compared with convert's (a run whose first record is still cut
        # off comes back from any archive with a start time of 0, which TensorBoard shows)
        check(src, dst, tmp_path, ignore_first_event=True)
    assert rounds >= 3


def test_concurrent_sync_refused_and_stale_lock_taken_over(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write(scalar(0))
    sync(src, dst)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (dst / LOCK_FILE).write_text(json.dumps(
            {"host": socket.gethostname(), "pid": sleeper.pid, "time": time.time()}))
        with pytest.raises(UsageError, match="another sync is running"):
            sync(src, dst)
        proc = run_tbconvert("sync", src, dst)
        assert proc.returncode == 2 and "another sync is running" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    # its process is gone: the lock is stale and taken over, with a note
    a.write(scalar(1))
    r = sync(src, dst)
    assert [i.kind for i in r.issues] == ["stale_lock_taken_over"]
    assert not (dst / LOCK_FILE).exists()
    check(src, dst, tmp_path)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="zombies are told by /proc")
def test_a_lock_whose_holder_is_a_zombie_is_stale(tmp_path):
    # (a killed sync whose parent has not collected it, as under an init that collects no
    # orphans, is dead: its lock must not hold the dataset forever)
    src, dst = tmp_path / "logs", tmp_path / "archive"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    sync(src, dst)
    zombie = subprocess.Popen(["sleep", "30"])
    try:
        (dst / LOCK_FILE).write_text(json.dumps(
            {"host": socket.gethostname(), "pid": zombie.pid, "time": time.time()}))
        os.kill(zombie.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = sync(src, dst)
        assert [i.kind for i in r.issues] == ["stale_lock_taken_over"]
    finally:
        zombie.wait()


_KILLED_WHILE_LOCKING = """
import os, sys
from tbconvert.incremental import lock
from tbconvert.report import Report
lines, at = [0], int(sys.argv[2])

def trace(frame, event, arg):
    if frame.f_code.co_filename != lock.__file__:
        return None
    if event == "line":
        lines[0] += 1
        if lines[0] == at:
            os._exit(9)         # killed here: no finally, no release
    return trace

sys.settrace(trace)
lock.Lock(sys.argv[1], Report()).acquire()
sys.settrace(None)
print(lines[0])
"""


def test_a_sync_killed_at_any_step_of_taking_the_lock_leaves_it_free(tmp_path):
    """A process killed at each line of taking the lock in turn (before, while and after
    the lock file appears): the lock it may leave is always readable (never an empty lock,
    which no one can tell from a live one), so the next sync takes it at once; the next sync
    that writes leaves no draft of it."""
    from tbconvert.incremental.lock import Lock
    from tbconvert.report import Report
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write(scalar(0))
    sync(src, dst)
    script = tmp_path / "take_lock.py"
    script.write_text(_KILLED_WHILE_LOCKING)
    whole = subprocess.run([sys.executable, str(script), str(dst), "0"], env=cli_env(),
                           capture_output=True, text=True, check=True)
    steps = int(whole.stdout)
    (dst / LOCK_FILE).unlink()
    for at in range(1, steps + 1):
        proc = subprocess.run([sys.executable, str(script), str(dst), str(at)], env=cli_env(),
                              capture_output=True, text=True)
        assert proc.returncode == 9, proc.stderr
        if (dst / LOCK_FILE).exists():
            assert json.loads((dst / LOCK_FILE).read_text())["pid"], f"killed at line {at}"
        with Lock(dst, Report()):
            pass
        a.write(scalar(at))
        r = sync(src, dst)      # a sync that writes sweeps the dead process's draft away
        assert not r.lost
        assert not [p.name for p in dst.iterdir() if p.name.startswith(LOCK_FILE)], at
    assert steps >= 5
    check(src, dst, tmp_path)


def test_ctrl_c_just_as_the_lock_is_taken_leaves_no_lock(tmp_path, monkeypatch):
    """A signal that lands between the lock file's creation and the lock being known as
    held (a watch stopped with SIGTERM as a round begins) still ends with the lock removed."""
    from tbconvert.incremental.lock import Lock
    from tbconvert.report import Report
    real = Lock._create

    def taken_then_interrupted(self):
        taken = real(self)
        os.kill(os.getpid(), signal.SIGINT)
        return taken

    monkeypatch.setattr(Lock, "_create", taken_then_interrupted)
    with pytest.raises(KeyboardInterrupt), Lock(tmp_path, Report()):
        pytest.fail("the block must not run")
    assert [p.name for p in tmp_path.iterdir()] == []


def test_ctrl_c_just_as_the_lock_is_released_leaves_no_lock(tmp_path, monkeypatch):
    """A signal that lands as the release begins, before it holds signals back (a watch
    stopped with SIGTERM as a round ends), still ends with the lock removed."""
    from tbconvert.incremental.lock import Lock
    from tbconvert.report import Report
    real = Lock._uninterrupted
    calls = []

    def interrupted_once_held(self):
        calls.append(self._held)
        if self._held and calls.count(True) == 1:
            raise KeyboardInterrupt      # (as the signal's handler raises it there)
        return real(self)

    monkeypatch.setattr(Lock, "_uninterrupted", interrupted_once_held)
    with pytest.raises(KeyboardInterrupt), Lock(tmp_path, Report()):
        assert [p.name for p in tmp_path.iterdir()] == ["_tbconvert.lock"]
    assert [p.name for p in tmp_path.iterdir()] == []
    assert calls == [False, True, True]


def test_destination_that_is_not_a_dataset_is_refused(tmp_path):
    src = tmp_path / "logs"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    proc = run_tbconvert("sync", src, other)
    assert proc.returncode == 6 and "not a tbconvert dataset" in proc.stderr
    assert (other / "notes.txt").read_text() == "mine"


def _dataset_state(dst: Path):
    if not (dst / "_tbconvert.json").exists():
        return None
    return full_rows(dst)


@pytest.mark.slow
def test_killed_sync_leaves_the_dataset_as_it_was(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    runs = [Events(src / f"r{i}" / "events.out.tfevents.1.host") for i in range(8)]
    for ev in runs:
        ev.write_many(scalar(s) for s in range(3000))
    step = 3000
    rng = random.Random(1)
    outcomes = []
    for seed in range(5):
        before = _dataset_state(dst)
        for i, ev in enumerate(runs):
            if rng.random() < 0.7:
                ev.write_many(scalar(s) for s in range(step, step + 500))
            if seed == 3 and i == 2:    # one run's file cut short: read whole again
                data = ev.path.read_bytes()
                ev.path.write_bytes(b"")
                ev.write_many(scalar(s) for s in range(1000))
                assert ev.path.stat().st_size < len(data)
        step += 500
        proc = subprocess.Popen([*cli_argv(), "sync", str(src), str(dst)], env=cli_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # a sync of this much takes well under a second: most kills land before its commit
        time.sleep(rng.uniform(0.05, 0.6) if seed < 4 else 3.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        after = _dataset_state(dst)
        outcomes.append(after == before)
        if after != before:
            # the kill came after the manifest was committed: the sync's whole result is in
            full = tmp_path / "full"
            shutil.rmtree(full, ignore_errors=True)
            tbconvert.convert(src, full, to_format="parquet")
            assert after == full_rows(full)
        # the dead sync's lock is stale and its parts are garbage: a new sync completes
        r = sync(src, dst)
        assert not r.lost, [i.message for i in r.lost]
        full = tmp_path / "full"
        shutil.rmtree(full, ignore_errors=True)
        tbconvert.convert(src, full, to_format="parquet")
        assert full_rows(dst) == full_rows(full)
        named = {p["file"] for p in json.loads((dst / "_tbconvert.json").read_text())["parts"]}
        assert {p.name for p in dst.iterdir() if p.name.startswith(("part-", "_pending"))} \
            == named
    assert any(outcomes), "no kill landed before a commit"
    check(src, dst, tmp_path)


@pytest.mark.e2e
def test_sync_cli_and_errors(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    proc = run_tbconvert("sync", src, dst)
    assert proc.returncode == 0, proc.stderr
    assert "1 run(s) added" in proc.stdout + proc.stderr
    proc = run_tbconvert("sync", src, tmp_path / "x.parquet")
    assert proc.returncode == 2 and "directory dataset" in proc.stderr
    proc = run_tbconvert("sync", tmp_path / "missing", dst)
    assert proc.returncode == 3
    proc = run_tbconvert("sync", dst, tmp_path / "again")
    assert proc.returncode == 2 and "use convert" in proc.stderr
    proc = run_tbconvert("sync", src, "https://example.invalid/archive")
    assert proc.returncode == 2 and "can only be read" in proc.stderr


def _files(path: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


@pytest.mark.slow
def test_sync_command_jobs_gives_the_dataset_of_one_process(tmp_path_factory, tmp_path):
    """``sync -j 2`` writes, sync after sync, the files ``-j 1`` writes, byte for byte: the
    first sync (40 MiB: its runs go to workers that the command forks), then small ones
    (the dataset of ``-j 1`` is what the other tests check against full conversions)."""
    from test_jobs import scalar_logdir
    big = tmp_path_factory.getbasetemp() / "jobs_big"     # shared with tests/test_jobs.py
    if not big.exists():
        scalar_logdir(big, runs=4, points=600_000)
    src = tmp_path / "logs"
    shutil.copytree(big, src)
    files = [Events.existing(next((src / f"run{i}").glob("*tfevents*"))) for i in range(4)]
    for growth in range(3):
        if growth:
            for f in files[growth - 1:]:
                for step in range(600_000 + 100 * growth, 600_100 + 100 * growth):
                    f.write(scalar(step))
            Events(src / f"new{growth}" / "events.out.tfevents.1.host").write(scalar(0))
        for jobs in ("1", "2"):
            proc = run_tbconvert("sync", src, tmp_path / f"j{jobs}", "--jobs", jobs)
            assert proc.returncode == 0, proc.stderr
        assert _files(tmp_path / "j1") == _files(tmp_path / "j2")
    proc = run_tbconvert("sync", src, tmp_path / "j2", "--jobs", "-1")
    assert proc.returncode == 2 and "--jobs" in proc.stderr


def test_parts_of_a_run_read_as_one_table_by_other_readers(tmp_path):
    """A run kept in several parts: DuckDB, Dask and tbconvert's own verify see one table."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(100))
    sync(src, dst)
    a.write_many(scalar(s) for s in range(100, 150))
    Events(src / "b" / "events.out.tfevents.1.host").write_many(scalar(s) for s in range(7))
    sync(src, dst)
    assert len(list(dst.glob("part-00000-a-*.parquet"))) == 2
    import duckdb
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{dst}/*.parquet') "
                   "WHERE run = 'a' AND tag = 'loss'").fetchall()[0][0]
    assert n == 150
    import dask.dataframe as dd
    df = dd.read_parquet(str(dst)).compute()
    assert len(df) == 2 * 157 and sorted(df["run"].unique()) == ["a", "b"]
    proc = run_tbconvert("verify", src, dst)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = run_tbconvert("info", dst, "--json")
    assert info.returncode == 0
    runs = json.loads(info.stdout)["runs"]
    assert len(runs) == 2


def test_runs_that_start_empty_or_half_written(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    (src / "empty").mkdir(parents=True)
    (src / "empty" / "events.out.tfevents.1.host").write_bytes(b"")
    half = src / "half" / "events.out.tfevents.1.host"
    half.parent.mkdir()
    event_pb2, _ = _pb()
    first = records.frame(event_pb2.Event(wall_time=WALL0, file_version="brain.Event:2")
                          .SerializeToString())
    half.write_bytes(first[:7])
    r = sync(src, dst)
    assert not r.lost and r.runs_added == 2
    # (a run with no event at all comes back from any archive with a start time of 0)
    check(src, dst, tmp_path, ignore_first_event=True)
    half.write_bytes(first + records.frame(scalar(1).SerializeToString()))
    e = Events(src / "empty" / "events.out.tfevents.1.host")
    e.write(scalar(3))
    r = sync(src, dst)
    assert not r.lost
    check(src, dst, tmp_path)
    # a single event file as the source
    one = tmp_path / "one"
    sync(half, one)
    half.write_bytes(half.read_bytes() + records.frame(scalar(2).SerializeToString()))
    r = sync(half, one)
    assert r.runs_extended == 1
    full = tmp_path / "one_full"
    tbconvert.convert(half, full, to_format="parquet")
    assert full_rows(one) == full_rows(full)


def test_a_record_still_being_written_is_no_extension(tmp_path):
    """Bytes that hold no complete record yet add nothing: the run is unchanged, and the
    report says the dataset changed in nothing; the record counts once it is complete."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    sync(src, dst)
    a.write(scalar(10), cut=9)
    r = sync(src, dst)
    assert (r.runs_extended, r.runs_unchanged, r.parts_written) == (0, 1, 0), r.summary()
    assert r.new_bytes == 9 and r.changed_nothing and not r.issues
    whole = records.frame(scalar(10).SerializeToString())
    with open(a.path, "ab") as fh:
        fh.write(whole[9:])
    r = sync(src, dst)
    assert (r.runs_extended, r.parts_written) == (1, 1) and not r.changed_nothing
    check(src, dst, tmp_path)


def test_a_record_cut_off_in_a_file_the_writer_left_is_lost_and_told(tmp_path):
    """A writer that died mid-record and was restarted with a new event file can never
    finish the cut record: once no writer touched the file for a while, a sync tells it as
    lost, once, as convert does; while the file is the run's last, or was just written, it
    is a record still being written."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    a.write(scalar(10), cut=30)
    c = Events(src / "c" / "events.out.tfevents.1.host")
    c.write_many(scalar(s) for s in range(10))
    c.write(scalar(10), cut=30)
    old = time.time() - 3600         # (no writer touched them for an hour)
    os.utime(a.path, (old, old))
    r = sync(src, dst)
    assert not r.issues, r.issues     # (each file the last of its run: still being written)
    b = Events(src / "a" / "events.out.tfevents.2.host")
    b.write_many(scalar(s) for s in range(11, 20))
    Events(src / "c" / "events.out.tfevents.2.host").write(scalar(11))
    r = sync(src, dst)
    told = [(i.kind, i.lost, i.run) for i in r.issues]
    # (c's file was just written: two writers may share a run, its own may finish the record)
    assert told == [("truncated_record", True, "a")], r.issues
    assert not sync(src, dst).issues      # told once
    c.finish_cut(scalar(10), 30)          # (and c's was finished: read, nothing lost)
    r = sync(src, dst)
    assert not r.lost and r.runs_rearchived == 1, r.summary()
    fresh = sync(src, tmp_path / "fresh")
    assert [(i.kind, i.lost, i.run) for i in fresh.issues] == told
    converted = tbconvert.convert(src, tmp_path / "full.parquet")
    assert [i.message for i in converted.issues] == [i.message for i in fresh.issues]
    check(src, dst, tmp_path)


def test_a_reader_that_took_the_manifest_before_a_commit_still_reads_its_parts(tmp_path):
    """A sync's commit retires the parts it leaves out (names bare-directory readers skip)
    instead of removing them, so a reader opened on the manifest before it reads what that
    manifest named; retired parts go at a later sync, once old enough."""
    from tbconvert.incremental import manifest
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    sync(src, dst)
    with tbconvert.api.open_reader(dst, options=None, report=tbconvert.Report()) as before:
        a.path.unlink()                  # (rewritten: read whole again, its part replaced)
        a = Events(a.path)
        a.write_many(scalar(s) for s in range(1, 12))
        r = sync(src, dst)
        assert r.runs_rearchived == 1, r.summary()
        assert not list(dst.glob("part-*-g0001.parquet"))
        assert len(list(dst.glob("_retired-*.gone"))) == 1
        assert {tag: len(s) for tag, s in
                tbconvert.read(dst).series["a"].items()} == {"loss": 11, "acc": 11}
        steps = [len(c) for run in before.iter_runs() for c in run.series]
        assert steps == [10, 10]
    rows = pads.dataset(str(dst), format="parquet").to_table().num_rows
    assert rows == 22       # (bare-directory readers see no retired part)
    real = manifest.RETIRE_SECONDS
    try:
        manifest.RETIRE_SECONDS = -1
        sync(src, dst)
    finally:
        manifest.RETIRE_SECONDS = real
    assert not list(dst.glob("_retired-*"))


def test_a_profilers_marker_file_is_never_new_again(tmp_path):
    """A run with the empty event file a profiler writes beside its own (never read) syncs
    to nothing new the second time: no new generation for it."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(5))
    Events(src / "a" / "events.out.tfevents.2.host.profile-empty").write(scalar(0))
    assert sync(src, dst).generation == 1
    r = sync(src, dst)
    assert r.changed_nothing and r.generation == 1, r.summary()


def test_tags_first_seen_in_one_event_keep_its_order_however_the_file_is_read(tmp_path):
    """A run's series are in order of first appearance, tags of one event in the event's
    order: the same whether the event is read with the events after it (convert, where a
    shorter event decoded first names a later value's tag first) or alone (a sync)."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "b" / "events.out.tfevents.1.host")
    a.write(scalar(1, tags=("r", "q", "p")))
    sync(src, dst)
    a.write(scalar(2, tags=("p",)))
    a.write(scalar(3, tags=("q", "p")))
    sync(src, dst)
    assert list(tbconvert.read(src).series["b"]) == ["r", "q", "p"]
    tbconvert.convert(src, tmp_path / "full", to_format="parquet")
    first = json.loads((dst / "_tbconvert.json").read_text())["parts"][0]["file"]
    import pyarrow.parquet as pq

    def series(path):
        rows = pq.read_table(path, columns=["tag", "series"]).to_pylist()
        return list(dict.fromkeys((row["tag"], row["series"]) for row in rows))
    whole = series(next((tmp_path / "full").glob("part-*.parquet")))
    assert whole == [("r", 0), ("q", 1), ("p", 2)]
    assert series(dst / first) == whole
    check(src, dst, tmp_path)


def _one_run_task(tmp_path):
    """A sync task for run ``a`` of 20 steps into an empty dataset directory."""
    from tbconvert.incremental.runs import RunTask
    src = tmp_path / "logs"
    Events(src / "a" / "events.out.tfevents.1.host").write_many(scalar(s) for s in range(20))
    dst = tmp_path / "archive"
    dst.mkdir()
    return dst, RunTask(name="a", logdir=str(src),
                        files=[str(src / "a" / "events.out.tfevents.1.host")], dst=str(dst),
                        part="part-00000-a-g0001.parquet", experiment={}, state=None)


def test_run_tasks_and_results_travel_to_other_processes(tmp_path):
    """What a scheduler ships to its workers and back: tasks and results pickle, and a task
    run in another process writes its part where the sync then finds it."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from tbconvert.incremental.files import pending_name
    from tbconvert.incremental.runs import sync_run
    dst, task = _one_run_task(tmp_path)
    assert pickle.loads(pickle.dumps(task)) == task
    with ProcessPoolExecutor(1) as pool:
        result = pool.submit(sync_run, task).result()
    assert result.part == task.part and result.points["scalar"] == 40
    assert (dst / pending_name(task.part)).is_file()
    assert pickle.loads(pickle.dumps(result)).state == result.state


def test_a_part_left_to_finish_is_the_part_written_at_once(tmp_path):
    """A run read by the syncing process leaves the end of its part's writing to the thread
    that flushes it: finished, the part is byte for byte the one written at once. The same
    task run in another process (a worker running it again) answers with its part whole."""
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    from tbconvert.incremental.files import pending_name
    from tbconvert.incremental.runs import sync_run, sync_run_here
    dst, task = _one_run_task(tmp_path)
    part = dst / pending_name(task.part)
    whole = sync_run(task)
    assert whole.finish is None
    expected = part.read_bytes()
    part.unlink()
    left = sync_run_here(os.getpid(), task)
    assert left.finish is not None and left.state == whole.state
    left.finish()
    assert part.read_bytes() == expected
    part.unlink()
    with ProcessPoolExecutor(1) as pool:
        elsewhere = pool.submit(sync_run_here, os.getpid(), task).result()
    assert elsewhere.finish is None and part.read_bytes() == expected
    assert pickle.loads(pickle.dumps(elsewhere)).state == whole.state


@pytest.mark.parametrize("small_footer", [1 << 20, 0])
def test_a_part_finished_later_has_the_bytes_of_one_closed_at_once(tmp_path, monkeypatch,
                                                                     small_footer):
    """write_part(later=True) and the call it returns write the file write_part writes at
    once, whether Arrow writes the footer's JSON (small) or it is added after (large)."""
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet import writer
    from tbconvert.formats.tfevents.reader import TfeventsReader
    from tbconvert.model import Experiment
    from tbconvert.report import Report
    src = tmp_path / "logs"
    path = src / "a" / "events.out.tfevents.1.host"
    Events(path).write_many(scalar(s, tags=(f"t{s % 7}", "loss")) for s in range(300))
    run, series = TfeventsReader(src, Options(), Report()).read_run("a", [path]).build()
    series = list(series)
    monkeypatch.setattr(writer, "_SMALL_FOOTER", small_footer)
    for compress in (True, False):
        at_once, later = tmp_path / f"once-{compress}", tmp_path / f"later-{compress}"
        assert writer.write_part(at_once, Experiment(), run, iter(series), compress) is None
        finish = writer.write_part(later, Experiment(), run, iter(series), compress, later=True)
        finish()
        assert later.read_bytes() == at_once.read_bytes()


def test_metadata_that_arrives_after_the_points(tmp_path):
    """A tag's first metadata decides its whole series: arriving late, it makes the run be
    read whole again."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    b = Events(src / "b" / "events.out.tfevents.1.host")
    b.write_many(tf2_tensor(s) for s in range(5))
    sync(src, dst)
    check(src, dst, tmp_path, view=False)   # TensorBoard cannot list a tag without metadata
    b.write(tf2_tensor(5, first=True))
    b.write(tf2_tensor(6, first=True, tag="other"))
    r = sync(src, dst)
    assert r.runs_rearchived == 1
    check(src, dst, tmp_path, view=False)
    b.write(tf2_tensor(7, first=True))      # later metadata never counts
    r = sync(src, dst)
    assert r.runs_extended == 1
    check(src, dst, tmp_path, view=False)


def test_nothing_new_loads_neither_numpy_nor_pyarrow(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    Events(src / "a" / "events.out.tfevents.1.host").write_many(scalar(s) for s in range(5))
    sync(src, dst)
    code = ("import sys, tbconvert; r = tbconvert.sync(sys.argv[1], sys.argv[2]); "
            "assert r.runs_unchanged == 1 and r.parts_written == 0; "
            "print(sorted(m for m in ('numpy', 'pyarrow') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(src), str(dst)], check=False,
                          env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_sync_command_with_new_scalars_loads_neither_pandas_nor_protobuf_events(tmp_path):
    """The command's start-up is most of a small sync: what it does not need stays unloaded."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(5))
    sync(src, dst)
    a.write_many(scalar(s) for s in range(5, 300))
    code = ("import sys; from tbconvert.cli import main; code = main(sys.argv[1:]); "
            "print(code, sorted(m for m in ('pandas', 'tensorboard.compat.proto.event_pb2') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, "sync", str(src), str(dst)], check=False,
                          env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0 []", proc.stdout + proc.stderr
    assert "1 extended" in proc.stderr
    check(src, dst, tmp_path, view=False)


def test_new_records_checked_one_by_one_find_a_damaged_payload(tmp_path):
    """A sync's new records come in groups of a few hundred of one length, whose payload
    checksums are taken one record at a time: a flipped byte in one is still found."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s, tags=("loss",)) for s in range(10))
    sync(src, dst)
    at = a.path.stat().st_size
    a.write_many(scalar(s, tags=("loss",)) for s in range(10, 610))
    data = bytearray(a.path.read_bytes())
    one = len(records.frame(scalar(300, tags=("loss",)).SerializeToString()))
    data[at + 290 * one + 20] ^= 0x40          # inside the payload of new record 290
    a.path.write_bytes(bytes(data))
    r = sync(src, dst)
    assert [i.kind for i in r.issues] == ["corrupt_record"], r.issues
    assert r.points["scalar"] == 599
    full = tmp_path / "full"
    tbconvert.convert(src, full, to_format="parquet")
    assert full_rows(dst) == full_rows(full)


def _states(dst: Path) -> dict:
    """Each run's files in the manifest, but for their modification times."""
    runs = json.loads((dst / "_tbconvert.json").read_text())["sync"]["runs"]
    return {name: [{k: v for k, v in f.items() if k != "mtime"} for f in state["files"]]
            for name, state in runs.items()}


def test_new_bytes_of_many_runs_read_together_are_read_as_each_alone(tmp_path):
    """The new bytes of the runs of one sync are framed and decoded together, save those
    that do not tile their file (a record still being written, damage): the dataset, the
    manifest's files and what is told are those of a sync of each run on its own."""
    together, alone = tmp_path / "together", tmp_path / "alone"
    for root in (together, alone):
        for name in "abcde":
            e = Events(root / "logs" / name / "events.out.tfevents.1.host")
            if name == "e":
                e.write(session_start(0))
            e.write_many(scalar(s) for s in range(20))
        sync(root / "logs", root / "archive")

    def grow(root: Path, name: str) -> None:
        e = Events.existing(root / "logs" / name / "events.out.tfevents.1.host")
        at = e.path.stat().st_size
        if name == "e":         # a restart hiding archived points: read whole again
            e.write(session_start(15))
        e.write_many(scalar(s, tags=("loss", "acc", name)) for s in range(20, 40))
        if name == "b":         # a record still being written
            e.write(scalar(40), cut=11)
        if name == "c":         # a flipped byte in a new record's payload
            data = bytearray(e.path.read_bytes())
            data[at + 30] ^= 0x40
            e.path.write_bytes(bytes(data))

    told = []
    for name in "abcde":
        grow(alone, name)
        r = sync(alone / "logs", alone / "archive")
        told += [(i.kind, i.run) for i in r.issues]
    for name in "abcde":
        grow(together, name)
    r = sync(together / "logs", together / "archive")
    assert (r.runs_extended, r.runs_rearchived) == (4, 1), r.summary()
    assert [(i.kind, i.run) for i in r.issues] == told
    assert ("corrupt_record", "c") in told
    assert _states(together / "archive") == _states(alone / "archive")
    assert full_rows(together / "archive") == full_rows(alone / "archive")
    # (not TensorBoard's view: it stops reading c at the damaged record)
    check(together / "logs", together / "archive", tmp_path, view=False)


def test_reading_resumes_at_a_record_boundary(tmp_path):
    """scan_file(start=...) finds exactly the records a whole scan finds after that offset,
    and a reader told to leave a cut-off last record for later does not report it."""
    from tbconvert.formats.base import Options
    from tbconvert.formats.tfevents.assemble import RunAssembler
    from tbconvert.formats.tfevents.reader import TfeventsReader
    from tbconvert.report import Report
    path = tmp_path / "run" / "events.out.tfevents.1.host"
    ev = Events(path)
    ev.write_many(scalar(s) for s in range(300))
    ev.write(scalar(300), cut=20)

    def found(start=0):
        out = []
        for b in records.scan_file(path, block_size=256, start=start):
            out.extend((b.offset + s, n) for s, n in zip(b.starts.tolist(), b.lengths.tolist(), strict=True))
        return out
    whole = found()
    middle = whole[150][0] - records.HEADER
    assert found(middle) == whole[150:]
    report = Report()
    reader = TfeventsReader(tmp_path, Options(), report)
    reader.defer_partial_tail = True
    state = reader.read_file(path, RunAssembler("run", detached=True), middle)
    assert state.partial_tail and not report.issues and state.records == len(whole) - 150
    assert state.end == whole[-1][0] + whole[-1][1] + records.FOOTER
    reader.defer_partial_tail = False
    reader.read_file(path, RunAssembler("run", detached=True), middle)
    assert [i.kind for i in report.issues] == ["truncated_record"]


def test_export_root_synced_per_experiment(tmp_path, fixtures_dir):
    """An export root: one dataset per experiment, read again only when its files change."""
    root = tmp_path / "export"
    shutil.copytree(fixtures_dir / "tbdev_export", root)
    (exp,) = [p for p in root.iterdir() if p.name.startswith("experiment_")]
    dst = tmp_path / "archive"
    r = sync(root, dst)
    assert r.runs_added > 0 and not r.lost
    sub = dst / exp.name[len("experiment_"):]
    full = tmp_path / "full"
    tbconvert.convert(exp, full, to_format="parquet")
    assert full_rows(sub) == full_rows(full)
    assert tbconvert.read(sub, restarts="keep-all").runs == tbconvert.read(full, restarts="keep-all").runs
    r = sync(root, dst)
    assert r.parts_written == 0 and r.runs_unchanged > 0
    # a newer export of the same experiment (one run fewer) replaces the dataset's runs
    scalars = exp / "scalars.json"
    lines = scalars.read_text().splitlines(keepends=True)
    first_run = json.loads(lines[0])["run"]
    scalars.write_text("".join(ln for ln in lines if json.loads(ln)["run"] != first_run))
    r = sync(root, dst)
    assert r.parts_written > 0
    shutil.rmtree(full)
    tbconvert.convert(exp, full, to_format="parquet")
    assert full_rows(sub) == full_rows(full)
    # one experiment given as the source: one dataset
    one = tmp_path / "one"
    sync(exp, one)
    assert full_rows(one) == full_rows(full)


def test_one_broken_experiment_of_a_root_costs_only_itself(tmp_path, fixtures_dir):
    (exp,) = (fixtures_dir / "tbdev_export").glob("experiment_*")
    root, dst = tmp_path / "export", tmp_path / "archive"
    ids = ["A" * 22, "M" * 22, "Z" * 22]
    for i in ids:
        shutil.copytree(exp, root / f"experiment_{i}")
    dst.mkdir()
    (dst / ids[1]).write_text("not a dataset")      # where the middle one's dataset goes
    proc = run_tbconvert("sync", root, dst)
    assert proc.returncode == 6 and "Traceback" not in proc.stderr, proc.stderr
    assert f"tbconvert: error: experiment experiment_{ids[1]}: " in proc.stderr
    assert "synced 2 of 3 experiment(s); the others were not changed" in proc.stderr
    for i in (ids[0], ids[2]):
        assert (dst / i / "_tbconvert.json").is_file()
    assert "2 experiment(s) at generation 1: " in proc.stderr, proc.stderr
    report = tbconvert.sync(root, dst)
    assert [name for name, _ in report.failures] == [f"experiment_{ids[1]}"]
    assert report.to_dict()["sync"]["failures"][0]["error"] == "OutputExistsError"
    assert report.experiments == {ids[0]: 1, ids[2]: 1}
    # the failed experiment counts nothing: what it wrote was removed again
    runs = len(tbconvert.read(exp).runs)
    assert report.runs == report.runs_unchanged == 2 * runs and report.parts_written == 0
    (dst / ids[1]).unlink()
    report = tbconvert.sync(root, dst)
    assert report.experiments == {ids[0]: 1, ids[1]: 1, ids[2]: 1}
    assert report.runs_added == report.parts_written == runs, report.summary()
    assert report.summary().startswith("3 experiment(s) at generation 1: ")


def test_a_second_sync_of_an_export_root_is_refused_whole(tmp_path, fixtures_dir):
    """Experiment by experiment, two syncs of one root each took the experiments the other
    had not and failed on the rest; the root is held whole, and unchanged experiments add up
    in the summary."""
    (exp,) = (fixtures_dir / "tbdev_export").glob("experiment_*")
    root, dst = tmp_path / "export", tmp_path / "archive"
    for i in ("A" * 22, "B" * 22):
        shutil.copytree(exp, root / f"experiment_{i}")
    first = sync(root, dst)
    runs = first.runs
    again = sync(root, dst)
    assert again.runs == again.runs_unchanged == runs > 0, again.summary()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (dst / LOCK_FILE).write_text(json.dumps(
            {"host": socket.gethostname(), "pid": sleeper.pid, "time": time.time()}))
        proc = run_tbconvert("sync", root, dst)
        assert proc.returncode == 2 and "another sync is running" in proc.stderr, proc.stderr
        assert str(dst) in proc.stderr and "synced" not in proc.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    (dst / LOCK_FILE).unlink()
    assert sync(root, dst).runs_unchanged == runs
    assert not (dst / LOCK_FILE).exists()


def test_an_experiment_gone_from_the_root_keeps_its_dataset_and_is_noted(tmp_path,
                                                                         fixtures_dir):
    (exp,) = (fixtures_dir / "tbdev_export").glob("experiment_*")
    root, dst = tmp_path / "export", tmp_path / "archive"
    for i in ("A" * 22, "B" * 22):
        shutil.copytree(exp, root / f"experiment_{i}")
    sync(root, dst)
    kept = full_rows(dst / ("B" * 22))
    shutil.rmtree(root / f"experiment_{'B' * 22}")
    report = sync(root, dst)
    notes = [i for i in report.issues if i.kind == "experiment_not_in_source"]
    assert len(notes) == 1 and "B" * 22 in notes[0].message and not notes[0].lost
    assert full_rows(dst / ("B" * 22)) == kept


def test_interrupted_sync_removes_its_parts(tmp_path, monkeypatch):
    """Ctrl-C while runs are read: the dataset stays as it was, with nothing left behind."""
    from tbconvert.incremental import runs as runs_mod
    src, dst = tmp_path / "logs", tmp_path / "archive"
    for name in ("a", "b"):
        Events(src / name / "events.out.tfevents.1.host").write_many(scalar(s) for s in range(9))
    sync(src, dst)
    before = sorted(p.name for p in dst.iterdir())
    for name in ("a", "b"):
        Events(src / name / "events.out.tfevents.2.host").write(scalar(20))
    real = runs_mod.sync_run
    calls = []

    def interrupted(task, **kwargs):
        calls.append(task.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task, **kwargs)
    monkeypatch.setattr(runs_mod, "sync_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sync(src, dst)
    assert sorted(p.name for p in dst.iterdir()) == before
    monkeypatch.setattr(runs_mod, "sync_run", real)
    assert sync(src, dst).runs_extended == 2
    check(src, dst, tmp_path)


def _run_parts(dst: Path, run: str) -> list[str]:
    return [p["file"] for p in json.loads((dst / "_tbconvert.json").read_text())["parts"]
            if p["run"] == run]


def _image(step: int):
    event_pb2, summary_pb2 = _pb()
    ev = event_pb2.Event(wall_time=WALL0 + step, step=step)
    ev.summary.value.add(tag="sample", image=summary_pb2.Summary.Image(
        height=1, width=2, colorspace=3, encoded_image_string=bytes([step % 256]) * (step % 7)))
    return ev


def test_a_run_synced_round_after_round_keeps_few_parts(tmp_path, monkeypatch):
    """A run that every sync extends (as under ``sync --watch``) does not gain a part per
    sync for ever: its last parts are merged like the digits of a counter. After every sync
    the dataset holds what a full conversion holds, merged parts included, their names
    sort in the dataset's order, and no merged-away part is left on disk."""
    from tbconvert.incremental import compact
    monkeypatch.setattr(compact, "FANOUT", 3)
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    b = Events(src / "b" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(20))
    a.write(tf2_tensor(0, first=True))
    b.write(scalar(0))
    sync(src, dst)
    counts, merged = [], 0
    for k in range(1, 31):
        a.write_many(scalar(s) for s in range(20 * k, 20 * k + 20))
        a.write(tf2_tensor(20 * k))
        a.write(_image(20 * k))
        if k == 17:     # a restart that hides only points of this sync's own part
            a.write(session_start(20 * k + 10))
            a.write_many(scalar(s) for s in range(20 * k + 10, 20 * k + 25))
        r = sync(src, dst)
        assert not r.lost and not r.runs_rearchived
        merged += r.parts_merged
        parts = _run_parts(dst, "a")
        counts.append(len(parts))
        assert parts == sorted(parts)
        on_disk = {p.name for p in dst.iterdir() if p.name.startswith(("part-", "_pending"))}
        assert on_disk == set(_run_parts(dst, "a") + _run_parts(dst, "b"))
        if k % 10 == 0:
            check(src, dst, tmp_path, view=k == 30)
    # 30 syncs in base 3: at most the base part and two parts per digit
    assert max(counts) <= 1 + 2 * 4 and counts[-1] < 6 and merged > 0
    state = json.loads((dst / "_tbconvert.json").read_text())["sync"]["runs"]["a"]
    assert sum(state["weights"]) == 30 and state["weights"][0] == 0


def _one_merge_due(tmp_path, monkeypatch):
    """A run synced twice with ``FANOUT`` 2: its next sync merges its two small parts."""
    from tbconvert.incremental import compact
    monkeypatch.setattr(compact, "FANOUT", 2)
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    for first in (0, 20):
        a.write_many(scalar(s) for s in range(first, first + 20))
        sync(src, dst)
    return src, dst, a


def test_small_sync_parts_are_uncompressed_until_merged(tmp_path, monkeypatch):
    """A sync's small part is written without compression (its set-up would cost more than
    the part); the run's first part, a large part and a merged part are compressed."""
    from tbconvert.incremental import runs
    src, dst, a = _one_merge_due(tmp_path, monkeypatch)
    first, small = (dst / p for p in _run_parts(dst, "a"))
    assert parquet_codecs(first) == {"ZSTD"} and parquet_codecs(small) == {"UNCOMPRESSED"}
    a.write_many(scalar(s) for s in range(40, 60))
    assert sync(src, dst).parts_merged == 2
    assert [parquet_codecs(dst / p) for p in _run_parts(dst, "a")] == [{"ZSTD"}, {"ZSTD"}]
    monkeypatch.setattr(runs, "SMALL_PART_BYTES", 64)
    a.write_many(scalar(s) for s in range(60, 80))
    sync(src, dst)
    assert parquet_codecs(dst / _run_parts(dst, "a")[-1]) == {"ZSTD"}
    check(src, dst, tmp_path)


def test_parts_that_cannot_be_read_whole_are_kept_unmerged_then_read_again(tmp_path,
                                                                          monkeypatch):
    """A damaged part is never laundered into a fresh part with fresh checksums: the
    merge is given up (reported, costing nothing) and the parts stay as they are. The
    next sync reads the run whole again from its event files, which repairs the dataset."""
    src, dst, a = _one_merge_due(tmp_path, monkeypatch)
    damaged = dst / _run_parts(dst, "a")[1]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 3] ^= 0xFF
    damaged.write_bytes(bytes(data))
    a.write_many(scalar(s) for s in range(40, 60))
    r = sync(src, dst)
    assert [i.kind for i in r.issues] == ["parts_not_merged"] and not r.lost
    assert "the next sync reads the run whole again" in r.issues[0].message
    assert len(_run_parts(dst, "a")) == 3 and damaged.read_bytes() == bytes(data)
    r = sync(src, dst)          # nothing new in the source: the run is read whole all the same
    assert r.runs_rearchived == 1 and [i.kind for i in r.issues] == ["run_read_whole"]
    assert "when its parts were merged" in r.issues[0].message
    assert len(_run_parts(dst, "a")) == 1 and not damaged.exists()
    check(src, dst, tmp_path, view=False)
    assert sync(src, dst).changed_nothing


def test_a_sync_stopped_while_it_merges_leaves_the_dataset_as_it_was(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) while a sync merges small parts, after its new parts are written:
    neither they nor the merged part stay behind, and the dataset is the previous sync's."""
    from tbconvert.incremental import compact
    src, dst, a = _one_merge_due(tmp_path, monkeypatch)
    before = {p.name: p.read_bytes() for p in dst.iterdir()}
    a.write_many(scalar(s) for s in range(40, 60))
    merge = compact.merge

    def interrupted(files, out, experiment):
        merge(files, out, experiment)       # the merged part is on disk, pending
        raise KeyboardInterrupt
    monkeypatch.setattr(compact, "merge", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sync(src, dst)
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == before
    monkeypatch.setattr(compact, "merge", merge)
    assert sync(src, dst).parts_merged == 2
    check(src, dst, tmp_path, view=False)


def test_merged_part_names_are_unique_and_sort_in_order():
    from tbconvert.incremental.compact import merged_name
    # a run's name hint may itself end like a generation ("exp-g2"): the mark still differs
    assert merged_name("part-00001-exp-g2-g0005.parquet", 31) == \
        "part-00001-exp-g2-g0005.m0031.parquet"
    again = merged_name("part-00001-exp-g2-g0005.m0031.parquet", 47)
    assert again == "part-00001-exp-g2-g0005.m0047.parquet"
    names = ["part-00001-exp-g2-g0001.parquet", again, "part-00001-exp-g2-g0048.parquet"]
    assert names == sorted(names)


def test_part_names_sort_in_generation_order_past_9999():
    """Readers of the bare directory take a run's parts in name order: a watch that syncs
    every minute passes generation 9999 within a week."""
    from tbconvert.formats.parquet.writer import part_name
    from tbconvert.incremental.compact import merged_name
    gens = [1, 2, 999, 9998, 9999, 10000, 10001, 99999, 100000, 123456, 10**9]
    names = [part_name(0, "train", g) for g in gens]
    assert names == sorted(names) and names[5] == "part-00000-train-gA10000.parquet"
    merged = [merged_name(names[1], g) for g in (3, 9999, 10000, 100001)]
    assert merged == sorted(merged) and names[0] < merged[0] < names[2]
    assert merged_name(merged[-1], 100002) == "part-00000-train-g0002.mB100002.parquet"


def test_a_sync_that_finds_nothing_new_removes_what_a_killed_one_left(tmp_path):
    """A sync killed as it committed leaves parts no manifest names; a reader of the bare
    directory counts their rows until the next sync, whatever it finds, removes them."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(20))
    sync(src, dst)
    part = next(dst.glob("part-*.parquet"))
    stray = dst / part.name.replace("-g0001", "-g0002")
    shutil.copy(part, stray)
    (dst / "_pending-x.parquet").write_bytes(b"half")
    assert pads.dataset(dst, format="parquet").count_rows() == 80
    r = sync(src, dst)
    assert r.changed_nothing and r.generation == 1
    assert sorted(p.name for p in dst.iterdir() if not p.name.startswith("_retired-")) == \
        sorted(["_tbconvert.json", part.name])
    assert pads.dataset(dst, format="parquet").count_rows() == 40


def test_a_value_changed_in_place_at_the_same_size_is_seen(tmp_path):
    # Beyond the first 4 KiB and before the last archived record, at the same size: only the
    # file's modification time tells it (an event file is rewritten, not edited, in practice;
    # a rerun of a job into the same file name would do this).
    src, dst = tmp_path / "logs", tmp_path / "ds"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many([scalar(step) for step in range(400)])
    tbconvert.sync(src, dst)
    path = a.path
    data = bytearray(path.read_bytes())
    old = records.frame(scalar(200).SerializeToString())
    at = data.index(old)
    ev = scalar(200)
    ev.summary.value[0].simple_value = 1.5
    new = records.frame(ev.SerializeToString())
    assert len(new) == len(old) and at > 4096
    data[at:at + len(new)] = new
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    r = tbconvert.sync(src, dst)
    assert r.runs_rearchived == 1, r.summary()
    assert any("same size, new modification time" in i.message for i in r.issues)
    check(src, dst, tmp_path)
    # a file touched without a change costs a rereading, never a wrong dataset
    os.utime(path)
    assert tbconvert.sync(src, dst).runs_rearchived == 1
    assert tbconvert.sync(src, dst).runs_unchanged == 1


def test_runs_an_earlier_tbconvert_archived_by_other_rules_are_read_whole(tmp_path):
    """An earlier tbconvert archived bfloat16 scalars as scalars of their bit patterns: a run
    whose state predates today's rules (no "rules" in it) and holds bfloat16 is read whole
    again at its next sync, so that its old points are not left beside new ones."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2

    def bf16(step: int, bits: int):
        ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
        v = ev.summary.value.add(tag="loss")
        v.tensor.CopyFrom(tensor_pb2.TensorProto(dtype=14, half_val=[bits]))
        v.tensor.tensor_shape.SetInParent()
        v.metadata.plugin_data.plugin_name = "scalars"
        v.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
        return ev
    path = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    head = event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")
    path.write_bytes(b"".join(records.frame(e.SerializeToString())
                              for e in (head, bf16(0, 0x3DCC), bf16(1, 0x3DCD))))
    dst = tmp_path / "dataset"
    sync(tmp_path / "logs", dst)
    # the state as the earlier rules left it
    marker = json.loads((dst / "_tbconvert.json").read_text())
    marker["sync"]["runs"]["run"].pop("rules")
    from tbconvert.formats.parquet import MARKER_DIGEST, marker_digest
    marker.pop(MARKER_DIGEST, None)
    marker[MARKER_DIGEST] = marker_digest(marker)
    (dst / "_tbconvert.json").write_text(json.dumps(marker))
    with open(path, "ab") as fh:
        fh.write(records.frame(bf16(2, 0x3DCE).SerializeToString()))
    report = sync(tmp_path / "logs", dst)
    assert report.runs_rearchived == 1, report.summary()
    assert "bit patterns" in " ".join(i.message for i in report.issues)
    assert json.loads((dst / "_tbconvert.json").read_text())["sync"]["runs"]["run"]["rules"] == 2
    check(tmp_path / "logs", dst, tmp_path, view=False)
    with open(path, "ab") as fh:
        fh.write(records.frame(bf16(3, 0x3DCF).SerializeToString()))
    assert sync(tmp_path / "logs", dst).runs_extended == 1


def test_an_export_root_sync_stops_when_the_machine_runs_out(tmp_path, fixtures_dir,
                                                               monkeypatch):
    from tbconvert.errors import OutOfResourcesError
    from tbconvert.incremental import exports
    (exp,) = (fixtures_dir / "tbdev_export").glob("experiment_*")
    root = tmp_path / "export"
    for i in ("A" * 22, "B" * 22):
        shutil.copytree(exp, root / f"experiment_{i}")
    tried = []
    monkeypatch.setattr(exports, "sync_experiment", out_of_memory(tried))
    with pytest.raises(OutOfResourcesError):
        tbconvert.sync(root, tmp_path / "archive")
    assert len(tried) == 1


def test_a_dataset_synced_from_an_export_then_from_its_event_files(tmp_path, fixtures_dir):
    """Runs archived from an export know no event files: synced from a logdir, they are read
    whole (not told unreadable and kept as they were)."""
    (exp,) = (fixtures_dir / "tbdev_export").glob("experiment_*")
    dst = tmp_path / "dataset"
    sync(exp, dst)
    tbconvert.tbdev_export(exp, tmp_path / "logs")
    report = sync(tmp_path / "logs", dst)
    assert not report.lost and report.runs_rearchived == report.runs > 0, report.summary()
    assert "TensorBoard.dev export" in " ".join(i.message for i in report.issues)
    check(tmp_path / "logs", dst, tmp_path, view=False)


def _manifest_bytes(dst: Path) -> bytes:
    return (dst / "_tbconvert.json").read_bytes()


def test_a_record_cut_off_at_the_end_commits_nothing_until_it_is_finished(tmp_path):
    """A writer that flushed half a record: each sync reads those bytes again, finds nothing
    complete, and leaves the dataset as it was (no new generation); the finished record is
    then archived as any other."""
    src, dst = tmp_path / "logs", tmp_path / "ds"
    ev = Events(src / "train" / "events.out.tfevents.1.host")
    ev.write_many(scalar(s) for s in range(100))
    sync(src, dst)
    ev.write(scalar(100), cut=20)
    first = sync(src, dst)          # the file's new size is noted
    before = _manifest_bytes(dst)
    for _ in range(3):
        r = sync(src, dst)
        assert (r.generation, r.parts_written, r.runs_rearchived) == (first.generation, 0, 0)
        assert r.changed_nothing and _manifest_bytes(dst) == before
    ev.finish_cut(scalar(100), 20)
    r = sync(src, dst)
    assert (r.generation, r.runs_extended, r.runs_rearchived) == (first.generation + 1, 1, 0)
    check(src, dst, tmp_path)


def test_a_job_that_died_mid_record_and_restarted_in_a_new_file_is_not_read_whole(tmp_path):
    """The old file keeps its cut record (its writer is gone); the next syncs read the new
    file's points only, never the run again as if the old file had been changed in place."""
    src, dst = tmp_path / "logs", tmp_path / "ds"
    old = Events(src / "train" / "events.out.tfevents.1.host")
    old.write_many(scalar(s) for s in range(200))
    sync(src, dst)
    old.write(scalar(200), cut=30)
    new = Events(src / "train" / "events.out.tfevents.2.host", wall=WALL0 + 300)
    new.write(scalar(200))
    r = sync(src, dst)
    assert (r.runs_extended, r.runs_rearchived) == (1, 0)
    for _ in range(2):
        again = sync(src, dst)
        assert (again.runs_rearchived, again.parts_written, again.generation) == \
            (0, 0, r.generation), again.summary()
    new.write(scalar(201))
    r = sync(src, dst)
    assert (r.runs_extended, r.runs_rearchived) == (1, 0), r.summary()
    check(src, dst, tmp_path)


def _tiny_runs(logdir: Path, runs: int) -> None:
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    with open_writer(logdir, format="tfevents") as w:
        for k in range(runs):
            name = f"trial_{k:05d}"
            w.write_run(Run(name, 1.7e9 + k), iter([
                ScalarSeries(run=name, tag=tag, metadata=md, steps=np.arange(2, dtype=np.int64),
                             wall_times=1.7e9 + k + np.arange(2.0), hidden=None,
                             values=np.array([k, k + 0.5], dtype=np.float32))
                for tag in ("loss", "accuracy", "lr", "grad_norm")]))


@pytest.mark.slow
def test_a_first_sync_of_many_runs_holds_little_per_run(tmp_path, monkeypatch):
    """While its runs are read, a sync holds neither the source's listing (the reader kept
    every event file's path, about 480 bytes a run) nor what a read run's task named; until
    it commits, each run's manifest entry is held as deflated JSON text, and neither a report
    that tells nothing nor a finished flush is kept. The first sync of 20,000 short runs held
    about 6 KB of Python objects a run, and one of 50,000 peaked past the memory bound."""
    import tracemalloc

    from tbconvert.formats.parquet import columns
    from tbconvert.incremental import manifest
    from tbconvert.incremental import runs as sync_runs
    reading, held = [], []
    real_run, real_commit = sync_runs.sync_run_here, manifest.commit

    def run_here(*args, **kwargs):
        if len(reading) < len(held) + 1:    # the first run read of each sync
            reading.append(tracemalloc.get_traced_memory()[0])
        return real_run(*args, **kwargs)

    def commit(dst, marker):
        held.append(tracemalloc.get_traced_memory()[0])
        real_commit(dst, marker)
    monkeypatch.setattr(sync_runs, "sync_run_here", run_here)
    monkeypatch.setattr(manifest, "commit", commit)
    sizes = (50, 450)
    for n in sizes:
        _tiny_runs(tmp_path / f"logs{n}", n)
    # what a first sync imports and caches, once, is no cost per run
    _tiny_runs(tmp_path / "warm", 3)
    tbconvert.sync(tmp_path / "warm", tmp_path / "warm_ds", jobs=1)
    reading.clear()
    held.clear()
    tracemalloc.start()
    try:
        for k in range(5000):   # the names' cache full: each run's name replaces another
            columns._one_string(f"filler {k}")
        for n in sizes:
            tbconvert.sync(tmp_path / f"logs{n}", tmp_path / f"ds{n}", jobs=1)
    finally:
        tracemalloc.stop()
    at_start = (reading[1] - reading[0]) / (sizes[1] - sizes[0])
    at_commit = (held[1] - held[0]) / (sizes[1] - sizes[0])
    # bytes a run (they were about 1,400 and 6,400, then 2,800; now about 950 and 1,800)
    assert at_start < 1150, at_start
    assert at_commit < 2300, at_commit
    marker = json.loads((tmp_path / "ds450" / "_tbconvert.json").read_bytes())
    assert len(marker["sync"]["runs"]) == len(marker["parts"]) == 450


def test_a_manifest_of_run_states_as_text_is_the_manifest_of_dicts(tmp_path):
    from tbconvert.formats.parquet import MARKER_DIGEST, marker_digest
    from tbconvert.incremental import manifest
    states = {"b\u00e9": {"rules": 2, "files": [{"name": "x", "size": 3}], "start_time": 1.5,
                          "tags": {"z": {"kinds": [[1, 2]], "max_step": None}, "a": {}}},
              "a": {"index": 0, "parts": ["p"], "weights": [0], "start_time": float("nan")}}
    plain = {"format": "tbconvert", "experiment": {"name": "\u00e9"},
             "parts": [{"file": "p", "run": "a"}],
             "sync": {"generation": 3, "runs": states}}
    text = dict(plain, sync={"generation": 3, "runs": {
        k: manifest.RunState(v) for k, v in states.items()}})
    for marker in (plain, text):
        manifest.commit(tmp_path, marker)
        written = (tmp_path / "_tbconvert.json").read_bytes()
        # (each run's state written in canonical form, keys sorted, as the digest takes it)
        expected = dict(plain, sync={"generation": 3, "runs": {
            k: json.loads(json.dumps(v, sort_keys=True)) for k, v in states.items()}})
        expected[MARKER_DIGEST] = marker_digest(plain)
        assert written == json.dumps(expected, ensure_ascii=False,
                                     separators=(",", ":")).encode("utf-8")
        assert manifest.marker_digest(marker) == marker_digest(plain)


def test_a_flush_that_failed_is_told_once_its_future_is_let_go_of(tmp_path, monkeypatch):
    from tbconvert.incremental import manifest
    from tbconvert.incremental.files import pending_name
    for k in range(300):
        (tmp_path / pending_name(f"part-{k}")).write_bytes(b"x")
    flusher = manifest.Flusher(tmp_path)
    try:
        flusher.add("part-missing")     # (no such file: its flush fails)
        for k in range(300):
            flusher.add(f"part-{k}")
        assert len(flusher._futures) <= manifest._MOST_PENDING + 1
        with pytest.raises(FileNotFoundError):
            flusher.wait()
    finally:
        flusher.close()
