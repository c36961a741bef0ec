"""Atomic outputs: write under a temporary name beside the destination, rename at the end.

An existing destination is refused unless ``force`` is given, and even then it
is only replaced once the new output is complete. A conversion killed at any
moment leaves the old destination (or none), plus at most a hidden temporary
``.<name>.tbconvert-tmp-*`` entry, never a partial file under the final name.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import uuid
from pathlib import Path

from tbconvert.errors import OutputError, OutputExistsError

TMP_MARK = ".tbconvert-tmp-"

# Outputs begun and neither committed nor aborted: what an interrupted program removes
# on its way out (see abort_pending), even if it was interrupted before a writer existed.
_PENDING: set = set()


def abort_pending() -> None:
    """Remove every temporary output not yet committed or aborted."""
    for out in list(_PENDING):
        out.abort()


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


class AtomicOutput:
    """A file or directory that appears under ``final`` only on :meth:`commit`.

    Usage::

        out = AtomicOutput(dst, force=False, directory=True)   # checks dst now
        write_everything_into(out.tmp)
        out.commit()       # or out.abort() on failure
    """

    def __init__(self, final: Path, *, force: bool, directory: bool) -> None:
        self.final = Path(final)
        self.directory = directory
        self.force = force
        if _exists(self.final) and not (directory and _is_empty_dir(self.final)):
            if not force:
                raise OutputExistsError(
                    f"{self.final} already exists; pass --force to replace it "
                    "(it is only replaced once the new output is complete)")
            if directory != self.final.is_dir():
                kind = "directory" if self.final.is_dir() else "file"
                raise OutputExistsError(
                    f"{self.final} exists and is a {kind}; refusing to replace it with a "
                    f"{'directory' if directory else 'file'}; remove it first")
        parent = self.final.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create {parent}: {exc.strerror or exc}") from None
        self.tmp = parent / f".{self.final.name}{TMP_MARK}{uuid.uuid4().hex[:12]}"
        self._done = False
        _PENDING.add(self)
        if directory:
            try:
                self.tmp.mkdir()
            except OSError as exc:
                _PENDING.discard(self)
                raise OutputError(f"cannot write in {parent}: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Move the finished output to its final name (replacing the old one if forced)."""
        if self._done:
            return
        if not self.directory or not _exists(self.final) or _is_empty_dir(self.final):
            if _is_empty_dir(self.final):
                self.final.rmdir()
            os.replace(self.tmp, self.final)  # atomic, also over an existing file
            self._finished()
            return
        # A non-empty directory cannot be replaced in one rename: swap the two atomically
        # where the system can (Linux), so no moment exists without a complete destination.
        if _exchange(self.tmp, self.final):
            self._finished()
            _remove(self.tmp)  # now the old output
            return
        old = self.final.parent / f".{self.final.name}{TMP_MARK}old-{uuid.uuid4().hex[:8]}"
        os.replace(self.final, old)
        os.replace(self.tmp, self.final)
        self._finished()
        _remove(old)

    @contextlib.contextmanager
    def writing(self):
        """``with out.writing() as tmp:`` write to ``tmp``; committed when the block ends.
        On any failure the partial output is removed; an OS error (disk full...) becomes
        one clear :class:`OutputError`."""
        with removed_on_failure(self.abort, self.final, also=BaseException):
            yield self.tmp
            self.commit()

    def abort(self) -> None:
        """Remove whatever was written; the destination is left as it was."""
        if not self._done:
            _remove(self.tmp)
            self._finished()

    def _finished(self) -> None:
        self._done = True
        _PENDING.discard(self)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif _exists(path):
            path.unlink()
    except OSError:
        pass


@contextlib.contextmanager
def removed_on_failure(abort, path, *, also=(KeyboardInterrupt,)):
    """Run the block; an OS error (disk full, size limit...) calls ``abort`` and becomes one
    clear :class:`OutputError` naming ``path``; an exception of type ``also`` calls ``abort``
    and goes on. Everything that writes an output fails this one way."""
    try:
        yield
    except OSError as exc:
        abort()
        raise OutputError(describe_os_error(exc, path)) from None
    except also:
        abort()
        raise


def describe_os_error(exc: OSError, path) -> str:
    """A one-line message for a write failure, with advice for the common ones."""
    if exc.errno == errno.ENOSPC:
        return f"{path}: the disk is full; partial output was removed"
    if exc.errno == errno.EFBIG:
        return f"{path}: file-size limit reached; partial output was removed"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{path}: permission denied; choose a destination you can write to"
    return f"{path}: {exc.strerror or exc}; partial output was removed"
