"""What an HDF5 file must not hold before tbconvert reads from it.

HDF5 can make a dataset out of bytes outside the file: external storage (raw data in
any named file, ``/etc/passwd`` or a FIFO included), external links, soft links and
virtual datasets mapping other files. A crafted archive (its seal is only a checksum,
anyone can recompute it) could so copy any local file into a conversion's output.
tbconvert writes none of these, so a file holding any of them is refused before a
byte of data is read. Datasets also declare their size, and reading one that declares
far more than the file stores would run (or allocate) for ever: refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import h5py
import numpy as np

from tbconvert import budget, sourcefiles
from tbconvert.errors import CorruptDataError
from tbconvert.formats.mismatch import not_this_format


def check_regular_file(path: Path) -> None:
    """A FIFO or device would block or never end: only regular files are opened. A directory
    is no archive at all (a logdir or dataset read as HDF5), not a damaged one."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise CorruptDataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise not_this_format(path, "hdf5", "is a directory, and HDF5 archives are single files")
    if not stat.S_ISREG(mode):
        raise CorruptDataError(f"{path}: is {sourcefiles.describe(mode)}, not a regular file; "
                               "copy the archive to a file first")


def _refuse(path: Path, name: str, what: str) -> None:
    raise CorruptDataError(f"{path}: /{name} is {what}, which tbconvert archives never hold "
                           "(it could read other files); the file was not read")


def audit(f: h5py.File, path: Path) -> None:
    """Refuse links and datasets that reach outside the file (see the module docstring)."""
    try:
        if _clean(f):
            return
    except Exception:  # noqa: BLE001 - anything unusual is judged by the full audit below
        pass
    _audit(f, path)


def _clean(f: h5py.File) -> bool:
    """True when the full audit would pass: one walk over every group reachable by hard
    links, each link's object opened relative to its group (no path lookups from the root,
    no second walk). False (or an exception) for anything else: then the full audit runs and
    reports exactly what it always did.

    The walk goes depth first and closes each object as soon as it is judged, so only the
    groups on the way down are open at a time: an archive of 100,000 series holds 100,000
    groups, and each one open holds memory in HDF5 (a groups' list of them would hold it all)."""
    oi = h5py.h5o.get_info(f.id)
    fileno = oi.fileno
    seen = {oi.addr}   # addresses within this file (nothing else is reached by hard links)
    hard = h5py.h5l.TYPE_HARD
    stack = [(f.id, _links(f.id), 0)]
    while stack:
        gid, items, i = stack.pop()
        while i < len(items):
            raw, kind = items[i]
            i += 1
            if kind != hard:
                return False
            obj = h5py.h5o.open(gid, raw)
            if isinstance(obj, h5py.h5d.DatasetID):
                dcpl = obj.get_create_plist()
                if dcpl.get_layout() == h5py.h5d.VIRTUAL or dcpl.get_external_count() > 0:
                    return False
            elif isinstance(obj, h5py.h5g.GroupID):
                oi = h5py.h5o.get_info(obj)
                if oi.fileno != fileno:
                    return False
                if oi.addr not in seen:
                    seen.add(oi.addr)
                    stack.append((gid, items, i))
                    stack.append((obj, _links(obj), 0))
                    break
            elif not isinstance(obj, h5py.h5t.TypeID):
                return False
    return True


def _links(gid) -> list:
    """A group's links (name, type), in HDF5's order."""
    items: list = []
    gid.links.iterate(lambda n, i, items=items: items.append((n, i.type)), info=True)
    return items


def _audit(f: h5py.File, path: Path) -> None:
    def link(name, info):
        kind = info.type
        if kind == h5py.h5l.TYPE_SOFT:
            _refuse(path, name, "a soft link")
        elif kind == h5py.h5l.TYPE_EXTERNAL:
            _refuse(path, name, "an external link")
        elif kind != h5py.h5l.TYPE_HARD:
            _refuse(path, name, "a user-defined link")
        return None

    def obj(raw, info):
        name = raw.decode("utf-8", "replace")
        if raw == b".":
            return None
        if info.type == h5py.h5o.TYPE_DATASET:
            dcpl = h5py.h5d.open(f.id, raw).get_create_plist()
            if dcpl.get_layout() == h5py.h5d.VIRTUAL:
                _refuse(path, name, "a virtual dataset")
            if dcpl.get_external_count() > 0:
                _refuse(path, name, "a dataset with external storage")
        elif info.type not in (h5py.h5o.TYPE_GROUP, h5py.h5o.TYPE_NAMED_DATATYPE):
            _refuse(path, name, "an unknown kind of object")
        return None

    _visit_links(f, link)
    h5py.h5o.visit(f.id, obj, info=True)


def _visit_links(f: h5py.File, fn) -> None:
    """Every link of every group reachable by hard links (soft and external links are seen,
    not followed)."""
    groups = [(f.id, "")]
    seen = set()
    while groups:
        gid, prefix = groups.pop()
        names = []
        gid.links.iterate(names.append)  # None from append: iteration goes on
        for raw in names:
            info = gid.links.get_info(raw)
            name = prefix + raw.decode("utf-8", "replace")
            fn(name, info)
            oinfo = h5py.h5o.get_info(gid, raw)
            if oinfo.type == h5py.h5o.TYPE_GROUP:
                key = (oinfo.fileno, oinfo.addr)
                if key not in seen:
                    seen.add(key)
                    groups.append((h5py.h5g.open(gid, raw), name + "/"))


class DatasetRefused(ValueError):
    """What :func:`check_dataset` finds wrong with a dataset, in words that name it (``what``)."""


def check_dataset(ds: h5py.Dataset, kinds: str, what: str) -> None:
    """A dataset of one of the numpy ``kinds`` that stores about as much as it declares."""
    check_dataset_id(ds.id, kinds, what)


def check_dataset_id(did: h5py.h5d.DatasetID, kinds: str, what: str, shape=None) -> None:
    """check_dataset on h5py's low-level dataset id (what the reader's fast path holds);
    ``shape``: ``did.shape`` when the caller has it already (each asks HDF5 anew)."""
    dtype = did.dtype
    if dtype.kind not in kinds:
        raise DatasetRefused(f"{what} is {dtype}, not the type tbconvert writes")
    if shape is None:
        shape = did.shape
    if type(shape) is tuple:
        size = 1
        for d in shape:
            size *= int(d)
    else:  # what np.prod makes of it (an error), as before
        size = int(np.prod(shape, dtype=object))
    declared = size * did.get_type().get_size()
    stored = did.get_storage_size()
    if declared > budget.inflate_allowance(stored):
        raise DatasetRefused(f"{what} declares {declared} bytes of data but the file stores "
                             f"{stored}")
