"""Worker processes: how they start, what they do first, how they stop.

Both kinds of parallel work use them: reading the parts of runs for one writer
(:mod:`tbconvert.formats.tfevents.parallel`) and converting whole runs as tasks
(:mod:`tbconvert.cluster`). Workers are started with "spawn", so they are children of the
leading process and notice when it is gone; "fork" is never used, as it would copy this
process's threads and its locks half-held. Workers ignore Ctrl-C (the terminal sends it
to every process of the group): the leading process unwinds, removes partial output, and
stops them. What a worker reads it reports as progress through a queue that the leading
process drains.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from tbconvert.interrupts import deferred

# In a worker: the queue its progress goes to (None in a process that is no worker).
_progress_queue = None


def context():
    """The multiprocessing context workers are started with."""
    if _own_process():
        # Stopped by Ctrl-C, workers can leave a queue's semaphore registered; the resource
        # tracker (a child started with the first one, sharing stderr) cleans it up at the
        # end, but also warns in four lines under the command's one-line message.
        os.environ.setdefault("PYTHONWARNINGS", "ignore:resource_tracker:UserWarning")
    return multiprocessing.get_context("spawn")


class _QueueProgress:
    def __init__(self, queue) -> None:
        self.queue = queue

    def advance(self, n: int) -> None:
        self.queue.put(n)


def progress():
    """Where this process reports bytes read: the leading process's queue in a worker, or
    what :func:`reporting_to` set; None when no one listens."""
    return None if _progress_queue is None else _QueueProgress(_progress_queue)


@contextlib.contextmanager
def reporting_to(queue):
    """``with reporting_to(queue):`` work done in this process reports its progress to
    ``queue`` (anything with ``put``), as a worker's does."""
    global _progress_queue
    saved, _progress_queue = _progress_queue, queue
    try:
        yield
    finally:
        _progress_queue = saved


def _init(progress_queue, parent: int, own_process: bool = False) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    if own_process:
        # A worker of the command makes the command's process-wide choices too: Arrow's pool,
        # and no pandas (pyarrow would import it, most of a second, only to ask it is there).
        from tbconvert import arrowpool
        arrowpool.own_process()
        arrowpool.block_pandas()


def _own_process() -> bool:
    """Whether this process is the command's own, without pandas (see ``tbconvert.cli``)."""
    from tbconvert import arrowpool
    return arrowpool.is_own_process() and arrowpool.pandas_blocked()


def _orphan_watch(parent: int) -> None:
    """End this worker as soon as the process that started it is gone (killed with SIGKILL,
    say): its work is of no use then, and it holds the terminal's output open. An orphan
    gets a new parent (also when the parent died before this worker even got here)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


class Workers:
    """A pool of ``jobs`` worker processes, started on the first :meth:`submit`; after a
    worker died, :meth:`stop` it and make a new one."""

    def __init__(self, ctx, jobs: int, progress_queue) -> None:
        self.ctx, self.jobs, self.progress_queue = ctx, jobs, progress_queue
        self.pool = None
        # Every process the pool started (it starts them while a call is submitted, in the
        # submitting thread): stopped here, and only these, never other children of the
        # program that uses tbconvert.
        self.processes: set = set()

    def submit(self, fn, *args):
        """``fn(*args)`` in a worker (``fn`` a module-level function); its future."""
        # Starting a worker must not be cut short by Ctrl-C: a process half started is one
        # that no one would stop.
        with deferred():
            if self.pool is None:
                self.pool = ProcessPoolExecutor(self.jobs, mp_context=self.ctx, initializer=_init,
                                                initargs=(self.progress_queue, os.getpid(),
                                                          _own_process()))
            future = self.pool.submit(fn, *args)
            self.processes.update((getattr(self.pool, "_processes", None) or {}).values())
            return future

    def stop(self) -> None:
        """End every worker now, pending work and all, and wait until they are gone."""
        if self.pool is None:
            return
        processes = self.processes | set((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.terminate()
        for proc in processes:
            proc.join()
        self.processes.clear()
        self.pool = None
