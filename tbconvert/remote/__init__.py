"""Sources and destinations at fsspec URLs (``s3://``, ``gs://``, ``az://``, ``hf://``,
``http(s)://``, ``memory://``...).

A remote source is staged locally (:mod:`tbconvert.remote.source`) and read by the
format's own reader; a remote destination is written locally and committed to the store
(:mod:`tbconvert.remote.dest`). Messages and report entries name the URL, never the
staging path, and never a secret.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from tbconvert import errors
from tbconvert.formats.base import Writer
from tbconvert.remote import failures
from tbconvert.remote.urls import (
    basename,
    is_remote,
    is_url,
    join,
    localize,
    parse_storage_options,
    protocol,
)

_PUBLIC: dict[str, str] = {}


def public_text(text: str) -> str:
    """``text`` naming URLs instead of staging paths, with secrets taken out."""
    for local in sorted(_PUBLIC, key=len, reverse=True):
        if local in text:
            text = text.replace(local, _PUBLIC[local])
    return failures.scrub(text)


if public_text not in errors.MESSAGE_FILTERS:
    errors.MESSAGE_FILTERS.append(public_text)


def publish(local: Path, url: str) -> None:
    _PUBLIC[str(local)] = url.rstrip("/")


def for_workers(location, scheduler):
    """``location`` as the workers of a cluster must be told it: a relative path is relative
    to the directory the command runs in, which is not a worker's. Messages and report
    entries still name it as the user gave it (``logs/run/...``)."""
    if scheduler is None or is_url(location):
        return location
    made = Path(os.path.abspath(location))
    if not os.path.isabs(location):
        publish(made, os.fspath(location))
    return made


def exists(url: str, storage_options=None) -> bool:
    """Whether anything is stored at or under ``url``."""
    from tbconvert.remote.urls import filesystem
    failures.remember_secrets(storage_options)
    fs, path = filesystem(url, storage_options)
    try:
        return bool(fs.exists(path))
    except Exception as exc:  # noqa: BLE001
        err = failures.describe(exc, url, writing=True)
        if "no such bucket" in err.cli_message():
            return False
        raise err from None


def public_report(report, start: int = 0) -> None:
    """Report entries from ``start`` on, rewritten to name URLs."""
    if not _PUBLIC:
        return
    for i in range(start, len(report.issues)):
        issue = report.issues[i]
        message = public_text(issue.message)
        path = None if issue.path is None else public_text(issue.path)
        if message != issue.message or path != issue.path:
            report.issues[i] = dataclasses.replace(issue, message=message, path=path)
    report.outputs[:] = [public_text(o) for o in report.outputs]


def check_overlap(src, dst) -> bool:
    """For URLs: refuse a destination that is, holds or lies in the source. Returns whether
    the pair was judged here (False: both are local paths)."""
    if not (is_remote(src) or is_remote(dst)):
        return False
    if is_remote(src) and is_remote(dst) and protocol(src) == protocol(dst):
        s = src.rstrip("/") + "/"
        d = dst.rstrip("/") + "/"
        how = "is" if s == d else "is inside" if d.startswith(s) else \
            "contains" if s.startswith(d) else ""
        if how:
            raise errors.UsageError(f"{dst} {how} the source {src}; choose a destination "
                                    "outside it (nothing was written)")
    return True


class RemoteReader:
    """A format's reader over a staged copy of a URL; closing it removes the stage."""

    def __init__(self, inner, stage) -> None:
        self._inner = inner
        self._stage = stage
        self._issues_from = 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def iter_runs(self):
        try:
            yield from self._inner.iter_runs()
        finally:
            public_report(self._inner.report)

    def plugin_source(self):
        """The files of TensorBoard's plugins the URL's listing holds, read from the store
        when asked for (see :mod:`tbconvert.formats.tfevents.plugin_copy`); None for a
        source of a format that holds none (an archive, an export)."""
        if getattr(self._inner, "plugin_source", None) is None:
            return None
        from tbconvert.formats.tfevents.plugin_copy import StoreFiles
        return StoreFiles(self._stage)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._stage.cleanup()
            public_report(self._inner.report)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_reader(url: str, fmt_name, options, report, open_local):
    """Stage ``url`` and open ``open_local(local_path)`` on it."""
    from tbconvert.remote.source import SourceStage
    stage = SourceStage(url, options.storage_options, report, options.progress,
                        options.wants_run)
    publish(stage.local, url)
    try:
        local = stage.fetch()
        inner = open_local(local)
    except BaseException:
        stage.cleanup()
        public_report(report)
        raise
    return RemoteReader(inner, stage)


class RemoteWriter:
    """A format's writer into a local stage, committed to the store on close."""

    run_parts = None    # every run goes through the stage's one writer

    def __init__(self, inner, stage) -> None:
        self._inner = inner
        self._stage = stage

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def close(self) -> None:
        try:
            self._inner.close()
        except BaseException:
            self._stage.abort()
            raise
        self._stage.commit()
        public_report(self._inner.report)

    def abort(self) -> None:
        try:
            self._inner.abort()
        finally:
            self._stage.abort()
            public_report(self._inner.report)

    # the same context protocol as every writer: commit on success, remove on failure
    __enter__ = Writer.__enter__
    __exit__ = Writer.__exit__


def open_writer(url: str, fmt, options, report, open_local):
    """A writer for ``url``: ``open_local(staged_path)`` wrapped to commit to the store."""
    from tbconvert.remote.dest import DestStage
    # A directory-writing format writes a directory unless the name carries its suffix.
    directory = fmt.directory_output and not basename(url).lower().endswith(fmt.suffixes)
    stage = DestStage(url, options.storage_options, force=options.force,
                      directory=directory or None, report=report)
    publish(stage.local, url)
    try:
        inner = open_local(stage.local)
    except BaseException:
        stage.abort()
        raise
    return RemoteWriter(inner, stage)


def staged_output(url: str, storage_options, *, force: bool, directory: bool, report=None):
    """A :class:`~tbconvert.remote.dest.DestStage` for outputs written outside a Writer
    (tables, media): write to ``stage.local``, then ``stage.commit()`` or ``stage.abort()``.
    ``report`` is told of names the store cannot hold as they are."""
    from tbconvert.remote.dest import DestStage
    stage = DestStage(url, storage_options, force=force, directory=directory, report=report)
    publish(stage.local, url)
    return stage


__all__ = ["is_url", "is_remote", "localize", "for_workers", "join", "basename", "parse_storage_options",
           "open_reader", "open_writer", "exists", "publish", "staged_output", "check_overlap",
           "public_text",
           "public_report"]
