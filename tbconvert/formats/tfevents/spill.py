"""Where a run's decoded pieces wait until the run has been read to its end.

Small runs stay in memory. Once the pieces held pass ``limit`` bytes, all of
them are written (pickled, numpy buffers out of band) to one temporary file,
so a run of any size costs a bounded amount of memory. Each piece is read
back once, by key, and the file is removed on :meth:`PieceStore.close` (or
when the store is collected).

Where the system allows it (Linux), the file has no name: it goes with the
process however that ends, also killed (by the OOM killer, say), where a
named file would stay in the temporary directory for good. It gets a name
only to be handed to another process (see ``__getstate__``).
"""

from __future__ import annotations

import os
import pickle
import tempfile
import weakref

SPILL_AT = 32 << 20


def _unnamed_file(directory: str | None):
    """A temporary file without a name in ``directory`` (None where the system or the
    file system cannot make one)."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return None
    try:
        fd = os.open(directory or tempfile.gettempdir(), flag | os.O_RDWR, 0o600)
    except OSError:
        return None
    return os.fdopen(fd, "w+b")


def _name(file, directory: str | None) -> str:
    """Give the unnamed ``file`` a name in ``directory`` (a copy where it cannot be linked)."""
    import uuid  # a spill handed to another process only
    directory = directory or tempfile.gettempdir()
    file.flush()
    for _ in range(100):
        path = os.path.join(directory, f"tbconvert-run-{uuid.uuid4().hex[:12]}.spill")
        try:
            procs = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.link(str(file.fileno()), path, src_dir_fd=procs, follow_symlinks=True)
            finally:
                os.close(procs)
            return path
        except FileExistsError:
            continue
        except OSError:
            break
    fd, path = tempfile.mkstemp(prefix="tbconvert-run-", suffix=".spill", dir=directory)
    with os.fdopen(fd, "wb") as out:
        file.seek(0)
        while block := file.read(1 << 20):
            out.write(block)
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class PieceStore:
    """Pieces by integer key: ``put`` returns the key, ``take`` gives the piece back once."""

    def __init__(self, limit: int = SPILL_AT, directory: str | None = None) -> None:
        self.limit = limit
        self.directory = directory
        self.path: str | None = None
        self._mem: dict[int, object] = {}
        self._where: dict[int, tuple[int, int]] = {}
        self._held = 0
        self._next = 0
        self._file = None
        self._finalizer = None

    def put(self, piece, size: int) -> int:
        key = self._next
        self._next += 1
        self._mem[key] = piece
        self._held += size
        if self._held > self.limit:
            self.spill()
        return key

    def spill(self) -> None:
        """Move every piece held in memory to the file. A full disk or a file-size limit is
        an :class:`~tbconvert.errors.OutputError`, as for any other output."""
        if not self._mem:
            return
        try:
            f = self._open()
            f.seek(0, os.SEEK_END)
            for key, piece in self._mem.items():
                start = f.tell()
                pickle.dump(piece, f, protocol=pickle.HIGHEST_PROTOCOL)
                self._where[key] = (start, f.tell() - start)
            f.flush()
        except OSError as exc:
            from tbconvert.errors import OutputError
            from tbconvert.output import describe_os_error
            where = f"temporary file {self.path or tempfile.gettempdir()}"
            raise OutputError(describe_os_error(exc, where)) from None
        self._mem.clear()
        self._held = 0

    def _open(self):
        if self._file is None:
            if self.path is None:
                self._file = _unnamed_file(self.directory)
                if self._file is None:
                    fd, self.path = tempfile.mkstemp(prefix="tbconvert-run-", suffix=".spill",
                                                     dir=self.directory)
                    self._finalizer = weakref.finalize(self, _remove, self.path)
                    self._file = os.fdopen(fd, "w+b")
            else:
                self._file = open(self.path, "r+b")
        return self._file

    def take(self, key: int):
        piece = self._mem.pop(key, None)
        if piece is not None:
            return piece
        start, length = self._where.pop(key)
        f = self._open()
        f.seek(start)
        return pickle.loads(f.read(length))

    def close(self) -> None:
        """Forget every piece and remove the file."""
        self._mem.clear()
        self._where.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._finalizer is not None:
            self._finalizer()
        elif self.path is not None:
            _remove(self.path)

    # A store crosses process boundaries (parallel reading) by its file's path: the receiver
    # owns the file from then on.
    def __getstate__(self):
        if self._file is not None:
            self._file.flush()
            if self.path is None:
                self.path = _name(self._file, self.directory)
        if self._finalizer is not None:
            self._finalizer.detach()
        return {"limit": self.limit, "directory": self.directory, "path": self.path,
                "mem": self._mem, "where": self._where, "next": self._next}

    def __setstate__(self, state) -> None:
        self.__init__(state["limit"], state["directory"])
        self.path = state["path"]
        self._mem = state["mem"]
        self._where = state["where"]
        self._next = state["next"]
        if self.path is not None:
            self._finalizer = weakref.finalize(self, _remove, self.path)
