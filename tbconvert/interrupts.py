"""Holding Ctrl-C and SIGTERM back while a C library is in the middle of a write.

Python raises ``KeyboardInterrupt`` (or whatever a handler raises) at any bytecode,
including inside Python callbacks that a C library such as HDF5 is running. An exception
there leaves the library half-way through an update, and it can crash on the next call.
Inside :func:`deferred`, a signal is only noted; the old handler runs when the block ends,
where unwinding is safe.
"""

from __future__ import annotations

import contextlib
import signal
import threading

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                 if hasattr(signal, name))


@contextlib.contextmanager
def deferred():
    """Run the block with SIGINT and SIGTERM held back until it ends (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    old = {}
    for signum in _SIGNALS:
        handler = signal.getsignal(signum)
        if handler is not None and handler is not signal.SIG_IGN:  # None: set outside Python
            old[signum] = handler
            signal.signal(signum, lambda n, frame: caught.append((n, frame)))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        if caught:
            signum, frame = caught[0]
            handler = old[signum]
            if handler is signal.SIG_DFL:
                signal.raise_signal(signum)
            else:
                handler(signum, frame)


class Thread(threading.Thread):
    """A daemon thread whose end :meth:`wait` awaits reliably, also after Ctrl-C.

    Before Python 3.13, a ``join`` that a signal handler's exception interrupts marks the
    thread as ended although it still runs: from then on ``is_alive`` is False and every
    ``join`` returns at once. Cleanup that must come after the thread's work (removing the
    files it writes, closing the file it adds to) waits here instead, on an event that the
    thread sets when its work is over.
    """

    def __init__(self, target, *, name: str, args: tuple = ()) -> None:
        super().__init__(target=target, name=name, args=args, daemon=True)
        self._over = threading.Event()

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._over.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the thread's work is over (waiting up to ``timeout`` seconds for it)."""
        return self._over.wait(timeout)

    def wait_held(self) -> None:
        """Wait for the end, with Ctrl-C and SIGTERM held back until then: what follows
        relies on the thread being done, and a second Ctrl-C must not skip the wait."""
        with deferred():
            self.wait()
