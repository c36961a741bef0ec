"""What an export directory holds and how it is spelled: file names, JSON-line encoding, discovery.

One experiment directory holds ``metadata.json``, three JSON-lines files
(``scalars.json``, ``tensors.json``, ``blob_sequences.json``) and the
``tensors/`` and ``blobs/`` directories (docs/format-notes.md). Older exports
(TensorBoard 2.0.1-2.1.0) wrote one ``scalars_<id>.json`` per experiment
directly into the export root instead.
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tbconvert import sourcefiles

METADATA = "metadata.json"
SCALARS = "scalars.json"
TENSORS = "tensors.json"
BLOB_SEQUENCES = "blob_sequences.json"
TENSORS_DIR = "tensors"
BLOBS_DIR = "blobs"
EXPERIMENT_PREFIX = "experiment_"

# Which JSON file holds which kind of series, in the exporter's order.
KINDS = ("scalars", "tensors", "blobs")
FILE_OF = {"scalars": SCALARS, "tensors": TENSORS, "blobs": BLOB_SEQUENCES}

# Keys of metadata.json the exporter wrote (anything else is kept as Experiment.extra).
METADATA_KEYS = ("create_time", "description", "name", "update_time")

EXPERIMENT_ID_RE = re.compile(r"[-_A-Za-z0-9]{22}")
OLD_SCALARS_RE = re.compile(r"scalars_(.+)\.json")
ARR_RE = re.compile(r"arr_(\d+)(?:\.npy)?")


def dumps_line(obj) -> str:
    """One JSON line exactly as the exporter wrote it: sorted keys, ASCII, NaN tokens."""
    return json.dumps(obj, sort_keys=True) + "\n"


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ``%.6f`` of a wall time: 17 characters for any date in the next millennia. A wall time of
# 1e300 would make a 300-character name, more than file systems allow.
MAX_TIME_NAME_CHARS = 32


def tensor_file_base(first_wall_time: float) -> tuple[str, bool]:
    """The exporter's ``%.6f`` name stem, and False when that is too long and the shortest
    exact spelling of the number (``1e+300``) is used instead."""
    base = f"{first_wall_time:.6f}"
    if len(base) <= MAX_TIME_NAME_CHARS:
        return base, True
    return repr(float(first_wall_time)), False


def tensor_file_name(first_wall_time: float, taken: set[str]) -> str:
    """``<wall time %.6f>.npz``, with ``_1``, ``_2``... on collision (the exporter's naming)."""
    base, _ = tensor_file_base(first_wall_time)
    name, n = f"{base}.npz", 0
    while name in taken:
        n += 1
        name = f"{base}_{n}.npz"
    taken.add(name)
    return name


def blob_id(seed: str, run: str, tag: str, point: int, index: int) -> str:
    """A deterministic 22-character URL-safe id, like the service's opaque blob ids."""
    import hashlib  # writing exports only: telling any source's format imports this module
    digest = hashlib.sha256(
        json.dumps([seed, run, tag, point, index]).encode("utf-8")).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def experiment_id_from_name(name: str) -> str:
    """The id an ``experiment_<id>`` directory name carries ("" for other names)."""
    if name.startswith(EXPERIMENT_PREFIX) and len(name) > len(EXPERIMENT_PREFIX):
        return name[len(EXPERIMENT_PREFIX):]
    return ""


@dataclass(frozen=True)
class Source:
    """One experiment of an export: a directory, or an old ``scalars_<id>.json`` file."""

    experiment_id: str
    path: Path            # the experiment directory, or the old-layout file
    old_layout: bool = False

    @property
    def root(self) -> Path:
        """The directory tensor and blob paths are relative to."""
        return self.path.parent if self.old_layout else self.path

    def json_file(self, kind: str) -> Path | None:
        if self.old_layout:
            return self.path if kind == "scalars" else None
        return self.path / FILE_OF[kind]

    @property
    def metadata_file(self) -> Path | None:
        return None if self.old_layout else self.path / METADATA


def _is_marker(path: Path) -> bool:
    """Something other than a directory is there. A FIFO or a broken link named
    ``scalars.json`` still marks an export: the reader then reports it as unreadable
    instead of the export being silently passed over."""
    try:
        return os.path.lexists(path) and not path.is_dir()
    except (OSError, ValueError):
        return False


def is_old_scalars_file(path: Path) -> bool:
    return OLD_SCALARS_RE.fullmatch(path.name) is not None and _is_marker(path)


def is_experiment_dir(path: Path) -> bool:
    """A directory holding an experiment's metadata.json or one of its JSON files."""
    try:
        return path.is_dir() and any(
            _is_marker(path / name) for name in (METADATA, SCALARS, TENSORS, BLOB_SEQUENCES))
    except OSError:
        return False


def source_of(path: Path) -> Source:
    """The one experiment ``path`` names (an experiment directory or an old scalars file)."""
    if is_old_scalars_file(path):
        return Source(OLD_SCALARS_RE.fullmatch(path.name).group(1), path, old_layout=True)
    return Source(experiment_id_from_name(path.name), path)


def find_experiments(path: Path) -> tuple[list[Source], bool]:
    """The experiments under ``path`` and whether ``path`` is an export root.

    ``path`` may be one experiment directory (any name), an old-layout
    ``scalars_<id>.json`` file, or an export root holding ``experiment_*``
    directories and/or ``scalars_<id>.json`` files (sorted by name). A root's other
    directories that hold an experiment's files (one renamed by hand) are experiments too:
    an export is never passed over without a word.
    """
    path = Path(path)
    if is_old_scalars_file(path) or is_experiment_dir(path):
        return [source_of(path)], False
    if not path.is_dir():
        return [], False
    found = []
    try:
        entries = sorted(sourcefiles.listdir(path), key=lambda p: p.name)
    except OSError:
        return [], True
    for entry in entries:
        if entry.name.startswith(EXPERIMENT_PREFIX) and entry.is_dir():
            found.append(Source(experiment_id_from_name(entry.name), entry))
        elif is_old_scalars_file(entry):
            found.append(source_of(entry))
        elif is_experiment_dir(entry):
            found.append(Source("", entry))
    return found, True


def looks_like_export(path: Path) -> bool:
    """Cheap check for :meth:`TbdevFormat.sniff`; never raises."""
    try:
        path = Path(path)
        if is_old_scalars_file(path) or is_experiment_dir(path):
            return True
        if not path.is_dir():
            return False
        for entry in sourcefiles.listdir(path):
            if entry.name.startswith(EXPERIMENT_PREFIX) and entry.is_dir():
                return True
            if is_old_scalars_file(entry):
                return True
        return False
    except OSError:
        return False


def experiment_names(sources, report=None) -> list[str]:
    """A name per experiment of an export root for its own output (its id, or the folder's
    name, made a safe path part and unique regardless of case). One that had to change (an
    unsafe name, or one another experiment's name takes) is noted in ``report``."""
    from tbconvert.names import safe_part
    taken: dict[str, Source] = {}
    names = []
    for n, source in enumerate(sources):
        given = source.experiment_id or source.path.name or f"experiment{n}"
        name = safe_part(given)
        if name != given and report is not None:
            report.add("experiment_renamed", f"{source.path}: the name {given!r} is not a safe "
                       f"path; written as {name}", lost=False)
        base, k = name, 1
        while name.lower() in taken:
            k += 1
            name = f"{base}_{k}"
        if name != base and report is not None:
            report.add("experiment_renamed",
                       f"{source.path}: named {base} like {taken[base.lower()].path} (the same "
                       f"experiment id, or names that differ in case only); written as {name}",
                       lost=False)
        taken[name.lower()] = source
        names.append(name)
    return names
