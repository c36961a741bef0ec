"""Worker processes: how they start, what they do first, how they stop.

Both kinds of parallel work use them: reading the parts of runs for one writer
(:mod:`tbconvert.formats.tfevents.parallel`) and converting whole runs as tasks
(:mod:`tbconvert.cluster`). Workers are children of the leading process and notice when
it is gone. Workers ignore Ctrl-C (the terminal sends it to every process of the group):
the leading process unwinds, removes partial output, and stops them. What a worker reads
it reports as progress through a queue that the leading process drains.

How they start. A spawned worker starts a new interpreter and imports numpy, pyarrow and
the readers again: about 0.35 s of CPU before its first task, on a core the conversion
needs. The ``tbconvert`` command, which owns its process and knows its threads, forks its
workers instead (on Linux), from the main thread, before they are given work: they start
with everything imported. Other threads may be alive then (the progress bar's clock, the
thread that adds staged runs), but none is inside a library call the workers use: those
threads only sleep, poll, or draw the bar, and a lock held over the fork
(:func:`hold_over_forks`) keeps the bar from being half drawn then. Everywhere else
(the Python API, inside a program whose threads tbconvert does not know, a pool started
from another thread, other systems) workers are spawned.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from tbconvert.errors import UsageError
from tbconvert.interrupts import deferred

# In a worker: the queue its progress goes to (None in a process that is no worker).
_progress_queue = None
# Set while this process forks its workers: the fork handlers below act only then.
_forking = False
# Locks taken over a fork of workers (see hold_over_forks).
_held: list = []
# How long a worker told to stop gets before it is killed.
STOP_GRACE = 5.0
# How long a stopped worker's exit code may take to be known (see Workers.stop).
EXIT_CODE_GRACE = 1.0


def context():
    """The multiprocessing context of the queues and the workers that cannot be forked."""
    if _own_process():
        # Stopped by Ctrl-C, workers can leave a queue's semaphore registered; the resource
        # tracker (a child started with the first one, sharing stderr) cleans it up at the
        # end, but also warns in four lines under the command's one-line message.
        os.environ.setdefault("PYTHONWARNINGS", "ignore:resource_tracker:UserWarning")
    return multiprocessing.get_context("spawn")


def refuse_script_rerun(jobs: int) -> None:
    """A UsageError when worker processes started now would run the calling script again.

    Spawned workers (the Python API's, see above) start by running the program's main
    script as Python's multiprocessing does, so a script that calls tbconvert with ``jobs``
    other than 1 at its top level, outside ``if __name__ == "__main__":``, would run in
    every worker: its own work and side effects again, and tbconvert's call there fails,
    costing the run that worker had. Refused here, before anything starts, with the line
    to move. Checked only where it can be told for sure: the call made from the main
    script's top level (or a function it calls) in this thread, the script's source at
    hand."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise UsageError(f"jobs={jobs}: this is a worker process that tbconvert started, "
                         f"and it is running the program's main script again; put the "
                         f"script's top-level calls under `if __name__ == \"__main__\":`, "
                         f"or pass jobs=1")
    found = _unguarded_call()
    if found is not None:
        script, line, text = found
        raise UsageError(f"jobs={jobs} starts worker processes that each run {script} from "
                         f"the top, so its line {line} ({text}) would run again in every one; "
                         f"put that line under `if __name__ == \"__main__\":`, or pass jobs=1")


