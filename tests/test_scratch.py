"""The local working directories of remote work: locked while their process lives, removed
by the next tbconvert once that process was killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import pytest
from helpers import CLI_CWD, cli_env

from tbconvert import scratch

_MAKE_AND_WAIT = """
import sys, time
from tbconvert import scratch
print(scratch.make(scratch.FETCHED), flush=True)
time.sleep(120)
"""


@pytest.fixture
def tmp_dir(tmp_path, monkeypatch):
    """The temporary directory of this test, for this process and the ones it starts."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def _start_one():
    proc = subprocess.Popen([sys.executable, "-c", _MAKE_AND_WAIT], stdout=subprocess.PIPE,
                            text=True, cwd=CLI_CWD, env=cli_env())
    made = proc.stdout.readline().strip()
    assert made, "the process made no directory"
    return proc, made


def test_a_live_processs_directory_is_kept_and_a_killed_ones_removed(tmp_dir):
    if scratch._lock(str(tmp_dir)) is None:
        pytest.skip("no directory locks here")
    proc, made = _start_one()
    try:
        (tmp_dir / made / "staged").write_bytes(b"x" * 1000)
        assert os.path.basename(made).startswith(scratch.FETCHED)
        assert scratch.sweep() == 0                     # alive: left alone
        mine = scratch.make(scratch.BUILT)
        assert os.path.isdir(made) and mine.is_dir()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert os.path.isdir(made)                      # a killed process cleans nothing
        assert scratch.sweep() == 1                     # its lock is gone with it
        assert not os.path.exists(made)
        assert mine.is_dir()                            # this process's own is kept
        scratch.remove(mine)
        assert list(tmp_dir.iterdir()) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_only_locked_directories_of_its_own_kinds_are_removed(tmp_dir):
    if scratch._lock(str(tmp_dir)) is None:
        pytest.skip("no directory locks here")
    kept = [tmp_dir / "tbconvert-src-abc", tmp_dir / "tbconvert-out-abc",
            tmp_dir / "tbconvert-sync-abc",            # older versions' names: maybe alive
            tmp_dir / f"{scratch.FETCHED}{scratch._UNLOCKED}abc",   # made without a lock
            tmp_dir / "other"]
    for path in kept:
        path.mkdir()
    (tmp_dir / f"{scratch.BUILT}file").write_text("a file, not a directory")
    target = tmp_dir / "elsewhere"
    target.mkdir()
    (tmp_dir / f"{scratch.SYNC_STAGE}link").symlink_to(target)
    stale = tmp_dir / f"{scratch.SYNC_STAGE}stale"
    stale.mkdir()
    assert scratch.sweep() == 1
    assert not stale.exists()
    assert all(p.exists() for p in kept) and target.is_dir()
    assert (tmp_dir / f"{scratch.SYNC_STAGE}link").is_symlink()


def test_without_locks_a_directory_says_so_and_is_never_swept(tmp_dir, monkeypatch):
    monkeypatch.setattr(scratch, "_lock", lambda path: None)
    made = scratch.make(scratch.FETCHED)
    assert made.name.startswith(scratch.FETCHED + scratch._UNLOCKED)
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_dir))
    assert scratch.sweep() == 0 and made.is_dir()
    scratch.remove(made)
    assert not made.exists()


def test_a_killed_commands_working_directory_goes_with_the_next_command(tmp_dir, tmp_path):
    """``convert SRC -`` keeps its table in a working directory until it is written out: a
    command killed outright (SIGKILL, the OOM killer) while a reader is slow leaves it, and
    the next tbconvert removes it."""
    if scratch._lock(str(tmp_dir)) is None:
        pytest.skip("no directory locks here")
    from helpers import BENCH, FIXTURES, cli_argv, run_tbconvert
    sys.path.insert(0, str(BENCH))
    import writers
    logs = tmp_path / "logs"
    writers.scalar_run(logs / "run", "pytorch", 40_000)      # a CSV of about 2 MB
    proc = subprocess.Popen([*cli_argv(), "convert", str(logs), "-", "-q"],
                            stdout=subprocess.PIPE, cwd=CLI_CWD, env=cli_env())
    try:
        # nobody reads the pipe: once it is full the command waits, its table written
        proc.stdout.read(1)
        left = [p for p in tmp_dir.iterdir() if p.name.startswith(scratch.STDOUT)]
        assert len(left) == 1 and (left[0] / "out.csv").is_file()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert left[0].is_dir()
    done = run_tbconvert("convert", FIXTURES / "torch_logdir", "-", "-q")
    assert done.returncode == 0 and done.stdout.startswith("run,tag,step")
    assert not left[0].exists()
    assert not [p for p in tmp_dir.iterdir() if p.name.startswith("tbconvert-")]
