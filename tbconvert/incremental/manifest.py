"""The dataset's manifest: its marker file, with the sync state beside the parts list.

``_tbconvert.json`` is what every reader of the dataset already trusts (format, schema
version, experiment, ``parts`` in run order, a SHA-256 of the rest); sync adds
``"sync": {"generation": G, "runs": {run: state}}``. It is written to a temporary file,
flushed to disk and renamed over the old one, so that readers and a later sync see the
old manifest or the new one, never a mix; part files no manifest names are left overs
of a sync that did not finish, and are removed.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

from tbconvert.errors import CorruptDataError
from tbconvert.formats.parquet import (
    MARKER_FILE,
    RETIRE_SECONDS,
    RETIRED_PREFIX,
    retired_at,
    retired_name,
)
from tbconvert.incremental.files import PENDING_PREFIX

_TMP_PREFIX = "_tbconvert.json.tmp-"


def load(dst: Path, report, each=None) -> dict:
    """The committed manifest, each run's state a :class:`RunState`; an empty one for a new
    dataset. ``each(name, state)``: called with every run's state as a dict before it is
    kept (what it changes of it is kept)."""
    from tbconvert.formats.base import CHECKSUM_ADVICE, Options
    from tbconvert.formats.parquet.reader import read_marker
    from tbconvert.incremental import manifest_stream
    if not (dst / MARKER_FILE).exists():
        return {"parts": [], "sync": {"generation": 0, "runs": {}}}
    marker = manifest_stream.read(dst / MARKER_FILE, each)
    if marker is not None and usual(dst, marker):
        return marker
    # not one read a run at a time: read whole, and what is wrong with it told
    try:
        marker = read_marker(dst, Options(), report)
    except CorruptDataError as exc:
        # the reader's advice (--ignore-checksum) is convert's: sync has no such option
        raw = str(exc.args[0])                                   # (as raised, in no wording)
        what = raw.removesuffix(CHECKSUM_ADVICE)
        rescue = (" (convert --ignore-checksum reads what the dataset still holds)"
                  if what != raw else "")      # (a manifest that does not parse reads nothing)
        raise CorruptDataError(f"{what}; sync leaves the dataset as it is: put {MARKER_FILE} "
                               f"back from a copy, or sync into a new directory{rescue}") from None
    state = marker.get("sync")
    if state is None:
        # a dataset written by convert: its runs are read whole once, then kept up to date;
        # the sync reports them as such (read whole, or removed), by the names its parts give
        parts = marker.get("parts")
        state = {"generation": 0, "runs": {}, "from_convert": sorted(
            {p["run"] for p in parts if isinstance(p, dict) and isinstance(p.get("run"), str)}
            if isinstance(parts, list) else ())}
    if not isinstance(state, dict) or not isinstance(state.get("generation"), int) or \
            not isinstance(state.get("runs"), dict):
        raise CorruptDataError(f"{dst / MARKER_FILE}: damaged (bad sync state); sync into a "
                               "new directory")
    for name, run in state["runs"].items():
        if not isinstance(run, dict) or not isinstance(run.get("parts"), list) or \
                not isinstance(run.get("index"), int):
            raise CorruptDataError(f"{dst / MARKER_FILE}: damaged (bad state of run "
                                   f"{name!r}); sync into a new directory")
    for name, run in state["runs"].items():
        if each is not None:
            each(name, run)
        state["runs"][name] = RunState(run)
    marker["sync"] = state
    return marker


def usual(dst: Path, marker: dict) -> bool:
    """Whether a manifest read a run at a time passes what :func:`load` checks of one read
    whole (the reader's checks of its header and parts, its sync state's)."""
    from tbconvert.errors import TbconvertError
    from tbconvert.formats.parquet.reader import check_header
    try:
        check_header(marker, dst / MARKER_FILE)
    except TbconvertError:
        return False
    return well_formed(marker)


def well_formed(marker: dict) -> bool:
    """Whether a manifest's parts and sync state are what a sync reads (the checks of
    :func:`usual` that need no pyarrow)."""
    parts, state = marker.get("parts"), marker.get("sync")
    if not isinstance(parts, list) or not all(
            isinstance(p, dict) and isinstance(p.get("file"), str) and _safe_part(p["file"])
            for p in parts):
        return False
    return isinstance(state, dict) and isinstance(state.get("generation"), int) and \
        isinstance(state.get("runs"), dict)


def _safe_part(name: str) -> bool:
    # (as the Parquet reader takes a part's name: in the dataset's directory, a part's prefix)
    return not ("/" in name or "\\" in name or name in (".", "..")) and \
        name.startswith(_PART_PREFIX)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class RunState:
    """A run's entry in the manifest's ``sync.runs``, held as its compact JSON until the
    manifest is written: as Python objects, the state of a run of a few tags took about
    5 KB, and a sync holds every run's (the first sync of 20,000 runs: 100 MB). The text is
    kept deflated: a run's entry repeats its tags' names and keys, and takes a third of the
    room. Raw deflate with a 4 KB window and a small hash: zlib's defaults set up (and let
    go of) 256 KB of state per call, ten times the time of compressing an entry (50 us
    against 5, twice per run of every sync), for no smaller text.

    The text is the canonical form (keys sorted) that the manifest's digest is taken of, so
    that the digest, computed when a manifest is read and again when one is written, takes
    each run's text as it is rather than decoding and encoding it again."""

    __slots__ = ("_deflated", "index", "rules")

    def __init__(self, state: dict) -> None:
        deflate = zlib.compressobj(1, zlib.DEFLATED, -12, 2)
        self._deflated = deflate.compress(canonical(state)) + deflate.flush()
        # (what the sync needs of every run before it reads any, without decoding each)
        self.index = state.get("index")
        self.rules = state.get("rules", 1)

    def __eq__(self, other) -> bool:
        return isinstance(other, RunState) and other._deflated == self._deflated

    __hash__ = None

    @property
    def text(self) -> bytes:
        return zlib.decompress(self._deflated, -12)

    def value(self) -> dict:
        return json.loads(self.text)


