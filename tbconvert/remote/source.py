"""Reading a source at a URL: one recursive listing, then large ranged reads into a local stage.

The stage is a private temporary directory that mirrors the files under the URL, so every
reader (event files, exports, Parquet, HDF5) runs its own local code on it, parallel runs
(``-j``) included. Only files a TensorBoard source can hold are fetched (event files, the
export's JSON, ``tensors/`` and ``blobs/``, Parquet parts), so checkpoints saved next to the
logs cost nothing (a URL naming one file fetches that file). The progress bar counts the
fetched bytes too. Requests: the listing's pages plus one ranged GET per ``BLOCK`` of each
file, issued concurrently. :meth:`SourceStage.refresh` fetches only what a growing file gained.
"""

from __future__ import annotations

import datetime
import errno
import os
import re
import shutil
from pathlib import Path, PurePosixPath

from tbconvert import scratch
from tbconvert.errors import FormatError, OutputError, UsageError
from tbconvert.formats.tfevents import plugin_files
from tbconvert.formats.tfevents.event_files import is_event_file
from tbconvert.remote import failures
from tbconvert.remote.urls import READ_ONLY, basename, filesystem, protocol

BLOCK = 64 << 20            # bytes per ranged read (at least 8 MiB: few, large requests)
BATCH_BYTES = 256 << 20     # bytes in flight at once
# What the readers of a directory source open: event files, an export's files (its JSON, and
# whatever lies in tensors/ and blobs/), the experiment facts tbconvert keeps beside event
# files, and a Parquet dataset's marker and part files. Checkpoints, model weights and other
# JSON are left where they are.
_WANTED_NAMES = frozenset({"metadata.json", "scalars.json", "tensors.json",
                           "blob_sequences.json", "tbconvert-experiment.json",
                           "_tbconvert.json"})
_WANTED_SUFFIXES = (".parquet", ".pq")
_WANTED_DIRS = frozenset({"tensors", "blobs"})
_OLD_EXPORT_RE = re.compile(r"scalars_.+\.json")


def wanted(rel: str) -> bool:
    """Whether a file at ``rel`` (below the source URL) can be part of a TensorBoard source."""
    parts = rel.split("/")
    name = parts[-1]
    return ("tfevents" in name or name in _WANTED_NAMES or name.endswith(_WANTED_SUFFIXES)
            or _OLD_EXPORT_RE.fullmatch(name) is not None
            or any(p in _WANTED_DIRS for p in parts[:-1]))


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` until every byte is down: a write may stop short (at a size limit or a full
    disk) and only the next one says why."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _mtime_ns(info: dict) -> int:
    """An object's modification time in nanoseconds from a listing entry (the key and the
    type differ from store to store), or 0."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified"):
        value = info.get(key)
        if value is None:
            continue
        try:
            if isinstance(value, str):
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if isinstance(value, datetime.datetime):
                if value.tzinfo is None:
                    value = value.replace(tzinfo=datetime.timezone.utc)
                value = value.timestamp()
            return max(0, int(float(value) * 1e9))
        except (TypeError, ValueError, OverflowError, OSError):
            continue
    return 0


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and all(p not in ("", ".", "..") and "\0" not in p for p in parts) \
        and not PurePosixPath(rel).is_absolute()


def _store_call(fn, name: str):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every store failure becomes one line
        raise OSError(errno.EIO, str(failures.describe(exc, name))) from None


class _StoreFile:
    """An object of the store read by byte ranges, as event files are fetched (opening one
    by name may find a folder of that name instead), its size as the listing gave it; its
    failures are OSErrors."""

    def __init__(self, fs, path: str, size: int, name: str) -> None:
        self._fs, self._path, self._size, self._name = fs, path, size, name
        self._at = 0

    def read(self, n: int = -1) -> bytes:
        end = self._size if n < 0 else min(self._size, self._at + n)
        if end <= self._at:
            return b""
        data = _store_call(lambda: self._fs.cat_file(self._path, start=self._at, end=end),
                           self._name)
        if len(data) != end - self._at:
            raise OSError(errno.EIO, f"the store gave {len(data)} bytes of {end - self._at} "
                                     "asked for")
        self._at = end
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class SourceStage:
    """The files under one source URL, mirrored in a local temporary directory."""

    def __init__(self, url: str, storage_options: dict | None, report, progress=None,
                 wants_run=lambda name: True) -> None:
        failures.remember_secrets(storage_options)
        self.url = url
        self.report = report
        self.fs, self.root = filesystem(url, storage_options)
        self.proto = protocol(url)
        if not self.root.strip("/") and self.proto not in READ_ONLY:
            raise UsageError(f"{url}: name a bucket (and a prefix or object in it), not the "
                             "whole store")
        self.tmp = scratch.make(scratch.FETCHED)
        name = basename(url)
        self.local = self.tmp / (name if _safe_rel(name) else "source")
        self.single = False
        self.sizes: dict[str, int] = {}     # rel -> bytes staged
        self.mtimes: dict[str, int] = {}    # rel -> the object's modification time (ns)
        self.dated: dict[str, int] = {}     # rel -> the time its staged copy was given
        self.requests = 0
        self.plugins_noted: set[str] = set()     # where the files of plugins were told of
        self.plugin_places: dict = {}             # {where: plugin_files.Place}
        self.others: dict[str, tuple[str, int]] = {}  # the listing's files not fetched
        self.wants_run = wants_run                # (only in the runs that were asked for)
        self.progress = progress    # told the bytes to fetch, then each batch fetched

    # ------------------------------------------------------------------ listing
    def listing(self) -> dict[str, tuple[str, int]]:
        """``{rel: (remote path, size)}`` of the wanted files: one recursive listing (which
        also notes each object's modification time, see :meth:`_dated`)."""
        try:
            self.fs.invalidate_cache()
            # HTTP has no listing: a URL there names one file
            found = {} if self.proto in ("http", "https") else self.fs.find(self.root,
                                                                             detail=True)
            if not found:
                found = self._single()
        except Exception as exc:  # noqa: BLE001 - every store failure becomes one line
            raise failures.describe(exc, self.url) from None
        self.requests += 1
        files: dict[str, tuple[str, int]] = {}
        root = self.root.rstrip("/")
        own = found.get(root)
        self.mtimes = {}
        if own is not None and own.get("type") == "file" and len(found) == 1:
            self.single = True
            self.mtimes[""] = _mtime_ns(own)
            return {"": (root, int(own.get("size") or 0))}
        skipped = 0
        plugin_found: dict = {}
        self.others = {}
        for path, info in sorted(found.items()):
            if info.get("type") == "directory" or not path.startswith(root + "/"):
                continue
            rel = path[len(root) + 1:]
            if not rel or rel.endswith("/"):
                continue                # a folder marker
            if not _safe_rel(rel):
                skipped += 1
                self.report.add("remote_key_skipped", f"{self.url}: the object {rel!r} has a "
                                "name that is not a safe path; skipped", path=self.url)
                continue
            if wanted(rel):
                files[rel] = (path, int(info.get("size") or 0))
                self.mtimes[rel] = _mtime_ns(info)
                continue
            self.others[rel] = (path, int(info.get("size") or 0))
            if (place := plugin_files.place(rel.split("/"))) is not None:
                plugin_found.setdefault(place, []).append(rel)
        runs = {rel.rpartition("/")[0] or "." for rel in files
                if is_event_file(rel.rpartition("/")[2])}
        self.plugin_places = {}
        for where, place, message in plugin_files.notes(
                plugin_found, self.wants_run, runs, self.name_of):
            if where not in self.plugins_noted:     # (a sync's later listings: told once)
                self.plugins_noted.add(where)
                place.note = self.report.add("plugin_files_not_read", message, path=self.url,
                                             run=place.run, lost=False)
            self.plugin_places[where] = place
        if not files and not skipped:
            raise FormatError(f"{self.url}: no such file or directory (or nothing a "
                              "TensorBoard source holds under it)")
        return files

    def name_of(self, rel: str) -> str:
        """``rel`` (below the URL) named as the user names it."""
        return f"{self.url.rstrip('/')}/{rel}"

    def open_other(self, rel: str):
        """A file of the listing that is not fetched, opened for reading (an OSError, which
        names no secret, where the store fails)."""
        if rel not in self.others:
            raise FileNotFoundError(errno.ENOENT, "not in the listing")
        path, size = self.others[rel]
        return _StoreFile(self.fs, path, size, self.name_of(rel))

    def _single(self) -> dict:
        try:
            info = self.fs.info(self.root)
        except FileNotFoundError as exc:
            if failures.unreachable(exc):
                raise     # (fsspec's HTTP store says "not found" for a refused connection too)
            return {}
        if info.get("type") != "file":
            return {}
        return {self.root.rstrip("/"): {**info, "type": "file"}}

    # ------------------------------------------------------------------ fetching
    def fetch(self) -> Path:
        """Stage everything; returns the local path that stands for the URL."""
        self._get(self.listing(), grow_only=False)
        return self.local

    def refresh(self) -> list[str]:
        """Fetch what changed since the last fetch: a grown file only from its old end.
        Returns the names (relative to the URL) that changed."""
        return self._get(self.listing(), grow_only=True)

    def _target(self, rel: str) -> Path:
        return self.local if self.single else self.local / rel

    def _get(self, files: dict[str, tuple[str, int]], grow_only: bool) -> list[str]:
        ranges: list[tuple[str, Path, int, int]] = []
        changed = []
        for rel, (remote, size) in files.items():
            target = self._target(rel)
            have = self.sizes.get(rel)
            if grow_only and have == size:
                if self.dated.get(rel) == self.mtimes.get(rel, 0):
                    continue
                have = None     # rewritten at the same size: fetched again whole
            start = have if grow_only and have is not None and have < size else 0
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with open(target, "r+b" if start else "wb") as f:
                    f.truncate(start)
            except OSError as exc:
                if isinstance(exc, (FileExistsError, NotADirectoryError, IsADirectoryError)):
                    self.report.add("remote_key_skipped", f"{self.url}: {rel} clashes with "
                                    "another object's name (a file and a folder of one name); "
                                    "skipped", path=self.url)
                    continue
                raise OutputError(f"cannot stage {self.url} in {self.tmp.parent}: "
                                  f"{exc.strerror or exc}; set TMPDIR to a disk with room") \
                    from None
            changed.append(rel)
            self.sizes[rel] = size
            for off in range(start, size, BLOCK):
                ranges.append((remote, target, off, min(size, off + BLOCK)))
        self._check_room(sum(end - start for _r, _t, start, end in ranges))
        if self.progress is not None and ranges:
            self.progress.start(sum(end - start for _r, _t, start, end in ranges))
        batch: list[tuple[str, Path, int, int]] = []
        held = 0
        for item in ranges:
            batch.append(item)
            held += item[3] - item[2]
            if held >= BATCH_BYTES:
                self._read(batch)
                batch, held = [], 0
        if batch:
            self._read(batch)
        self._dated(changed)
        return changed

    def _dated(self, rels: list[str]) -> None:
        """Give staged files their object's modification time, not the time they were
        fetched: a sync tells a file rewritten at the same size by its time (0 where the
        store gives none, which never changes)."""
        for rel in rels:
            ns = self.dated[rel] = self.mtimes.get(rel, 0)
            try:
                os.utime(self._target(rel), ns=(ns, ns))
            except OSError:
                pass

    def _check_room(self, need: int) -> None:
        """Refuse, before fetching anything, a source the temporary directory cannot hold."""
        try:
            free = shutil.disk_usage(self.tmp).free
        except OSError:
            return
        if need > free:
            raise OutputError(f"{self.url}: reading it needs {_gib(need)} of local space for "
                              f"its files, but {self.tmp.parent} has {_gib(free)} free; set "
                              "TMPDIR to a disk with room")

    def _read(self, batch) -> None:
        try:
            blocks = self.fs.cat_ranges([b[0] for b in batch], [b[2] for b in batch],
                                        [b[3] for b in batch], on_error="raise")
        except Exception as exc:  # noqa: BLE001
            raise failures.describe(exc, self.url) from None
        self.requests += len(batch)
        for (_remote, target, start, end), data in zip(batch, blocks, strict=True):
            if isinstance(data, BaseException):
                raise failures.describe(data, self.url) from None
            try:
                with open(target, "r+b") as f:
                    _write_all(f.fileno(), data, start)
            except OSError as exc:
                raise OutputError(f"{self.url}: cannot keep its files in {self.tmp.parent}: "
                                  f"{exc.strerror or exc}; set TMPDIR to a disk with room") \
                    from None
            if self.progress is not None:
                self.progress.advance(end - start)

    def cleanup(self) -> None:
        scratch.remove(self.tmp)
