"""Files that TensorBoard's plugins read beside the event files, which tbconvert does not read.

Some plugins keep their data outside the event files: each plugin's assets in a run's
``plugins/NAME/`` directory (the profiler's traces in ``plugins/profile/<session>/``), the
projector's ``projector_config.pbtxt`` with the embeddings, metadata and sprites it names
(PyTorch's ``add_embedding`` writes them), and the PyTorch profiler's traces
(``*.pt.trace.json``, or ``.json.gz``) in a run's directory, which its own plugin shows.
They are not event data: an event-file output carries them (:mod:`.plugin_copy`), and no
other output holds them; readers note each such place, so that an archive is never taken
for all of a logdir.
"""

from __future__ import annotations

import dataclasses
import os

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


def collect(rel_parts: list[str], others: list[str], found: dict) -> None:
    """Add to ``found`` (``{(where, plugin): [file, ...]}``, by :func:`place`, files relative
    to the logdir) which of ``others``, the files of a directory at ``rel_parts`` that are not
    event files, TensorBoard's plugins read."""
    inside = place([*rel_parts, ""])
    if inside is not None:
        if others:
            found.setdefault(inside, []).extend("/".join([*rel_parts, f]) for f in others)
        return
    for f in others:
        if f == PROJECTOR_CONFIG or f.endswith(_PT_TRACE_ENDS):
            found.setdefault(place([*rel_parts, f]), []).append("/".join([*rel_parts, f]))


def owner(where: str) -> str:
    """The directory (named as a run) whose plugin files are at ``where`` (as
    :func:`place` gives it)."""
    parts = where.split("/")
    above = parts[:-1] if parts[-1] in (PROJECTOR_CONFIG, PT_TRACES) else parts[:-2]
    return "/".join(above) or "."


@dataclasses.dataclass
class Place:
    """A place of plugin files in a source (see :func:`place`): its plugin, its files
    (relative to the logdir), the run it belongs to (None: a directory that is not a run),
    and the note told of it (taken back where an output carries the files)."""

    plugin: str
    files: list[str]
    run: str | None = None
    note: object = None


def take_back(report, places) -> None:
    """Take the notes told of ``places`` out of ``report`` (their files were carried, or
    compared): those very notes, not equal ones an earlier reading left in a shared report."""
    told = {id(p.note) for p in places if p.note is not None}
    if told:
        report.issues[:] = [i for i in report.issues if id(i) not in told]


def notes(found: dict, wants_run, runs, path_of, named_of=None):
    """``(where, place, message)`` for each place that ``found`` (as :func:`collect` fills
    it) holds and whose owner ``wants_run`` accepts, in order: ``path_of(where)`` names the
    place as the user does, ``named_of(path)`` (None: not looked at) counts the files a
    projector config there names, and the place's run is its owner where that is one of
    ``runs``."""
    for (where, plugin), files in sorted(found.items()):
        above = owner(where)
        if not wants_run(above):
            continue
        path = path_of(where)
        named = named_of(path) if named_of is not None and where.endswith(PROJECTOR_CONFIG) \
            else None
        yield (where, Place(plugin, sorted(files), above if above in runs else None),
               note(path, plugin, len(files), named))


def note(where: str, plugin: str, n: int, named: int | None = None) -> str:
    """The note on files of a plugin that tbconvert does not read (``where``: as the user
    names it); for the projector's config, ``named``: how many of the files it names exist
    (None: not looked at)."""
    keep = ("only an event-file output carries them (copy them beside any other output to "
            "keep them)")
    if where.endswith(PT_TRACES):
        return (f"{where}: {n} trace(s) of the PyTorch profiler (which its TensorBoard plugin "
                f"shows; not event data) were not read; {keep}")
    if not where.endswith(PROJECTOR_CONFIG):
        return (f"{where}: {n} file(s) of TensorBoard's {plugin} plugin (not event data) "
                f"were not read; {keep}")
    if named == 0:
        return (f"{where}: the projector's configuration (not event data) was not read; only "
                "an event-file output carries it (copy it beside any other output to keep it)")
    what = "the files it names" if named is None else f"the {named} file(s) it names"
    return f"{where}: the projector's configuration and {what} (not event data) were not read; {keep}"


# A config larger than this is not looked into (TensorBoard's own are a few hundred bytes).
PROJECTOR_CONFIG_MAX = 16 << 20


def projector_named_files(config: str) -> int | None:
    """How many of the files that the projector config at ``config`` names exist (None: the
    config cannot be read or parsed, or is too large to look into)."""
    try:
        # (a FIFO or device under that name is not waited on: not a regular file, no count)
        with os.fdopen(sourcefiles.open_regular(config), "rb") as fh:
            text = fh.read(PROJECTOR_CONFIG_MAX + 1)
    except OSError:
        return None
    named = named_paths(text)
    if named is None:
        return None
    base = os.path.dirname(config)
    found = set()
    for name in named:
        path = os.path.normpath(os.path.join(base, os.path.expanduser(name)))
        try:
            if os.path.isfile(path):
                found.add(path)
        except (OSError, ValueError):
            continue
    return len(found)


def named_paths(config: bytes) -> list[str] | None:
    """The file names a projector config names (tensors, metadata, bookmarks, sprites, and its
    checkpoint), read as TensorBoard reads the config, a ``ProjectorConfig`` in protobuf's text
    format; None where that fails or the config is larger than ``PROJECTOR_CONFIG_MAX``."""
    if len(config) > PROJECTOR_CONFIG_MAX:
        return None
    from google.protobuf import text_format
    from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig
    parsed = ProjectorConfig()
    try:
        text_format.Parse(config.decode("utf-8"), parsed)
    except (UnicodeDecodeError, text_format.ParseError, ValueError):
        return None
    names = [parsed.model_checkpoint_path]
    for emb in parsed.embeddings:
        names += [emb.tensor_path, emb.metadata_path, emb.bookmarks_path, emb.sprite.image_path]
    return [n for n in names if n]
