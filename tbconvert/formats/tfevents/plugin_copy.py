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
from tbconvert.formats.tfevents import event_files
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

    def resolves_inside(self, rel: str, above: str) -> bool:
        """Whether ``rel``, its links followed, lies in the directory ``above``."""
        try:
            top = os.path.realpath(self.name(above))
            return os.path.commonpath([top, os.path.realpath(self.name(rel))]) == top
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

    def resolves_inside(self, rel: str, above: str) -> bool:
        return True     # (a store has no links)


def carry(reader, writer, report) -> None:
    """Copy the plugin files ``reader`` found into ``writer``'s output (one that carries
    them, an event-file logdir: :func:`tbconvert.api.carry_plugin_files` asks), taking back
    the notes that said they were not read."""
    source = getattr(reader, "plugin_source", None)
    if source is None:
        return
    source = source()
    if source is None:
        return
    # {place in the output: file copied there}: a file a config names may also be in a place
    # of its own. A run's places go first: a directory that is not a run, whose name a renamed
    # run took, does not take the run's places.
    done: dict[str, str] = {}
    for where, place in sorted(source.places.items(), key=lambda kv: (kv[1].run is None, kv[0])):
        _carry_place(source, writer, report, where, place, done)


def _carry_place(source, writer, report, where: str, place, done: dict) -> None:
    above = plugins.owner(where)
    into = writer.files_dir(place.run, above)
    named, skipped = named_files(source, where)
    copied, failed = collections.Counter(), []
    for rel in [*place.files, *named]:
        dest = _moved(rel, above, into)
        if done.get(dest) == rel:
            copied["named" if rel in named else "own"] += 1
            continue
        why = _copy(source, writer, rel, dest)
        if why is None:
            done[dest] = rel
            copied["named" if rel in named else "own"] += 1
        else:
            failed.append(why)
    plugins.take_back(report, [place])
    if copied:
        report.add("plugin_files_copied", _copied_message(
            source.name(where), _moved(where, above, into), place.plugin, copied, skipped),
            run=place.run, count=sum(copied.values()), lost=False)
    elif skipped:
        report.add("plugin_files_not_read", f"{source.name(where)}: {_skipped(skipped)}",
                   run=place.run, lost=False)
    for why in failed:
        report.add("plugin_files_not_read", why, run=place.run, lost=False)


def _moved(rel: str, above: str, into: str) -> str:
    """``rel`` (below the directory ``above``) moved below ``into`` instead."""
    inner = rel if above == "." else rel[len(above) + 1:]
    return inner if into == "." else f"{into}/{inner}"


def _copied_message(src: str, dest: str, plugin: str, copied, skipped) -> str:
    """(``dest``: the place in the output, relative to it: the same words whatever the
    output is called, as the rest of a report's)"""
    more = f"; {_skipped(skipped)}" if skipped else ""
    if src.endswith(plugins.PROJECTOR_CONFIG):
        what = (f"the projector's configuration and the {copied['named']} file(s) it names in "
                "its run" if copied["own"] else f"{copied['named']} file(s) the projector's "
                "configuration names (not the configuration itself)")
    elif src.endswith(plugins.PT_TRACES):
        what = f"{copied['own']} trace(s) of the PyTorch profiler"
    else:
        what = f"{copied['own']} file(s) of TensorBoard's {plugin} plugin"
    return f"{src}: {what} copied to the output's {dest}{more}"


def _skipped(skipped: collections.Counter) -> str:
    if skipped["unreadable config"]:
        return (f"it is larger than {plugins.PROJECTOR_CONFIG_MAX >> 20} MiB or not a config "
                "TensorBoard's projector can parse: the files it names were not looked for")
    return ("files it names were not copied (the copy still names them as they were): "
            + ", ".join(f"{n} {why}" for why, n in sorted(skipped.items())))


def named_files(source, where: str) -> tuple[list[str], collections.Counter]:
    """For the place ``where``: when it is a projector config, the files it names that
    TensorBoard's projector reads in its run's directory (relative to the logdir), and why
    the others it names are not copied (by reason); for any other place, none."""
    skipped: collections.Counter = collections.Counter()
    if not where.endswith(plugins.PROJECTOR_CONFIG):
        return [], skipped
    above = plugins.owner(where)
    try:
        with source.open(where) as fh:
            text = fh.read(plugins.PROJECTOR_CONFIG_MAX + 1)
    except OSError:
        return [], skipped
    named = plugins.named_paths(text)
    if named is None:
        skipped["unreadable config"] += 1
        return [], skipped
    inside = []
    for name in named:
        # TensorBoard takes a name relative to the config's directory, and only what resolves
        # inside it; a name the copy would still spell as the source's place is not copied
        if os.path.isabs(name) or name.startswith("~") or "\\" in name:
            skipped["named by an absolute path"] += 1
            continue
        rel = posixpath.normpath(name if above == "." else f"{above}/{name}")
        if not (above == "." and not rel.startswith("../") and rel != ".."
                or rel.startswith(above + "/")) or not _safe(rel) or \
                not source.resolves_inside(rel, above):
            skipped["outside its run"] += 1
        elif event_files.is_event_file(posixpath.basename(rel)):
            skipped["event file (converted, not copied)"] += 1
        elif not source.is_file(rel):
            skipped["not there"] += 1
        else:
            inside.append(rel)
    return sorted(set(inside)), skipped


def _safe(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and all(p not in ("", ".", "..") for p in parts)


def _copy(source, writer, rel: str, dest: str) -> str | None:
    """Copy ``rel`` of the source to ``dest`` in the output; None, or why it was not. A
    failure of the output (a full disk) fails the conversion, as for any other output."""
    if not _safe(rel) or not _safe(dest):
        return f"{source.name(rel)}: its name is not a safe path; not copied"
    if any(event_files.is_event_file(d) for d in dest.split("/")[:-1]):
        return (f"{source.name(rel)}: its place in the output, {dest}, is below a directory "
                "named like an event file, which TensorBoard takes for one; not copied")
    target = writer.out.tmp.joinpath(*dest.split("/"))
    try:
        src = source.open(rel)
    except OSError as exc:
        return f"{source.name(rel)}: cannot be read ({exc.strerror or exc}); not copied"

    def write():
        taken = f"{source.name(rel)}: the output already has {dest} (or a file in its path); " \
                "not copied"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except (FileExistsError, NotADirectoryError):
            return taken
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
