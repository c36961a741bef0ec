"""The file object HDF5 writes through, so that a failed write can never crash the process.

HDF5 keeps written data in its own caches and flushes them later, often while h5py is
releasing an object, where an error cannot be raised. A disk that fills up or a
file-size limit then leaves HDF5 in a state where closing the file crashes inside the
library. So the archive is written through h5py's ``fileobj`` driver into this object:
the first failed write is remembered and every later write becomes a no-op, HDF5 never
sees an error, and the writer raises the remembered error at its next check, removing
the partial file. (Interrupts are held back by the writer, see tbconvert.interrupts.)

HDF5 writes its metadata a few dozen bytes at a time (an archive of 20,000 small series:
600,000 writes), so small writes are gathered (up to ``GATHER_BYTES``) and written sorted,
those that touch or overlap as one; anything that reads, truncates or checks the file
writes them first, so HDF5 and the writer see the file as written.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tbconvert.interrupts import deferred

GATHER_BYTES = 1 << 20     # small writes held back at most
DIRECT_BYTES = 64 << 10    # a write this large goes straight to the file


class FailSafeFile:
    """A seekable binary file whose writes stop, rather than fail, after the first OS error."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                           0o666)
        self._pos = 0
        self._size = 0          # the logical size, as HDF5 believes it to be
        self.error: OSError | None = None
        self._held: list = []   # (position, sequence number, bytes) of writes not yet made
        self._held_bytes = 0

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
        self._write_held()
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
            if n < DIRECT_BYTES:
                self._held.append((self._pos, len(self._held), bytes(view)))
                self._held_bytes += n
                if self._held_bytes >= GATHER_BYTES:
                    self._write_held()
            else:
                self._write_held()   # (first: a held write it overlaps is older)
                self._pwrite(view, self._pos)
        self._pos += n
        self._size = max(self._size, self._pos)
        return n

    def _pwrite(self, view, pos: int) -> None:
        if self.error is not None:
            return
        done, n = 0, len(view)
        try:
            while done < n:
                done += os.pwrite(self._fd, view[done:], pos + done)
        except OSError as exc:
            self.error = exc

    def _write_held(self) -> None:
        """Make the held writes: by position, each run of writes that touch or overlap as
        one write (where they overlap, the later write's bytes)."""
        held, self._held, self._held_bytes = self._held, [], 0
        if not held:
            return
        held.sort()   # by position, then sequence
        i = 0
        while i < len(held):
            start = held[i][0]
            end = start + len(held[i][2])
            j = i + 1
            while j < len(held) and held[j][0] <= end:
                end = max(end, held[j][0] + len(held[j][2]))
                j += 1
            if j == i + 1:
                self._pwrite(memoryview(held[i][2]), start)
            else:
                run = held[i:j]
                if all(run[k][0] + len(run[k][2]) == run[k + 1][0] for k in range(len(run) - 1)):
                    buf = b"".join(item[2] for item in run)
                else:
                    buf = bytearray(end - start)
                    for pos, _seq, data in sorted(run, key=lambda item: item[1]):
                        buf[pos - start:pos - start + len(data)] = data
                self._pwrite(memoryview(buf), start)
            i = j

    def truncate(self, size: int | None = None) -> int:
        self._write_held()
        size = self._pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                self.error = exc
        self._size = size
        return size

    def flush(self) -> None:
        self._write_held()

    # -- what the writer calls -------------------------------------------------------------

    def check(self) -> None:
        """Make the held writes; raise the first write error, if there was one."""
        self._write_held()
        if self.error is not None:
            raise self.error

    @property
    def fd(self) -> int:
        """The file descriptor, its held writes made (for reading the file behind HDF5)."""
        self._write_held()
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            self._write_held()
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
