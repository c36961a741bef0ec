"""Running per-run work here, in local processes or on a Dask cluster, one call for all.

Conversion is parallel by run: the caller cuts its work into picklable items
and a top-level function, and :func:`run_tasks` calls the function on each
item: in this process, in ``jobs`` local worker processes, or on the workers of
a ``dask.distributed`` scheduler (``tcp://host:8786``). Results come back in
item order whatever the order of completion.

A task whose process dies (killed, out of memory) is run again, up to
``retries`` times; one that still cannot finish becomes ``lost(item, why)``
when the caller gives ``lost`` (an error otherwise), so it costs only itself.
A :class:`~tbconvert.errors.TbconvertError` raised by a task is raised here as
it would be in one process.
"""

from __future__ import annotations

import collections
import importlib
import queue as queue_module
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from tbconvert.errors import ClusterError, MissingDependencyError, TbconvertError, UsageError

# How long to wait for a scheduler to answer before calling it unreachable.
CONNECT_TIMEOUT = 10
# How long a scheduler without workers is given to get one (an adaptive cluster scaling up).
WORKERS_TIMEOUT = 60
_WAIT = 0.2


def run_tasks(fn: Callable[[Any], Any], items: Iterable[Any], *, scheduler: str | None = None,
              retries: int = 2, jobs: int = 1, progress=None, sizes=None,
              lost: Callable[[Any, str], Any] | None = None, share: bool = False,
              on_result: Callable[[int, Any], None] | None = None) -> list:
    """``[fn(item) for item in items]``: here (``jobs`` 1), in ``jobs`` local processes
    (0: one per core), or on the cluster at ``scheduler``.

    ``progress`` (a :class:`~tbconvert.formats.base.Progress`) hears what local workers
    report as they go, or ``sizes[i]`` when item ``i`` is done elsewhere. ``share``: this
    process converts items too, beside ``jobs - 1`` workers (an item that crashes the process
    then costs what it costs with ``jobs`` 1). ``on_result(i, result)`` hears each result as
    soon as it is in (from any thread of this process, in any order); an exception it raises
    stops the work.
    """
    items = list(items)
    if scheduler is not None:
        return _on_cluster(fn, items, scheduler, retries, progress, sizes, lost, on_result)
    from tbconvert.formats.base import processes
    jobs = min(processes(jobs), len(items))
    if jobs <= 1:
        results = []
        for k, item in enumerate(items):
            results.append(fn(item))
            if on_result is not None:
                on_result(k, results[-1])
            _advance(progress, sizes, k)
        return results
    return _in_processes(fn, items, jobs, retries, progress, lost, share, sizes, on_result)


def _advance(progress, sizes, k: int) -> None:
    if progress is not None and sizes is not None:
        progress.advance(sizes[k])


def _name_of(item) -> str:
    """What to call an item in a message: its run's name where it has one."""
    return str(getattr(item, "name", None) or item)


def _give_up(lost, item, why: str):
    if lost is None:
        raise TbconvertError(why)
    return lost(item, why)


# -- local processes ------------------------------------------------------------------------

class _Results(dict):
    """Results by item index, each passed on to ``on_result`` as it is stored."""

    def __init__(self, on_result) -> None:
        super().__init__()
        self.on_result = on_result

    def __setitem__(self, k, value) -> None:
        super().__setitem__(k, value)
        if self.on_result is not None:
            self.on_result(k, value)


