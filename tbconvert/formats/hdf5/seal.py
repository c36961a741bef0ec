"""A checksum of the whole archive, kept in the HDF5 user block.

HDF5 checksums its newer metadata but not its data chunks, variable-length data or
large attributes, and the library can hang or crash on a damaged file rather than
report it. So a finished archive is sealed: the first ``USERBLOCK`` bytes (which HDF5
leaves to the user and every HDF5 tool skips) hold one line of text with the size and
CRC32C of everything after them. The reader checks the seal before HDF5 sees the file.

The line looks like ``tbconvert-hdf5-seal {"bytes": 81920, "crc32c": 3735928559}``.
Archives without a seal (foreign HDF5 files) are read as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tbconvert import sourcefiles

USERBLOCK = 4096
MAGIC = b"tbconvert-hdf5-seal "
_BLOCK = 8 << 20


def crc_of(fd: int, start: int) -> tuple[int, int]:
    """(CRC32C, byte count) of the file from ``start`` to its end."""
    from tbconvert.checksum import crc32c  # here: sniffing a file only reads MAGIC
    crc, pos = 0, start
    while True:
        data = os.pread(fd, _BLOCK, pos)
        if not data:
            return crc, pos - start
        crc = crc32c(data, crc)
        pos += len(data)


def write_seal(fd: int) -> None:
    """Seal the finished archive open on ``fd``."""
    crc, size = crc_of(fd, USERBLOCK)
    line = MAGIC + json.dumps({"bytes": size, "crc32c": crc}).encode("ascii") + b"\n"
    os.pwrite(fd, line.ljust(USERBLOCK, b"\0"), 0)


class SealBroken(Exception):
    """The archive changed after it was sealed (the message says how)."""


class OpenForWriting(SealBroken):
    """The archive changed, and HDF5 marks it open for writing: most likely a program has it
    open (or had, and did not close it cleanly), not damage; the message says what is wrong,
    ``advice`` what to do."""

    advice = ("; it was not opened, because a file being written can change as it is read; close "
              "that program and try again (if no program has it open, the archive was changed "
              "after tbconvert wrote it: --ignore-checksum reads what can still be read)")


# HDF5 marks a file in its superblock as it opens it for writing, and clears the mark only as
# it closes the file cleanly: so while a program has the archive open (even without changing
# anything), or after one was killed, the seal cannot match. The superblock starts right after
# the user block; from version 2 on, its byte 11 holds these flags (bit 0: open for writing,
# bit 2: open for SWMR writing). Versions 0 and 1 (which tbconvert does not write) have none.
_SUPERBLOCK_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_WRITE_ACCESS_FLAGS = 0x01 | 0x04


def _marked_open_for_writing(fd: int) -> bool:
    head = os.pread(fd, 12, USERBLOCK)
    return (len(head) == 12 and head.startswith(_SUPERBLOCK_SIGNATURE) and head[8] in (2, 3)
            and bool(head[11] & _WRITE_ACCESS_FLAGS))


def _read_seal(head: bytes) -> dict | None:
    """The seal's facts in the user block ``head``, or None when the file has no seal;
    SealBroken if it is unreadable."""
    if not head.startswith(MAGIC):
        return None
    line = head[len(MAGIC):].split(b"\n", 1)[0]
    try:
        facts = json.loads(line)
        if not (isinstance(facts, dict) and isinstance(facts.get("bytes"), int)
                and isinstance(facts.get("crc32c"), int)):
            raise ValueError
    except ValueError:
        raise SealBroken("its checksum line is damaged") from None
    return facts


def check_seal(path: Path) -> bool:
    """True if sealed and intact, False if there is no seal; SealBroken if damaged
    (OpenForWriting if HDF5 marks it open for writing)."""
    fd = sourcefiles.open_fd(path)
    try:
        head = os.pread(fd, USERBLOCK, 0)
        facts = _read_seal(head)
        if facts is None:
            return False
        crc, size = crc_of(fd, USERBLOCK)
        # counted, not USERBLOCK + size: a file cut inside the user block is shorter than that
        length = len(head) + size
        if length != facts["bytes"] + USERBLOCK:
            wrong = (f"it is {length} bytes long but was written {facts['bytes'] + USERBLOCK} "
                     "bytes long")
            damage = "it was truncated, extended or edited after it was written"
        elif crc != facts["crc32c"]:
            wrong, damage = "its checksum does not match", "bytes changed after it was written"
        else:
            return True
        if _marked_open_for_writing(fd):
            raise OpenForWriting("the archive is open for writing in another program, or was "
                                 f"not closed cleanly by one (HDF5 marks it so, and {wrong})")
    finally:
        os.close(fd)
    raise SealBroken(f"{wrong}: {damage}")
