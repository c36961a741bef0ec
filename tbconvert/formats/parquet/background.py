"""A row group encoded by Arrow in a thread of its own while the next one is made.

Arrow encodes and writes a row group without the GIL, and a run's next row group is made
in Python (its pieces taken back from the spill, joined, checksummed) in the meantime: a run
of 20,000 legacy histograms in five row groups took 7% less time so. At most one row group
is being written at a time: the next one waits for it (the same bytes, in the same order),
and so memory holds at most the row group being written and the one being made.

A write that fails raises its error at the next :meth:`Writing.wait`, in the thread that
writes the file. The thread is waited for on an event, not joined: before Python 3.13 a
join cut short by Ctrl-C left the thread marked as ended while it still ran, and the file
closed under it crashed the process. Forked workers are started only while no row group is being written
(:func:`tbconvert.workers.hold_over_forks`): a child inheriting Arrow's allocator midway
through a write could wait for ever on a lock that no thread of its own holds.
"""

from __future__ import annotations

import threading

from tbconvert import workers
from tbconvert.interrupts import Thread

_WRITING = threading.Lock()
workers.hold_over_forks(_WRITING)


class Writing:
    """The row group being written, if any."""

    def __init__(self) -> None:
        self._thread: Thread | None = None
        self._failed: BaseException | None = None

    def start(self, write, *args) -> None:
        """Wait for the write before, then call ``write(*args)`` in a thread of its own."""
        self.wait()

        def run() -> None:
            try:
                with _WRITING:
                    write(*args)
            except BaseException as exc:  # noqa: BLE001 - raised again by wait()
                self._failed = exc
        self._thread = Thread(run, name="tbconvert-parquet-row-group")
        self._thread.start()

    def wait(self, held: bool = False) -> None:
        """Return once no row group is being written; raise what a write raised. ``held``:
        with Ctrl-C and SIGTERM held back meanwhile (the file is closed next, which must
        not happen under a write). A wait cut short by a signal is waited for again."""
        thread = self._thread
        if thread is not None:
            thread.wait_held() if held else thread.wait()
            self._thread = None
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed
