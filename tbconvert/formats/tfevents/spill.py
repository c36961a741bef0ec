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

A *batch* (:meth:`PieceStore.put_batch`) holds the pieces of many series of one block
as shared columns, sorted by series: a run of many tags costs a few numpy calls per
block instead of a piece per tag. Each series takes its rows once (``take(key, tid)``);
spilled, a batch's columns are written as raw bytes, so that a series reads back only
its own rows.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import weakref
from typing import NamedTuple

import numpy as np

SPILL_AT = 32 << 20
# Bytes of a spilled batch read at a time (the rows of the series asking, and of the next).
READ_AHEAD = 256 << 10
AHEAD_BUDGET = 8 << 20
# A spilled piece this large is unpickled from the file (small ones: from their bytes, faster).
_LOAD_FROM_FILE = 1 << 20


class Batch:
    """Rows of many series (``tids``: their numbers, sorted; series ``tids[i]`` holds rows
    ``bounds[i]:bounds[i + 1]``) as columns ``cols``. The piece of a series is its rows of
    the first ``lead`` columns, then the values ``tail``, then its rows of the others."""

    __slots__ = ("tids", "bounds", "cols", "lead", "tail", "left", "_next")

    def __init__(self, tids, bounds, cols: tuple, lead: int, tail: tuple) -> None:
        self.tids = tids
        self.bounds = bounds
        self.cols = cols
        self.lead = lead
        self.tail = tail
        self.left = len(tids)   # series that have not taken their rows yet
        self._next = 0          # where the next series' rows are likely to be

    def __getstate__(self):
        return (self.tids, self.bounds, self.cols, self.lead, self.tail, self.left)

    def __setstate__(self, state) -> None:
        self.tids, self.bounds, self.cols, self.lead, self.tail, self.left = state
        self._next = 0

    def piece(self, cols: list) -> tuple:
        return tuple(cols[:self.lead]) + self.tail + tuple(cols[self.lead:])

    def rows(self, tid: int) -> tuple[int, int]:
        # The series of a batch take their rows in order: the one after the last taken is
        # tried first (a search per series cost a run of 50,000 tags seconds).
        i = self._next
        tids = self.tids
        if not (i < len(tids) and tids[i] == tid):
            i = int(np.searchsorted(tids, tid))
            if i >= len(tids) or tids[i] != tid:
                raise KeyError(tid)
        self._next = i + 1
        self.left -= 1
        return int(self.bounds[i]), int(self.bounds[i + 1])


class _Raw(NamedTuple):
    """Where a piece spilled as raw bytes lies, and how it is rebuilt from them."""

    start: int
    length: int
    layout: object


# A piece spilled raw holds its arrays' bytes in the file and the rest in ``layout``: its
# small values as they are, each array as ``(_ARRAY, offset, dtype, shape)`` into the
# piece's bytes. Pickling pieces of tens of rows cost 15 us each way, a third of the
# spill's time for a run of legacy histograms, where the bytes' own write and read are
# the rest. Kept values are those small enough to hold: larger bytes go to the file too.
_ARRAY, _BYTES, _TUPLE, _LIST = 0, 1, 2, 3
_KEPT = (str, int, float, bool, type(None))
_KEPT_BYTES = 256
_ALIGN = 16


class _Unfit(Exception):
    """A piece holding something that raw bytes do not keep: it is pickled instead."""


