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


def _read_seal(fd: int) -> dict | None:
    """The seal's facts, or None when the file has no seal; SealBroken if it is unreadable."""
    head = os.pread(fd, USERBLOCK, 0)
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
    """True if sealed and intact, False if there is no seal; SealBroken if damaged."""
    fd = sourcefiles.open_fd(path)
    try:
        facts = _read_seal(fd)
        if facts is None:
            return False
        crc, size = crc_of(fd, USERBLOCK)
    finally:
        os.close(fd)
    if size != facts["bytes"]:
        raise SealBroken(f"it is {size + USERBLOCK} bytes long but was written "
                         f"{facts['bytes'] + USERBLOCK} bytes long: it was truncated, extended "
                         "or edited after it was written")
    if crc != facts["crc32c"]:
        raise SealBroken("its checksum does not match: bytes changed after it was written")
    return True
