"""The kinds of a tag's points and the series class they go in, decided once per tag.

A point's *kind* is its dtype code and an ndim class (0, 1, more); a tag's kinds and its
migrated metadata decide whether it becomes a scalar series of one dtype, a blob sequence
or tensors: :func:`tag_container`.
"""

from __future__ import annotations

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import legacy
from tbconvert.model import DataClass, Metadata

NDIM0, NDIM1, NDIMN = 0, 1, 2


def ndim_class(arr) -> int:
    return min(arr.ndim, NDIMN)


NO_KINDS: frozenset = frozenset()
_KIND_SETS: dict = {}


def with_kind(kinds, kind) -> frozenset:
    """``kinds`` and ``kind``, one shared frozenset for every tag with the same kinds (most
    tags of a run have the same one or two)."""
    return shared(frozenset(kinds) | {kind})


def shared(kinds: frozenset) -> frozenset:
    """The one frozenset equal to ``kinds`` that every tag with these kinds shares."""
    return _KIND_SETS.setdefault(kinds, kinds)


def tag_kinds(raw_md: Metadata, kinds, has_none: bool) -> tuple[Metadata, bool, set]:
    """A tag's metadata as migrated, whether its points get legacy fixes, and the kinds of
    its points after them."""
    md = legacy.with_data_class(raw_md)
    fixups = raw_md.data_class == DataClass.UNKNOWN
    if not fixups:
        return md, fixups, frozenset(kinds)
    kinds = {_fixed_kind(md.plugin_name, k) for k in kinds}
    if has_none and md.plugin_name == "hparams":
        kinds.add((legacy.NULL_TENSOR[0], NDIM1))
    return md, fixups, frozenset(kinds)


def tag_container(raw_md: Metadata, kinds, has_none: bool) -> tuple | None:
    """The container :meth:`RunAssembler.series` gives a tag first logged with ``raw_md``
    whose points are of ``kinds`` (None if the tag has no points)."""
    md, _, kinds = tag_kinds(raw_md, kinds, has_none)
    return container(md, kinds) if kinds else None


def _fixed_kind(plugin: str, kind):
    """The (code, ndim class) a point of this kind has after :func:`legacy.fix_point`."""
    code, ndim = kind
    if plugin == "audio" and ndim == NDIMN:
        return code, NDIM1
    if plugin in legacy.GRAPH_SUB_PLUGINS and ndim == NDIM0:
        return code, NDIM1
    return kind


_CONTAINERS: dict = {}


def container(md: Metadata, kinds) -> tuple:
    """Which series class the tag's points go in: ``("scalar", dtype)``, ``("blobs",)`` or
    ``("tensors",)``, decided once for the whole tag."""
    key = (md.data_class, frozenset(kinds))
    shape = _CONTAINERS.get(key)
    if shape is None:
        shape = _CONTAINERS[key] = _container_of(md, kinds)
    return shape


def _container_of(md: Metadata, kinds) -> tuple:
    if md.data_class == DataClass.SCALAR:
        codes = {c for c, _ in kinds}
        if len(codes) == 1 and all(nd == NDIM0 for _, nd in kinds):
            code = next(iter(codes))
            # (bfloat16 is kept as its bits, which are no values: its tensors keep its type)
            if code not in (dt.DT_STRING, dt.DT_RAW_PROTO, dt.DT_BFLOAT16) and \
                    code in dt._TABLE:
                dtype = dt.numpy_dtype(code)
                if dtype.kind in "fiub":
                    return ("scalar", dtype)
    if md.data_class == DataClass.BLOB_SEQUENCE and kinds == {(dt.DT_STRING, NDIM1)}:
        return ("blobs",)
    return ("tensors",)
