"""Which form a point is written in: the legacy summary fields where that is exact.

Many readers (the legacy ``EventAccumulator``'s ``Scalars()``/``Histograms()``/
``Images()``, tbparse, tensorboard-reducer) only see ``simple_value``,
``histo``, ``image`` and ``audio``. TensorBoard turns those into tensors with
fresh metadata (docs/format-notes.md), so a point whose metadata is exactly what
that migration makes, and whose data survives the trip back bit for bit, is
written in the legacy form; everything else keeps the tensor form. TensorBoard
shows the same either way.
"""

from __future__ import annotations

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.model import DataClass, Metadata

SIMPLE, HISTO, IMAGE, AUDIO = "simple_value", "histo", "image", "audio"

_LEGACY_MD = {
    SIMPLE: ("scalars", b"", DataClass.SCALAR),
    HISTO: ("histograms", b"", DataClass.TENSOR),
    IMAGE: ("images", b"\x10\x01", DataClass.BLOB_SEQUENCE),
    AUDIO: ("audio", b"\x10\x0b\x18\x01", DataClass.BLOB_SEQUENCE),
}
_INT32_MAX = (1 << 31) - 1


def legacy_kind(md: Metadata) -> str | None:
    """The legacy field whose migration yields exactly ``md``, if any."""
    if not md.display_name:  # the migration always fills in a display name
        return None
    for kind, (plugin, content, data_class) in _LEGACY_MD.items():
        if (md.plugin_name, md.plugin_content, md.data_class) == (plugin, content, data_class):
            return kind
    return None


def metadata_proto(md: Metadata, tag: str, summary_pb2):
    """What a legacy value carries so the migration rebuilds ``md`` (None: nothing needed)."""
    if md.display_name == tag and not md.description:
        return None
    return summary_pb2.SummaryMetadata(display_name=md.display_name,
                                       summary_description=md.description)


def signaling_nans(bits: np.ndarray, exp_mask: int, frac_mask: int, quiet: int) -> np.ndarray:
    """Signaling NaNs get quieted on a trip through a double, so they keep the tensor form."""
    return ((bits & exp_mask) == exp_mask) & ((bits & frac_mask) != 0) & ((bits & quiet) == 0)


def simple_ok(values: np.ndarray) -> np.ndarray:
    """Per float32 value: does ``simple_value`` hold it exactly?"""
    bits = values.view(np.uint32)
    return ~signaling_nans(bits, 0x7F800000, 0x7FFFFF, 0x400000)


def histogram(code: int, arr: np.ndarray, summary_pb2):
    """A ``HistogramProto`` that TensorBoard migrates back to exactly ``arr``, or None."""
    if code != dt.DT_FLOAT or arr.dtype != np.float32 or arr.ndim != 2 or arr.shape[1] != 3:
        return None
    if not simple_ok(np.ascontiguousarray(arr).reshape(-1)).all():
        return None
    if not len(arr):
        return summary_pb2.HistogramProto()
    lefts, rights, counts = arr[:, 0], arr[:, 1], arr[:, 2]
    # The migration trims empty end buckets and shares inner edges.
    if not (counts[0] > 0 and counts[-1] > 0):
        return None
    if not np.array_equal(np.ascontiguousarray(rights[:-1]).view(np.uint32),
                          np.ascontiguousarray(lefts[1:]).view(np.uint32)):
        return None
    c64 = counts.astype(np.float64)
    return summary_pb2.HistogramProto(
        min=float(lefts[0]), max=float(rights[-1]), num=float(np.nansum(c64)),
        bucket_limit=rights.astype(np.float64).tolist(), bucket=c64.tolist())


def _dimension(blob) -> int | None:
    if blob is None or not blob or not blob.isdigit():
        return None
    value = int(blob)
    return value if str(value).encode() == blob and value <= _INT32_MAX else None


def image(seq, summary_pb2):
    """A ``Summary.Image`` for a point ``[width, height, one image]``, or None."""
    if len(seq) != 3 or seq[2] is None:
        return None
    width, height = _dimension(seq[0]), _dimension(seq[1])
    if width is None or height is None:
        return None
    return summary_pb2.Summary.Image(width=width, height=height, encoded_image_string=seq[2])


def audio(seq, summary_pb2):
    """A ``Summary.Audio`` for a point of one clip, or None."""
    if len(seq) != 1 or seq[0] is None:
        return None
    return summary_pb2.Summary.Audio(encoded_audio_string=seq[0], content_type="audio/wav")
