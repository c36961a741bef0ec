"""Kept workers: processes that stay from one round of work to the next (``sync --watch``)
and take a share of each round in one message, while the leading process runs its own.

Each worker has a pipe of its own. The thread that hands a share over writes it there
itself and goes on with its own share at once; it reads the answer from the same pipe once
that is done. Through a process pool a share travels through two more threads of the
leading process (the pool's manager and its queue's feeder) and a semaphore that says it
has begun: each needs the GIL while the leader works, and a round of ten small runs
measured 3-5 ms from handing a share over to its worker beginning it.

A worker that died (killed, out of memory) shows as its pipe closing: its share is
:class:`Lost`, for the caller to run again elsewhere; the next round starts a new worker.
"""

from __future__ import annotations

import multiprocessing
import os
import time

from tbconvert import workers
from tbconvert.interrupts import deferred


class Lost(Exception):
    """The worker died before it answered."""


class KeptWorkers:
    """``jobs`` worker processes, started on :meth:`start` (or the first :meth:`send`) and
    kept until :meth:`stop`."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._procs: list = []
        self._conns: list = []

    @property
    def processes(self) -> list:
        """The worker processes started and not stopped yet."""
        return list(self._procs)

    def start(self) -> None:
        """Start the workers now: forked when they can be from here (call it from the main
        thread before other threads get work, see :mod:`tbconvert.workers`), spawned
        otherwise."""
        if self._procs:
            return
        with deferred():    # a worker half started is one that no one would stop
            try:
                self._start()
            except BaseException:
                self.stop()
                raise

    def _start(self) -> None:
        own = workers._own_process()
        if workers.forks_here():
            ctx, forking = multiprocessing.get_context("fork"), workers._forking_workers
        else:
            ctx, forking = workers.context(), None
        for _ in range(self.jobs):
            mine, theirs = multiprocessing.Pipe(duplex=True)
            proc = ctx.Process(target=_serve, args=(theirs, os.getpid(), own), daemon=True,
                               name="tbconvert-kept")
            if forking is None:
                proc.start()
            else:
                with forking():
                    proc.start()
            theirs.close()      # the worker's end: its death then closes the pipe
            self._procs.append(proc)
            self._conns.append(mine)

    def send(self, k: int, fn, items: list, whole: bool = False) -> None:
        """Hand ``[fn(item) for item in items]`` to worker ``k`` (``fn`` a module-level
        function), or ``fn(items)`` if ``whole``. :class:`Lost` if the worker is gone."""
        self.start()
        try:
            self._conns[k].send((fn, items, whole))
        except (OSError, EOFError):
            raise Lost(f"worker {k} is gone") from None

    def receive(self, k: int) -> list:
        """What worker ``k`` answered to its last :meth:`send`; what ``fn`` raised there is
        raised here. :class:`Lost` if the worker died first."""
        try:
            ok, answer = self._conns[k].recv()
        except (OSError, EOFError):
            raise Lost(f"worker {k} died") from None
        if not ok:
            raise answer
        return answer

    def stop(self) -> None:
        """End every worker now, whatever it is doing, and wait until they are gone."""
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + workers.STOP_GRACE
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():     # deaf to SIGTERM (it landed before the worker set up)
                proc.kill()
                proc.join()
        self._procs, self._conns = [], []


def _serve(conn, parent: int, own_process: bool) -> None:
    workers._init(None, parent, own_process)
    while True:
        try:
            fn, items, whole = conn.recv()
        except (OSError, EOFError):
            return      # the leading process closed its end: stopped
        try:
            answer = (True, fn(items) if whole else [fn(item) for item in items])
        except BaseException as exc:  # noqa: BLE001 - raised again in the leading process
            answer = (False, exc)
        try:
            conn.send(answer)
        except (OSError, EOFError):
            return
        except Exception as exc:  # noqa: BLE001 - an answer that does not pickle
            from tbconvert.errors import TbconvertError
            conn.send((False, TbconvertError(f"a worker's answer could not be passed on "
                                             f"({type(exc).__name__}: {exc})")))
