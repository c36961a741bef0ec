"""The TensorBoard.dev export layout (``tensorboard dev export``), read and written.

Reading accepts every export generation (docs/format-notes.md): old
``scalars_<id>.json`` files, 2.1-2.2 exports with scalars only, 2.3 exports
with pickled string tensors (refused unless ``--allow-pickle``) and the
2.4-2.15 layout. Writing produces one experiment directory laid out exactly
as the exporter wrote it.
"""

from __future__ import annotations

from pathlib import Path

from tbconvert.formats.base import Format, classes_on_demand, deferred
from tbconvert.formats.tbdev import export_dir


class TbdevFormat(Format):
    name = "tbdev"
    description = "TensorBoard.dev export (experiment_<id>/ with metadata.json, *.json, npz, blobs)"
    reader = deferred("tbconvert.formats.tbdev.reader:TbdevReader")
    writer = deferred("tbconvert.formats.tbdev.writer:TbdevWriter")
    requires = ("google.protobuf", "tensorboard")

    @classmethod
    def sniff(cls, path: Path) -> bool:
        return export_dir.looks_like_export(Path(path))


__all__ = ["TbdevFormat", "TbdevReader", "TbdevWriter"]

__getattr__ = classes_on_demand(TbdevFormat, __name__)
