"""Turning run, tag and other names from data into safe relative paths.

Names come from data (event-file directories, export JSON, archives) and may
hold ``..``, absolute paths, drive letters, NUL, control characters or be very
long. Nothing here ever yields a path outside the destination: unsafe parts
are percent-escaped (so distinct names stay distinct) and the caller reports
the renaming.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MAX_PART_BYTES = 200  # well under the usual 255-byte limit, leaving room for suffixes

_UNSAFE_CHARS = set('\\:*?"<>|%') | {chr(c) for c in range(32)} | {"\x7f"}


def _escape_char(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def safe_part(part: str) -> str:
    """One path component made safe; unchanged when it already is."""
    if part in ("", ".", ".."):
        return {"": "%00empty", ".": "%2E", "..": "%2E%2E"}[part]
    out = "".join(_escape_char(c) if c in _UNSAFE_CHARS else c for c in part)
    if out.endswith((" ", ".")):  # trailing dots and spaces vanish on Windows
        out = out[:-1] + _escape_char(out[-1])
    encoded = out.encode("utf-8")
    if len(encoded) > MAX_PART_BYTES:
        digest = hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        head = encoded[:MAX_PART_BYTES - 18].decode("utf-8", "ignore")
        out = f"{head}~{digest}"
    return out


def run_parts(run: str) -> list[str]:
    """A run name as safe directory components; ``"."`` (the root) is ``[]``."""
    if run == ".":
        return []
    return [safe_part(p) for p in run.split("/")]


def run_dir(root: Path, run: str) -> tuple[Path, bool]:
    """Directory for ``run`` under ``root``, and whether the name had to change."""
    parts = run_parts(run)
    path = root.joinpath(*parts) if parts else root
    changed = "/".join(parts) != run and not (run == "." and not parts)
    return path, changed


def is_within(root: Path, path: Path) -> bool:
    """Whether ``path`` stays inside ``root`` once resolved (symlinks included)."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False
