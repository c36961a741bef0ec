"""Which form a point is written in: the legacy summary fields where both loaders agree.

Many readers (the legacy ``EventAccumulator``'s ``Scalars()``/``Images()``/
``Audio()``, tbparse, tensorboard-reducer) only see ``simple_value``,
``histo``, ``image`` and ``audio``. TensorBoard's two loaders turn those into
tensors differently (docs/format-notes.md): the Python loader makes fresh
metadata, the data server behind the default ``--load_fast`` keeps metadata
that names its data class and otherwise makes its own, with an empty display
name. So each tag's first value carries its full metadata, data class
included, whatever its form; then a scalar, an image or an audio clip whose
data survives the migration bit for bit is written in its legacy form, which
both loaders turn into the very same point. Histograms always keep the tensor
form: the data server turns a ``histo`` into float64 rows the Python loader
does not make.
"""

from __future__ import annotations

import numpy as np

from tbconvert.formats.tfevents.encode import signaling_nans
from tbconvert.media_headers import png_channels, wav_info
from tbconvert.model import DataClass, Metadata

SIMPLE, HISTO, IMAGE, AUDIO = "simple_value", "histo", "image", "audio"

_LEGACY_MD = {
    SIMPLE: ("scalars", b"", DataClass.SCALAR),
    HISTO: ("histograms", b"", DataClass.TENSOR),
    IMAGE: ("images", b"\x10\x01", DataClass.BLOB_SEQUENCE),
    AUDIO: ("audio", b"\x10\x0b\x18\x01", DataClass.BLOB_SEQUENCE),
}
_INT32_MAX = (1 << 31) - 1


def legacy_kind(md: Metadata, tag: str | None = None) -> str | None:
    """The legacy field whose migration yields exactly ``md`` for ``tag``, if any (for
    readers: which form a tag's points most likely came in)."""
    if not md.display_name and tag != "":
        return None  # the migration fills in the tag as display name (empty only for tag "")
    for kind, (plugin, content, data_class) in _LEGACY_MD.items():
        if (md.plugin_name, md.plugin_content, md.data_class) == (plugin, content, data_class):
            return kind
    return None


def written_kind(md: Metadata, tag: str | None = None) -> str | None:
    """The legacy field the writer puts ``tag``'s points in, if any."""
    kind = legacy_kind(md, tag)
    return None if kind == HISTO else kind


def simple_ok(values: np.ndarray) -> np.ndarray:
    """Per float32 value: does ``simple_value`` hold it exactly? (Signaling NaNs get quieted
    on their way through a Python float, so they keep the tensor form.)"""
    return ~signaling_nans(values)


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
    # (the colour space, which no reader of TensorBoard's shows, as writers set it)
    return summary_pb2.Summary.Image(width=width, height=height,
                                     colorspace=png_channels(seq[2]) or 0,
                                     encoded_image_string=seq[2])


def audio(seq, summary_pb2):
    """A ``Summary.Audio`` for a point of one clip, or None; the rate, channels and length that
    the legacy ``EventAccumulator`` shows (and TensorBoard's migration drops) are read back from
    the WAV header, where writers take them from."""
    if len(seq) != 1 or seq[0] is None:
        return None
    rate, channels, frames = wav_info(seq[0])
    return summary_pb2.Summary.Audio(sample_rate=rate or 0, num_channels=channels or 0,
                                     length_frames=frames or 0, encoded_audio_string=seq[0],
                                     content_type="audio/wav")
