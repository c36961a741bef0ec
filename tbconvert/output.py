"""Atomic outputs: write under a temporary name beside the destination, rename at the end.

An existing destination is refused unless ``force`` is given, and even then it
is only replaced once the new output is complete. A conversion killed at any
moment leaves the old destination (or none), plus at most a hidden temporary
``.<name>.tbconvert-tmp-*`` entry, never a partial file under the final name.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

from tbconvert.errors import MESSAGE_FILTERS, OutputError, OutputExistsError, UsageError
from tbconvert.sourcefiles import TMP_MARK

# Outputs begun and neither committed nor aborted: what an interrupted program removes
# on its way out (see abort_pending), even if it was interrupted before a writer existed.
_PENDING: set = set()


def abort_pending() -> None:
    """Remove every temporary output not yet committed or aborted."""
    for out in list(_PENDING):
        out.abort()


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _refuse_where_we_stand(final: Path) -> None:
    """An output is made beside its destination and put in its place whole, which cannot be
    done to the directory this process works in (``.``), nor to one above it: told so, not
    as a destination that "appeared" or a busy device."""
    try:
        here = os.path.realpath(os.getcwd())
        there = os.path.realpath(final)
    except (OSError, ValueError):
        return
    if os.path.isdir(there) and (here == there or here.startswith(there.rstrip(os.sep) + os.sep)):
        raise UsageError(f"{final}: is the current directory{'' if here == there else ' or above it'}"
                         "; tbconvert writes its output beside the destination and puts it in "
                         "place whole, which cannot be done to the directory it runs in: name "
                         f"a new directory inside it (such as {Path(final) / 'out'}) or run "
                         "from elsewhere")


class AtomicOutput:
    """A file or directory that appears under ``final`` only on :meth:`commit`.

    Usage::

        out = AtomicOutput(dst, force=False, directory=True)   # checks dst now
        write_everything_into(out.tmp)
        out.commit()       # or out.abort() on failure
    """

    def __init__(self, final: Path, *, force: bool, directory: bool) -> None:
        self.final = Path(final)
        self.directory = directory
        self.force = force
        _refuse_where_we_stand(self.final)
        if _exists(self.final) and not (directory and _is_empty_dir(self.final)):
            # (a file for a directory is refused with or without --force: told first)
            if directory != self.final.is_dir():
                kind = "directory" if self.final.is_dir() else "file"
                if self.final.is_symlink() and not self.final.exists():
                    raise OutputExistsError(
                        f"{self.final} is a symbolic link to {os.readlink(self.final)}, which "
                        "does not exist; refusing to replace the link with a directory; "
                        "remove it first")
                raise OutputExistsError(
                    f"{self.final} exists and is a {kind}; refusing to replace it with a "
                    f"{'directory' if directory else 'file'}; remove it first")
            if not force:
                raise OutputExistsError(
                    f"{self.final} already exists; pass --force to replace it "
                    "(it is only replaced once the new output is complete)")
        parent = self.final.parent
        # Parents this output creates go again if it fails: a failed conversion leaves no trace.
        self._created = _missing_parents(parent)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _remove_created(self._created)
            if exc.errno in (errno.EEXIST, errno.ENOTDIR):
                raise OutputError(f"cannot create {parent}: a file is in the way (one of its "
                                  "parents is a file, not a directory)") from None
            raise OutputError(f"cannot create {parent}: {exc.strerror or exc}") from None
        _sweep_leftovers(self.final)
        self.tmp = parent / _tmp_name(self.final.name, uuid.uuid4().hex[:12])
        self._done = False
        self._placed = False     # the output is under its final name
        _PENDING.add(self)
        if directory:
            try:
                self.tmp.mkdir()
            except OSError as exc:
                _PENDING.discard(self)
                _remove_created(self._created)
                raise OutputError(f"cannot write in {parent}: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Move the finished output to its final name (replacing the old one if forced).

        Without ``force``, a destination that appeared while the output was written (another
        conversion to the same name, a user) is not replaced either: the new output is removed
        and :class:`OutputExistsError` raised."""
        if self._done:
            return
        # Ctrl-C and SIGTERM wait until the output is in place and a replaced one is gone
        # (a signal between the swap and the removal would leave the old output behind, and
        # the message would say the new, complete one had been removed).
        from tbconvert.interrupts import deferred
        try:
            with deferred():
                self._put_in_place()
        except KeyboardInterrupt as exc:
            if self._placed:
                exc.complete = self.final
            raise

    def _put_in_place(self) -> None:
        if not self.force:
            self._commit_new()
            return
        if not self.directory or not _exists(self.final) or _is_empty_dir(self.final):
            if _is_empty_dir(self.final):
                self.final.rmdir()
            os.replace(self.tmp, self.final)  # atomic, also over an existing file
            self._placed = True
            self._finished()
            return
        # A non-empty directory cannot be replaced in one rename: swap the two atomically
        # where the system can (Linux), so no moment exists without a complete destination.
        if _exchange(self.tmp, self.final):
            self._placed = True
            self._finished()
            _remove(self.tmp)  # now the old output
            return
        old = self.final.parent / _tmp_name(self.final.name, f"old-{uuid.uuid4().hex[:8]}")
        os.replace(self.final, old)
        os.replace(self.tmp, self.final)
        self._placed = True
        self._finished()
        _remove(old)

    def _commit_new(self) -> None:
        if self.directory and _is_empty_dir(self.final):
            with contextlib.suppress(OSError):   # filled meanwhile: refused below
                self.final.rmdir()
        try:
            done = _rename_noreplace(self.tmp, self.final)
            if not done:
                # no such rename here: checked, then renamed (a file over a file appearing in
                # between would be replaced; a directory is never put over a non-empty one)
                if _exists(self.final):
                    raise FileExistsError(errno.EEXIST, "exists")
                os.rename(self.tmp, self.final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                raise
            self.abort()
            raise OutputExistsError(
                f"{self.final} appeared while the output was being written; not replaced "
                "(pass --force to replace it)") from None
        self._placed = True
        self._finished()

    @contextlib.contextmanager
    def writing(self):
        """``with out.writing() as tmp:`` write to ``tmp``; committed when the block ends.
        On any failure the partial output is removed; an OS error (disk full...) becomes
        one clear :class:`OutputError`."""
        with removed_on_failure(self.abort, self.final, also=BaseException):
            yield self.tmp
            self.commit()

    def abort(self) -> None:
        """Remove whatever was written; the destination is left as it was."""
        if not self._done:
            _remove(self.tmp)
            self._finished()
            _remove_created(self._created)

    def _finished(self) -> None:
        self._done = True
        _PENDING.discard(self)


class ScratchDir:
    """A hidden directory beside an output, for files on their way into it; removed by
    :meth:`remove`, and by :func:`abort_pending` when the program is interrupted."""

    def __init__(self, beside: Path) -> None:
        beside = Path(beside)
        self.path = beside.parent / _tmp_name(beside.name, f"stage-{uuid.uuid4().hex[:12]}")
        _PENDING.add(self)      # first: a signal right after the mkdir still removes it
        try:
            self.path.mkdir()
        except OSError as exc:
            _PENDING.discard(self)
            raise OutputError(f"cannot write in {beside.parent}: {exc.strerror or exc}") from None

    def remove(self) -> None:
        _remove(self.path, settle=True)
        _PENDING.discard(self)

    abort = remove


def _final_names(text: str) -> str:
    """A message with each output's hidden temporary name (``.x.tbconvert-tmp-...``) told as
    the name it was being written for: the user knows the destination, not our staging."""
    import re
    return re.sub(r"(^|[/\s'\"(])\.((?:[^/\s]|\s(?!\.))+?)" + re.escape(TMP_MARK)
                  + r"[0-9a-f]{8}-\d+-[\w-]+", r"\1\2", text)


MESSAGE_FILTERS.append(_final_names)


def _host() -> str:
    """This host as a temporary name tells it: a hash of its name."""
    import socket
    import zlib
    return f"{zlib.crc32(socket.gethostname().encode('utf-8', 'surrogateescape')):08x}"


def _owner() -> str:
    """This process as a temporary name tells it: its host, and its pid."""
    return f"{_host()}-{os.getpid()}"


def _tmp_name(final: str, tail: str) -> str:
    """The hidden name of an output on its way to ``final``, naming its process (so that a
    later conversion to the same name can tell the leftover of a killed one)."""
    return f".{_short(final)}{TMP_MARK}{_owner()}-{tail}"


def _sweep_leftovers(final: Path) -> None:
    """Remove what killed conversions to ``final`` on this host left beside it (SIGKILL and
    power loss leave no chance to clean up): temporaries whose process is gone."""
    import re
    if os.name != "posix":      # (os.kill(pid, 0) is no liveness probe elsewhere)
        return
    prefix = f".{_short(final.name)}{TMP_MARK}"
    host = _host()
    try:
        entries = [e for e in os.scandir(final.parent) if e.name.startswith(prefix)]
    except OSError:
        return
    for entry in entries:
        m = re.match(r"([0-9a-f]{8})-(\d{1,10})-(old-)?", entry.name[len(prefix):])
        # (an "old-" one is a replaced output that a kill left as the only copy: the user's)
        if m is None or m.group(3) or m.group(1) != host or process_alive(int(m.group(2))):
            continue
        _remove(Path(entry.path))


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), None where unknown: with the pid, it tells
    the process from a later one given the same pid."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of ``pid`` from /proc (Linux), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether process ``pid`` (started at ``started``, if known) still runs on this host. A
    zombie has ended: it only waits for its parent to collect it, which may be never (a
    container whose first process collects no orphans)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):     # (another user's process: alive)
        pass
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    if state in ("Z", "X"):
        return False
    return started is None or start == started


