"""Opening and listing sources without leaving a trace on them.

Reading a file or listing a directory normally updates its access time. tbconvert
promises that sources are never modified, timestamps included, so every reader opens
its files and lists its directories through here: with ``O_NOATIME`` where the system
has it. The kernel allows that flag only to the
file's owner (or root); for other people's files the access time follows the system's
own rules (``relatime``, ``noatime``), as it would for any program reading them.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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


def _entries(path) -> list[tuple[str, bool]]:
    """``(name, is a directory (links followed))`` for each entry of a directory."""
    if not (_NOATIME and _DIRECTORY and os.scandir in os.supports_fd):
        with os.scandir(path) as it:
            return [(e.name, _is_dir(e)) for e in it]
    fd = open_fd(path, directory=True)
    try:
        with os.scandir(fd) as it:
            return [(e.name, _is_dir(e)) for e in it]  # while fd is open: is_dir may stat via it
    finally:
        os.close(fd)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def listdir(path: Path) -> list[Path]:
    """``path.iterdir()``, without touching the directory's access time."""
    path = Path(path)
    return [path / name for name, _ in _entries(path)]


def walk(top, onerror=None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top, onerror=onerror)`` (top-down; links to directories listed, not
    entered; ``dirnames`` may be edited to steer the walk), without touching access times."""
    stack = [os.fspath(top)]
    while stack:
        current = stack.pop()
        try:
            entries = _entries(current)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        dirnames = [name for name, is_dir in entries if is_dir]
        filenames = [name for name, is_dir in entries if not is_dir]
        yield current, dirnames, filenames
        for name in reversed(dirnames):
            path = os.path.join(current, name)
            if not os.path.islink(path):
                stack.append(path)


def open_binary(path) -> BinaryIO:
    """``open(path, "rb")``, without touching the access time."""
    return os.fdopen(open_fd(path), "rb")


def read_bytes(path) -> bytes:
    with open_binary(path) as f:
        return f.read()


def read_text(path, encoding: str = "utf-8") -> str:
    return read_bytes(path).decode(encoding)


__all__ = ["open_fd", "open_regular", "NotRegularFile", "describe", "open_binary", "read_bytes", "read_text",
           "listdir", "walk"]
