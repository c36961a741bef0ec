"""Messages and progress on stderr for the command line."""

from __future__ import annotations

import os
import sys
import threading
import time

from tbconvert.cli.text import shown as one_line
from tbconvert.report import Report


class UI:
    """What the command line says: errors, the warning summary, a progress bar."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False, stream=None) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.stream = stream if stream is not None else sys.stderr
        self._bar = None

    def error(self, message: str) -> None:
        self.close_progress()
        print(f"tbconvert: error: {one_line(message)}", file=self.stream)

    def info(self, message: str) -> None:
        if not self.quiet:
            self.close_progress()
            print(one_line(message), file=self.stream)

    def summary(self, report: Report) -> None:
        """Warnings and notes, repeated ones summarised with counts."""
        self.close_progress()
        if self.quiet or not report.issues:
            return
        limit = 10**9 if self.verbose else 5
        for line in report.summary_lines(limit_per_kind=limit):
            line = one_line(line)
            print(f"tbconvert: {line}" if not line.startswith("  ") else line, file=self.stream)

    def progress(self) -> _Bar | None:
        """A progress receiver for the copy loop: None (nothing drawn) unless stderr is a
        terminal and not ``--quiet``."""
        if self.quiet or not getattr(self.stream, "isatty", lambda: False)():
            return None
        return _Bar(self)

    def close_progress(self) -> None:
        if self._bar is not None:
            from tbconvert import workers
            workers.unhold_over_forks(self._bar.get_lock())
            self._bar.close()
            self._bar = None


class _Bar:
    """A :class:`tbconvert.formats.base.Progress` (not imported here: this module loads
    before the signal handlers are in place, so it stays light). Source bytes done of the
    total, with rate and time left; drawn once a job has run
    for :data:`SHOW_AFTER` seconds (short jobs stay silent), then at least every
    :data:`REFRESH` seconds while work advances."""

    def __init__(self, ui: UI) -> None:
        self.ui = ui

    def _tqdm(self):
        if self.ui._bar is None:
            from tqdm import tqdm

            # Only this process draws: a lock of its threads, not tqdm's default, which also
            # holds a semaphore shared with the workers. Held over a fork of workers (below),
            # that one is released by the worker and here: twice, and the bar's clock and the
            # leading thread could then both take it, and end waiting for each other for ever.
            tqdm.set_lock(threading.RLock())
            try:
                width, height = os.get_terminal_size(self.ui.stream.fileno())
            except (AttributeError, OSError, ValueError):
                width = height = 0
            # A terminal that reports no size (a bare pseudo-terminal) still gets a bar: tqdm
            # draws nothing where it finds no rows.
            bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024,
                       file=self.ui.stream, leave=False, dynamic_ncols=width > 0,
                       ncols=None if width > 0 else 80, nrows=None if height > 0 else 24,
                       delay=SHOW_AFTER, mininterval=REFRESH, desc="converting")
            self.ui._bar = bar
            from tbconvert import workers
            workers.hold_over_forks(bar.get_lock())   # never forked half drawn
            # Reading one large block can take seconds: a clock keeps the bar (and its time
            # left) on screen meanwhile.
            threading.Thread(target=_keep_drawn, args=(bar,), daemon=True).start()
        return self.ui._bar

    def start(self, total: int) -> None:
        bar = self._tqdm()
        bar.total = (bar.total or 0) + max(int(total), 0)

    def advance(self, n: int) -> None:
        if n > 0:
            self._tqdm().update(n)

    def finish(self) -> None:
        bar = self.ui._bar
        if bar is not None and bar.total and bar.n < bar.total:
            bar.update(bar.total - bar.n)


SHOW_AFTER = 1.0
REFRESH = 0.25


def _keep_drawn(bar) -> None:
    while not bar.disable:
        time.sleep(REFRESH)
        if bar.disable or bar.start_t is None:
            return
        if time.time() - bar.start_t >= SHOW_AFTER:
            try:
                bar.refresh()
            except (ValueError, OSError, AttributeError):  # closed under us
                return
