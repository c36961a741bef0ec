"""What the manifest remembers of an event file, and what changed since (no numpy, no
pyarrow: a sync that finds nothing new never loads them)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.checksum import crc32c
from tbconvert.formats.tfevents.event_files import PROFILE_EMPTY

# The head checksum covers this much of a file: enough to tell a rewritten file.
HEAD_BYTES = 4096
PENDING_PREFIX = "_pending-"


def _crc_in(fd: int, offset: int, length: int) -> str | None:
    try:
        data = os.pread(fd, length, offset)
    except OSError:
        return None
    if len(data) != length:
        return None
    return f"{crc32c(data):08x}"


def _open(path: Path) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` and its status. Without blocking: an event file's name can be
    a FIFO's, and opening a FIFO to read waits for a writer (the reader skips it)."""
    fd = sourcefiles.open_fd(path, nonblock=True)   # (its access time kept, as readers keep it)
    try:
        return fd, os.fstat(fd)
    except OSError:
        os.close(fd)
        raise


def file_entry(path: Path, size: int, end: int, last) -> dict:
    head = min(HEAD_BYTES, end)
    entry = {"name": path.name, "size": size, "end": end, "head": f"{0:08x}", "last": None}
    try:
        fd, st = _open(path)
    except OSError:
        fd = None
    try:
        # The modification time tells a rewrite of the same size whose head and last record
        # are unchanged; kept only when it is the time of the ``size`` bytes that were read.
        if fd is not None and st.st_size == size:
            entry["mtime"] = st.st_mtime_ns
        if head:
            entry["head"] = None if fd is None else _crc_in(fd, 0, head)
        if last is not None:
            entry["last"] = [last[0], last[1], None if fd is None else _crc_in(fd, *last)]
    finally:
        if fd is not None:
            os.close(fd)
    return entry


def _changed(path: Path, entry: dict) -> tuple[str | None, int]:
    """Why ``path`` is not the file archived as ``entry`` plus appended bytes (None: it is),
    and its size; the file is opened once for both of its checksums."""
    try:
        fd, st = _open(path)
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror})", 0
    try:
        size = st.st_size
        if not stat.S_ISREG(st.st_mode):
            # not an event file to read (the reader reported it): unchanged while nothing
            # of it was archived
            return (f"{path.name} is no longer a regular file", size) if entry["end"] else \
                (None, entry["size"])
        if size < entry["end"]:
            return f"{path.name} was truncated", size
        head = min(HEAD_BYTES, entry["end"])
        if head and _crc_in(fd, 0, head) != entry["head"]:
            return f"{path.name} was replaced or rewritten", size
        last = entry.get("last")
        if last is not None and _crc_in(fd, last[0], last[1]) != last[2]:
            return f"{path.name} was rewritten", size
        mtime = entry.get("mtime")
        if size == entry["size"] and mtime is not None and st.st_mtime_ns != mtime:
            return f"{path.name} was changed in place (same size, new modification time)", size
    finally:
        os.close(fd)
    return None, size


def plan_files(files, state: dict | None) -> tuple[str | None, list[tuple[Path, int]]]:
    """``(why the run is read whole or None, [(file, offset to read from)])`` for a run whose
    event files are ``files`` (in reading order) and whose manifest state is ``state``."""
    files = [Path(f) for f in files]
    if state is None:
        return "a new run", [(f, 0) for f in files]
    whole = [(f, 0) for f in files]
    if state.get("reread"):     # the dataset lost what it held of the run
        return state["reread"], whole
    if "files" not in state:
        return "it was archived from a TensorBoard.dev export, not from event files", whole
    archived = state["files"]
    if [f.name for f in files[:len(archived)]] != [a["name"] for a in archived]:
        return "its event files were removed, renamed or one sorts before archived ones", whole
    reads = []
    for i, (path, entry) in enumerate(zip(files, archived, strict=False)):
        why, size = _changed(path, entry)
        if why is not None:
            return why, whole
        if size != entry["size"]:
            if i != len(archived) - 1:
                return f"{path.name} grew but is not the run's last event file", whole
            reads.append((path, entry["end"]))
        elif entry["end"] < size and not path.name.endswith(PROFILE_EMPTY):
            # It ended inside a record that might still be finished: read it again (finished,
            # or once its writer has left it for good, told as lost). (A profiler's marker
            # file is never read, so nothing of it is ever pending.)
            reads.append((path, entry["end"]))
    reads.extend((f, 0) for f in files[len(archived):])
    if reads and state.get("start_time") is None:
        return "nothing of it was archived yet", whole
    return None, reads


def pending_name(part: str) -> str:
    """Where a task writes ``part``: a name that readers listing the directory skip
    (leading ``_``, no ``.parquet`` suffix) until the sync renames it, before it commits."""
    return f"{PENDING_PREFIX}{part}.tmp"
