"""Names from data made storable: safe relative paths, and text every format can encode.

Names come from data (event-file directories, export JSON, archives) and may
hold ``..``, absolute paths, drive letters, NUL, control characters, bytes that
are not UTF-8, lone surrogates, or be very long. Nothing here ever yields a path
outside the destination: unsafe parts are percent-escaped (so distinct names
stay distinct), over-long parts and paths are shortened with a digest of the
whole name, and the caller reports the renaming.

Directory names read from a POSIX file system that are not UTF-8 reach Python
as surrogate escapes (PEP 383). Every output spells them as text: formats that store
text (Parquet, HDF5, CSV, exports, tags everywhere) get :func:`text`, which spells each
such byte ``%XX`` (and any other lone surrogate as its three UTF-8 bytes ``%ED%A0%80``),
and directory names (:func:`safe_part`) spell them the same way: TensorBoard's loader
fails on the whole logdir at a directory name that is not UTF-8. A backslash would not
do: exports read it as a Windows path separator.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

# NAME_MAX is 255 bytes on every common file system; stay under it with room for a
# "~N" clash suffix and the hidden ".<name>.tbconvert-tmp-*" name of a top-level output.
MAX_PART_BYTES = 200
# A whole relative path (run, or run plus tag for media) in bytes. PATH_MAX (4096 on
# Linux, 1024 on macOS) also counts the destination's own path and the file name.
MAX_PATH_BYTES = 768

# A backslash is a separator to Windows and to exports; "%" is escaped where it would read as
# an escape (see _ESCAPED_CODES); control characters would reach terminals. Windows also refuses
# :*?"<>| and trailing dots and spaces, which POSIX file systems (and TensorBoard's run names
# there) keep: an ISO time as a run name stays as it is.
_WINDOWS = os.name == "nt"
_UNSAFE_CHARS = set("\\%") | {chr(c) for c in range(32)} | {"\x7f"} | (
    set(':*?"<>|') if _WINDOWS else set())
_SURROGATE = re.compile("[\ud800-\udfff]")
# The codes safe_part spells as ``%XX``: the unsafe characters above, "." and " " (".." and
# Windows' trailing dots and spaces), and the bytes of non-UTF-8 names and lone surrogates.
# Only a "%" followed by one of them is escaped itself, so that every spelling reads back
# one way; any other "%" stays as it is ("50%", "%41"), the run name TensorBoard showed.
_ESCAPED_CODES = frozenset(
    [f"{ord(c):02X}" for c in _UNSAFE_CHARS] + ["2E", "20"] + [f"{b:02X}" for b in range(0x80, 0x100)])


def _surrogate_text(m: re.Match) -> str:
    ch = m.group()
    raw = ch.encode("utf-8", "surrogateescape" if "\udc80" <= ch <= "\udcff" else "surrogatepass")
    return "".join(f"%{b:02X}" for b in raw)


@functools.lru_cache(maxsize=4096)
def text(name: str) -> str:
    """``name`` as text any encoder takes: each lone surrogate made a visible escape."""
    return _SURROGATE.sub(_surrogate_text, name) if _SURROGATE.search(name) else name


def _escape_char(ch: str) -> str:
    if "\ud800" <= ch <= "\udfff":
        return _surrogate_text(_SURROGATE.match(ch))
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def _part_bytes(part: str) -> bytes:
    return part.encode("utf-8", "surrogatepass")


def _digest(name: str) -> str:
    import hashlib  # only names that cannot be used as they are: every command imports this module
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@functools.lru_cache(maxsize=4096)
def safe_part(part: str) -> str:
    """One path component made safe; unchanged when it already is."""
    if part in ("", ".", ".."):
        return {"": "%00empty", ".": "%2E", "..": "%2E%2E"}[part]
    out = "".join(_escape_char(c) if _unsafe_at(part, i) else c for i, c in enumerate(part))
    if _WINDOWS and out.endswith((" ", ".")):  # trailing dots and spaces vanish on Windows
        out = out[:-1] + _escape_char(out[-1])
    encoded = _part_bytes(out)
    if len(encoded) > MAX_PART_BYTES:
        head = encoded[:MAX_PART_BYTES - 18].decode("utf-8", "ignore")
        out = f"{head}~{_digest(part)}"
    return out


def _unsafe_at(part: str, i: int) -> bool:
    c = part[i]
    if c == "%":
        return part[i + 1:i + 3].upper() in _ESCAPED_CODES
    return c in _UNSAFE_CHARS or _SURROGATE.match(c) is not None


def shortened(parts: list[str], name: str, budget: int = MAX_PATH_BYTES) -> list[str]:
    """``parts`` cut so that their joined bytes fit ``budget``: the leading parts that fit,
    then one part holding a digest of the whole name (distinct names stay distinct)."""
    if sum(len(_part_bytes(p)) + 1 for p in parts) <= budget:
        return parts
    tail = f"~{_digest(name)}"
    kept, used = [], len(tail)
    for p in parts[:-1]:
        size = len(_part_bytes(p)) + 1
        if used + size > budget:
            break
        kept.append(p)
        used += size
    return kept + [tail]


def path_parts(name: str, budget: int = MAX_PATH_BYTES) -> list[str]:
    """A ``/``-separated name as safe components whose joined length fits ``budget``."""
    return shortened([safe_part(p) for p in name.split("/")], name, budget)


def run_parts(run: str) -> list[str]:
    """A run name as safe directory components; ``"."`` (the root) is ``[]``."""
    if run == ".":
        return []
    return path_parts(run)


def run_dir(root: Path, run: str, taken: set | None = None) -> tuple[Path, bool]:
    """Directory for ``run`` under ``root``, and whether the name had to change.

    With ``taken`` (the keys of directories already given out; pass the same set for
    every run of one output), a directory another run already has gets a ``~N`` suffix
    instead, so no two runs share one. Keys are case-folded where ``root`` ignores case.
    """
    parts = run_parts(run)
    path = root.joinpath(*parts) if parts else root
    if taken is not None:
        path = _unique(root, path, taken)
    rel = path.relative_to(root).as_posix()
    changed = rel != run and not (run == "." and rel == ".")
    return path, changed


def reserve(root: Path, name: str, taken: set) -> None:
    """Keep ``root/name`` (a file the writer puts beside the runs) from :func:`run_dir`."""
    path = root / name
    taken.add(str(path).casefold() if case_insensitive(root) else str(path))


def _unique(root: Path, path: Path, taken: set) -> Path:
    fold = case_insensitive(root)
    key = lambda p: str(p).casefold() if fold else str(p)   # noqa: E731
    base, n = path, 1
    while key(path) in taken:
        n += 1
        if base == root:     # the root run clashes with nothing but itself
            path = root / f"%2E~{n}"
        else:
            path = base.with_name(f"{base.name}~{n}")
    taken.add(key(path))
    return path


def case_insensitive(directory: Path) -> bool:
    """Whether the file system ignores case in ``directory`` (probed; see
    :func:`tbconvert.output.check_destination`)."""
    from tbconvert.output import _case_insensitive, _nearest_existing
    return _case_insensitive(_nearest_existing(Path(directory)))


def storable(run, chunks: Iterable, report, *, keep_bytes: bool = False):
    """``(run, chunks)`` with run and tag names every writer can encode.

    Names holding lone surrogates are made :func:`text` and the change reported once
    per name; with ``keep_bytes`` (a writer that stores run names as directory names
    byte for byte) the run name is left as it is.
    """
    name = run.name if keep_bytes else text(run.name)
    if name != run.name:
        report.add("name_escaped", f"run {name}: the name is not valid UTF-8; stored with "
                   "its odd bytes escaped (%XX)", run=name, lost=False)
        run = replace(run, name=name)
    return run, _storable_chunks(chunks, name, report)


def _storable_chunks(chunks: Iterable, run_name: str, report) -> Iterator:
    told: set[str] = set()
    for chunk in chunks:
        tag = text(chunk.tag)
        if tag != chunk.tag and tag not in told:
            told.add(tag)
            report.add("name_escaped", f"{text(run_name)}/{tag}: the tag is not valid UTF-8; "
                       "stored with its odd bytes escaped (%XX)", run=text(run_name), tag=tag,
                       lost=False)
        if tag != chunk.tag or run_name != chunk.run:
            chunk = replace(chunk, run=run_name, tag=tag)
        yield chunk


def is_within(root: Path, path: Path) -> bool:
    """Whether ``path`` stays inside ``root`` once resolved (symlinks included)."""
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False