def _in_processes(fn, items, jobs, retries, progress, lost, share=False, sizes=None,
                  on_result=None) -> list:
    """Items in a pool of worker processes, fed by a thread of this process. With ``share``,
    this process works through items too (the pool has ``jobs - 1`` workers): it is idle
    otherwise, and has its imports done. A pool whose worker died is replaced; the items it
    held are run again one at a time, in workers, so the one that kills its worker is found
    and given up after ``retries``, and the others finish."""
    import threading

    from tbconvert import workers
    from tbconvert.interrupts import Thread, deferred

    ctx = workers.context()
    progress_queue = workers.ProgressQueues()
    pool_size = jobs - 1 if share else jobs
    results = _Results(on_result)
    # The largest items first, so that no process is left with a big one at the end while
    # the others idle (results are kept by index: the order of work changes no output).
    order = range(len(items)) if sizes is None else sorted(range(len(items)),
                                                           key=lambda k: -sizes[k])
    todo = collections.deque(order)
    suspects: collections.deque = collections.deque()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list = []

    def take():
        with lock:
            return todo.popleft() if todo else None

    here = _HereQueue()

    def drain() -> None:
        while True:
            try:
                n = progress_queue.get_nowait()
            except (queue_module.Empty, OSError, ValueError):
                break
            if progress is not None:
                progress.advance(n)
        while here:
            n = here.popleft()
            if progress is not None:
                progress.advance(n)

    first = workers.Workers(ctx, pool_size, progress_queue)

    def feed() -> None:
        try:
            _feed(fn, items, ctx, progress_queue, pool_size, retries, lost, results, take,
                  suspects, stop, drain, first)
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            errors.append(exc)
            stop.set()

    feeder = Thread(target=feed, name="tbconvert-tasks")
    with workers.reporting_to(here):   # items run here report their progress as workers do
        with deferred():   # a feeder started must be waited for below
            try:
                # forked (see tbconvert.workers) here, before other threads get work
                first.start()
            except BaseException:
                first.stop()
                raise
            feeder.start()
        try:
            while share and not stop.is_set():
                k = take()
                if k is None:
                    break
                try:
                    results[k] = fn(items[k])
                finally:
                    workers.flush_progress()
            feeder.wait()
        finally:
            stop.set()
            # the feeder stops the workers: none may still be writing once this returns
            feeder.wait_held()
            first.stop()    # if the feeder stopped before it took the workers over
            drain()
            progress_queue.close()
            progress_queue.join_thread()
    if errors:
        raise errors[0]
    return [results[k] for k in range(len(items))]


class _HereQueue(collections.deque):
    """Progress of the items this process runs, for the feeder thread to pass on."""

    put = collections.deque.append


def _feed(fn, items, ctx, progress_queue, pool_size, retries, lost, results, take, suspects,
          stop, drain, first) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    from tbconvert import workers

    deaths: collections.Counter = collections.Counter()
    while not stop.is_set():
        alone = bool(suspects)
        size = 1 if alone else pool_size
        pool, first = first or workers.Workers(ctx, size, progress_queue), None
        running: dict = {}
        unsent: list = []       # an item the pool refused: a worker died since the last look
        broken = False
        try:
            while not stop.is_set():
                while len(running) < size:
                    k = (suspects.popleft() if suspects else None) if alone else take()
                    if k is None:
                        break
                    try:
                        running[pool.submit(fn, items[k])] = k
                    except BrokenProcessPool:
                        unsent.append(k)
                        broken = True
                        break
                if broken or not running:
                    break
                done, _ = wait(running, timeout=_WAIT, return_when=FIRST_COMPLETED)
                drain()
                for future in done:
                    k = running.pop(future)
                    try:
                        results[k] = future.result()
                    except BrokenProcessPool:
                        broken = True
                        running[future] = k
                if broken:
                    break
        finally:
            pool.stop()
        if not broken:
            # done, or done with the suspects: the items left (none taken by this process
            # beside the workers) go on in a full pool
            if not suspects and not alone:
                return
            continue
        held = sorted(running.values()) + unsent
        if alone:
            k = held[0]
            deaths[k] += 1
            if deaths[k] > retries:
                workers.killed_for_memory(pool, _name_of(items[k]), deaths[k])
                results[k] = _give_up(lost, items[k], "the process converting it died "
                                      f"{deaths[k]} times")
            else:
                suspects.appendleft(k)
        else:
            suspects.extend(held)