def state_of(state):
    """A run's state as a dict (None stays None), from a :class:`RunState` or a dict."""
    return state.value() if isinstance(state, RunState) else state


def state_of_run(state):
    """:func:`state_of`, without the keys the sync gives a run's state anew when it commits
    (its index and parts): what reading the run starts from, and answers."""
    state = state_of(state)
    if state is None or not ("index" in state or "parts" in state):
        return state
    return {k: v for k, v in state.items() if k not in ("index", "parts")}


def canonical(obj) -> bytes:
    """The text of ``obj`` in the form a manifest's digest is taken of."""
    return _json(obj, sort=True)


def named_parts(marker: dict) -> set:
    """The part files ``marker`` names; it may be ``{"named": set of them}``, all a sync
    keeps of the manifest it replaces."""
    if "named" in marker:
        return marker["named"]
    return {p["file"] for p in marker.get("parts", [])}


def _json(obj, sort: bool = False) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                      sort_keys=sort).encode("utf-8")


def _object(items: dict, sort: bool, value_pieces):
    """The JSON text of the object ``items`` in pieces, ``value_pieces(key, value)`` giving
    each value's: what ``json.dumps`` gives, keys sorted with ``sort``."""
    yield b"{"
    for k, key in enumerate(sorted(items) if sort else items):
        yield (b"," if k else b"") + _json(key) + b":"
        yield from value_pieces(key, items[key])
    yield b"}"


def marker_pieces(marker: dict, sort: bool = False):
    """The compact JSON text of a manifest in pieces (``sort``: the canonical form its
    digest is taken of), each run's :class:`RunState` written from its text: the text of
    ``json.dumps`` on the same manifest of dicts, each run's state in canonical form (as a
    RunState holds it), without all of it held at once."""
    def run(key, value):
        yield value.text if isinstance(value, RunState) else canonical(value)

    def sync(key, value):
        if key == "runs" and isinstance(value, dict):
            yield from _object(value, sort, run)
        else:
            yield _json(value, sort)

    def top(key, value):
        if key == "sync" and isinstance(value, dict):
            yield from _object(value, sort, sync)
        else:
            yield _json(value, sort)
    return _object(marker, sort, top)


def marker_digest(marker: dict) -> str:
    """:func:`~tbconvert.formats.parquet.marker_digest` of a manifest whose runs' states may
    be :class:`RunState` (the same digest)."""
    import hashlib

    from tbconvert.formats.parquet import MARKER_DIGEST
    digest = hashlib.sha256()
    for piece in marker_pieces({k: v for k, v in marker.items() if k != MARKER_DIGEST},
                               sort=True):
        digest.update(piece)
    return digest.hexdigest()


def commit(dst: Path, marker: dict) -> None:
    """Replace the manifest with ``marker`` in one step (its digest added here)."""
    from tbconvert.errors import OutputError
    from tbconvert.formats.parquet import schema as S
    from tbconvert.output import describe_os_error
    marker = dict(marker)
    marker[S.MARKER_DIGEST] = marker_digest(marker)
    # Every part the manifest names must be on disk (their renames too) before the manifest
    # is: the directory is flushed while the draft is, side by side, both before the rename.
    names_flushed = _pool().submit(_fsync_dir, dst)
    tmp = dst / f"{_TMP_PREFIX}{os.getpid()}"
    try:
        # A run's state at a time (json.dumps' C encoder; json.dump to a file encodes
        # piece by piece in Python): a dataset of many runs has a large manifest, written
        # every sync.
        try:
            with open(tmp, "wb") as fh:
                for piece in marker_pieces(marker):
                    fh.write(piece)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            names_flushed.result()
        os.replace(tmp, dst / MARKER_FILE)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(describe_os_error(exc, dst / MARKER_FILE)) from None
    _fsync_dir(dst)


