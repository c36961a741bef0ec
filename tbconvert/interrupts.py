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

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM") if hasattr(signal, name))


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
