"""An event file's records found in one piece and in blocks, in comparable form.

Reading in blocks must find exactly what a whole-file scan finds (within the documented
limits); the fuzz harnesses and the tests compare the two through these functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tbconvert.formats.tfevents import records


def payloads(buf, starts, lengths) -> list[bytes]:
    """The payloads of the records starting at ``starts`` in ``buf``."""
    return [bytes(buf[s:s + n]) for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]


def whole_file(data: bytes) -> list[bytes]:
    """Every record's payload, ``data`` scanned in one piece."""
    starts, lengths, _ = records.scan(data)
    return payloads(data, starts, lengths)


@dataclass
class Blocked:
    """What reading a file in blocks found: payloads, file offsets of the records'
    headers, and ``(offset, length)`` of each damaged stretch."""

    payloads: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    damage: list = field(default_factory=list)


def in_blocks(path, **kw) -> Blocked:
    """Read ``path`` with :func:`records.scan_file` (``block_size=...``); every record found
    lies whole inside its block's buffer."""
    out = Blocked()
    for block in records.scan_file(path, **kw):
        starts, lengths = block.starts, block.lengths
        inside = all(s >= records.HEADER and s + n + records.FOOTER <= len(block.buf)
                     for s, n in zip(starts.tolist(), lengths.tolist(), strict=True))
        assert inside, "record outside its block"
        out.payloads += payloads(block.buf, starts, lengths)
        out.offsets += (starts - records.HEADER + block.offset).tolist()
        out.damage += [(d.offset, d.length) for d in block.damage]
    return out
