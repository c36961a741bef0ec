"""Where event files are and what they are called.

The rules are TensorBoard's (docs/format-notes.md, "Event files, runs and their order").
"""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.errors import FormatError, raise_if_exhausted

EVENT_MARK = "tfevents"
PROFILE_EMPTY = ".profile-empty"
FILE_VERSION = "brain.Event:2"
WRITER_SUFFIX = ".tbconvert"
# Experiment facts (name, description, times) ride beside the logdir, where TensorBoard ignores them.
EXPERIMENT_SIDECAR = "tbconvert-experiment.json"
# What TensorBoard's plugins read beside event files: each plugin's assets in a run's
# plugins/NAME/ (the profiler's traces in plugins/profile/...), and the projector's config.
PLUGINS_DIR = "plugins"
PROJECTOR_CONFIG = "projector_config.pbtxt"


def is_event_file(name: str) -> bool:
    return EVENT_MARK in name


def plugin_place(rel_parts: list[str]) -> tuple[str, str] | None:
    """For a file that is not an event file, at ``rel_parts`` below a logdir: ``(where, plugin)``
    when a TensorBoard plugin reads it (``where``: its ``plugins/NAME`` directory, or the
    projector config's own path, relative), None otherwise."""
    for i, part in enumerate(rel_parts[:-2]):
        if part == PLUGINS_DIR:
            return "/".join(rel_parts[:i + 2]), rel_parts[i + 1]
    if rel_parts and rel_parts[-1] == PROJECTOR_CONFIG:
        return "/".join(rel_parts), "projector"
    return None


def _count_plugin_files(rel_parts: list[str], filenames: list[str],
                        counts: collections.Counter) -> None:
    """Count into ``counts`` (by :func:`plugin_place`) the files of a directory at
    ``rel_parts`` that TensorBoard's plugins read."""
    inside = plugin_place([*rel_parts, ""])
    if inside is not None:
        n = sum(1 for f in filenames if not is_event_file(f))
        if n:
            counts[inside] += n
    elif PROJECTOR_CONFIG in filenames:
        counts[plugin_place([*rel_parts, PROJECTOR_CONFIG])] += 1


def plugin_owner(where: str) -> str:
    """The directory (named as a run) whose plugin files are at ``where`` (as
    :func:`plugin_place` gives it)."""
    parts = where.split("/")
    owner = parts[:-1] if parts[-1] == PROJECTOR_CONFIG else parts[:-2]
    return "/".join(owner) or "."


def plugin_files_note(where: str, plugin: str, count: int, named: int | None = None) -> str:
    """The note on files of a plugin that tbconvert does not read (``where``: as the user
    names it); for the projector's config, ``named``: how many of the files it names exist
    (None: not looked at)."""
    keep = "no output holds them (copy them beside the output to keep them)"
    if not where.endswith(PROJECTOR_CONFIG):
        return (f"{where}: {count} file(s) of TensorBoard's {plugin} plugin (not event data) "
                f"were not read; {keep}")
    if named == 0:
        return (f"{where}: the projector's configuration (not event data) was not read; no "
                "output holds it (copy it beside the output to keep it)")
    what = "the files it names" if named is None else f"the {named} file(s) it names"
    return f"{where}: the projector's configuration and {what} (not event data) were not read; {keep}"


# The fields of a projector config that name files (tensors, metadata, sprites, bookmarks,
# checkpoints); a config larger than PROJECTOR_CONFIG_MAX is not looked into.
_NAMED_PATH = re.compile(rb'(?:tensor_path|metadata_path|image_path|bookmarks_path|'
                         rb'model_checkpoint_path)\s*:\s*"((?:[^"\\]|\\.)*)"')
PROJECTOR_CONFIG_MAX = 1 << 20


def projector_named_files(config: str) -> int | None:
    """How many of the files that the projector config at ``config`` names exist (None: the
    config cannot be read, or is too large to look into)."""
    try:
        with sourcefiles.open_binary(config) as fh:
            text = fh.read(PROJECTOR_CONFIG_MAX + 1)
    except OSError:
        return None
    if len(text) > PROJECTOR_CONFIG_MAX:
        return None
    base = os.path.dirname(config)
    found = set()
    for m in _NAMED_PATH.finditer(text):
        name = os.fsdecode(m.group(1).replace(b'\\"', b'"'))
        path = os.path.normpath(os.path.join(base, name))
        try:
            if os.path.isfile(path):
                found.add(path)
        except (OSError, ValueError):
            continue
    return len(found)


def discover(root: Path, on_problem, on_note=None,
             wants_run=lambda name: True) -> list[tuple[str, list[Path]]]:
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
    Unreadable directories are reported and skipped. ``on_note(kind, message)`` hears of what
    costs no data: a tbconvert output on its way in the source (skipped), a directory
    named like an event file (read as a directory; TensorBoard fails on it), and files of
    TensorBoard's plugins that are not event data (not read: see :func:`plugin_place`), in
    the directories whose name (as a run's) ``wants_run`` accepts.
    """
    if root.is_file():
        return [(".", [root])]
    runs = []
    plugin_files: collections.Counter = collections.Counter()

    def onerror(exc: OSError) -> None:
        raise_if_exhausted(exc)    # (not the directory's fault: every other would fail too)
        where = exc.filename if isinstance(exc.filename, str) else os.fspath(root)
        if os.path.normpath(where) == os.path.normpath(root):
            # the source itself: nothing of it can be read (an empty output would say otherwise)
            raise FormatError(f"{root}: cannot be read ({exc.strerror})")
        on_problem("unreadable_directory", f"{where}: cannot be read ({exc.strerror}); skipped")

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
            _count_plugin_files([] if rel == "." else rel.split(os.sep), filenames,
                                plugin_files)
        if files:
            name = "." if rel == "." else rel.replace(os.sep, "/")
            runs.append((name, [Path(f) for f in files]))
    if on_note is not None:
        for (where, plugin), count in sorted(plugin_files.items()):
            if not wants_run(plugin_owner(where)):
                continue
            path = os.path.join(root, *where.split("/"))
            named = projector_named_files(path) if where.endswith(PROJECTOR_CONFIG) else None
            on_note("plugin_files_not_read", plugin_files_note(path, plugin, count, named))
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
