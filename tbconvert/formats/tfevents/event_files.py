"""Where event files are and what they are called.

The rules are TensorBoard's (docs/format-notes.md, "Event files, runs and their order").
"""

from __future__ import annotations

import os
from pathlib import Path

from tbconvert import sourcefiles

EVENT_MARK = "tfevents"
PROFILE_EMPTY = ".profile-empty"
FILE_VERSION = "brain.Event:2"
WRITER_SUFFIX = ".tbconvert"
# Experiment facts (name, description, times) ride beside the logdir, where TensorBoard ignores them.
EXPERIMENT_SIDECAR = "tbconvert-experiment.json"


def is_event_file(name: str) -> bool:
    return EVENT_MARK in name


def discover(root: Path, on_problem) -> list[tuple[str, list[Path]]]:
    """Runs under ``root`` as TensorBoard finds them: ``[(run name, event files sorted)]``.

    A run is every directory that directly holds a file with ``tfevents`` in
    its name; its name is the path relative to ``root`` (``"."`` for the
    root). Symbolic links to directories are not followed (as TensorBoard's
    Python loader does); unreadable directories are reported and skipped.
    """
    if root.is_file():
        return [(".", [root])]
    runs = []

    def onerror(exc: OSError) -> None:
        on_problem("unreadable_directory", f"{exc.filename}: cannot be read ({exc.strerror}); skipped")

    for dirpath, dirnames, filenames in sourcefiles.walk(root, onerror=onerror):
        dirnames.sort()
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                on_problem("symlink_not_followed",
                           f"{os.path.join(dirpath, d)}: symbolic link to a directory not followed")
        files = sorted(os.path.join(dirpath, f) for f in filenames if is_event_file(f))
        if files:
            rel = os.path.relpath(dirpath, root)
            name = "." if rel == "." else rel.replace(os.sep, "/")
            runs.append((name, [Path(f) for f in files]))
    return runs


def host_name() -> str:
    import socket  # only writers name files after the host: reading stays without it
    host = socket.gethostname() or "localhost"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in host)[:64] or "localhost"


def event_file_name(first_wall_time: float, counter: int, host: str | None = None,
                    pid: int | None = None) -> str:
    """The writer's name for a run's file; ``host`` and ``pid`` default to this process's
    (a run written by a worker takes those of the process that leads the conversion, so a
    task run twice writes one name)."""
    secs = int(first_wall_time) if first_wall_time == first_wall_time and abs(first_wall_time) < 1e11 else 0
    host = host_name() if host is None else host
    pid = os.getpid() if pid is None else pid
    return f"events.out.{EVENT_MARK}.{max(secs, 0):010d}.{host}.{pid}.{counter}{WRITER_SUFFIX}"
