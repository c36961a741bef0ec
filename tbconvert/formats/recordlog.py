"""A run's run-level events (session logs, log messages, meta graphs) as compact bytes.

A run written by TF1's Supervisor or ``tf.logging`` holds a session log and a log message
every few steps: millions of them in a long run. As Python objects each cost a kilobyte;
here each is its serialized fields in one growing buffer, and once the buffer passes
:data:`SPILL_AT` bytes it goes to a temporary file, so a run's records cost a bounded amount
of memory whatever their number. A :class:`RecordLog` is read back as often as wanted, one
:class:`~tbconvert.model.RunRecord` at a time, in the order they were added.

The file has no name where the system allows it (see :mod:`.tfevents.spill`). Pickled, a
log carries its records; one marked with :meth:`RecordLog.hand_over` (a run read in a worker
process) carries only its file's name instead, given to the file then, and whoever unpickles
it owns the file from then on.
"""

from __future__ import annotations

import os
import struct
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator

from tbconvert.formats.tfevents.spill import _name, _remove, discard_spill, open_spill
from tbconvert.model import RunRecord

SPILL_AT = 1 << 20
# kind code, step, wall time, payload length; a kind no event has (an archive edited
# outside tbconvert) is code OTHER with its UTF-8 name after the head
_HEAD = struct.Struct("<BqdQ")
_NAME_LENGTH = struct.Struct("<I")
_CODES = {kind: code for code, kind in enumerate(RunRecord.KINDS)}
OTHER = 255


def _frame(rec: RunRecord) -> bytes:
    code = _CODES.get(rec.kind, OTHER)
    head = _HEAD.pack(code, rec.step, rec.wall_time, len(rec.payload))
    if code == OTHER:
        name = rec.kind.encode("utf-8", "surrogatepass")
        head += _NAME_LENGTH.pack(len(name)) + name
    return head + rec.payload


def _records_of(buf) -> Iterator[RunRecord]:
    view = memoryview(buf)
    at, end = 0, len(view)
    kinds = RunRecord.KINDS
    while at < end:
        code, step, wall, length = _HEAD.unpack_from(view, at)
        at += _HEAD.size
        if code == OTHER:
            (n,) = _NAME_LENGTH.unpack_from(view, at)
            at += _NAME_LENGTH.size
            kind = bytes(view[at:at + n]).decode("utf-8", "surrogatepass")
            at += n
        else:
            kind = kinds[code]
        yield RunRecord(kind, step, wall, bytes(view[at:at + length]))
        at += length


def in_slices(records: Iterable, size: int) -> Iterator[list]:
    """``records`` as lists of ``size`` (the last of fewer): a run's records written a
    slice at a time, never all at once."""
    part = []
    for rec in records:
        part.append(rec)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


class RecordLog:
    """Run records appended in order and read back in that order, as a sequence."""

    def __init__(self, records: Iterable[RunRecord] = (), directory: str | None = None) -> None:
        self.directory = directory
        self.path: str | None = None
        self._file = None
        self._finalizer = None
        self._chunks = array("q")      # bytes of each chunk in the file, in order
        self._buf = bytearray()
        self._count = 0
        self._by_path = False
        self.extend(records)

    def append(self, rec: RunRecord) -> None:
        self._buf += _frame(rec)
        self._count += 1
        if len(self._buf) >= SPILL_AT:
            self._spill()

    def extend(self, records: Iterable[RunRecord]) -> None:
        if isinstance(records, RecordLog) and records is not self:
            # another log's bytes as they are (the parts of a run read in parallel, joined),
            # not each record decoded and framed again
            for framed in records._framed():
                self._buf += framed
                if len(self._buf) >= SPILL_AT:
                    self._spill()
            self._count += len(records)
            return
        for rec in records:
            self.append(rec)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RunRecord]:
        for framed in self._framed():
            yield from _records_of(framed)

    def _framed(self) -> Iterator[bytes]:
        """The framed records a chunk at a time: those in the file, then those held."""
        if self._chunks:
            f = self._open()
            at = 0
            for size in self._chunks.tolist():
                f.seek(at)
                chunk = f.read(size)
                if len(chunk) != size:
                    from tbconvert.errors import OutputError
                    raise OutputError(f"temporary file {self.path or tempfile.gettempdir()}: "
                                      "cut short while it was read back")
                yield chunk
                at += size
        yield bytes(self._buf)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("record index out of range")
        for k, rec in enumerate(self):
            if k == index:
                return rec
        raise IndexError("record index out of range")  # pragma: no cover

    def __eq__(self, other) -> bool:
        if not isinstance(other, (RecordLog, tuple, list)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash((RecordLog, self._count))

    def __repr__(self) -> str:
        return f"RecordLog({self._count} records)"

    def _spill(self) -> None:
        try:
            f = self._open()
            f.seek(0, os.SEEK_END)
            f.write(self._buf)
            f.flush()
        except OSError as exc:
            from tbconvert.errors import OutputError
            from tbconvert.output import describe_os_error
            where = f"temporary file {self.path or tempfile.gettempdir()}"
            raise OutputError(describe_os_error(exc, where)) from None
        self._chunks.append(len(self._buf))
        self._buf = bytearray()

    def _open(self):
        return open_spill(self, "tbconvert-records-")

    def close(self) -> None:
        """Forget the records and remove the file."""
        self._buf = bytearray()
        self._chunks = array("q")
        self._count = 0
        discard_spill(self)

    def hand_over(self) -> None:
        """Be pickled by the file's name, not the records (for one process that unpickles
        it once: parallel reading hands a run's part to the leading process so)."""
        self._by_path = True

    def __getstate__(self):
        if not self._by_path:
            return {"directory": self.directory, "records": list(self)}
        if self._file is not None and self.path is None:
            self.path = _name(self._file, self.directory)
        if self._finalizer is not None:
            self._finalizer.detach()
        return {"directory": self.directory, "path": self.path, "chunks": self._chunks,
                "buf": bytes(self._buf), "count": self._count}

    def __setstate__(self, state) -> None:
        self.__init__(state.get("records", ()), directory=state["directory"])
        if "records" in state:
            return
        self.path = state["path"]
        self._chunks = state["chunks"]
        self._buf = bytearray(state["buf"])
        self._count = state["count"]
        if self.path is not None:
            self._finalizer = weakref.finalize(self, _remove, self.path)