def run_in_shares(fn: Callable[[Any], Any], items: list, sizes: list, pool, *,
                  lost: Callable[[Any, str], Any],
                  on_result: Callable[[int, Any], None] | None = None,
                  ahead: int = 0, share_fn: Callable[[list], list] | None = None,
                  own_fn: Callable[[list], Any] | None = None) -> list:
    """``[fn(item) for item in items]``, the items split by ``sizes`` into one share for this
    process and one for each worker of ``pool`` (a :class:`~tbconvert.kept.KeptWorkers`,
    kept by the caller from one call to the next); ``ahead``: the work this process has
    besides its share, in the units of ``sizes``. A worker gets its whole share in one
    message and answers once: many small items gain from a second core, where handing them
    over one at a time would cost more than they take. ``share_fn(share)``, if given, is
    what a worker runs for its share instead (it answers ``[fn(item) for item in share]``);
    ``own_fn(share)``, what this process runs for its own (it yields ``fn(item)`` of each
    item in turn).
    The items of a worker that died are run again as :func:`run_tasks` runs them (``lost``
    for one that still cannot finish); the pool then starts new workers on its next use."""
    from tbconvert.kept import Lost

    shares = _shares(sizes, pool.jobs + 1, ahead)
    results: list = [None] * len(items)

    def store(k, result) -> None:
        results[k] = result
        if on_result is not None:
            on_result(k, result)
    again: list = []
    try:
        handed = []
        for worker, share in enumerate(shares[1:]):
            if not share:
                continue
            try:
                shared = [items[k] for k in share]
                if share_fn is None:
                    pool.send(worker, fn, shared)
                else:
                    pool.send(worker, share_fn, shared, whole=True)
                handed.append((worker, share))
            except Lost:
                again.extend(share)
        own = [items[k] for k in shares[0]]
        for k, result in zip(shares[0], map(fn, own) if own_fn is None else own_fn(own),
                             strict=True):
            store(k, result)
        for worker, share in handed:
            try:
                answers = pool.receive(worker)
            except Lost:
                again.extend(share)
                continue
            for k, result in zip(share, answers, strict=True):
                store(k, result)
    except BaseException:
        pool.stop()     # none may still be writing once this returns
        raise
    if again:
        pool.stop()
        again.sort()
        redone = _in_processes(fn, [items[k] for k in again], jobs=2, retries=2, progress=None,
                               lost=lost)
        for k, result in zip(again, redone, strict=True):
            store(k, result)
    return results


def _shares(sizes: list, count: int, ahead: int = 0) -> list[list[int]]:
    """Item indices in ``count`` shares of about equal total size (each largest item to the
    lightest share), the first share starting with ``ahead``; each in item order."""
    shares: list[list[int]] = [[] for _ in range(count)]
    loads = [ahead] + [0] * (count - 1)
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        i = loads.index(min(loads))
        shares[i].append(k)
        loads[i] += sizes[k]
    return [sorted(share) for share in shares]


# -- a Dask cluster -------------------------------------------------------------------------

