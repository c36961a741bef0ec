"""One sync at a time per dataset: a lock file that outlives a crash and is known stale.

The lock is a small JSON file created with ``O_EXCL`` in the dataset directory, naming
the host, process id, the process' own start time (so that a recycled pid is not taken
for the holder) and when the lock was taken. A lock is stale when its process is gone
from this host, or, for another host (a shared file system), when it is older than
:data:`FOREIGN_STALE_SECONDS`; a stale lock is taken over and the take-over reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from pathlib import Path

from tbconvert.errors import OutputError, StorageError, UsageError
from tbconvert.output import process_alive, process_start

LOCK_FILE = "_tbconvert.lock"
# A sync of a lab's logs may run for hours; a lock from another host this old is abandoned.
FOREIGN_STALE_SECONDS = 48 * 3600


_DRAFTS = f"{LOCK_FILE}.draft-"     # (the start of every lock draft's name)


def _host_tag() -> str:
    """This host's name as it may appear in a file name."""
    return "".join(c if c.isalnum() or c in "._" else "_" for c in socket.gethostname())[:64]


def dead_draft(name: str) -> bool:
    """Whether ``name`` in a dataset is the draft of a lock whose process, on this host, was
    killed while it took the lock (its ``finally`` never ran): garbage."""
    # (asked of every name in the dataset, every sync: the host's name only for a draft's)
    if not name.startswith(_DRAFTS):
        return False
    prefix = f"{_DRAFTS}{_host_tag()}-"
    if not name.startswith(prefix):
        return False
    pid = name[len(prefix):].split("-", 1)[0]
    return pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid))


class SyncLocked(UsageError):
    """Another sync holds the dataset."""


def parsed_lock(raw: bytes) -> dict:
    """A lock's content as a sync writes it, or {} for anything else (being written, damaged,
    or not a sync's), which is known stale once it is a minute old."""
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    when = data.get("time")
    # (a time that no clock gives cannot be shown, nor trusted to say how old the lock is)
    if when is not None and not (isinstance(when, (int, float)) and not isinstance(when, bool)
                                 and 0 <= when <= time.time() + 86400):
        return {}
    return data


