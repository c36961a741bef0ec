"""Process-wide choices of the ``tbconvert`` command for Arrow: its memory pool, and no pandas.

Arrow's default pool (mimalloc in the pyarrow wheels) keeps the pages of freed row groups
for reuse, so a long Parquet read or write holds tens of MiB more than it uses; jemalloc
hands them back to the system, told to do so at once (Arrow's jemalloc keeps them for a
second, several row groups read and written: 60-100 MiB more at the peak of a Parquet ->
Parquet conversion of histograms). The pool is process-wide, so only the command line, which
owns its process, changes it (:func:`own_process`); the Python API leaves the caller's
pyarrow as it is (set ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` for the same effect there).

pyarrow's choice of pool does not reach Arrow's C++ code where pyarrow passes it none
(Parquet's decompression and encoding buffers): that takes the pool named by
``ARROW_DEFAULT_MEMORY_POOL`` when pyarrow is imported. The command names jemalloc there
before importing it, or those buffers keep 30-50 MiB of mimalloc's pages, freed by Arrow's
threads, that no ``release_unused`` hands back.
"""

from __future__ import annotations

import os
import sys

_OWN_PROCESS = False
_CHOSEN = False
PREFERRED = "jemalloc"
_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
# Set with _POOL_VARIABLE by the command (inherited by its workers): not the user's choice.
_NAMED_BY_COMMAND = "TBCONVERT_NAMED_ARROW_POOL"


def own_process() -> None:
    """The calling program owns the process: conversions may choose Arrow's pool."""
    global _OWN_PROCESS
    _OWN_PROCESS = True
    if _POOL_VARIABLE not in os.environ and "pyarrow" not in sys.modules and _has_preferred():
        os.environ[_POOL_VARIABLE] = os.environ[_NAMED_BY_COMMAND] = PREFERRED


def _has_preferred() -> bool:
    """Whether the installed pyarrow was built with jemalloc, told without importing it
    (Arrow warns on stderr of a pool it lacks): its build configuration, installed with it."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("pyarrow")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    for where in spec.submodule_search_locations:
        try:
            with open(os.path.join(where, "include", "arrow", "util", "config.h")) as fh:
                return f"#define ARROW_{PREFERRED.upper()}\n" in fh.read()
        except OSError:
            continue
    return False


def _user_named_pool() -> bool:
    named = os.environ.get(_POOL_VARIABLE)
    return bool(named) and named != os.environ.get(_NAMED_BY_COMMAND)


def is_own_process() -> bool:
    return _OWN_PROCESS


def choose() -> None:
    """Before Arrow allocates for a conversion: switch to :data:`PREFERRED` if allowed.

    Left alone when the user named a pool in ``ARROW_DEFAULT_MEMORY_POOL`` or this build of
    pyarrow lacks jemalloc.
    """
    global _CHOSEN
    if _CHOSEN or not _OWN_PROCESS or _user_named_pool():
        return
    _CHOSEN = True
    import pyarrow as pa
    if PREFERRED in pa.supported_memory_backends():
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)


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