def _short(name: str, limit: int = 200) -> str:
    """``name`` cut to ``limit`` bytes, so the hidden temporary beside a destination whose name
    is near the 255-byte limit is still a valid name."""
    raw = os.fsencode(name)
    return name if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _missing_parents(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    for p in (path, *path.parents):
        if _exists(p):
            break
        missing.append(p)
    return missing


def _remove_created(dirs: list[Path]) -> None:
    """Remove the directories an output created, deepest first, while they are empty
    (another output may have been committed into one of them meanwhile)."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return


@contextlib.contextmanager
def made_in_place(directory):
    """Run the block that creates ``directory`` (with its missing parents) and writes into it
    in place; if the block fails, the directories it created go again while they are empty.

    For an output that cannot be written aside and renamed (a synced dataset, which later
    syncs add to where it is): a first attempt that fails leaves no trace, as an
    :class:`AtomicOutput` does, while a directory that was there before stays, and so does
    one that holds what a committed step wrote."""
    created = _missing_parents(Path(directory))
    try:
        yield
    except BaseException:
        _remove_created(created)
        raise


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _renameat2(a: Path, b: Path, flags: int) -> int | None:
    """Linux ``renameat2(a, b, flags)``: 0 once done, else its errno; None where the system
    has no such call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return None
    at_fdcwd = -100
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return 0
    return ctypes.get_errno()


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False if the system cannot."""
    return _renameat2(a, b, _RENAME_EXCHANGE) == 0


def _rename_noreplace(a: Path, b: Path) -> bool:
    """Rename ``a`` to ``b`` unless ``b`` exists, in one atomic step: True once done, False
    where the system or file system cannot; an existing ``b`` raises
    :class:`FileExistsError`."""
    code = _renameat2(a, b, _RENAME_NOREPLACE)
    if code is None or code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    if code:
        raise OSError(code, os.strerror(code), str(b))
    return True


def _remove(path: Path, settle: bool = False) -> None:
    """Remove ``path``, whatever it is. With ``settle``, a directory that a file still being
    closed by a stopping thread or process kept from going is tried again for a moment."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            tries = 50 if settle else 0
            while tries and os.path.lexists(path):
                time.sleep(0.02)
                shutil.rmtree(path, ignore_errors=True)
                tries -= 1
        elif _exists(path):
            path.unlink()
    except OSError:
        pass


@contextlib.contextmanager
def removed_on_failure(abort, path, *, also=(KeyboardInterrupt,)):
    """Run the block; an OS error (disk full, size limit...) calls ``abort`` and becomes one
    clear :class:`OutputError` naming ``path``; an exception of type ``also`` calls ``abort``
    and goes on. Everything that writes an output fails this one way."""
    try:
        yield
    except OutputExistsError:   # a destination that appeared meanwhile: told whole
        abort()
        raise
    except OSError as exc:
        abort()
        raise OutputError(describe_os_error(exc, path)) from None
    except also:
        abort()
        raise


def describe_os_error(exc: OSError, path) -> str:
    """A one-line message for a write failure, with advice for the common ones."""
    if exc.errno == errno.ENOSPC:
        return f"{path}: the disk is full; partial output was removed"
    if exc.errno == errno.EFBIG:
        return f"{path}: file-size limit reached; partial output was removed"
    if exc.errno == errno.EROFS:
        return f"{path}: a read-only file system; choose a destination you can write to"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{path}: permission denied; choose a destination you can write to"
    return f"{path}: {exc.strerror or exc}; partial output was removed"


# ------------------------------------------------------------------ source vs destination

def check_destination(src, dst) -> None:
    """Refuse a destination that is the source, lies inside it or contains it.

    Replacing such a destination (``--force``) would destroy the source, and writing inside
    it would change what is being read. Both paths are compared by identity (device and
    inode of every existing ancestor, so symlinks, bind mounts and case-insensitive names
    are seen through) and by their resolved names, case-folded where the file system
    ignores case. Raises :class:`UsageError` before anything is written.
    """
    src, dst = Path(src), Path(dst)
    if not _exists(src):
        return      # nothing to protect; the reader says that the source is missing
    how = _overlap(src, dst)
    if how:
        raise UsageError(f"{dst} {how} the source {src}; choose a destination outside it "
                         "(nothing was written)")


def _overlap(src: Path, dst: Path) -> str:
    src_ids = _chain_ids(src)       # identities of src and its ancestors, src first
    dst_ids = _chain_ids(dst)
    if src_ids and dst_ids and src_ids[0] != (-1, -1):
        if src_ids[0] == dst_ids[0]:
            return "is"
        if src_ids[0] in dst_ids[1:]:
            return "is inside"
        if _exists(dst) and dst_ids[0] in src_ids[1:]:
            return "contains"
    # By name as well, where identities say nothing (file systems without stable inodes).
    how = _name_overlap(_resolved(src), _resolved(dst))
    if not how:
        folded = _name_overlap(_fold(_resolved(src)), _fold(_resolved(dst)))
        # Only ask the file system (a probe file) when case alone makes the difference.
        if folded and _case_insensitive(_nearest_existing(dst)):
            how = folded
    return how


def _name_overlap(s: Path, d: Path) -> str:
    if s == d:
        return "is"
    if s in d.parents:
        return "is inside"
    if d in s.parents:
        return "contains"
    return ""


def _chain_ids(path: Path) -> list[tuple[int, int]]:
    """(device, inode) of ``path`` (if it exists) and of each existing ancestor."""
    ids: list[tuple[int, int]] = []
    resolved = _resolved(path)
    for p in (resolved, *resolved.parents):
        try:
            st = os.stat(p)     # follows symlinks: a link to the source is the source
        except (OSError, ValueError):
            if p == resolved:
                ids.append((-1, -1))    # keeps index 0 for the path itself
            continue
        ids.append((st.st_dev, st.st_ino))
    return ids


def _resolved(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return Path(os.path.abspath(path))


def _nearest_existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    for p in (path, *path.parents):
        if p.exists():
            return p if p.is_dir() else p.parent
    return Path(path.anchor or ".")


def _fold(path: Path) -> Path:
    import unicodedata
    return Path(unicodedata.normalize("NFD", str(path)).casefold())


_CASE_PROBES: dict[tuple[int, int], bool] = {}


def _case_insensitive(directory: Path) -> bool:
    """Whether names in ``directory`` ignore case, found by probing (a platform's
    ``normcase`` does not tell: macOS volumes may go either way)."""
    try:
        st = os.stat(directory)
    except OSError:
        return False
    key = (st.st_dev, st.st_ino)
    if key not in _CASE_PROBES:
        probe = directory / f".tbconvert-case-{uuid.uuid4().hex[:8]}"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            # Read-only or not ours: judge by the names already there.
            _CASE_PROBES[key] = _case_insensitive_by_listing(directory)
        else:
            os.close(fd)
            try:
                _CASE_PROBES[key] = os.path.lexists(directory / probe.name.upper())
            finally:
                os.unlink(probe)
    return _CASE_PROBES[key]


def _case_insensitive_by_listing(directory: Path) -> bool:
    try:
        with os.scandir(directory) as it:
            for entry in it:
                swapped = entry.name.swapcase()
                if swapped != entry.name:
                    return os.path.lexists(os.path.join(directory, swapped)) and not any(
                        e == swapped for e in os.listdir(directory))
    except OSError:
        pass
    return False