def _layout(piece, buffers: list, at: list | None = None):
    """``piece`` as a raw layout whose bytes are appended to ``buffers`` (padded to
    :data:`_ALIGN`); :class:`_Unfit` for a piece holding anything else."""
    at = [0] if at is None else at
    kind = type(piece)
    if kind is tuple or kind is list:
        parts = tuple(_layout(item, buffers, at) for item in piece)
        return (_TUPLE if kind is tuple else _LIST, parts)
    if kind is np.ndarray:
        if piece.dtype.hasobject or piece.dtype.fields is not None \
                or not piece.flags.c_contiguous:
            raise _Unfit
        data = memoryview(piece).cast("B") if piece.nbytes else b""
        out = (_ARRAY, at[0], piece.dtype, piece.size, piece.shape if piece.ndim != 1 else None)
    elif kind is bytes and len(piece) > _KEPT_BYTES:
        if len(piece) >= _LOAD_FROM_FILE:
            raise _Unfit    # unpickled from the file: read once, never copied again
        data = piece
        out = (_BYTES, at[0], len(piece))
    elif kind in _KEPT or kind is bytes:
        return piece
    else:
        raise _Unfit
    buffers.append(data)
    at[0] += len(data)
    pad = -at[0] % _ALIGN
    if pad:
        buffers.append(bytes(pad))
        at[0] += pad
    return out


def _rebuilt(layout, buf):
    """The piece of a raw ``layout`` from its bytes ``buf`` (a uint8 array)."""
    if type(layout) is not tuple:
        return layout
    tag = layout[0]
    if tag == _ARRAY:
        _, offset, dtype, count, shape = layout
        out = np.frombuffer(buf, dtype, count, offset)
        return out if shape is None else out.reshape(shape)
    if tag == _BYTES:
        return buf[layout[1]:layout[1] + layout[2]].tobytes()
    items = [_rebuilt(part, buf) for part in layout[1]]
    return tuple(items) if tag == _TUPLE else items


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


# A spill file's owner (a PieceStore, a RecordLog) keeps it in ``_file``, its name (None:
# unnamed) in ``path``, where it goes in ``directory`` (None: the system's temporary
# directory) and in ``_finalizer`` what removes a named one when the owner goes.

def open_spill(owner, prefix: str):
    """``owner``'s spill file, made the first time: unnamed where the system can make one
    (nothing to remove, however the process ends), else named ``prefix...``."""
    if owner._file is None:
        if owner.path is None:
            owner._file = _unnamed_file(owner.directory)
            if owner._file is None:
                fd, owner.path = tempfile.mkstemp(prefix=prefix, suffix=".spill",
                                                  dir=owner.directory)
                owner._finalizer = weakref.finalize(owner, _remove, owner.path)
                owner._file = os.fdopen(fd, "w+b")
        else:
            owner._file = open(owner.path, "r+b")
    return owner._file


