"""Opening files an export names, only when they are regular files.

A FIFO named ``scalars.json`` or ``blobs/blob_x.bin`` would block ``open`` until
something writes to it, a device would stream forever, a symlink loop or an
over-long name raises errors ``pathlib`` does not expect. Every file the export
reader opens goes through :func:`open_regular`, which opens as
:func:`tbconvert.sourcefiles.open_regular` does (without blocking, checked with
``fstat`` on the descriptor it got, access times left alone) and raises
:class:`~tbconvert.sourcefiles.NotRegularFile` (an ``OSError``) for anything but
a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from tbconvert import sourcefiles

NotRegularFile = sourcefiles.NotRegularFile
_describe = sourcefiles.describe


def kind_of(path) -> str | None:
    """None for a regular file (links followed); otherwise what the path is, in words.

    Never raises and never opens: "missing", "a symlink loop", "a name too long"...
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        if exc.errno == errno.ENAMETOOLONG:
            return "a name too long for the file system"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "missing"
        return f"unreadable ({exc.strerror or exc})"
    except ValueError:           # an embedded NUL
        return "an invalid name"
    return None if stat.S_ISREG(mode) else _describe(mode)


def exists(path) -> bool:
    """Whether anything (a broken link included) is at ``path``; never raises."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def open_regular(path) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only (see the module docstring).

    Every failure is an ``OSError`` (``ValueError`` of an embedded NUL included), so
    callers handle one exception type.
    """
    try:
        return os.fdopen(sourcefiles.open_regular(path), "rb")
    except ValueError as exc:
        raise OSError(errno.EINVAL, str(exc), str(path)) from None


def size_of(f) -> int:
    return os.fstat(f.fileno()).st_size


def read_regular(path, limit: int | None = None) -> bytes:
    """All bytes of a regular file; ``OSError`` when it holds more than ``limit``."""
    with open_regular(path) as f:
        if limit is not None:
            size = size_of(f)
            if size > limit:
                raise OSError(errno.EFBIG, f"holds {size} bytes (at most {limit} are read)",
                              str(path))
            data = f.read(size + 1)   # read(n) allocates n bytes at once: ask for what is there
            if len(data) > size:
                raise OSError(errno.EAGAIN, "grew while it was read", str(path))
            return data
        return f.read()


def reason(exc: OSError) -> str:
    """Short words for an ``OSError`` from this module, without the path repeated."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop"
    if exc.errno == errno.ENAMETOOLONG:
        return "a name too long for the file system"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "does not exist"
    return str(exc.strerror or exc)


__all__ = ["NotRegularFile", "exists", "kind_of", "open_regular", "read_regular", "reason",
           "size_of"]