def _flush(path: Path, finish=None) -> None:
    if finish is not None:
        finish()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The threads that flush parts and the directory, kept for the life of the process: a
# sync run again and again (``--watch``, a training loop calling ``tbconvert.sync``)
# would otherwise start them anew every round, and a thread's start waits for it to run
# (on a busy machine, longer than the flush it is for).
_POOL_THREADS = 16
_shared = None


def _pool():
    global _shared
    if _shared is None:
        from concurrent.futures import ThreadPoolExecutor
        _shared = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="tbconvert-flush")
    return _shared


def _forget_pool() -> None:
    # a forked child (a sync worker) has none of its parent's threads
    global _shared
    _shared = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


# How many flushes a Flusher keeps before it lets go of those done, and how many it lets
# wait to be done (see Flusher._let_go_of_done).
_KEPT_FUTURES = 64
_MOST_PENDING = 256


class Flusher:
    """Parts flushed to disk in the background, each as soon as its task has written it, so
    that the disk works while the next runs are read (a sync's parts are small: waiting for
    each in turn, or for all at the end, is most of what publishing costs)."""

    def __init__(self, dst: Path) -> None:
        import threading
        self.dst = dst
        self._futures: list = []
        # the first of the flushes let go of once done that failed (see add)
        self._failed: BaseException | None = None
        self._lock = threading.Lock()     # parts arrive from the threads that run tasks

    def add(self, part: str, finish=None):
        """Flush ``part``, once ``finish()`` (what is left of writing it, if anything) is
        done; the flush's future."""
        from tbconvert.incremental.files import pending_name
        with self._lock:
            if len(self._futures) >= _KEPT_FUTURES:
                self._let_go_of_done()
            future = _pool().submit(_flush, self.dst / pending_name(part), finish)
            self._futures.append(future)
        return future

    def _let_go_of_done(self) -> None:
        """Drop the flushes done at the head of the list, their first failure kept: a future
        takes about 1 KB, and the first sync of 20,000 runs kept one for every part. Past
        _MOST_PENDING not done, the oldest are waited for: each holds its part's last row
        group until written, and a disk that slow gains nothing from more waiting."""
        futures = self._futures
        done = 0
        while done < len(futures) and (futures[done].done()
                                       or len(futures) - done > _MOST_PENDING):
            failed = futures[done].exception()      # (waits for it to be done)
            if self._failed is None:
                self._failed = failed
            done += 1
        del futures[:done]

    def wait(self) -> None:
        """Every part added is on disk (OSError: one could not be flushed)."""
        if self._failed is not None:
            raise self._failed
        for future in self._futures:
            future.result()

    def close(self, wait: bool = True) -> None:
        """No flush of this flusher's is left running (those not begun are dropped);
        ``wait`` False: those running go on, their outcome no longer looked at."""
        import concurrent.futures
        with self._lock:
            futures, self._futures = self._futures, []
        for future in futures:
            future.cancel()
        if wait:
            concurrent.futures.wait(futures)


def publish(dst: Path, parts: list[str], flusher: Flusher | None = None) -> None:
    """Flush the parts a sync wrote to disk and give them their final names (the manifest,
    committed next, names them). ``flusher``: where they are being flushed already."""
    from tbconvert.errors import OutputError
    from tbconvert.incremental.files import pending_name
    from tbconvert.output import describe_os_error

    try:
        if flusher is None:
            # all at once, side by side: the file system commits them together
            flusher = Flusher(dst)
            for part in parts:
                flusher.add(part)
        try:
            flusher.wait()
        finally:
            flusher.close()
    except OSError as exc:
        raise OutputError(describe_os_error(exc, dst)) from None
    for part in parts:
        try:
            os.replace(dst / pending_name(part), dst / part)
        except OSError as exc:
            raise OutputError(describe_os_error(exc, dst / part)) from None


# (schema.PART_PREFIX, without importing pyarrow: a sync that finds nothing new tidies too)
_PART_PREFIX = "part-"


