"""Where event files are and what they are called.

The rules are TensorBoard's (docs/format-notes.md, "Event files, runs and their order").
"""

from __future__ import annotations

import os
from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.errors import FormatError, raise_if_exhausted
from tbconvert.formats.tfevents import plugin_files as plugins

EVENT_MARK = "tfevents"
PROFILE_EMPTY = ".profile-empty"
FILE_VERSION = "brain.Event:2"
WRITER_SUFFIX = ".tbconvert"
# Experiment facts (name, description, times) ride beside the logdir, where TensorBoard ignores them.
EXPERIMENT_SIDECAR = "tbconvert-experiment.json"


def is_event_file(name: str) -> bool:
    return EVENT_MARK in name


def discover(root: Path, on_problem, on_note=None, wants_run=lambda name: True,
             places: dict | None = None) -> list[tuple[str, list[Path]]]:
    """Runs under ``root`` as TensorBoard finds them: ``[(run name, event files sorted)]``.

    A run is every directory that directly holds a file with ``tfevents`` in
    its name; its name is the path relative to ``root`` (``"."`` for the
    root). Symbolic links are followed, as TensorBoard's logdir walk follows them: a
    linked directory is a run under the link's path, a directory reached along two paths is
    a run under each (TensorBoard shows both), a linked event file is read where it leads.
    Reported and not followed: a link back to a directory above it (TensorBoard would list
    the same runs again, ever deeper), a directory already read under
    ``sourcefiles.MAX_PATHS_PER_DIRECTORY`` paths, a link that leads nowhere (one named
    like an event file stays in its run, as in TensorBoard, and the reader names it).
    Unreadable directories are reported and skipped. ``on_note(kind, message, run=None)``
    hears of what costs no data: a tbconvert output on its way in the source (skipped), a directory
    named like an event file (read as a directory; TensorBoard fails on it), and files of
    TensorBoard's plugins that are not event data (not read: see :mod:`.plugin_files`), in
    the directories whose name (as a run's) ``wants_run`` accepts; ``places`` (a dict) is
    given each of those as ``{where: plugin_files.Place}``, its note the one ``on_note``
    returned.
    """
    if root.is_file():
        return [(".", [root])]
    runs = []
    found_plugin_files: dict = {}

    def onerror(exc: OSError) -> None:
        raise_if_exhausted(exc)    # (not the directory's fault: every other would fail too)
        where = exc.filename if isinstance(exc.filename, str) else os.fspath(root)
        if os.path.normpath(where) == os.path.normpath(root):
            # the source itself: nothing of it can be read (an empty output would say otherwise)
            raise FormatError(f"{root}: cannot be read ({exc.strerror})")
        on_problem("unreadable_directory", f"{where}: cannot be read ({exc.strerror}); skipped")

    dangling: set[str] = set()

    def onskip(path: str, why: str, exc: OSError | None) -> None:
        if why == sourcefiles.LOOP:
            on_problem("symlink_loop", f"{path}: leads back to {_target(path)}, a directory "
                                       "above it; not followed (its runs are read once, under "
                                       "the shorter path)")
        elif why == sourcefiles.REPEATED:
            on_problem("symlink_not_followed",
                       f"{path}: leads to {_target(path)}, already read under "
                       f"{sourcefiles.MAX_PATHS_PER_DIRECTORY} other paths; not followed")
        elif not is_event_file(os.path.basename(path)):
            on_problem("dangling_symlink", f"{path}: a symbolic link to {_link(path)}, which "
                                           f"cannot be reached ({exc.strerror}); skipped")
            dangling.add(path)   # told here: not again as a plugin file that was not copied

    for dirpath, dirnames, filenames in sourcefiles.walk(root, onerror=onerror, onskip=onskip):
        dirnames.sort()
        # an output of tbconvert's on its way holds partial runs, never the logdir's own
        for name in [d for d in dirnames if sourcefiles.TMP_MARK in d]:
            dirnames.remove(name)
            if on_note is not None:
                on_note("leftover_output_skipped",
                        f"{os.path.join(dirpath, name)}: an incomplete output of tbconvert "
                        "(being written, or left by one that was killed); not read as runs")
        files = sorted(os.path.join(dirpath, f) for f in filenames if is_event_file(f))
        if on_note is not None:
            for name in (d for d in dirnames if is_event_file(d)):
                on_note("event_file_named_directory",
                        f"{os.path.join(dirpath, name)}: a directory named like an event file; "
                        "read as a directory (TensorBoard takes it for an event file: it "
                        "shows nothing of it"
                        f"{', nor of the event files sorted after it here' if files else ''})")
        rel = os.path.relpath(dirpath, root)
        if on_note is not None:
            plugins.collect([] if rel == "." else rel.split(os.sep),
                            [f for f in filenames if not is_event_file(f)
                             and os.path.join(dirpath, f) not in dangling], found_plugin_files)
        if files:
            name = "." if rel == "." else rel.replace(os.sep, "/")
            runs.append((name, [Path(f) for f in files]))
    if on_note is not None:
        told = plugins.notes(found_plugin_files, wants_run, {name for name, _ in runs},
                             lambda where: os.path.join(root, *where.split("/")),
                             plugins.projector_named_files)
        for where, place, message in told:
            place.note = on_note("plugin_files_not_read", message, run=place.run)
            if places is not None:
                places[where] = place
    return runs


def _target(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return "a directory"


def _link(path: str) -> str:
    try:
        return repr(os.readlink(path))
    except (OSError, ValueError):
        return "an unknown target"


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
