"""What a conversion read, wrote and could not keep. Never prints.

Readers and writers record an :class:`Issue` for everything that did not make
it through unchanged (a corrupt record, a lost blob, a renamed run, a point
TensorBoard's restart rule hides...). The command line prints a summary; the
API hands the report back.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Iterable


@dataclass(frozen=True, slots=True)
class Issue:
    """One thing that did not go through unchanged.

    ``kind`` is a short stable identifier (``corrupt_record``,
    ``missing_blob``, ``hidden_points``...). ``count`` is how many points,
    records or bytes it concerns (see the kind). ``lost`` is False for
    notes that lose no data (a renamed run, hidden points kept and marked).
    """

    kind: str
    message: str
    path: str | None = None
    run: str | None = None
    tag: str | None = None
    count: int = 1
    lost: bool = True


@dataclass
class Report:
    """Counts and issues of one conversion."""

    issues: list[Issue] = field(default_factory=list)
    runs: int = 0
    series: int = 0
    points: collections.Counter = field(default_factory=collections.Counter)
    outputs: list[str] = field(default_factory=list)

    def add(self, kind: str, message: str, *, path=None, run=None, tag=None,
            count: int = 1, lost: bool = True) -> Issue:
        issue = Issue(kind, message, None if path is None else str(path), run, tag, count, lost)
        self.issues.append(issue)
        return issue

    def extend(self, issues: Iterable[Issue]) -> None:
        self.issues.extend(issues)

    @property
    def lost(self) -> list[Issue]:
        """Issues that cost data."""
        return [i for i in self.issues if i.lost]

    def summary_lines(self, limit_per_kind: int = 5) -> list[str]:
        """Human-readable lines, repeated issues summarised with counts."""
        by_kind: dict[str, list[Issue]] = collections.defaultdict(list)
        for issue in self.issues:
            by_kind[issue.kind].append(issue)
        lines = []
        for kind, issues in by_kind.items():
            total = sum(i.count for i in issues)
            head = "warning" if any(i.lost for i in issues) else "note"
            lines.append(f"{head}: {kind.replace('_', ' ')}: {len(issues)} "
                         f"{'time' if len(issues) == 1 else 'times'} ({total} in all)")
            for issue in issues[:limit_per_kind]:
                lines.append(f"  {issue.message}")
            if len(issues) > limit_per_kind:
                lines.append(f"  ... and {len(issues) - limit_per_kind} more like this")
        return lines

    def to_dict(self) -> dict:
        return {
            "runs": self.runs,
            "series": self.series,
            "points": dict(self.points),
            "outputs": list(self.outputs),
            "issues": [
                {"kind": i.kind, "message": i.message, "path": i.path, "run": i.run,
                 "tag": i.tag, "count": i.count, "lost": i.lost}
                for i in self.issues
            ],
        }
