"""Opening and listing sources without leaving a trace on them.

Reading a file or listing a directory normally updates its access time. tbconvert
promises that sources are never modified, timestamps included, so every reader opens
its files and lists its directories through here: with ``O_NOATIME`` where the system
has it. The kernel allows that flag only to the
file's owner (or root); for other people's files the access time follows the system's
own rules (``relatime``, ``noatime``), as it would for any program reading them.
"""

from __future__ import annotations

import collections
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

# In the hidden name of every output tbconvert writes (``.<name>.tbconvert-tmp-...``) until it is
# complete: one found in a source is an output being written, or one a killed conversion left.
TMP_MARK = ".tbconvert-tmp-"

_NOATIME = getattr(os, "O_NOATIME", 0)
_BASE = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def open_fd(path, *, directory: bool = False, nonblock: bool = False) -> int:
    """A read-only file descriptor for ``path``."""
    flags = _BASE | (_DIRECTORY if directory else 0) | (_NONBLOCK if nonblock else 0)
    if _NOATIME:
        try:
            return os.open(path, flags | _NOATIME)
        except PermissionError:  # EPERM: not the owner; open as anyone would
            pass
    return os.open(path, flags)


class NotRegularFile(OSError):
    """A pipe, device, socket or directory where a data file was expected."""


def describe(mode: int) -> str:
    """What a file of ``mode`` is, in words (for one that is not a regular file)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path) -> int:
    """A read-only descriptor for the regular file ``path``; :class:`NotRegularFile` otherwise.

    Opened non-blocking, so a FIFO never waits for a writer, and checked on the open
    descriptor itself, so the file cannot be swapped between the check and the read.
    """
    fd = open_fd(path, nonblock=True)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"is {describe(st.st_mode)}, not a regular file",
                                 str(path))
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _entries(path) -> tuple[tuple, list[tuple[str, bool, OSError | None]]]:
    """The identity of the directory ``path`` (links followed), and for each of its entries
    ``(name, is a directory (links followed), why a link leads nowhere)``."""
    if not (_NOATIME and _DIRECTORY and os.scandir in os.supports_fd):
        st = os.stat(path)
        with os.scandir(path) as it:
            return _identity(st, path), [_entry(e, os.path.join(path, e.name)) for e in it]
    fd = open_fd(path, directory=True)
    try:
        st = os.fstat(fd)   # what was opened, even if the path changed since
        with os.scandir(fd) as it:
            # while fd is open: is_dir may stat via it
            return _identity(st, path), [_entry(e, os.path.join(path, e.name)) for e in it]
    finally:
        os.close(fd)


def _identity(st: os.stat_result, path) -> tuple:
    if st.st_ino:
        return st.st_dev, st.st_ino
    # some network and FUSE file systems give every file inode 0: the resolved name then
    # tells directories apart (links included, bind mounts not)
    return st.st_dev, os.path.realpath(path)


def _entry(entry: os.DirEntry, path: str) -> tuple[str, bool, OSError | None]:
    try:
        if entry.is_dir():
            return entry.name, True, None
    except OSError:
        pass
    try:
        link = entry.is_symlink()
    except OSError:
        link = False
    if link:
        try:
            os.stat(path)
        except OSError as exc:
            return entry.name, False, exc
    return entry.name, False, None


def listdir(path: Path) -> list[Path]:
    """``path.iterdir()``, without touching the directory's access time."""
    path = Path(path)
    return [path / name for name, _, _ in _entries(path)[1]]


# A directory met again below itself is a loop; one met again along another path is not, and
# TensorBoard lists it (its runs) once per path. Links to links can multiply the paths (ten
# levels of two links each make 1,024), so a directory is listed under this many at most: far
# more than a layout made to compare runs needs, and the walk stays linear in the directories.
MAX_PATHS_PER_DIRECTORY = 64

LOOP, DANGLING, REPEATED = "loop", "dangling", "repeated"


def walk(top, onerror=None, onskip=None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top, onerror=onerror, followlinks=True)`` (top-down; ``dirnames`` may be
    edited to steer the walk) as TensorBoard walks a logdir, without touching access times
    and never in a circle.

    A link to a directory is entered under its own path, like the directory it leads to.
    ``onskip(path, why, error)`` hears of what is not: a directory that is one of those above
    it on its path (``LOOP``: a link to an ancestor, links to each other, a bind mount), one
    already listed under :data:`MAX_PATHS_PER_DIRECTORY` paths (``REPEATED``), and a link
    that leads nowhere (``DANGLING``, with the error: it stays in ``filenames``, where
    TensorBoard lists it).
    """
    stack = [(os.fspath(top), frozenset())]
    listed: collections.Counter = collections.Counter()
    while stack:
        current, above = stack.pop()
        try:
            key, entries = _entries(current)
        except OSError as exc:
            if onerror is not None:
                # the directory's path, whatever the error holds (a descriptor's number, None)
                exc.filename = current
                onerror(exc)
            continue
        skip = LOOP if key in above else REPEATED if listed[key] >= MAX_PATHS_PER_DIRECTORY \
            else None
        if skip is not None:
            if onskip is not None:
                onskip(current, skip, None)
            continue
        listed[key] += 1
        dirnames = [name for name, is_dir, _ in entries if is_dir]
        filenames = [name for name, is_dir, _ in entries if not is_dir]
        if onskip is not None:
            for name, _, broken in entries:
                if broken is not None:
                    onskip(os.path.join(current, name), DANGLING, broken)
        yield current, dirnames, filenames
        if dirnames:
            below = above | {key}
            stack.extend((os.path.join(current, name), below) for name in reversed(dirnames))


def open_binary(path) -> BinaryIO:
    """``open(path, "rb")``, without touching the access time."""
    return os.fdopen(open_fd(path), "rb")


def read_bytes(path) -> bytes:
    with open_binary(path) as f:
        return f.read()


def read_text(path, encoding: str = "utf-8") -> str:
    return read_bytes(path).decode(encoding)


__all__ = ["open_fd", "open_regular", "NotRegularFile", "describe", "open_binary", "read_bytes", "read_text",
           "listdir", "walk", "MAX_PATHS_PER_DIRECTORY", "LOOP", "DANGLING",
           "REPEATED"]
