"""Parquet archives: one row per point, self-describing (see docs/archives.md)."""

from __future__ import annotations

import json
from pathlib import Path

from tbconvert.errors import MissingDependencyError
from tbconvert.formats.base import Format

try:
    import pyarrow  # noqa: F401
    import pyarrow.parquet  # noqa: F401
except ImportError as exc:  # pragma: no cover - pyarrow is a dependency
    raise MissingDependencyError(
        "the parquet format needs pyarrow: pip install 'tbconvert[parquet]'") from exc

from tbconvert.formats.parquet import schema
from tbconvert.formats.parquet.reader import ParquetReader
from tbconvert.formats.parquet.writer import ParquetWriter
from tbconvert import sourcefiles


class ParquetFormat(Format):
    name = "parquet"
    description = ("Parquet archive: one row per point (run, tag, step, wall_time, value, ...); "
                   "a directory destination gets one file per run")
    suffixes = (".parquet", ".pq")
    directory = False
    reader = ParquetReader
    writer = ParquetWriter

    @classmethod
    def sniff(cls, path: Path) -> bool:
        path = Path(path)
        try:
            if path.is_dir():
                marker = path / schema.MARKER_FILE
                if not marker.is_file():
                    return False
                meta = json.loads(sourcefiles.read_text(marker))
                return isinstance(meta, dict) and meta.get("format") == schema.FORMAT_NAME
            if path.is_file():
                with sourcefiles.open_binary(path) as fh:
                    if fh.read(4) != b"PAR1":
                        return False
                    kv = pyarrow.parquet.read_metadata(fh).metadata or {}
                return schema.METADATA_KEY in kv
        except Exception:  # noqa: BLE001 - sniffing never raises
            return False
        return False


__all__ = ["ParquetFormat", "ParquetReader", "ParquetWriter"]
