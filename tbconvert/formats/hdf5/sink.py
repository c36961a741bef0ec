"""The file object HDF5 writes through, so that a failed write can never crash the process.

HDF5 keeps written data in its own caches and flushes them later, often while h5py is
releasing an object, where an error cannot be raised. A disk that fills up or a
file-size limit then leaves HDF5 in a state where closing the file crashes inside the
library. So the archive is written through h5py's ``fileobj`` driver into this object:
the first failed write is remembered and every later write becomes a no-op, HDF5 never
sees an error, and the writer raises the remembered error at its next check, removing
the partial file. (Interrupts are held back by the writer, see tbconvert.interrupts.)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tbconvert.interrupts import deferred


class FailSafeFile:
    """A seekable binary file whose writes stop, rather than fail, after the first OS error."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                           0o666)
        self._pos = 0
        self._size = 0          # the logical size, as HDF5 believes it to be
        self.error: OSError | None = None

    # -- what h5py's fileobj driver calls ------------------------------------------------

    def seek(self, pos: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._pos = pos
        elif whence == os.SEEK_CUR:
            self._pos += pos
        else:
            self._pos = self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, self._size - self._pos)
        try:
            data = os.pread(self._fd, size, self._pos)
        except OSError as exc:
            self.error = self.error or exc
            data = b""
        if len(data) < size:
            # past the end, or never written after a failure: zeros, as HDF5's own driver gives
            data += bytes(size - len(data))
        self._pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(memoryview(buffer).cast("B")))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        if self.error is None:
            done = 0
            try:
                while done < n:
                    done += os.pwrite(self._fd, view[done:], self._pos + done)
            except OSError as exc:
                self.error = exc
        self._pos += n
        self._size = max(self._size, self._pos)
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                self.error = exc
        self._size = size
        return size

    def flush(self) -> None:
        pass  # every write goes straight to the system

    # -- what the writer calls -------------------------------------------------------------

    def check(self) -> None:
        """Raise the first write error, if there was one."""
        if self.error is not None:
            raise self.error

    @property
    def fd(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0


@contextlib.contextmanager
def writing(sink: FailSafeFile):
    """HDF5 work on a file written through ``sink``, interrupts held back. Once a write
    failed (a full disk), HDF5 reads back zeros and fails with its own misleading errors
    ("filter returned failure during read"): the write error that started it is the one
    raised."""
    with deferred():
        try:
            yield
        except Exception:
            if sink.error is not None:
                raise sink.error from None
            raise
        sink.check()
