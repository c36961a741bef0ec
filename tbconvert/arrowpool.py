"""Process-wide choices of the ``tbconvert`` command for Arrow: its memory pool, and no pandas.

Arrow's default pool (mimalloc in the pyarrow wheels) keeps the pages of freed row groups
for reuse, so a long Parquet read or write holds tens of MiB more than it uses; jemalloc
hands them back to the system. The pool is process-wide, so only the command line, which
owns its process, changes it (:func:`own_process`); the Python API leaves the caller's
pyarrow as it is (set ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` for the same effect there).
"""

from __future__ import annotations

import os

_OWN_PROCESS = False
_CHOSEN = False
PREFERRED = "jemalloc"


def own_process() -> None:
    """The calling program owns the process: conversions may choose Arrow's pool."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def is_own_process() -> bool:
    return _OWN_PROCESS


def choose() -> None:
    """Before Arrow allocates for a conversion: switch to :data:`PREFERRED` if allowed.

    Left alone when the user named a pool in ``ARROW_DEFAULT_MEMORY_POOL`` or this build of
    pyarrow lacks jemalloc.
    """
    global _CHOSEN
    if _CHOSEN or not _OWN_PROCESS or os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    _CHOSEN = True
    import pyarrow as pa
    if PREFERRED in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())


def release() -> None:
    """After a row group is done with: give the pool's free pages back to the system.

    For the Python API, which keeps the caller's pool (mimalloc by default, which holds on to
    freed row groups: 30-80 MiB on 20M points). jemalloc returns them by itself; asking it
    as well would only purge its arenas for nothing."""
    import pyarrow as pa
    pool = pa.default_memory_pool()
    if pool.backend_name != "jemalloc":
        pool.release_unused()


class _NoPandas:
    """An import finder that reports pandas missing.

    pyarrow imports pandas on its first array only to learn whether it is there, which
    costs about 50 MiB and most of a second; converting, describing and comparing sources
    never uses pandas. pyarrow remembers the answer, so this is for the command's own
    process (and its workers) only, never for the Python API."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def block_pandas() -> None:
    """Make ``import pandas`` fail in this process (see :class:`_NoPandas`)."""
    import sys
    if _NoPandas not in sys.meta_path:
        sys.meta_path.insert(0, _NoPandas)


def unblock_pandas() -> None:
    import sys
    if _NoPandas in sys.meta_path:
        sys.meta_path.remove(_NoPandas)


def pandas_blocked() -> bool:
    """Whether :func:`block_pandas` is in force."""
    import sys
    return _NoPandas in sys.meta_path
