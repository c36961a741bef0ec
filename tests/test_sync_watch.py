"""``tbconvert sync --watch``: one process syncing round after round, stopped by a signal."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from helpers import CLI_CWD, cli_argv, cli_env
from test_sync import Events, check, full_rows, scalar, tf2_tensor

import tbconvert
from tbconvert.errors import UsageError
from tbconvert.incremental.lock import LOCK_FILE


def _generation(dst: Path) -> int:
    try:
        return json.loads((dst / "_tbconvert.json").read_text())["sync"]["generation"]
    except (OSError, ValueError, KeyError):
        return 0


def _wait(what, proc, timeout: float = 60.0, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        assert proc.poll() is None, proc.communicate()
        time.sleep(poll)
    raise AssertionError("the watching sync did not get there in time")


def _start(*args, stderr=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([*cli_argv(), "sync", *map(str, args)], cwd=CLI_CWD, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _stop(proc: subprocess.Popen, signum=signal.SIGTERM) -> tuple[int, str]:
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def _workers_of(proc: subprocess.Popen) -> list[int]:
    """The command's worker processes: its children running what it runs (forked)."""
    own = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    pids = []
    for children in Path(f"/proc/{proc.pid}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == own:
                    pids.append(int(pid))
            except OSError:
                pass
    return pids


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _leftovers(dst: Path) -> list[str]:
    return sorted(p.name for p in dst.iterdir()
                  if p.name == LOCK_FILE or p.name.startswith(("_pending-", "_tbconvert.json.tmp")))


@pytest.mark.e2e
def test_watch_follows_a_growing_logdir_until_sigterm(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(20))
    proc = _start(src, dst, "--watch", "0.2")
    try:
        first = _wait(lambda: _generation(dst), proc)
        a.write_many(scalar(s) for s in range(20, 45))          # the run's file grew
        b = Events(src / "b" / "events.out.tfevents.2.host")    # and a run was added
        b.write(tf2_tensor(0, first=True))
        b.write_many(scalar(s) for s in range(5))
        _wait(lambda: _generation(dst) > first and len(
            json.loads((dst / "_tbconvert.json").read_text())["sync"]["runs"]) == 2, proc)
        # a round with nothing new commits nothing: the generation stays
        time.sleep(0.6)
        settled = _generation(dst)
        time.sleep(0.6)
        assert _generation(dst) == settled
    finally:
        code, err = _stop(proc)
    assert code == 143, err
    assert "Traceback" not in err
    rounds = [line for line in err.splitlines() if re.search(r" round \d+ ", line)]
    assert len(rounds) >= 3 and "1 run(s) added" in rounds[0], err
    assert "nothing new" in rounds[-1], err
    assert any("1 run(s) added, 1 extended" in line for line in rounds), err
    assert err.strip().splitlines()[-1] == (f"tbconvert: {dst}: stopped (SIGTERM); the dataset "
                                            "holds what the last complete round committed")
    assert _leftovers(dst) == []
    check(src, dst, tmp_path)


@pytest.mark.parametrize("verbose", [False, True])
def test_watch_lists_rounds_that_change_something_with_their_time(tmp_path, verbose):
    """Over days most rounds find nothing: a stretch of them is one line (``-v``: every round),
    and every line carries the local date and time."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(20))
    proc = _start(src, dst, "--watch", "0.1", "-j", "1", *(["-v"] if verbose else []))
    try:
        first = _wait(lambda: _generation(dst), proc)
        time.sleep(1.0)                       # about ten rounds that find nothing
        a.write_many(scalar(s) for s in range(20, 30))
        _wait(lambda: _generation(dst) > first, proc)
        time.sleep(0.6)
    finally:
        code, err = _stop(proc)
    assert code == 143 and "Traceback" not in err, err
    rounds = [line for line in err.splitlines() if re.search(r" round \d+ ", line)]
    assert all(re.match(rf"tbconvert: {re.escape(str(dst))}: \d{{4}}-\d\d-\d\d "
                        r"\d\d:\d\d:\d\d round \d+ \(\d+\.\d{3} s\): ", line)
               for line in rounds), err
    idle = [line for line in rounds if "nothing new" in line]
    grew = [k for k, line in enumerate(rounds) if "1 extended" in line]
    assert "1 run(s) added" in rounds[0] and len(grew) == 1, err
    if verbose:
        assert len(rounds) >= 10 and not idle, err
        assert sum("0 extended, 0 read whole again, 0 removed, 1 unchanged" in line
                   for line in rounds) >= 8, err
    else:
        # the first round, one line for the quiet stretch, the round that grew, one more line
        assert len(rounds) == 4 and grew == [2], err
        assert idle[0].endswith("nothing new; rounds that find nothing new are not listed "
                                "(-v lists them)"), err


def test_watch_stopped_during_a_round_keeps_the_last_complete_one(tmp_path):
    """With ``-j 2`` the command keeps a forked worker between rounds, which writes its share
    of the runs: stopped mid-round, nothing it wrote is left, and it is gone too."""
    src, dst = tmp_path / "logs", tmp_path / "archive"
    runs = [Events(src / f"r{i}" / "events.out.tfevents.1.host") for i in range(6)]
    for ev in runs:
        ev.write_many(scalar(s) for s in range(3000))
    proc = _start(src, dst, "--watch", "0.1", "-j", "2")
    try:
        first = _wait(lambda: _generation(dst), proc)
        kept = _workers_of(proc)
        assert len(kept) == 1, kept
        before = full_rows(dst)
        for ev in runs:
            ev.write_many(scalar(s) for s in range(3000, 6000))
        # the next round is writing its parts
        _wait(lambda: any(p.name.startswith("_pending-") for p in dst.iterdir()), proc,
              poll=0.002)
    finally:
        code, err = _stop(proc)
    assert code == 143 and "Traceback" not in err, err
    assert _leftovers(dst) == []
    assert all(_gone(pid) for pid in kept)
    if _generation(dst) == first:
        assert full_rows(dst) == before
    # else the signal came after that round's commit (which may have seen only some of the
    # appends): the next sync completes it either way
    tbconvert.sync(src, dst)
    check(src, dst, tmp_path, view=False)


def test_watch_skips_held_rounds_reports_failed_ones_and_stops_on_ctrl_c(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    # the logdir is not there yet (training not started): rounds fail, the loop goes on
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err_file:
        proc = _start(src, dst, "--watch", "0.1", stderr=err_file)
    sleeper = None
    try:
        # (waited for, not slept: a busy machine starts the command late)
        _wait(lambda: "round 1" in log.read_text(), proc)
        Events(src / "a" / "events.out.tfevents.1.host").write_many(
            scalar(s) for s in range(10))
        _wait(lambda: _generation(dst), proc)
        # another (live) sync holds the dataset: rounds are skipped, not errors
        sleeper = subprocess.Popen(["sleep", "60"])
        (dst / LOCK_FILE).write_text(json.dumps(
            {"host": socket.gethostname(), "pid": sleeper.pid, "time": time.time()}))
        time.sleep(0.6)
        (dst / LOCK_FILE).unlink()
        code, _ = _stop(proc, signal.SIGINT)
        err = log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
    assert code == 130, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert any("round 1" in line and "no such file or directory; trying again" in line
               for line in lines), err
    assert any("skipped, another sync holds the dataset" in line for line in lines), err
    assert _leftovers(dst) == []
    check(src, dst, tmp_path, view=False)


def test_watch_quiet_and_errors_that_end_it(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    proc = _start(src, dst, "--watch", "0.1", "-q")
    try:
        _wait(lambda: _generation(dst), proc)
        time.sleep(0.3)
    finally:
        code, err = _stop(proc)
    assert code == 143 and err == ""      # -q: stopping is no error
    # what no later round can change ends the command at once
    proc = _start(src, tmp_path / "x.parquet", "--watch", "0.1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "directory dataset" in err
    proc = _start(src, dst, "--watch", "soon")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "seconds" in err
    # --strict: the first round that skipped data ends it, after committing that round
    bad = Events(src / "b" / "events.out.tfevents.1.host")
    bad.write(scalar(1))
    with open(bad.path, "ab") as fh:
        fh.write(b"\x07" * 40)                # damage between two complete records
    bad.write(scalar(2))
    proc = _start(src, dst, "--watch", "0.1", "--strict")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 8 and "--strict" in err and "round 1" in err, err
    assert _leftovers(dst) == [] and _generation(dst) == 2


def test_sync_watch_in_the_library(tmp_path):
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    seen = []

    def grow(seconds):
        a.write_many(scalar(s) for s in range(10 + 5 * len(seen), 15 + 5 * len(seen)))

    n = tbconvert.sync_watch(src, dst, 0.0, rounds=3, sleep=grow, on_round=seen.append)
    assert n == 3 and [r.number for r in seen] == [1, 2, 3]
    assert [r.report.generation for r in seen] == [1, 2, 3]
    assert all(r.error is None and r.skipped is None and r.seconds >= 0 for r in seen)
    a.write(scalar(100))            # grown after the last round: not in yet
    rows = {p["file"] for p in json.loads((dst / "_tbconvert.json").read_text())["parts"]}
    assert len(rows) == 3
    tbconvert.sync(src, dst)
    check(src, dst, tmp_path, view=False)
    with pytest.raises(UsageError, match="directory dataset"):
        tbconvert.sync_watch(src, tmp_path / "x.parquet", 0.0, rounds=2, sleep=grow)
    with pytest.raises(UsageError, match="0 seconds or more"):
        tbconvert.sync_watch(src, dst, -1, rounds=1)


def test_watch_rounds_look_through_the_whole_dataset_only_at_sweeps(tmp_path, monkeypatch):
    """A long watch keeps two minutes of retired parts, thousands of names: between sweeps
    (every SWEEP_SECONDS, the first round's too) a round looks only at the names it may
    leave (the parts it replaces, writes and merges), which it retires or removes at once;
    what it did not leave (a killed sync's part) waits for the next sweep."""
    import shutil

    from tbconvert.incremental import compact, manifest
    monkeypatch.setattr(compact, "FANOUT", 2)       # rounds 2 and 4 merge
    monkeypatch.setattr(manifest, "SWEEP_SECONDS", 3600)
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    seen: list = []
    stray = dst / "part-00099-gone-g0001.parquet"

    def grow(seconds):
        if len(seen) == 1:
            shutil.copy(next(dst.glob("part-*.parquet")), stray)
        a.write_many(scalar(s) for s in range(10 + 5 * len(seen), 15 + 5 * len(seen)))

    tbconvert.sync_watch(src, dst, 0.0, rounds=4, sleep=grow, on_round=seen.append)
    assert [r.error for r in seen] == [None] * 4
    assert sum(r.report.parts_merged for r in seen) >= 2
    named = {p["file"] for p in json.loads((dst / "_tbconvert.json").read_text())["parts"]}
    parts = {p.name for p in dst.glob("part-*.parquet")}
    assert parts == named | {stray.name}
    assert list(dst.glob("_retired-*.gone")) and _leftovers(dst) == []
    check(src, dst, tmp_path, view=False)
    # the next watch's first round sweeps: the stray part goes, expired retired parts too
    monkeypatch.setattr(manifest, "RETIRE_SECONDS", -1)
    tbconvert.sync_watch(src, dst, 0.0, rounds=1)
    assert {p.name for p in dst.glob("part-*.parquet")} == named
    assert not list(dst.glob("_retired-*")) and _leftovers(dst) == []


def test_sync_watch_with_kept_workers_writes_what_one_process_writes(tmp_path, monkeypatch):
    """``jobs=2``: a worker started once takes a share of every round's runs, however few
    points are new, and of the runs whose small parts are merged; killed between two rounds,
    the next round still completes, with new workers. The parts are byte for byte those of
    ``jobs=1``."""
    import multiprocessing

    from tbconvert.incremental import compact
    monkeypatch.setattr(compact, "FANOUT", 2)     # three runs merge two parts in round 3
    datasets = []
    for jobs in (1, 2):
        src, dst = tmp_path / f"j{jobs}" / "logs", tmp_path / f"j{jobs}" / "archive"
        runs = [Events(src / f"r{i}" / "events.out.tfevents.1.host") for i in range(4)]
        for ev in runs:
            ev.write_many(scalar(s) for s in range(50))
        seen: list = []

        def grow(seconds, runs=runs, seen=seen, jobs=jobs):
            k = len(seen)
            if jobs == 2 and k == 2:
                kept = multiprocessing.active_children()
                assert len(kept) == 1
                os.kill(kept[0].pid, signal.SIGKILL)
                kept[0].join()
            for ev in runs[:max(k + 1, 3)]:
                ev.write_many(scalar(s) for s in range(50 + 10 * k, 60 + 10 * k))

        tbconvert.sync_watch(src, dst, 0.0, rounds=4, sleep=grow, on_round=seen.append,
                             jobs=jobs)
        assert [r.error for r in seen] == [None] * 4
        assert [r.report.parts_merged for r in seen] == [0, 0, 6, 0]
        assert multiprocessing.active_children() == []      # stopped with the loop
        check(src, dst, tmp_path / f"j{jobs}", view=False)
        datasets.append({p.name: p.read_bytes() for p in dst.glob("*.parquet")})
    assert datasets[0] == datasets[1] and len(datasets[0]) >= 4
    with pytest.raises(TypeError, match="schedular"):
        tbconvert.sync_watch(src, dst, 0.0, rounds=1, schedular="tcp://127.0.0.1:1")


def test_a_kept_workers_share_flushes_its_own_parts(tmp_path, monkeypatch):
    """``sync_share`` (what a kept worker runs for its share): the results of ``sync_run``,
    each part flushed to disk by a thread while the next run is read. A part whose flush was
    done when the share answers is said to be flushed, so the leading process does not
    flush it again; the answer does not wait for the others (nor for a flush that failed),
    said not to be, which the leading process flushes."""
    import copy
    import dataclasses
    import threading

    from tbconvert.incremental import runs
    from tbconvert.incremental.files import pending_name
    src, dst = tmp_path / "logs", tmp_path / "archive"
    logs = [Events(src / f"r{i}" / "events.out.tfevents.1.host") for i in range(3)]
    for ev in logs:
        ev.write_many(scalar(s) for s in range(20))
    tbconvert.sync(src, dst)
    for ev in logs[:2]:
        ev.write_many(scalar(s) for s in range(20, 30))
    tasks: list = []
    real = runs.sync_run

    def grab(task, **kwargs):
        tasks.append(copy.deepcopy(task))
        return real(task, **kwargs)
    monkeypatch.setattr(runs, "sync_run", grab)
    tbconvert.sync(src, dst)
    monkeypatch.setattr(runs, "sync_run", real)
    assert len(tasks) == 3

    def parts_of(results):
        return {r.part: (dst / pending_name(r.part)).read_bytes() for r in results if r.part}
    alone = [real(t) for t in tasks]
    expected = parts_of(alone)
    assert len(expected) == 2
    flushed = []
    fsync = os.fsync

    def recording(fd):
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fsync(fd)
    monkeypatch.setattr(os, "fsync", recording)
    shared = runs.sync_share(tasks)
    assert parts_of(shared) == expected
    assert [dataclasses.replace(r, flushed=False, report=None) for r in shared] == \
        [dataclasses.replace(r, report=None) for r in alone]
    said = {str(dst / pending_name(r.part)) for r in shared if r.flushed}
    assert all(r.part is not None for r in shared if r.flushed)
    assert said <= set(flushed)

    # flushes that are not done when the share is: its answer does not wait for them
    go_on = threading.Event()

    def slow(fd):
        go_on.wait(60)
        return fsync(fd)
    monkeypatch.setattr(os, "fsync", slow)
    try:
        assert [r.flushed for r in runs.sync_share(tasks)] == [False] * 3
    finally:
        go_on.set()

    def failing(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", failing)
    assert [r.flushed for r in runs.sync_share(tasks)] == [False] * 3
    assert runs.sync_share([]) == []


def test_a_watch_round_takes_the_manifest_it_committed_until_another_writer_changes_it(
        tmp_path, monkeypatch):
    """A round takes the manifest the watch's last round committed from memory while the
    file is still that one; a sync from elsewhere between rounds (a new file renamed in) or
    an edit in place makes the next round read it from disk, and what it reads counts."""
    from tbconvert.incremental import manifest_stream
    reads: list = []
    real_read = manifest_stream.read

    def counted(path, each=None):
        reads.append(path)
        return real_read(path, each)
    monkeypatch.setattr(manifest_stream, "read", counted)
    src, dst = tmp_path / "logs", tmp_path / "archive"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many(scalar(s) for s in range(10))
    seen: list = []
    read_before: list = []

    def grow(seconds):
        k = len(seen)
        read_before.append(len(reads))
        a.write_many(scalar(s) for s in range(10 * k, 10 * k + 10))
        if k == 2:      # another sync commits between two rounds
            Events(src / "b" / "events.out.tfevents.1.host").write_many(
                scalar(s) for s in range(5))
            tbconvert.sync(src, dst)
        if k == 4:      # the manifest rewritten in place, byte for byte: still read again
            marker = dst / "_tbconvert.json"
            text = marker.read_bytes()
            time.sleep(0.01)
            with open(marker, "r+b") as fh:
                fh.write(text)

    tbconvert.sync_watch(src, dst, 0.0, rounds=6, sleep=grow, on_round=seen.append)
    assert [r.error for r in seen] == [None] * 6
    read_before.append(len(reads))
    # rounds 2, 4, 6 took the manifest from memory; round 3 read the one the other sync
    # committed (which took the new points: the round found nothing new, at the other
    # sync's generation) and kept it for round 4; round 5 read the one edited in place
    new_reads = [b - a for a, b in zip(read_before, read_before[1:], strict=False)]
    assert new_reads == [0, 2, 0, 1, 0], new_reads   # (round 3: the other sync read it too)
    generations = [r.report.generation for r in seen]
    assert seen[2].report.parts_written == 0
    assert generations[2:4] == [generations[1] + 1, generations[1] + 2]
    assert _generation(dst) == generations[-1]
    check(src, dst, tmp_path, view=False)
