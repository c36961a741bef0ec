"""What to do with the points TensorBoard's restart rule hides (docs/format-notes.md).

``"visible"`` leaves them out, as TensorBoard shows the run; ``"keep-all"`` keeps
them (archives always keep them, marked). tbparse's reader also accepts
``"per-file"``, tbparse's own view, where a restart purges only within its file.
"""

from __future__ import annotations

from typing import Literal, get_args

Restarts = Literal["visible", "keep-all"]
TbparseRestarts = Literal["visible", "per-file", "keep-all"]

CHOICES: tuple[str, ...] = get_args(Restarts)


def check(restarts: str, choices: tuple[str, ...] = CHOICES) -> None:
    """A UsageError for a value that is not one of ``choices``."""
    if restarts not in choices:
        from tbconvert.errors import UsageError
        raise UsageError(f"restarts must be one of {', '.join(choices)}, not {restarts!r}")
