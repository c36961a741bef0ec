"""Blobs too large for the ``blobs`` variable-length dataset, each a dataset of its own.

HDF5 keeps a variable-length element in a global heap collection, which it builds in memory
whole, beside the converted copy of the element and the caller's: writing one 92 MB image
held three to four copies of it, and copying the staged run into the archive (H5Ocopy)
read it into memory again. A blob over :data:`LARGE_BLOB_BYTES` is therefore stored as the
contiguous uint8 dataset ``series/<j>/large_blobs/<k>`` (``k``: its index in ``blobs``,
where its own element is left empty): written from the blob's bytes, copied a buffer at a
time, and read straight into a ``bytes`` object. An archive holding one has schema version
2, which older versions of tbconvert refuse instead of reading the empty element.
"""

from __future__ import annotations

import h5py
import numpy as np

from tbconvert.formats.hdf5 import schema

# Blobs over this are stored apart.
LARGE_BLOB_BYTES = 16 << 20
GROUP = "large_blobs"
# The schema version of an archive that holds a large blob.
VERSION = schema.LATEST_VERSION


def write(series: h5py.Group, k: int, blob: bytes) -> None:
    """Store ``blob`` as the ``k``-th blob of the series group ``series``."""
    series.create_dataset(f"{GROUP}/{k}", data=np.frombuffer(blob, np.uint8),
                          track_times=False)


def indices(series: h5py.Group) -> dict:
    """The series' large blobs by their index (empty when it has none)."""
    group = series.get(GROUP)
    if group is None:
        return {}
    if not isinstance(group, h5py.Group):
        raise ValueError(f"its {GROUP} is not a group")
    out = {}
    for name in group:
        if not name.isdigit():
            raise ValueError(f"its {GROUP} holds {name!r}, not a blob's index")
        out[int(name)] = name
    return out


def read(series: h5py.Group, name: str, fh) -> bytes:
    """The blob stored as ``large_blobs/<name>``; ``fh`` is the archive's file, from which a
    contiguous dataset is read as it lies (once, not into an array and then into bytes)."""
    ds = series[GROUP][name]
    if not isinstance(ds, h5py.Dataset) or ds.ndim != 1 or ds.dtype != np.uint8:
        raise ValueError(f"its {GROUP}/{name} is not a one-dimensional uint8 dataset")
    size = ds.shape[0]
    at = ds.id.get_offset() if ds.chunks is None and size else None
    if at is None:
        return ds[()].tobytes()
    fh.seek(at)
    data = fh.read(size)
    if len(data) != size:
        raise ValueError(f"its {GROUP}/{name} runs past the end of the file")
    return data
