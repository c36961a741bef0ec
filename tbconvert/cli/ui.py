"""Messages and progress on stderr for the command line."""

from __future__ import annotations

import sys

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

    def progress(self, label: str) -> None:
        """Advance the bar by one unit (a run); shown only on a terminal."""
        if self.quiet or not getattr(self.stream, "isatty", lambda: False)():
            return
        if self._bar is None:
            from tqdm import tqdm
            self._bar = tqdm(unit=" runs", file=self.stream, leave=False, dynamic_ncols=True)
        self._bar.set_postfix_str(one_line(label)[-40:], refresh=False)
        self._bar.update(1)

    def close_progress(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
