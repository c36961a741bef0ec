"""Time limits for tests of hostile input: a case that hangs fails instead of hanging the suite."""

from __future__ import annotations

import contextlib
import signal


class Hang(Exception):
    """A case took longer than its deadline (raised in the main thread by SIGALRM)."""


@contextlib.contextmanager
def deadline(seconds: float, what: str):
    def on_alarm(signum, frame):
        raise Hang(f"{what}: took more than {seconds} s (blocked?)")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
