"""A check of an archive's global heap collections before HDF5 parses them.

HDF5 keeps variable-length data (every name, tag and blob of an archive) in global heap
collections ("GCOL" blocks). Its parser (libhdf5 1.14) walks a collection's objects by their
recorded sizes and, on a free-space record of size 0, never moves on: a forged archive would
hang the reader inside the library, where no signal reaches it. No file HDF5 writes holds
such a record, so one found is damage, refused before HDF5 sees it.

The scan looks at every "GCOL" signature in the file, also those that happen to lie inside
data; it refuses only the one pattern that makes HDF5 loop, which ordinary data does not
hold by chance.

The file is mapped, not read, and scanned a window at a time: the pages already scanned are
given back as the scan moves on, since every page a mapping has touched counts in the
process's memory (an archive of a gigabyte would otherwise be a gigabyte of it).
"""

from __future__ import annotations

import mmap
import os
import struct

from tbconvert import sourcefiles

_SIGNATURE = b"GCOL"
_HEADER = 16        # signature, version, 3 reserved bytes, collection size (8 bytes)
_OBJECT_HEADER = 16  # index (2), references (2), reserved (4), size (8)


_WINDOW = 8 << 20
_PAGE = mmap.PAGESIZE
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def endless_collection(path) -> int | None:
    """The offset of a global heap collection HDF5's parser would loop on, or None."""
    fd = sourcefiles.open_fd(path)
    try:
        size = os.fstat(fd).st_size
        if size < _HEADER + _OBJECT_HEADER:
            return None
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as data:
            release = _releaser(data)
            for start in range(0, size, _WINDOW):
                end = min(size, start + _WINDOW)
                # a signature starting in this window (it may end in the next one)
                at = data.find(_SIGNATURE, start, end + len(_SIGNATURE) - 1)
                while at >= 0:
                    if _loops(data, at, size, release):
                        return at
                    at = data.find(_SIGNATURE, at + 1, end + len(_SIGNATURE) - 1)
                release(start, end)
    finally:
        os.close(fd)
    return None


def _releaser(data: mmap.mmap):
    """``release(lo, hi)``: drop the mapping's pages within ``lo..hi`` from the process (the
    file's bytes stay in the page cache, and are mapped again if read again)."""
    if _DONTNEED is None or not hasattr(data, "madvise"):
        return lambda lo, hi: None

    def release(lo: int, hi: int) -> None:
        lo -= lo % _PAGE
        if hi > lo:
            data.madvise(_DONTNEED, lo, hi - lo)
    return release


def _loops(data, at: int, size: int, release) -> bool:
    """Walk the collection at ``at`` as HDF5 does; True where a step would not advance."""
    if at + _HEADER > size or data[at + 4] != 1:
        return False
    (length,) = struct.unpack_from("<Q", data, at + 8)
    end = min(at + length, size)
    p = mark = at + _HEADER
    while p + _OBJECT_HEADER <= end:
        if p - mark >= _WINDOW:  # a collection as long as the file walks it all
            release(mark, p)
            mark = p
        index, _refs, _reserved, object_size = struct.unpack_from("<HHIQ", data, p)
        if index == 0:
            # free space: HDF5 steps by the recorded size as it is (0: not at all; past
            # 2**63: backwards, as its pointer wraps)
            if object_size == 0 or object_size >= 1 << 63:
                return True
            p += object_size
        else:
            p += _OBJECT_HEADER + ((object_size + 7) & ~7 & ((1 << 64) - 1))
    return False
