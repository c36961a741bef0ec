"""glibc's malloc told to keep freed memory for reuse, as a conversion wants it.

A conversion allocates and frees the same few MiB over and over: a block of records, its
columns, a row group's batches. By default glibc maps an allocation above its mmap
threshold afresh each time, and hands the top of its heap back to the system beyond its
trim threshold, so the next block pays a page fault for every 4 KiB it touches. One run of
20M points converted to Parquet or HDF5 took 128,000-181,000 page faults, and 23,000-25,000
with the memory kept: about 5% of the conversion's CPU time.

These settings are process-wide. The ``tbconvert`` command owns its process and keeps
freed memory for its whole life (:func:`keep_freed_memory`, also in its spawned workers).
A Dask task keeps it only while it runs (:func:`roomy`). The Python API leaves the caller's
process alone (it only hands free heap back where a reader is done with it,
:func:`give_back_free_heap`): set ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` for the same
effect there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Blocks, columns and row groups stay well below the mmap threshold. The trim threshold
# bounds what is kept: within the command's 256 MiB goal for peak memory (measured:
# 193 MiB at most on 20M points, CSV).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
# Set by the user (or by Dask): their choice stands.
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "GLIBC_TUNABLES")


@functools.cache
def _libc():
    import ctypes
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt, libc.malloc_trim   # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return None
    return libc


def keep_freed_memory() -> bool:
    """For the rest of the process, keep freed memory for reuse (see the module); whether the
    settings were made (not on other C libraries, nor where the user chose their own)."""
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def give_back_free_heap() -> None:
    """Hand the heap's free memory back to the system now (glibc keeps it otherwise).
    Elsewhere: nothing to do."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@contextlib.contextmanager
def roomy():
    """Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also fixes
    glibc's mmap threshold at 128 KiB: every block array is then mapped and unmapped anew,
    doubling a run's CPU time (page faults). During the task, freed memory is kept for
    reuse; afterwards the worker's setting is back and the memory is returned."""
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = _libc() if trim is not None else None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, int(trim) if trim.isdigit() else 128 << 10)
        libc.mallopt(_M_MMAP_THRESHOLD, 128 << 10)
        libc.malloc_trim(0)
