"""Parquet archives: one row per point, self-describing (see docs/archives.md)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.formats.base import Format, classes_on_demand, deferred

# pyarrow loads only with the reader or writer (or to sniff a file): telling that a logdir
# is not a Parquet archive must not cost pyarrow's start-up time and memory, nor need it.
# A directory dataset's marker: its file list, run order and experiment (docs/archives.md).
# Named here, not in schema, so that sniffing a directory or a sync that finds nothing new
# does not import pyarrow.
MARKER_FILE = "_tbconvert.json"
MARKER_DIGEST = "sha256"    # the marker's key holding the SHA-256 of the rest (marker_digest)


def marker_digest(marker: dict) -> str:
    """SHA-256 (hex) of a directory marker without its digest key, in one canonical form."""
    import hashlib
    body = {k: v for k, v in marker.items() if k != MARKER_DIGEST}
    canonical = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ParquetFormat(Format):
    name = "parquet"
    description = ("Parquet archive: one row per point (run, tag, step, wall_time, value, ...); "
                   "a directory destination gets one file per run")
    reader = deferred("tbconvert.formats.parquet.reader:ParquetReader")
    writer = deferred("tbconvert.formats.parquet.writer:ParquetWriter")
    requires = ("pyarrow", "crc32c")

    @classmethod
    def sniff(cls, path: Path) -> bool:
        path = Path(path)
        try:
            if path.is_dir():
                return _looks_like_dataset(path)
            if path.is_file():
                with sourcefiles.open_binary(path) as fh:
                    if fh.read(4) != b"PAR1":
                        return False
                    import pyarrow.parquet

                    from tbconvert.formats.parquet import keyvalue, schema
                    # (Arrow reading a footer of many row groups whole takes hundreds of MB)
                    if keyvalue.split_footer(fh, schema.METADATA_KEY) is not None:
                        return True
                    kv = pyarrow.parquet.read_metadata(fh).metadata or {}
                return schema.METADATA_KEY in kv
        except Exception:  # noqa: BLE001 - sniffing never raises
            return False
        return False


def _looks_like_dataset(path: Path) -> bool:
    """A tbconvert dataset, or what is left of one: its marker, even damaged (the reader then
    says what is wrong, rather than no format being found), or without a marker, part files
    named as tbconvert names them, or a first sync's files."""
    marker = path / MARKER_FILE
    if os.path.lexists(marker):
        try:
            meta = json.loads(sourcefiles.read_text(marker))
        except (OSError, ValueError):
            return True
        from tbconvert.formats.parquet import schema
        return not isinstance(meta, dict) or meta.get("format") in (schema.FORMAT_NAME, None)
    return any(_PART_NAME.match(p.name) or p.name.startswith(SYNC_NAMES)
               for p in sourcefiles.listdir(path))


# part-00000-<hint>[-g0001[.m0002]].parquet, and what a sync leaves before its first commit
_PART_NAME = re.compile(r"part-\d{5}-.*\.parquet\Z")
SYNC_NAMES = ("_pending-", "_tbconvert.lock")


# A part a commit left out waits this long under a retired name, for the readers that took
# the manifest before that commit (a `sync --watch` commits every round).
RETIRE_SECONDS = 120
RETIRED_PREFIX = "_retired-"


def retired_name(part: str, when: int) -> str:
    """A part's name once retired at ``when`` (seconds): a leading ``_`` and no ``.parquet``
    suffix, so that readers of the bare directory (pyarrow.dataset, Spark, Dask, DuckDB's
    ``*.parquet``) skip it."""
    return f"{RETIRED_PREFIX}{when}-{part}.gone"


def retired_at(name: str) -> int:
    stamp = name[len(RETIRED_PREFIX):].split("-", 1)[0]
    return int(stamp) if stamp.isdigit() else 0


def find_retired(directory: Path, part: str) -> Path | None:
    """The retired copy of ``part`` in ``directory``, if a recent commit left one."""
    suffix = f"-{part}.gone"
    try:
        names = [e.name for e in sourcefiles.listdir(directory)
                 if e.name.startswith(RETIRED_PREFIX) and e.name.endswith(suffix)]
    except OSError:
        return None
    return directory / max(names, key=retired_at) if names else None


__all__ = ["ParquetFormat", "ParquetReader", "ParquetWriter"]

__getattr__ = classes_on_demand(ParquetFormat, __name__)
