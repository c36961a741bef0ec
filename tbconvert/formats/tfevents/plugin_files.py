"""Files that TensorBoard's plugins read beside the event files, which tbconvert does not read.

Some plugins keep their data outside the event files: each plugin's assets in a run's
``plugins/NAME/`` directory (the profiler's traces in ``plugins/profile/<session>/``), the
projector's ``projector_config.pbtxt`` with the embeddings, metadata and sprites it names
(PyTorch's ``add_embedding`` writes them), and the PyTorch profiler's traces
(``*.pt.trace.json``, or ``.json.gz``) in a run's directory, which its own plugin shows.
They are not event data, so no output holds them; readers note each such place, so that an
archive is never taken for all of a logdir.
"""

from __future__ import annotations

import collections
import os
import re

from tbconvert import sourcefiles

PLUGINS_DIR = "plugins"
PROJECTOR_CONFIG = "projector_config.pbtxt"
# The PyTorch profiler's traces (``tensorboard_trace_handler``), by the name a place of them is
# told under.
PT_TRACES = "*.pt.trace.json"
_PT_TRACE_ENDS = (".pt.trace.json", ".pt.trace.json.gz")


def place(rel_parts: list[str]) -> tuple[str, str] | None:
    """For a file that is not an event file, at ``rel_parts`` below a logdir: ``(where, plugin)``
    when a TensorBoard plugin reads it (``where``: its ``plugins/NAME`` directory, or the
    projector config's own path, relative), None otherwise."""
    for i, part in enumerate(rel_parts[:-2]):
        if part == PLUGINS_DIR:
            return "/".join(rel_parts[:i + 2]), rel_parts[i + 1]
    if rel_parts and rel_parts[-1] == PROJECTOR_CONFIG:
        return "/".join(rel_parts), "projector"
    if rel_parts and rel_parts[-1].endswith(_PT_TRACE_ENDS):
        return "/".join([*rel_parts[:-1], PT_TRACES]), "PyTorch profiler"
    return None


def count(rel_parts: list[str], others: list[str], counts: collections.Counter) -> None:
    """Count into ``counts`` (by :func:`place`) which of ``others``, the files of a directory
    at ``rel_parts`` that are not event files, TensorBoard's plugins read."""
    inside = place([*rel_parts, ""])
    if inside is not None:
        if others:
            counts[inside] += len(others)
        return
    if PROJECTOR_CONFIG in others:
        counts[place([*rel_parts, PROJECTOR_CONFIG])] += 1
    traces = sum(1 for f in others if f.endswith(_PT_TRACE_ENDS))
    if traces:
        counts[place([*rel_parts, PT_TRACES[1:]])] += traces


def owner(where: str) -> str:
    """The directory (named as a run) whose plugin files are at ``where`` (as
    :func:`place` gives it)."""
    parts = where.split("/")
    above = parts[:-1] if parts[-1] in (PROJECTOR_CONFIG, PT_TRACES) else parts[:-2]
    return "/".join(above) or "."


def notes(counts: collections.Counter, wants_run, runs, path_of, named_of=None):
    """``(where, message, run)`` for each place that ``counts`` (as :func:`count` fills it)
    holds and whose owner ``wants_run`` accepts, in order: ``path_of(where)`` names the place
    as the user does, ``named_of(path)`` (None: not looked at) counts the files a projector
    config there names, and ``run`` is the owner where it is one of ``runs``."""
    for (where, plugin), n in sorted(counts.items()):
        above = owner(where)
        if not wants_run(above):
            continue
        path = path_of(where)
        named = named_of(path) if named_of is not None and where.endswith(PROJECTOR_CONFIG) \
            else None
        yield where, note(path, plugin, n, named), above if above in runs else None


def note(where: str, plugin: str, n: int, named: int | None = None) -> str:
    """The note on files of a plugin that tbconvert does not read (``where``: as the user
    names it); for the projector's config, ``named``: how many of the files it names exist
    (None: not looked at)."""
    keep = "no output holds them (copy them beside the output to keep them)"
    if where.endswith(PT_TRACES):
        return (f"{where}: {n} trace(s) of the PyTorch profiler (which its TensorBoard plugin "
                f"shows; not event data) were not read; {keep}")
    if not where.endswith(PROJECTOR_CONFIG):
        return (f"{where}: {n} file(s) of TensorBoard's {plugin} plugin (not event data) "
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
        # (a FIFO or device under that name is not waited on: not a regular file, no count)
        with os.fdopen(sourcefiles.open_regular(config), "rb") as fh:
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
