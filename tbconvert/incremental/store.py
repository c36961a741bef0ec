"""A synced dataset at an fsspec URL (``s3://``, ``gs://``, ``memory://``...).

Object stores have no rename, so the sync works on a small local stage holding only the
committed manifest, and the store sees, in this order:

1. one listing of the dataset's prefix (the manifest, the lock, the parts);
2. the lock object ``_tbconvert.lock`` (host, pid, time), created with ``If-None-Match: *``
   where the store takes it (S3, and moto), so two syncs cannot both create it; elsewhere
   it is checked then written, and is advisory;
3. one GET of the manifest ``_tbconvert.json``; parts no manifest names (left by a sync
   that was killed) are deleted;
4. the new parts, uploaded straight to their final keys: their names carry the new
   generation, so the committed manifest names none of them and readers never see them;
5. the manifest, in one PUT (a single-object PUT is atomic on S3): the commit;
6. only then the parts the new manifest no longer names are deleted, and the lock.

A sync killed before step 5 leaves the dataset as it was (plus unnamed parts the next
sync removes); killed after it, the new dataset, with at most some unnamed parts left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tbconvert import scratch
from tbconvert.errors import OutputExistsError, TbconvertError, UsageError
from tbconvert.formats.parquet import MARKER_FILE
from tbconvert.incremental.files import PENDING_PREFIX, pending_name
from tbconvert.incremental.lock import LOCK_FILE, Lock, parsed_lock

_UPLOADS = 8        # part uploads in flight at once


def _is_part(name: str) -> bool:
    return name.startswith("part-") and name.endswith(".parquet")


class StoreDataset:
    """The dataset at ``url``: its listing, a local stage with its manifest, and the
    manifest operations of :mod:`tbconvert.incremental.manifest` done against the store."""

    def __init__(self, url: str, storage_options: dict | None = None) -> None:
        from tbconvert.remote import failures
        from tbconvert.remote.urls import READ_ONLY, check_plain_key, filesystem, protocol
        failures.remember_secrets(storage_options)
        self.url = url.rstrip("/")
        if protocol(url) in READ_ONLY:
            raise UsageError(f"{url}: {protocol(url)}:// URLs can only be read; sync into a "
                             "store such as s3://, gs:// or az://")
        self.fs, root = filesystem(url, storage_options)
        self.root = root.rstrip("/")
        if protocol(url) in ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss") and \
                "/" not in self.root.strip("/"):
            raise UsageError(f"{url}: name a prefix inside the bucket ({self.url}/dataset, "
                             "not the bucket itself)")
        check_plain_key(url, self.root)
        self.names: dict[str, int] = {}
        self.uploaded: list[str] = []
        self.stage = scratch.make(scratch.SYNC_STAGE)
        from tbconvert import remote
        remote.publish(self.stage, self.url)

    def key(self, name: str) -> str:
        return f"{self.root}/{name}"

    def _error(self, exc: Exception):
        from tbconvert.remote import failures
        return failures.describe(exc, self.url, writing=True)

    # -- listing and preparing -----------------------------------------------------------------

    def list(self) -> None:
        """List the prefix once: every later decision uses this listing."""
        try:
            self.fs.invalidate_cache()
            found = self.fs.find(self.root, detail=True)
        except FileNotFoundError:
            found = {}
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from None
        if self.root in found and found[self.root].get("type") != "directory":
            raise OutputExistsError(f"{self.url}: exists and is a single object; sync "
                                    "needs a directory dataset (choose another DST)")
        prefix = self.root + "/"
        self.names = {k[len(prefix):]: int(v.get("size") or 0)
                      for k, v in found.items() if k.startswith(prefix)}
        if MARKER_FILE not in self.names:
            foreign = [n for n in self.names if not (
                _is_part(n) or n.startswith(("_tbconvert", PENDING_PREFIX)))]
            if foreign:
                raise OutputExistsError(f"{self.url}: exists and is not a tbconvert dataset "
                                        f"(it holds {foreign[0]!r}); choose a new or empty "
                                        "prefix")

    def fetch_marker(self) -> None:
        """The committed manifest into the stage (one GET), when there is one."""
        if MARKER_FILE not in self.names:
            return
        try:
            data = self.fs.cat_file(self.key(MARKER_FILE))
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from None
        (self.stage / MARKER_FILE).write_bytes(data)

    # -- the manifest operations (the stage path is what the sync passes as ``dst``) ------------

    def load(self, dst: Path, report, each=None) -> dict:
        from tbconvert.incremental import manifest
        return manifest.load(dst, report, each)

    def remove_garbage(self, dst: Path, marker: dict, retire: bool = False) -> int:
        """Delete the listed parts ``marker`` does not name (and drafts), here and in the stage.
        (Never retired: a store's readers list the prefix, which would show them.)"""
        from tbconvert.incremental import manifest
        manifest.remove_garbage(dst, marker)
        named = manifest.named_parts(marker)
        stray = [n for n in self.names if "/" not in n and (
            (_is_part(n) and n not in named) or n.startswith(PENDING_PREFIX))]
        self._delete(stray)
        return len(stray)

    def _delete(self, names) -> None:
        names = list(names)
        if not names:
            return
        try:
            self.fs.rm([self.key(n) for n in names])
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from None
        for n in names:
            self.names.pop(n, None)

    def publish(self, dst: Path, parts: list[str]) -> None:
        """Upload the staged parts to their final keys, several at once (no manifest names
        them yet), and drop the local copies."""
        from concurrent.futures import ThreadPoolExecutor, wait
        pool = ThreadPoolExecutor(_UPLOADS)
        futures = []
        try:
            for part in parts:
                self.uploaded.append(part)
                futures.append(pool.submit(self.fs.put_file, str(dst / pending_name(part)),
                                           self.key(part)))
            for future in futures:
                future.result()
        except BaseException as exc:
            for future in futures:
                future.cancel()
            wait(futures, timeout=300)
            if isinstance(exc, Exception) and not isinstance(exc, TbconvertError):
                raise self._error(exc) from None
            raise
        finally:
            pool.shutdown(wait=False)
        for part in parts:
            try:
                os.unlink(dst / pending_name(part))
            except OSError:
                pass
            self.names[part] = 0

    def commit(self, dst: Path, marker: dict) -> None:
        """The manifest in one PUT: the sync's commit."""
        from tbconvert.formats.parquet import schema as S
        from tbconvert.incremental.manifest import marker_digest, marker_pieces
        marker = dict(marker)
        marker[S.MARKER_DIGEST] = marker_digest(marker)
        data = b"".join(marker_pieces(marker))
        from tbconvert.interrupts import deferred
        # Ctrl-C waits: once the PUT is in, the new parts belong to the dataset, and cleaning
        # up after an interrupt must follow the new manifest, not the old one.
        with deferred():
            try:
                self.fs.pipe_file(self.key(MARKER_FILE), data)
            except Exception as exc:  # noqa: BLE001
                raise self._error(exc) from None
            self.uploaded = []
            (dst / MARKER_FILE).write_bytes(data)

    def abort(self) -> None:
        """Remove the parts uploaded for a manifest that was never committed (best effort:
        the next sync removes what is left)."""
        parts, self.uploaded = self.uploaded, []
        try:
            self._delete(parts)
        except Exception:  # noqa: BLE001
            pass

    def cleanup(self) -> None:
        scratch.remove(self.stage)


class StoreLock(Lock):
    """The dataset's lock as an object in the store (see the module's notes on exclusivity)."""

    def __init__(self, dataset: StoreDataset, report, *, break_lock: bool = False) -> None:
        super().__init__(dataset.stage, report, break_lock=break_lock)
        self.dataset = dataset
        self.key = dataset.key(LOCK_FILE)
        self.shown = f"{dataset.url}/{LOCK_FILE}"

    def _create(self) -> bool:
        fs = self.dataset.fs
        try:
            fs.pipe_file(self.key, self._body(), mode="create")
        except FileExistsError:
            return False
        except OSError as exc:
            import errno
            if exc.errno == errno.EINVAL:       # a store answering 412 without the condition
                return False
            raise self.dataset._error(exc) from None
        except TypeError:
            # a file system without exclusive writes: check, then write (advisory)
            if fs.exists(self.key):
                return False
            fs.pipe_file(self.key, self._body())
        except Exception as exc:  # noqa: BLE001
            raise self.dataset._error(exc) from None
        return True

    def holder(self) -> dict | None:
        try:
            return parsed_lock(self.dataset.fs.cat_file(self.key))
        except FileNotFoundError:
            return None
        except OSError:
            return {}

    def _age(self) -> float | None:
        try:
            modified = self.dataset.fs.modified(self.key)
            return time.time() - modified.timestamp()
        except Exception:  # noqa: BLE001
            return None

    def _stale(self, holder: dict) -> str | None:
        if not holder:
            age = self._age()
            return "unreadable and over a minute old" if age is not None and age > 60 else None
        return super()._stale(holder)

    TRIES = 5

    def _uninterrupted(self):
        # a request to the store may take long: Ctrl-C stays free to stop it (a lock
        # object left behind is known stale later)
        import contextlib
        return contextlib.nullcontext()

    def _where(self) -> tuple[object, str, object]:
        return self.dataset.url, "lock object", self.shown

    def _take_over(self, holder: dict) -> bool:
        try:
            self.dataset.fs.rm_file(self.key)
        except FileNotFoundError:
            pass
        except Exception as exc:  # noqa: BLE001 - told as the store's error
            raise self.dataset._error(exc) from None
        return True

    def _remove(self) -> None:
        self.dataset.fs.rm_file(self.key)