def _wait_for_a_worker(client, scheduler: str) -> None:
    """Return once the scheduler has a worker; a UsageError after :data:`WORKERS_TIMEOUT`
    seconds without one (its tasks would wait for ever)."""
    start = time.monotonic()
    try:
        if client.scheduler_info().get("workers"):
            return
        client.wait_for_workers(1, timeout=WORKERS_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - a timeout, of whichever kind this dask raises
        waited = time.monotonic() - start
        how = (f"none came within {WORKERS_TIMEOUT} s" if waited >= WORKERS_TIMEOUT - 1 else
               f"waiting for one failed after {waited:.0f} s: {type(exc).__name__}")
        raise UsageError(f"--scheduler {scheduler}: the scheduler has no workers ({how}); "
                         f"start some with `dask worker {scheduler}`") from None


def _connect(distributed, scheduler: str):
    """A client of the scheduler at ``scheduler``, or a UsageError within about
    ``CONNECT_TIMEOUT`` seconds. Dask's own timeout covers connecting, not a peer that
    accepts and never answers (a dashboard port, a proxy), and bytes of another protocol
    are read as a message of any length: so the client is made in a thread of its own,
    waited for with a deadline, and whatever it fails with is told in one line."""
    import threading
    try:     # an address Dask cannot parse is told as such, before anything is tried
        from distributed.comm import registry
        from distributed.comm.addressing import parse_address, parse_host_port
        scheme, location = parse_address(scheduler)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except ValueError as exc:
        raise UsageError(f"--scheduler {scheduler!r}: not the address of a Dask scheduler "
                         f"({exc}); give it as tcp://HOST:PORT") from None
    made: dict = {}

    def connect() -> None:
        try:
            made["client"] = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT,
                                                set_as_default=False)
        except BaseException as exc:  # noqa: BLE001 - told by the thread that waits
            made["error"] = exc
    thread = threading.Thread(target=connect, name="tbconvert-scheduler-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT + 5)
    fix = "check the address (the scheduler's port, 8786 by default, not its dashboard's) " \
          "and that the scheduler is running"
    if thread.is_alive():
        raise UsageError(f"--scheduler {scheduler}: nothing answered as a Dask scheduler within "
                         f"{CONNECT_TIMEOUT + 5} s; {fix}")
    exc = made.get("error")
    if exc is not None:
        if not isinstance(exc, Exception):
            raise exc
        if isinstance(exc, MemoryError):    # another protocol's bytes read as a length
            why = "it answered, but not as a Dask scheduler"
        elif isinstance(exc, TypeError):    # another Dask server (a worker's port)
            why = "it answered, but not as a Dask scheduler (a worker's port?)"
        else:
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        raise UsageError(f"--scheduler {scheduler}: cannot reach a Dask scheduler there "
                         f"({why}); {fix}") from None
    return made["client"]


def _outcome(future, distributed) -> tuple[bool, Any]:
    """``(True, result)`` of a task on the cluster, or ``(False, None)`` when Dask gave up on
    it for workers that died; tbconvert's own errors pass as they are, a task's bug is told
    in one line."""
    try:
        return True, future.result()
    except distributed.KilledWorker:
        return False, None
    except TbconvertError:
        raise
    except _lost_scheduler(distributed) as exc:
        if getattr(future, "status", None) == "error" and isinstance(exc, ConnectionError):
            raise _task_failed(exc) from None   # the task's own error: the scheduler answered
        why = str(exc).replace("\\n", "\n").splitlines()[0][:200] if str(exc) else ""
        raise ClusterError(f"the connection to the Dask scheduler was lost while the tasks ran "
                           f"({type(exc).__name__}{': ' + why if why else ''}); run the "
                           "command again once the scheduler is back") from None
    except Exception as exc:  # noqa: BLE001 - a task's own bug, told in one line
        raise _task_failed(exc) from None


def _task_failed(exc: Exception) -> TbconvertError:
    return TbconvertError(f"a task on the cluster failed: {type(exc).__name__}: {exc}")


def _lost_scheduler(distributed) -> tuple:
    """What a task's future raises when the client loses its scheduler: the future cancelled
    (``scheduler-connection-lost``), or the connection closed under a call."""
    import asyncio
    import concurrent.futures
    found = [asyncio.CancelledError, concurrent.futures.CancelledError, ConnectionError]
    for module, name in (("distributed.client", "FutureCancelledError"),
                         ("distributed.comm.core", "CommClosedError")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


# Set by the command line, whose errors are one line: Dask's own logging of a lost
# scheduler (tracebacks of its reconnection attempts) is then kept off standard error.
QUIET_LOGS = False


def _quiet_distributed_logs() -> None:
    import logging
    names = ["distributed"] + [n for n in logging.root.manager.loggerDict
                               if n.startswith("distributed.")]
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _on_cluster(fn, items, scheduler, retries, progress, sizes, lost, on_result=None) -> list:
    try:
        import distributed
    except ImportError:
        raise MissingDependencyError(
            "--scheduler needs dask.distributed: pip install 'tbconvert[dask]'") from None
    if QUIET_LOGS:
        _quiet_distributed_logs()
    client = _connect(distributed, scheduler)
    futures = []
    try:
        _wait_for_a_worker(client, scheduler)
        batch = uuid.uuid4().hex[:8]
        futures = [client.submit(fn, item, retries=retries, pure=False,
                                 key=f"tbconvert-{batch}-{k}") for k, item in enumerate(items)]
        results: dict[int, Any] = {}

        def done(k: int, result) -> None:
            results[k] = result
            if on_result is not None:
                on_result(k, result)
            _advance(progress, sizes, k)

        suspects = []
        for k, future in enumerate(futures):   # in order: the results are merged in order
            ok, result = _outcome(future, distributed)
            if ok:
                done(k, result)
            else:
                # The scheduler blames every task a dying worker held, the one that killed
                # it and those waiting beside it alike: tried again alone, below.
                suspects.append(k)
        for k in suspects:
            # alone on the cluster now: a task whose workers die again is the one that kills them
            futures.append(client.submit(fn, items[k], retries=retries, pure=False,
                                         key=f"tbconvert-{batch}-{k}-alone"))
            ok, result = _outcome(futures[-1], distributed)
            done(k, result if ok else _give_up(lost, items[k], "every worker that took it died"))
        return [results[k] for k in range(len(items))]
    finally:
        # Ctrl-C or a failure: the tasks still queued are of no use any more.
        try:
            if futures:
                client.cancel(futures)
        finally:
            client.close()
