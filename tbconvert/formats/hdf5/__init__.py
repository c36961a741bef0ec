"""HDF5 archives: numbered groups, names as attributes (see docs/archives.md)."""

from __future__ import annotations

from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.formats.base import Format, classes_on_demand, deferred
from tbconvert.formats.hdf5 import schema, seal

# h5py loads only with the reader or writer (or to sniff a file that starts like HDF5).
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


class Hdf5Format(Format):
    name = "hdf5"
    description = "HDF5 archive: one numbered group per run and series, names as attributes"
    reader = deferred("tbconvert.formats.hdf5.reader:Hdf5Reader")
    writer = deferred("tbconvert.formats.hdf5.writer:Hdf5Writer")
    requires = ("h5py", "crc32c")

    @classmethod
    def sniff(cls, path: Path) -> bool:
        path = Path(path)
        try:
            if not path.is_file():
                return False
            with sourcefiles.open_binary(path) as fh:
                head = fh.read(len(seal.MAGIC))
            if head.startswith(seal.MAGIC):
                return True  # sealed: not opened here, a damaged file could hang HDF5
            if not head.startswith(_HDF5_MAGIC):
                return False
            import h5py
            with sourcefiles.open_binary(path) as fh, h5py.File(fh, "r") as f:
                return f.attrs.get(schema.ATTR_FORMAT) in (schema.FORMAT_NAME,
                                                           schema.FORMAT_NAME.encode())
        except Exception:  # noqa: BLE001 - sniffing never raises
            return False


__all__ = ["Hdf5Format", "Hdf5Reader", "Hdf5Writer"]

__getattr__ = classes_on_demand(Hdf5Format, __name__)
