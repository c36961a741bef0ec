"""Footer parts that grow with every run, kept in a file until the footer is written.

A single file of many short runs has, for each run, a row group's footer entry and its
JSON (the run, its series, the row group's checksums): about 2.5 KB encoded, several times
that as Python objects. Twenty thousand runs held them all until the file closed, past the
memory the conversion may use; here they go to an unnamed file beside the output as they
come, and are copied into the footer a block at a time (:mod:`footer` writes these objects
as it would the bytes they hold).
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

_BLOCK = 1 << 20


class Spool:
    """Encoded items one after another (``sep`` between two), in an unnamed file in the
    directory ``where``: the system removes it however the process ends."""

    def __init__(self, where: Path, sep: bytes = b"") -> None:
        self._fh = tempfile.TemporaryFile(dir=where)
        self._sep = sep
        self.count = 0
        self.size = 0

    def __len__(self) -> int:
        return self.count

    def add(self, item) -> None:
        """Add ``item``: bytes, or an object giving them a block at a time (``blocks()``)."""
        if self.count and self._sep:
            self._fh.write(self._sep)
            self.size += len(self._sep)
        for block in item.blocks() if hasattr(item, "blocks") else (item,):
            self._fh.write(block)
            self.size += len(block)
        self.count += 1

    def blocks(self) -> Iterator[bytes]:
        fh = self._fh
        fh.flush()
        fh.seek(0)
        left = self.size
        while left:
            block = fh.read(min(left, _BLOCK))
            if not block:
                raise OSError("a spool file is shorter than what was written to it")
            left -= len(block)
            yield block
        fh.seek(0, 2)    # more may be added

    def close(self) -> None:
        try:
            self._fh.close()
        except OSError:
            # (the last buffered bytes could not be written, on a full disk say: the file is
            # unnamed and closed all the same, and what it held is no longer wanted)
            pass


class Pieces:
    """Bytes made of bytes objects and spools, in order, without joining them in memory."""

    def __init__(self, parts: list) -> None:
        self.parts = parts
        self.size = sum(len(p) if isinstance(p, bytes) else p.size for p in parts)

    def __len__(self) -> int:
        return self.size

    def in_memory(self) -> bool:
        return all(isinstance(p, bytes) for p in self.parts)

    def blocks(self) -> Iterator[bytes]:
        for part in self.parts:
            if isinstance(part, bytes):
                yield part
            else:
                yield from part.blocks()

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for block in self.blocks():
            digest.update(block)
        return digest.hexdigest()


class Text:
    """Bytes added piece by piece: held in memory while they are few, in a spool beside the
    output once they pass :data:`TEXT_HELD` (the JSON of a run of millions of records)."""

    def __init__(self, where: Path) -> None:
        self._where = where
        self._held = bytearray()
        self._spool: Spool | None = None

    def add(self, data: bytes) -> None:
        self._held += data
        if len(self._held) >= TEXT_HELD:
            if self._spool is None:
                self._spool = Spool(self._where)
            self._spool.add(bytes(self._held))
            self._held = bytearray()

    @property
    def size(self) -> int:
        return len(self._held) + (self._spool.size if self._spool is not None else 0)

    def __len__(self) -> int:
        return self.size

    def value(self):
        """The bytes when they are held in memory, else this object (see :class:`Pieces`)."""
        return bytes(self._held) if self._spool is None else self

    def blocks(self) -> Iterator[bytes]:
        if self._spool is not None:
            yield from self._spool.blocks()
        if self._held:
            yield bytes(self._held)

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()


TEXT_HELD = 1 << 20


class FileText:
    """The bytes of the file ``path`` (written by another process), a block at a time."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.size = self.path.stat().st_size

    def __len__(self) -> int:
        return self.size

    def blocks(self) -> Iterator[bytes]:
        with open(self.path, "rb") as fh:
            left = self.size
            while left:
                block = fh.read(min(left, _BLOCK))
                if not block:
                    raise OSError(f"{self.path}: shorter than when it was written")
                left -= len(block)
                yield block