def _unguarded_call():
    """(script, line, its text) of the main script's top-level statement running now in
    this thread, when it lies outside every ``if __name__ == "__main__":`` and workers
    would run the script again; None otherwise, or when that cannot be told."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return None         # a package's __main__: multiprocessing does not run it again
    path = getattr(spec, "origin", None) if name is not None else getattr(main, "__file__", None)
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is getattr(main, "__dict__", None)
                                     and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None or not isinstance(path, str):
        return None
    import ast
    try:
        with open(path, "rb") as fh:
            source = fh.read(1 << 22)
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _tests_main(node.test) and any(
                stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno) for stmt in node.body):
            return None
    lines = source.decode("utf-8", "replace").splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
    return os.path.basename(path), line, text if len(text) <= 60 else text[:57] + "..."


def _tests_main(test) -> bool:
    import ast
    nodes = list(ast.walk(test))
    return (any(isinstance(n, ast.Name) and n.id == "__name__" for n in nodes)
            and any(isinstance(n, ast.Constant) and n.value == "__main__" for n in nodes))


class ProgressQueues:
    """Where workers report progress: a queue per way of starting them, made when first
    needed, drained as one. A queue of the spawn context (which spawned workers need) has
    named semaphores, and the first one starts multiprocessing's resource tracker, an
    interpreter of its own (about 40 ms of CPU while the conversion starts on every core);
    forked workers report to a fork-context queue, which needs none."""

    def __init__(self) -> None:
        self._queues: dict = {}

    def for_workers(self, method: str):
        """The queue of workers started by ``method`` (``"fork"`` or ``"spawn"``)."""
        queue = self._queues.get(method)
        if queue is None:
            queue = self._queues[method] = multiprocessing.get_context(method).Queue()
        return queue

    def get_nowait(self):
        """A report from any of the queues; ``queue.Empty`` when none has one."""
        for queue in list(self._queues.values()):
            try:
                return queue.get_nowait()
            except queue_module.Empty:
                continue
        raise queue_module.Empty

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()

    def join_thread(self) -> None:
        for queue in self._queues.values():
            queue.join_thread()


class _QueueProgress:
    """Progress passed on to ``queue``, gathered: a report each (a pickle, a lock, a wake-up
    of the queue's thread and a write) cost a sweep's small runs more than their reading
    (about ten reports a run). What is gathered goes at most every :data:`PROGRESS_EVERY`
    seconds, and when the task ends (:func:`flush_progress`)."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def advance(self, n: int) -> None:
        global _unsent
        _unsent += n
        if time.monotonic() - _sent_at >= PROGRESS_EVERY:
            flush_progress()


# What this process's progress reports hold that was not yet put in the queue, and when
# the last one went.
_unsent = 0
_sent_at = 0.0
PROGRESS_EVERY = 0.05


def flush_progress() -> None:
    """Put what this process's progress gathered in the queue it reports to."""
    global _unsent, _sent_at
    if _unsent and _progress_queue is not None:
        n, _unsent = _unsent, 0
        _sent_at = time.monotonic()
        _progress_queue.put(n)


def _reported(fn, *args):
    """``fn(*args)`` in a worker, its progress all passed on when it returns."""
    try:
        return fn(*args)
    finally:
        flush_progress()


def progress():
    """Where this process reports bytes read: the leading process's queue in a worker, or
    what :func:`reporting_to` set; None when no one listens."""
    return None if _progress_queue is None else _QueueProgress(_progress_queue)


@contextlib.contextmanager
def reporting_to(queue):
    """``with reporting_to(queue):`` work done in this process reports its progress to
    ``queue`` (anything with ``put``), as a worker's does."""
    global _progress_queue
    flush_progress()
    saved, _progress_queue = _progress_queue, queue
    try:
        yield
    finally:
        flush_progress()
        _progress_queue = saved


def hold_over_forks(lock) -> None:
    """From now on, a fork of workers takes ``lock`` (anything with ``acquire`` and
    ``release``) first, so that no other thread is inside what it guards at the moment of
    the fork: a worker would inherit it half done (a line half written to stderr, with the
    stream's own lock held for ever). Until :func:`unhold_over_forks`."""
    _held.append(lock)


def unhold_over_forks(lock) -> None:
    with contextlib.suppress(ValueError):
        _held.remove(lock)


def _before_fork() -> None:
    if _forking:
        for lock in _held:
            lock.acquire()


def _after_fork_in_parent() -> None:
    if _forking:
        for lock in reversed(_held):
            lock.release()


def _after_fork_in_child() -> None:
    global _forking
    if not _forking:
        return
    _forking = False
    for lock in reversed(_held):
        lock.release()
    _held.clear()
    # The command's handlers (or the deferring ones of submit) would make a worker unwind
    # as the command does; a worker is stopped by SIGTERM and leaves Ctrl-C to the leader.
    # Set before Python code runs in the child, so no signal finds the old ones.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _leave_stops_to_the_leader()


def _leave_stops_to_the_leader() -> None:
    """Ctrl-C and a closed terminal (SIGHUP) reach every process of the group: a worker
    ignores them, and the leading process unwinds and stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def forks_here() -> bool:
    """Whether workers started now are forked (see the module's docstring)."""
    return (sys.platform.startswith("linux") and _own_process()
            and threading.current_thread() is threading.main_thread())


@contextlib.contextmanager
def _forking_workers():
    global _forking
    _forking = True
    try:
        yield
    finally:
        _forking = False


def _init(progress_queue, parent: int, own_process: bool = False) -> None:
    global _progress_queue, _unsent
    _progress_queue = progress_queue
    _unsent = 0     # (a forked worker starts with what its parent had gathered)
    _leave_stops_to_the_leader()
    threading.Thread(target=_orphan_watch, args=(parent,), daemon=True).start()
    if own_process:
        # A worker of the command makes the command's process-wide choices too: Arrow's pool,
        # freed memory kept, and no pandas (pyarrow would import it, most of a second, only
        # to ask it is there). A forked worker has them already; a spawned one makes them.
        from tbconvert import arrowpool, malloc
        arrowpool.own_process()
        malloc.keep_freed_memory()
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


def _ended(proc) -> bool:
    """Whether the worker process ``proc`` has ended, whatever its exit code says yet."""
    from multiprocessing.connection import wait
    try:
        return bool(wait([proc.sentinel], 0))
    except (OSError, ValueError):    # its sentinel closed: it was joined, so it has ended
        return True


def killed_for_memory(pool: Workers, name: str, deaths: int) -> None:
    """Raise :class:`~tbconvert.errors.OutOfResourcesError` when the worker that died last
    was killed by SIGKILL, as the kernel's out-of-memory killer kills: the machine is short
    of memory, no fault of the run's data, and a run left out for it would make the output
    depend on ``--jobs`` (with one process, the whole command is killed). A worker that
    crashed otherwise (a signal of its own: SIGSEGV, SIGABRT) costs its run only."""
    import signal
    if getattr(signal, "SIGKILL", None) in pool.died_by:
        from tbconvert.errors import OutOfResourcesError
        raise OutOfResourcesError(
            f"{name}: the process reading it was killed (SIGKILL) {deaths} times, as the "
            "kernel does when the machine runs out of memory; free memory, or convert with "
            "fewer processes (--jobs 1)")


class Workers:
    """A pool of ``jobs`` worker processes, started on the first :meth:`submit`; after a
    worker died, :meth:`stop` it and make a new one."""

    def __init__(self, ctx, jobs: int, progress_queue: ProgressQueues) -> None:
        # (the workers report to the queue of progress_queue that suits how they start)
        self.ctx, self.jobs, self.progress_queue = ctx, jobs, progress_queue
        self.pool = None
        # Every process the pool started (it starts them while a call is submitted, in the
        # submitting thread): stopped here, and only these, never other children of the
        # program that uses tbconvert.
        self.processes: set = set()
        # The signals that ended workers before the last stop(): SIGKILL is what the kernel's
        # out-of-memory killer sends (see killed_for_memory).
        self.died_by: set = set()

    def start(self) -> None:
        """Start the workers now, when they can be forked from here (call it from the main
        thread before other threads get work); otherwise they are spawned on the first
        :meth:`submit`, wherever that is."""
        if self.pool is None and forks_here():
            self.submit(int)

    def submit(self, fn, *args):
        """``fn(*args)`` in a worker (``fn`` a module-level function); its future."""
        # Starting a worker must not be cut short by Ctrl-C: a process half started is one
        # that no one would stop.
        with deferred():
            forking = contextlib.nullcontext()
            if self.pool is None:
                ctx = self.ctx
                if forks_here():
                    # A forked pool starts all its workers on its first call, here.
                    ctx, forking = multiprocessing.get_context("fork"), _forking_workers()
                queue = self.progress_queue.for_workers(ctx.get_start_method())
                self.pool = ProcessPoolExecutor(self.jobs, mp_context=ctx, initializer=_init,
                                                initargs=(queue, os.getpid(), _own_process()))
            with forking:
                future = self.pool.submit(_reported, fn, *args)
            self.processes.update((getattr(self.pool, "_processes", None) or {}).values())
            return future

    def stop(self) -> None:
        """End every worker now, pending work and all, and wait until they are gone."""
        if self.pool is None:
            return
        processes = self.processes | set((getattr(self.pool, "_processes", None) or {}).values())
        # The pool's own thread reaps the workers too: once it is done, every one of them is
        # known to be gone (one it reaped first can still look alive to a join below).
        manager = getattr(self.pool, "_executor_manager_thread", None)
        self.pool.shutdown(wait=False, cancel_futures=True)
        # (a pool that was starting workers in another thread has them all once it is shut)
        processes |= set((getattr(self.pool, "_processes", None) or {}).values())
        for proc in processes:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + STOP_GRACE
        killed_here = set()
        for proc in processes:
            proc.join(max(0.0, deadline - time.monotonic()))
            # deaf to SIGTERM (it landed before the worker set up); one whose end the pool's
            # thread is reaping just now looks alive, but its sentinel tells it is gone
            if proc.is_alive() and not _ended(proc):
                killed_here.add(proc)
                proc.kill()
                proc.join()
        if manager is not None:
            manager.join(STOP_GRACE)
        # Read once every worker is joined: the pool's own thread may be reaping one while it
        # is looked at above, which then looks alive and has no exit code yet. A SIGTERM sent
        # here to one already dead changes nothing; a SIGKILL sent here is not counted.
        # The pool's thread may also have taken a worker's exit status and not yet stored it
        # where its exit code is read (a busy machine leaves that thread waiting): a moment.
        settled = time.monotonic() + EXIT_CODE_GRACE
        while any(p.exitcode is None for p in processes - killed_here) and \
                time.monotonic() < settled:
            time.sleep(0.002)
        self.died_by = {-p.exitcode for p in processes - killed_here
                        if p.exitcode is not None and p.exitcode < 0}
        self.processes.clear()
        self.pool = None