def discard_spill(owner) -> None:
    """Close ``owner``'s spill file and remove it."""
    if owner._file is not None:
        owner._file.close()
        owner._file = None
    if owner._finalizer is not None:
        owner._finalizer()
    elif owner.path is not None:
        _remove(owner.path)


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
        # per spilled batch, rows read ahead of the series that asked (see _read_rows)
        self._ahead: dict[int, tuple[int, int, list]] = {}
        self._batches = 0       # batches in the file

    def reserve(self) -> int:
        """A key for a piece put later (``put(piece, size, key)``)."""
        key = self._next
        self._next += 1
        return key

    def put(self, piece, size: int, key: int | None = None) -> int:
        if key is None:
            key = self.reserve()
        self._mem[key] = piece
        self._held += size
        if self._held > self.limit:
            self.spill()
        return key

    def put_batch(self, batch: Batch, size: int, key: int | None = None) -> int:
        """Store a :class:`Batch` (under ``key``, reserved, if given); each of its series
        takes its piece with ``take(key, tid)``."""
        return self.put(batch, size, key)

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
                if isinstance(piece, Batch):
                    # raw columns: a series reads back its own rows only
                    where = []
                    for col in piece.cols:
                        where.append((f.tell(), col.dtype.str))
                        f.write(memoryview(col).cast("B"))
                    piece.cols = tuple(where)
                    self._where[key] = piece
                    self._batches += 1
                    continue
                buffers = []
                try:
                    layout = _layout(piece, buffers)
                except _Unfit:
                    pickle.dump(piece, f, protocol=pickle.HIGHEST_PROTOCOL)
                    self._where[key] = (start, f.tell() - start)
                    continue
                for buffer in buffers:
                    f.write(buffer)
                self._where[key] = _Raw(start, f.tell() - start, layout)
            f.flush()
        except OSError as exc:
            from tbconvert.errors import OutputError
            from tbconvert.output import describe_os_error
            where = f"temporary file {self.path or tempfile.gettempdir()}"
            raise OutputError(describe_os_error(exc, where)) from None
        self._mem.clear()
        self._held = 0

    def spilled(self) -> bool:
        """Whether pieces went to the file (the run was too large to hold)."""
        return self._file is not None

    def _open(self):
        return open_spill(self, "tbconvert-run-")

    def take(self, key: int, tid: int | None = None):
        """The piece ``key`` (of a batch: the rows of series ``tid``), given back once."""
        piece = self._mem.get(key)
        if piece is not None:
            if isinstance(piece, Batch):
                a, b = piece.rows(tid)
                if not piece.left:
                    del self._mem[key]
                return piece.piece([c[a:b] for c in piece.cols])
            del self._mem[key]
            return piece
        where = self._where[key]
        if isinstance(where, Batch):
            a, b = where.rows(tid)
            held = self._ahead.get(key)
            if held is not None and held[0] <= a <= b <= held[1]:
                start = held[0]
                out = [col[a - start:b - start].copy() for col in held[2]]
            else:
                end, cols = self._read_rows(where, a, b)
                out = cols
                if end > b:
                    # the rows read ahead are kept apart, never with a series' own rows
                    out = [col[:b - a].copy() for col in cols]
                    self._ahead[key] = (b, end, [col[b - a:].copy() for col in cols])
                else:
                    self._ahead.pop(key, None)
            if not where.left:
                del self._where[key]
                self._batches -= 1
                self._ahead.pop(key, None)
            return where.piece(out)
        del self._where[key]
        f = self._open()
        if isinstance(where, _Raw):
            buf = np.empty(where.length, np.uint8)    # no zeros written first
            f.seek(where.start)
            if f.readinto(buf) != where.length:
                raise OSError(f"{self.path or 'temporary file'}: cut short")
            return _rebuilt(where.layout, buf)
        start, length = where
        f.seek(start)
        if length >= _LOAD_FROM_FILE:
            # the unpickler reads a large buffer (an image) straight into its object, where
            # the pickle's bytes read first would be a second copy of it
            return pickle.load(f)
        return pickle.loads(f.read(length))

    def _read_rows(self, batch: Batch, a: int, b: int) -> tuple[int, list]:
        """Rows ``a:b`` of a spilled batch's columns, and as many of the rows after them as
        :data:`READ_AHEAD` bytes allow: the series of a batch take their rows in order, and
        a run of 50,000 tags once read its spill back in 3 million reads of a few rows. All
        batches together hold at most :data:`AHEAD_BUDGET` bytes read ahead."""
        width = sum(np.dtype(dtype).itemsize for _, dtype in batch.cols) or 1
        ahead = min(READ_AHEAD, AHEAD_BUDGET // max(1, self._batches))
        end = max(b, min(int(batch.bounds[-1]), a + ahead // width))
        f = self._open()
        out = []
        for offset, dtype in batch.cols:
            col = np.empty(end - a, dtype=dtype)
            f.seek(offset + a * col.itemsize)
            if f.readinto(memoryview(col).cast("B")) != col.nbytes:
                raise OSError(f"{self.path or 'temporary file'}: cut short")
            out.append(col)
        return end, out

    def close(self) -> None:
        """Forget every piece and remove the file."""
        self._mem.clear()
        self._where.clear()
        self._ahead.clear()
        self._batches = 0
        discard_spill(self)

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
        self._batches = sum(isinstance(w, Batch) for w in self._where.values())
        self._next = state["next"]
        if self.path is not None:
            self._finalizer = weakref.finalize(self, _remove, self.path)