class Sweeps:
    """When a ``sync --watch`` last looked through each of its datasets whole for garbage
    (kept from one round to the next; see :func:`remove_garbage`)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def due(self, dst: Path, now: float) -> bool:
        """Whether ``dst`` is to be looked through whole now (then it is taken as done)."""
        key = os.path.abspath(dst)
        if now - self._last.get(key, -SWEEP_SECONDS) < SWEEP_SECONDS:
            return False
        self._last[key] = now
        return True


class Committed:
    """The manifest of each of a ``sync --watch``'s datasets as its last round committed or
    read it, and who the file was then (device, inode, size, modification and change
    times). The next round takes it from here while the file is still that one, instead of
    reading, checking and parsing it again: 2 ms of a 30 ms round of ten runs, and most of
    a round that finds nothing new. Any other writer (another sync renames a new manifest
    in; an edit in place) changes who the file is, and the round reads it as every sync
    does."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple] = {}

    @staticmethod
    def look(dst: Path) -> tuple | None:
        """Who the manifest of ``dst`` is now (None: it cannot be looked at)."""
        try:
            return _identity(os.stat(Path(dst) / MARKER_FILE))
        except OSError:
            return None

    def keep(self, dst: Path, marker: dict, seen: tuple | None = None) -> None:
        """``marker`` (as :func:`~tbconvert.incremental.manifest_stream.read` gives it: its
        runs' states as :class:`RunState`, no digest) was just committed to ``dst``, or
        (``seen``: who the file was before) read from it."""
        key = os.path.abspath(dst)
        now = self.look(dst)
        if now is None or (seen is not None and now != seen):
            self._kept.pop(key, None)
            return
        self._kept[key] = (now, _copy(marker))

    def take(self, dst: Path) -> dict | None:
        """The manifest of ``dst`` if it is the one kept (a copy the sync may change, its
        states shared), else None."""
        entry = self._kept.get(os.path.abspath(dst))
        if entry is None or self.look(dst) != entry[0]:
            return None
        return _copy(entry[1])


def _copy(marker: dict) -> dict:
    """A manifest whose own dicts a sync may change (its runs' states are never changed)."""
    sync = marker["sync"]
    return dict(marker, sync=dict(sync, runs=dict(sync["runs"])))


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


# How often a watch's rounds look through the whole dataset for garbage. Between, a round
# looks at the names it may have left itself: a watch of a round every 0.2 s keeps two
# minutes of retired parts, thousands of names, and listing them every round took longer
# than the round's own work (800 rounds: 0.7 -> 8.4 ms a round).
SWEEP_SECONDS = 30


def remove_garbage(dst: Path, marker: dict, retire: bool = False, left=None,
                   sweeps: Sweeps | None = None) -> int:
    """Take away part files (and manifest drafts, and the lock drafts of killed syncs) that
    ``marker`` does not name; how many. A sync killed as it committed leaves parts that no
    manifest names, which readers of the bare directory would count.

    With ``retire`` (just after a commit, whose manifest left them out), parts are retired
    rather than removed (see :func:`~tbconvert.formats.parquet.retired_name`): a reader that
    took the manifest before the commit still finds them for RETIRE_SECONDS. Retired parts
    older than that are removed.

    ``left`` (with ``sweeps``, a watch's): every name this sync may have left behind (the
    parts the manifest it replaced named, the pending files of the parts it wrote). Unless
    ``sweeps`` says the whole directory is due, only those are looked at: retired parts
    then wait for the next sweep, at most SWEEP_SECONDS more."""
    import time

    from tbconvert.incremental.lock import dead_draft
    named = named_parts(marker)
    removed = 0
    now = int(time.time())
    if left is not None and sweeps is not None and not sweeps.due(dst, time.monotonic()):
        entries = _present(dst, (name for name in left if name not in named))
    else:
        entries = os.scandir(dst)
    for entry in entries:
        name = entry.name
        part = name.startswith(_PART_PREFIX) and name.endswith(".parquet") and name not in named
        stray = name.startswith((_TMP_PREFIX, PENDING_PREFIX)) or dead_draft(name) or (
            name.startswith(RETIRED_PREFIX) and retired_at(name) < now - RETIRE_SECONDS)
        if (part or stray) and entry.is_file(follow_symlinks=False):
            try:
                if part and retire:
                    os.replace(entry.path, os.path.join(dst, retired_name(name, now)))
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


class _Entry:
    """What :func:`remove_garbage` asks of a directory entry, for a name looked up alone."""

    __slots__ = ("name", "path", "_regular")

    def __init__(self, name: str, path: str, regular: bool) -> None:
        self.name, self.path, self._regular = name, path, regular

    def is_file(self, follow_symlinks: bool = True) -> bool:
        return self._regular


def _present(dst: Path, names) -> list[_Entry]:
    """The entries of ``dst`` among ``names`` (those that are not there, or cannot be
    looked at, are left out)."""
    import stat
    found = []
    for name in sorted(set(names)):
        if "/" in name or os.sep in name or name in (".", ".."):
            continue
        path = os.path.join(dst, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        found.append(_Entry(name, path, stat.S_ISREG(mode)))
    return found
