"""Local working directories, which a killed tbconvert leaves to the next.

A source at a URL is fetched into a temporary directory, an output for a URL is built in
one, a sync into an object store keeps its stage in one, runs read by several processes
spill there, and a table for standard output waits there: gigabytes, sometimes. Ctrl-C
and SIGTERM remove them; a process killed outright (SIGKILL, the OOM killer, a batch
scheduler's hard limit) cannot. So each directory is locked (``flock`` on the directory
itself) by the process that made it, for as long as that process lives: the kernel lets go
of the lock however the process ends. Whenever tbconvert makes such a directory, it first
removes those whose lock it can take, as no live process holds them. A lock tells that
where a process number would not (a temporary directory shared by containers that see
each other's processes under other numbers, or not at all).

A directory is locked before it gets its final name, so no other process ever sees it
unlocked; where the file system has no locks, its name says so and it is never removed by
another process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

# The kinds of directory, by the start of their names.
FETCHED = "tbconvert-fetched-"
BUILT = "tbconvert-built-"
SYNC_STAGE = "tbconvert-syncstage-"
JOBS = "tbconvert-jobs-"            # the spill files of runs read by several processes
STDOUT = "tbconvert-stdout-"        # a table on its way to standard output
KINDS = (FETCHED, BUILT, SYNC_STAGE, JOBS, STDOUT)
_NEW = ".tbconvert-new-"
_UNLOCKED = "unlocked-"

# The lock of each directory this process made and has not removed: path -> descriptor.
_held: dict[str, int] = {}


def make(kind: str) -> Path:
    """A new working directory of ``kind`` (one of :data:`KINDS`), locked by this process
    until :func:`remove`; the leftovers of dead processes are removed first."""
    sweep()
    fresh = tempfile.mkdtemp(prefix=_NEW)
    fd = _lock(fresh)
    rest = os.path.basename(fresh)[len(_NEW):]
    final = os.path.join(os.path.dirname(fresh), kind + (rest if fd is not None
                                                         else _UNLOCKED + rest))
    try:
        os.rename(fresh, final)         # the lock is the directory's: it goes with it
    except OSError:
        if fd is not None:
            os.close(fd)
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    if fd is not None:
        _held[final] = fd
    return Path(final)


@contextlib.contextmanager
def directory(kind: str):
    """``with directory(kind) as path:`` a directory of :func:`make`, removed at the end."""
    path = make(kind)
    try:
        yield path
    finally:
        remove(path)


def remove(path: Path) -> None:
    """Remove a directory :func:`make` gave, and let go of its lock."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _held.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def _lock(path: str) -> int | None:
    """A descriptor holding an exclusive lock on directory ``path``; None where none can
    be had (no ``flock`` here, or a file system without locks)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def sweep(directory: str | None = None) -> int:
    """Remove the working directories in ``directory`` (the temporary directory) that this
    user's tbconvert processes left when they were killed; how many."""
    directory = directory or tempfile.gettempdir()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = 0
    for entry in entries:
        name = entry.name
        if not name.startswith(KINDS) or _UNLOCKED in name or entry.path in _held:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or (
                    uid is not None and entry.stat(follow_symlinks=False).st_uid != uid):
                continue
        except OSError:
            continue
        fd = _lock(entry.path)
        if fd is None:
            continue            # alive (or not ours to judge)
        try:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed
