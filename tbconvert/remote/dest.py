"""Writing a destination at a URL so that it appears complete or not at all.

The writer works in a local stage exactly as it does for a local destination; the commit
then uploads. Object stores have no rename, so:

- a single-object output (Parquet file, HDF5 file, CSV) where nothing is under its key yet
  is uploaded straight to it: a PUT, or a multipart upload that is completed last, makes
  the object appear whole (an upload that an interrupt had to wait for is removed again);
  one that replaces an object (``--force``) is uploaded under a temporary key and moved
  with Ctrl-C and SIGTERM held back, so the old object stays until the new one is whole;
- a directory output (event-file logdir, export, Parquet dataset, media) is uploaded under
  a hidden temporary prefix beside it, ``.<name>.tbconvert-tmp-<id>/``; then, with Ctrl-C
  and SIGTERM held back, each object is copied server-side to the final prefix, objects of
  a replaced (``--force``) output that the new one lacks are deleted, and the temporary
  prefix is removed. Until the copies begin nothing exists under the final prefix.

Stores that are not object stores (``memory://``, SFTP...) take the temporary-name route
for single files too, finished by a move.
"""

from __future__ import annotations

import contextlib
import uuid

from tbconvert import scratch
from tbconvert.errors import OutputError, OutputExistsError, TbconvertError, UsageError
from tbconvert.output import _PENDING, TMP_MARK
from tbconvert.remote import failures
from tbconvert.remote.urls import ATOMIC_PUT, READ_ONLY, basename, check_plain_key, filesystem, protocol

_UPLOADS = 8     # uploads in flight at once


def _is_marker(key: str) -> bool:
    """Whether an object of a directory output is a marker (``_tbconvert.json``, and any
    ``_``-named file readers skip) rather than data."""
    return key.rsplit("/", 1)[-1].startswith("_")


def _keys(url: str, rels: list[str], report) -> list[str]:
    """The object keys (below the output's prefix) of the staged files ``rels``: text, each
    byte of a name that is not UTF-8 spelt ``%XX``. The local writers escape a ``%`` that
    precedes such a spelling, so no two files get one key; should two do so (copied plugin
    files), the upload is refused rather than one object lost."""
    from tbconvert import names
    keys = [names.text(rel) for rel in rels]
    if keys == rels:
        return keys
    seen: dict[str, str] = {}
    told: set[str] = set()
    for rel, key in zip(rels, keys, strict=True):
        if seen.setdefault(key, rel) != rel:
            raise OutputError(f"{url}: two files would be stored as {key!r} (a name that is not "
                              "UTF-8 spelt %XX, beside a file already named so); write to a "
                              "local directory instead")
        if key != rel and report is not None:
            # the outermost part of the path that changed: a run directory, told once
            parts, changed = key.split("/"), rel.split("/")
            depth = next(i for i, (a, b) in enumerate(zip(parts, changed, strict=True)) if a != b)
            prefix = "/".join(parts[:depth + 1])
            if prefix not in told:
                told.add(prefix)
                report.add("name_escaped", f"{prefix}: the name is not valid UTF-8; stored in "
                           f"{url} with its odd bytes escaped (%XX), as object keys are text",
                           lost=False)
    return keys


class DestStage:
    """A local stage for the output at ``url``, and its commit to the store."""

    def __init__(self, url: str, storage_options: dict | None, *, force: bool,
                 directory: bool | None = None, report=None) -> None:
        failures.remember_secrets(storage_options)
        self.url = url
        self.report = report
        self.proto = protocol(url)
        if self.proto in READ_ONLY:
            raise UsageError(f"{url}: {self.proto}:// URLs can only be read; write to a "
                             "store such as s3://, gs:// or az://")
        self.fs, self.root = filesystem(url, storage_options)
        if "/" not in self.root.strip("/"):
            raise UsageError(f"{url}: name an object or prefix inside the bucket "
                             f"({url.rstrip('/')}/logs, not the bucket itself)")
        check_plain_key(url, self.root)
        self.force = force
        self.kind = self._existing()
        if self.kind is not None:
            if directory is not None and (self.kind == "directory") != directory:
                raise OutputExistsError(
                    f"{url} exists and is a {'directory' if self.kind == 'directory' else 'file'}"
                    f"; refusing to replace it with a {'directory' if directory else 'file'}; "
                    "remove it first")
            if not force:
                raise OutputExistsError(f"{url} already exists; pass --force to replace it "
                                        "(it is only replaced once the new output is complete)")
        self.tmp = scratch.make(scratch.BUILT)
        self.local = self.tmp / basename(url)
        parent, _, name = self.root.rpartition("/")
        self._temporary = f"{parent}/.{name}{TMP_MARK}{uuid.uuid4().hex[:12]}"
        self._uploaded: list[str] = []
        self._done = False
        _PENDING.add(self)

    def _existing(self) -> str | None:
        try:
            self.fs.invalidate_cache()
            info = self.fs.info(self.root)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001
            err = failures.describe(exc, self.url, writing=True)
            if "no such bucket" in err.cli_message():
                return None      # the upload says so, once there is something to upload
            raise err from None
        return "directory" if info.get("type") == "directory" else "file"

    def commit(self) -> None:
        """Put the staged output in place. Names in a directory output that are not valid
        UTF-8 (a run directory named by other bytes) are uploaded with those bytes spelt
        ``%XX``, as object keys are text; each such name is noted in the stage's report."""
        if self._done:
            return
        try:
            if self.local.is_dir():
                self._commit_directory()
            elif self.local.exists():
                self._commit_file()
        except TbconvertError:
            self.abort()
            raise
        except Exception as exc:  # noqa: BLE001
            self.abort()
            raise failures.describe(exc, self.url, writing=True) from None
        self._finish()

    def _commit_file(self) -> None:
        if self.kind == "directory":
            raise OutputExistsError(f"{self.url} exists and is a directory; remove it first")
        if self.proto in ATOMIC_PUT and self.kind is None:
            # Nothing under the key to keep: the object appears whole once its PUT ends. An
            # interrupt waits for the PUT in flight (it cannot be cut short), then abort()
            # removes what it made, so Ctrl-C leaves no object. (An object that appears
            # under the key while the PUT runs is replaced: a store's PUT cannot refuse it.)
            self._check_still_free()
            self._uploaded = [self.root]
            self._put([(self.local, self.root)])
            self._uploaded = []
            return
        # An object to replace (--force), or a store whose PUTs are not whole: uploaded
        # aside, then moved with Ctrl-C held back, so the old object stays until the new one
        # is whole and an interrupted upload costs only the temporary one.
        self._uploaded = [self._temporary]
        self._put([(self.local, self._temporary)])
        self._check_still_free()
        with self._held() as done:
            self.fs.mv(self._temporary, self.root)
            self._uploaded = []
            done.append(True)

    @contextlib.contextmanager
    def _held(self):
        """Ctrl-C and SIGTERM held back while the output is put in place. One that arrives
        then is let through after it, marked ``complete`` with the URL once the block has
        appended to the list it is given, so that it is told as coming after a whole
        output, not as a removal."""
        from tbconvert.interrupts import deferred
        done: list = []
        try:
            with deferred():
                yield done
        except KeyboardInterrupt as exc:
            if done:
                exc.complete = self.url
            raise

    def _commit_directory(self) -> None:
        files = sorted(p for p in self.local.rglob("*") if p.is_file())
        rels = _keys(self.url, [p.relative_to(self.local).as_posix() for p in files],
                     self.report)
        staged = [f"{self._temporary}/{rel}" for rel in rels]
        finals = [f"{self.root}/{rel}" for rel in rels]
        self._uploaded = staged
        if files:
            self._put(list(zip(files, staged, strict=True)))
        self._check_still_free()
        old = set()
        if self.kind is not None:
            self.fs.invalidate_cache()
            old = {p.rstrip("/") for p in self.fs.find(self.root)}
        # A store has no rename: the objects are copied one by one. So that a commit cut short
        # (the store failing midway) never leaves a marker naming parts that are not there, a
        # replaced output's markers go first and the new ones (a dataset's `_tbconvert.json`)
        # last: readers then refuse the prefix instead of reading a mix.
        pairs = list(zip(staged, finals, strict=True))
        old_markers = sorted(p for p in old if _is_marker(p))
        with self._held() as done:    # the short commit runs to its end once begun
            try:
                if old_markers:
                    self.fs.rm(old_markers)
                for group in (False, True):
                    these = [pair for pair in pairs if _is_marker(pair[1]) == group]
                    if these:
                        self.fs.copy([a for a, _ in these], [b for _, b in these])
            except Exception as exc:  # noqa: BLE001 - told as a store failure, with what is left
                raise self._cut_short(exc, finals, bool(old_markers)) from None
            stale = sorted(old - set(finals))
            if stale:
                self.fs.rm(stale)
            if staged:
                self.fs.rm(staged)
            self._uploaded = []
            done.append(True)

    def _cut_short(self, exc: BaseException, finals: list[str],
                   had_marker: bool) -> TbconvertError:
        """The error for a commit the store failed midway: a new output's objects copied so
        far are removed again; a replaced one is left incomplete, and the message says so."""
        err = failures.describe(exc, self.url, writing=True)
        if self.kind is None:
            try:
                self.fs.rm(finals)
                left = "nothing was left there"
            except Exception:  # noqa: BLE001 - the store is failing: said, not hidden
                left = "part of the output may be left there: remove it before reading it"
        elif had_marker:
            left = ("the old output there is partly replaced (its marker removed, so tbconvert "
                    "refuses to read it): run again with --force to finish replacing it")
        else:
            left = ("the old output there is partly replaced: run again with --force to finish "
                    "replacing it")
        return type(err)(f"{err.cli_message()}; the output was being put in place: {left}")

    def _check_still_free(self) -> None:
        """Without ``force``, refuse a destination that another conversion (or a user) made
        while this output was written and uploaded aside: checked just before it is put in
        place."""
        if not self.force and self._existing() is not None:
            raise OutputExistsError(f"{self.url} appeared while the output was being written; "
                                    "not replaced (pass --force to replace it)")

    def _put(self, pairs) -> None:
        """Upload ``(local, key)`` pairs, several at once. On an interrupt or a failure no
        new upload starts and those in flight are waited for (an upload cannot be cut short;
        further interrupts wait too), so nothing lands after :meth:`abort` has cleaned up."""
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(_UPLOADS)
        try:
            # A signal may land while uploads are still being submitted, before their futures
            # are known here: the pool itself is waited for, not a list of futures.
            futures = [pool.submit(self.fs.put_file, str(local), key) for local, key in pairs]
            for future in futures:
                future.result()
        except BaseException:
            # A second Ctrl-C here would leave uploads running that land after abort() has
            # cleaned up, under a message saying they were removed: it waits its turn.
            from tbconvert.interrupts import deferred
            with deferred():
                pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=False)

    def abort(self) -> None:
        """Remove the stage and whatever was uploaded under the temporary name."""
        if self._done:
            return
        if self._uploaded:
            try:
                self.fs.rm(self._uploaded)
            except Exception:  # noqa: BLE001 - best effort; the name is hidden and marked
                pass
        self._finish()

    def _finish(self) -> None:
        self._done = True
        _PENDING.discard(self)
        scratch.remove(self.tmp)
