"""Plugin files carried into an event-file output.

A logdir converted to a logdir keeps what TensorBoard's plugins read beside the event files
(:mod:`.plugin_files`): each place's files are copied byte for byte to the same place under the
run's directory in the output (the run's new name, where it had to change), and a projector
config takes the embeddings, metadata and sprites it names along when they lie in its run.
The note that told of the place is taken back and another says where its files went. What
cannot be copied (a file that cannot be read, one the config names outside its run, a name
already taken in the output) is noted; no event data depends on it.
"""

from __future__ import annotations

import collections
import os
import posixpath

from tbconvert import sourcefiles
from tbconvert.formats.tfevents import plugin_files as plugins

_BLOCK = 1 << 20


class LocalFiles:
    """The plugin files of a local logdir (its places, as the walk found them)."""

    def __init__(self, root, places: dict) -> None:
        self.root = os.fspath(root)
        self.places = places

    def name(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def open(self, rel: str):
        return os.fdopen(sourcefiles.open_regular(self.name(rel)), "rb")

    def is_file(self, rel: str) -> bool:
        try:
            return os.path.isfile(self.name(rel))
        except (OSError, ValueError):
            return False


class StoreFiles:
    """The plugin files of a logdir at a URL (its listing's places), read from the store."""

    def __init__(self, stage) -> None:
        self.stage = stage
        self.places = stage.plugin_places

    def name(self, rel: str) -> str:
        return self.stage.name_of(rel)

    def open(self, rel: str):
        return self.stage.open_other(rel)

    def is_file(self, rel: str) -> bool:
        return rel in self.stage.others


def carry(reader, writer, report) -> None:
    """Copy the plugin files ``reader`` found into ``writer``'s output, where it carries
    them (an event-file logdir), taking back the notes that said they were not read."""
    source = getattr(reader, "plugin_source", None)
    if source is None or not getattr(writer, "carries_plugin_files", False):
        return
    source = source()
    if source is None:
        return
    done: set[str] = set()      # (a file a config names may also be in a place of its own)
    for where, place in sorted(source.places.items()):
        _carry_place(source, writer, report, where, place, done)


def _carry_place(source, writer, report, where: str, place, done: set) -> None:
    above = plugins.owner(where)
    into = writer.files_dir(place.run, above)
    named, outside = named_files(source, where)
    copied, failed = collections.Counter(), []
    for rel in [*place.files, *named]:
        if rel in done:
            continue
        done.add(rel)
        why = _copy(source, writer, rel, _moved(rel, above, into))
        if why is None:
            copied["named" if rel in named else "own"] += 1
        else:
            failed.append(why)
    if place.note is not None and place.note in report.issues:
        report.issues.remove(place.note)
    if copied:
        report.add("plugin_files_copied", _copied_message(
            source.name(where), _moved(where, above, into), place.plugin, copied, outside),
            run=place.run, count=sum(copied.values()), lost=False)
    for why in failed:
        report.add("plugin_files_not_read", why, run=place.run, lost=False)


def _moved(rel: str, above: str, into: str) -> str:
    """``rel`` (below the directory ``above``) moved below ``into`` instead."""
    inner = rel if above == "." else rel[len(above) + 1:]
    return inner if into == "." else f"{into}/{inner}"


def _copied_message(src: str, dest: str, plugin: str, copied, outside: int) -> str:
    """(``dest``: the place in the output, relative to it: the same words whatever the
    output is called, as the rest of a report's)"""
    more = ""
    if src.endswith(plugins.PROJECTOR_CONFIG):
        what = (f"the projector's configuration and the {copied['named']} file(s) it names in "
                "its run" if copied["own"] else f"{copied['named']} file(s) the projector's "
                "configuration names (not the configuration itself)")
        if outside:
            more = (f"; {outside} more it names, outside its run or not there, were not copied "
                    "(the copy still names them as they were)")
    elif src.endswith(plugins.PT_TRACES):
        what = f"{copied['own']} trace(s) of the PyTorch profiler"
    else:
        what = f"{copied['own']} file(s) of TensorBoard's {plugin} plugin"
    return f"{src}: {what} copied to the output's {dest}{more}"


def named_files(source, where: str) -> tuple[list[str], int]:
    """For the place ``where``: when it is a projector config, the files it names that lie in
    its run's directory (relative to the logdir), and how many others it names (outside it,
    or absent); for any other place, none."""
    if not where.endswith(plugins.PROJECTOR_CONFIG):
        return [], 0
    config, above = where, plugins.owner(where)
    try:
        with source.open(config) as fh:
            text = fh.read(plugins.PROJECTOR_CONFIG_MAX + 1)
    except OSError:
        return [], 0
    if len(text) > plugins.PROJECTOR_CONFIG_MAX:
        return [], 0
    inside, outside = [], 0
    base = posixpath.dirname(config)
    for named in plugins.named_paths(text):
        rel = posixpath.normpath(posixpath.join(base, named)) if base else posixpath.normpath(named)
        within = not named.startswith("/") and "\\" not in named and (
            above == "." and not rel.startswith("../") and rel != ".."
            or rel.startswith(above + "/"))
        if within and _safe(rel) and source.is_file(rel):
            inside.append(rel)
        else:
            outside += 1
    return sorted(set(inside)), outside


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in parts)


def _copy(source, writer, rel: str, dest: str) -> str | None:
    """Copy ``rel`` of the source to ``dest`` in the output; None, or why it was not. A
    failure of the output (a full disk) fails the conversion, as for any other output."""
    if not _safe(rel) or not _safe(dest):
        return f"{source.name(rel)}: its name is not a safe path; not copied"
    target = writer.out.tmp.joinpath(*dest.split("/"))
    try:
        src = source.open(rel)
    except OSError as exc:
        return f"{source.name(rel)}: cannot be read ({exc.strerror or exc}); not copied"

    def write():
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return f"{source.name(rel)}: the output already has {dest}; not copied"
        with os.fdopen(fd, "wb") as out:
            while True:
                try:
                    block = src.read(_BLOCK)
                except OSError as exc:
                    failed = exc
                    break
                if not block:
                    return None
                out.write(block)
        target.unlink(missing_ok=True)
        return f"{source.name(rel)}: cannot be read ({failed.strerror or failed}); not copied"
    with src:
        return writer.guard(write)


def digests(source) -> dict[str, str]:
    """``{file: SHA-256 of its bytes}`` (relative to the logdir) of every file a carrying
    output would copy (an unreadable file: why, in words), to compare two logdirs by."""
    import hashlib
    out: dict[str, str] = {}
    for where, place in sorted(source.places.items()):
        for rel in [*place.files, *named_files(source, where)[0]]:
            if rel in out:
                continue
            h = hashlib.sha256()
            try:
                with source.open(rel) as fh:
                    while block := fh.read(_BLOCK):
                        h.update(block)
                out[rel] = h.hexdigest()
            except OSError as exc:
                out[rel] = f"cannot be read ({exc.strerror or exc})"
    return out