class Lock:
    """``with Lock(dataset_dir, report):`` holds the dataset for one sync."""

    def __init__(self, directory: Path, report, *, break_lock: bool = False) -> None:
        self.path = Path(directory) / LOCK_FILE
        self.report = report
        self.break_lock = break_lock
        self._held = False
        self.left_behind = False    # held, but could not be removed (the store failing)
        # tells this lock from any other, also from one of the same process: a store whose
        # answer to the creating write was lost (and the write retried) must find it its own
        self._token = uuid.uuid4().hex

    def _body(self) -> bytes:
        pid = os.getpid()
        return json.dumps({"host": socket.gethostname(), "pid": pid,
                           "process_start": process_start(pid), "time": time.time(),
                           "token": self._token}).encode()

    def _create(self) -> bool:
        """Take the lock if it is free. Its content is written whole under a name of its own
        first, then linked to the lock's name, which fails if a lock is there: a lock created
        empty and filled in after would, if its process were killed in between, be an
        unreadable lock that no one can tell from a live one."""
        draft = self.path.with_name(f"{_DRAFTS}{_host_tag()}-{os.getpid()}-"
                                    f"{uuid.uuid4().hex[:8]}")
        try:
            try:
                # Not flushed to disk: a lock matters while its process lives, and one that
                # a crash of the machine leaves empty is known stale after a minute.
                with open(draft, "xb") as fh:
                    fh.write(self._body())
                try:
                    os.link(draft, self.path)
                except FileExistsError:
                    return False
                except OSError:     # a file system without hard links
                    return self._create_in_place()
            finally:
                with contextlib.suppress(OSError):     # (a draft left is removed later)
                    draft.unlink(missing_ok=True)
        except OSError as exc:
            # a full or read-only disk: the sync cannot begin, and says so as writing fails
            from tbconvert.output import describe_os_error
            raise OutputError(describe_os_error(exc, self.path)) from None
        return True

    def _create_in_place(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._body())
        finally:
            os.close(fd)
        return True

    def holder(self) -> dict | None:
        """The lock's content; {} when unreadable (being written, or damaged)."""
        try:
            return parsed_lock(self.path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError:
            return {}

    def _stale(self, holder: dict) -> str | None:
        """Why the lock is abandoned, None while its holder may be working."""
        host, pid, when = holder.get("host"), holder.get("pid"), holder.get("time")
        age = time.time() - when if isinstance(when, (int, float)) else None
        if host == socket.gethostname() and isinstance(pid, int):
            if not process_alive(pid, holder.get("process_start")):
                return f"process {pid} on this host is gone"
            return None
        if age is not None and age > FOREIGN_STALE_SECONDS:
            return f"taken {age / 3600:.0f} hours ago on {host}"
        if not holder:
            try:
                if time.time() - self.path.stat().st_mtime > 60:
                    return "unreadable and over a minute old"
            except OSError:
                return None
        return None

    # How often a lock that is taken over while this sync takes it over is tried again.
    TRIES = 20

    def _where(self) -> tuple[object, str, object]:
        """The dataset, what the lock is, and the lock, as messages name them."""
        return self.path.parent, "lock file", self.path

    def _uninterrupted(self):
        """Where Ctrl-C and SIGTERM wait: while the lock file is taken or removed (quick, on
        a local disk), so that no lock is ever left taken but not known as held."""
        from tbconvert.interrupts import deferred
        return deferred()

    def acquire(self) -> None:
        dataset, noun, lock = self._where()
        for _ in range(self.TRIES):
            # A lock taken is a lock held (the release in __enter__ then removes it).
            with self._uninterrupted():
                if self._create():
                    self._held = True
                    return
            holder = self.holder()
            if holder is None:
                continue            # released meanwhile
            if holder.get("token") == self._token:
                self._held = True   # created by this attempt, its answer lost on the way
                return
            why = "--break-lock was given" if self.break_lock else self._stale(holder)
            if why is None:
                who = (f"process {holder.get('pid')} on {holder.get('host')}, since "
                       f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['time']))}"
                       if isinstance(holder.get("time"), (int, float)) else "another process")
                raise SyncLocked(
                    f"{dataset}: another sync is running on this dataset ({who}); "
                    f"wait for it, or if it is dead pass --break-lock ({noun} {lock})")
            if not self._take_over(holder):
                continue
            self.report.add("stale_lock_taken_over",
                            f"{lock}: a lock of an earlier sync was taken over ({why})",
                            path=lock, lost=False)
        raise SyncLocked(f"{lock}: could not take the lock; another sync keeps taking it")

    def _take_over(self, holder: dict) -> bool:
        """Remove the stale lock ``holder`` describes; False: another process was quicker."""
        # Moved aside first: of two processes taking over, only one moves this lock.
        aside = self.path.with_name(f"{LOCK_FILE}.stale-{os.getpid()}")
        if self.path.is_dir():
            raise OutputError(f"{self.path}: a directory where this dataset's lock file goes; "
                              "no sync can run until it is removed")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return False
        try:
            moved = parsed_lock(aside.read_bytes())
        except OSError:
            moved = {}
        if moved != holder:
            # another process took over first and this moved its fresh lock: put it back
            try:
                os.link(aside, self.path)
            except OSError:
                pass
            os.unlink(aside)
            return False
        os.unlink(aside)
        return True

    def release(self) -> None:
        if not self._held:
            return
        with self._uninterrupted():    # a signal now would leave the lock behind
            self._held = False
            try:
                holder = self.holder()
                if holder and holder.get("pid") == os.getpid() and \
                        holder.get("host") == socket.gethostname():
                    self._remove()
                elif holder == {}:      # could not be read: left, and said so (__exit__)
                    self.left_behind = True
            except Exception:  # noqa: BLE001 - a lock left behind is known stale later
                self.left_behind = True

    def _remove(self) -> None:
        os.unlink(self.path)

    def __enter__(self):
        try:
            self.acquire()
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.release()
        except BaseException:
            # Ctrl-C or SIGTERM landed as the release began, before its signals were held
            # back (see _uninterrupted): the lock still goes, then the signal's error goes on.
            self.release()
            raise
        if self.left_behind and isinstance(exc, StorageError):
            shown = getattr(self, "shown", self.path)
            raise StorageError(f"{exc}; the dataset's lock {shown} could not be removed: the "
                               "next sync from this host takes it over (from another host, "
                               "pass --break-lock)") from None
