"""A run written on its own into a scratch HDF5 file, then copied into the archive.

Every run of an archive is written this way, in this process (``--jobs 1``) or in a
worker process: compressing is what costs when writing, and HDF5's object copy moves
the compressed chunks into the archive as they are (for a run of 1.5M points, a few ms
against half a second to write it). The archive's bytes so do not depend on where its
runs were written. A scratch file's size and CRC32C (what :func:`stage` returns) are
checked before HDF5 opens it again: HDF5 can hang or crash on a damaged file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import h5py
from h5py import h5o, h5p

from tbconvert.errors import OutputError
from tbconvert.formats.hdf5 import schema
from tbconvert.formats.hdf5.rungroup import check_run_name, write_run_group
from tbconvert.formats.hdf5.seal import crc_of
from tbconvert.formats.hdf5.sink import FailSafeFile, writing
from tbconvert.interrupts import deferred
from tbconvert.model import Run, Series

# The archive's own file settings: objects copied between files of one format version
# come out as they went in.
LIBVER = ("v108", "latest")
GROUP = "run"   # the run's group in a scratch file

# HDF5's metadata cache grows (by default up to 32 MiB of entries, which take several times
# that in memory: 400-500 MB for a run of 20,000 series) while a run of many series is written
# or copied; these files' caches are kept small instead. Each series is touched once, so a
# larger cache gains nothing (copying is faster with the small one).
CACHE_BYTES = 1 << 20


def cap_metadata_cache(f: h5py.File, size: int = CACHE_BYTES) -> None:
    """Keep HDF5's metadata cache of ``f`` at most ``size`` bytes (of entries)."""
    config = f.id.get_mdc_config()
    config.max_size = size
    config.min_size = min(config.min_size, size)
    config.initial_size = min(config.initial_size, size)
    config.set_initial_size = True
    f.id.set_mdc_config(config)


def stage(path: Path, run: Run, series: Iterable[Series]) -> dict:
    """Write ``run`` into the new file ``path``; returns the facts :func:`copy_staged` checks.

    A failure (a full disk raises its OSError, an interrupt its exception) removes the
    file; a ``path`` that already exists is left alone (FileExistsError).
    """
    check_run_name(run.name)
    sink = f = None
    try:
        with deferred():
            sink = FailSafeFile(path)
            f = h5py.File(sink, "w", libver=LIBVER)
            cap_metadata_cache(f)
        large_blobs = write_run_group(f, GROUP, run, series, lambda: writing(sink))
        with writing(sink):
            f.close()
            f = None
        with deferred():
            crc, size = crc_of(sink.fd, 0)
            sink.close()
        info = {"bytes": size, "crc32c": crc}
        if large_blobs:
            info["large_blobs"] = large_blobs
        return info
    except BaseException:
        with deferred():
            if f is not None:
                with contextlib.suppress(Exception):  # failing already; the file goes
                    f.close()
            if sink is not None:
                sink.close()
                Path(path).unlink(missing_ok=True)
        raise


def copy_staged(path: Path, info: dict | None, run_name: str, parent: h5py.Group, name: str,
                holding: Callable) -> None:
    """Copy the run staged in ``path`` to ``parent[name]`` (HDF5 work inside ``holding()``),
    then remove ``path``, also on failure. A missing, damaged or foreign file is a clear
    :class:`OutputError`."""
    what = f"{path}: the run {run_name!r} written apart for this archive"
    fh = src = group = None
    try:
        try:
            fh = open(path, "rb")  # closed below, once HDF5 has let go of it
        except FileNotFoundError:
            raise OutputError(f"{what} is missing (removed while the conversion ran?); "
                              "convert again") from None
        except OSError as exc:
            raise OutputError(f"{what} cannot be read ({exc.strerror or exc}); "
                              "convert again") from None
        if info is not None:
            _check(fh.fileno(), info, what)
        with deferred():
            try:
                src = h5py.File(fh, "r")
                cap_metadata_cache(src)
                group = src[GROUP]
                staged_name = group.attrs["name"]
            except Exception:  # noqa: BLE001 - whatever HDF5 makes of it, the file is bad
                raise OutputError(f"{what} is not a run written by tbconvert; convert "
                                  "again") from None
        if staged_name != run_name:
            raise OutputError(f"{what} holds the run {staged_name!r} instead; convert again")
        with holding():
            _copy_run(group, parent, name)
    finally:
        with deferred():
            group = None
            if src is not None:
                with contextlib.suppress(Exception):
                    src.close()
            if fh is not None:
                fh.close()
            with contextlib.suppress(OSError):
                os.unlink(path)


def _copy_run(group: h5py.Group, parent: h5py.Group, name: str) -> None:
    """HDF5's object copy of the run ``group`` to ``parent[name]``, one series at a time: a
    copy of the whole group at once keeps what it copied in memory until it is done (a
    run of 20,000 series: hundreds of MB). The group and its direct members come first
    (the series and records groups empty), then each series and record dataset in turn."""
    shallow = h5p.create(h5p.OBJECT_COPY)
    shallow.set_copy_object(h5o.COPY_SHALLOW_HIERARCHY_FLAG)
    h5o.copy(group.id, b".", parent.id, name.encode(), copypl=shallow)
    dst = parent[name]
    for sub in (schema.SERIES, schema.RECORDS):
        if sub not in group:
            continue
        src_id, dst_id = group[sub].id, dst[sub].id
        members = [str(j) for j in range(len(group[sub]))] if sub == schema.SERIES \
            else list(group[sub])
        for member in members:
            h5o.copy(src_id, member.encode(), dst_id, member.encode())


def _check(fd: int, info, what: str) -> None:
    if not isinstance(info, dict):
        raise OutputError(f"{what} came without the facts written with it; convert again")
    try:
        crc, size = crc_of(fd, 0)
    except OSError as exc:
        raise OutputError(f"{what} cannot be read ({exc.strerror or exc}); "
                          "convert again") from None
    if size != info.get("bytes"):
        raise OutputError(f"{what} is {size} bytes long but was written {info.get('bytes')} "
                          "bytes long: it was changed before it was copied; convert again")
    if crc != info.get("crc32c"):
        raise OutputError(f"{what} does not match its checksum: bytes changed before it was "
                          "copied; convert again")
