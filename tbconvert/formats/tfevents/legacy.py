"""TensorBoard's migration of legacy summaries to the data-class form.

The rules are written down in docs/format-notes.md, "Legacy summaries and their migration".

``simple_value``, ``histo``, ``image`` and ``audio`` values become tensors with
fresh metadata exactly as TensorBoard's ``data_compat`` does; the data class
of a tag follows its plugin as in ``dataclass_compat``. Reproducing this
byte for byte is what makes our view of a logdir equal TensorBoard's.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.errors import CorruptDataError
from tbconvert.formats.tfevents import histo_records
from tbconvert.model import DataClass, Metadata

# plugin name -> data class, for metadata that does not say (dataclass_compat's table)
PLUGIN_DATA_CLASS: dict[str, DataClass] = {
    "scalars": DataClass.SCALAR,
    "histograms": DataClass.TENSOR,
    "text": DataClass.TENSOR,
    "pr_curves": DataClass.TENSOR,
    "mesh": DataClass.TENSOR,
    "custom_scalars": DataClass.TENSOR,
    "hparams": DataClass.TENSOR,
    "images": DataClass.BLOB_SEQUENCE,
    "audio": DataClass.BLOB_SEQUENCE,
    "graph_run_metadata": DataClass.BLOB_SEQUENCE,
    "graph_run_metadata_graph": DataClass.BLOB_SEQUENCE,
    "graph_keras_model": DataClass.BLOB_SEQUENCE,
}
GRAPH_SUB_PLUGINS = frozenset({"graph_run_metadata", "graph_run_metadata_graph", "graph_keras_model"})

RUN_GRAPH_TAG = "__run_graph__"
GRAPHS_PLUGIN = "graphs"
TAGGED_RUN_METADATA_PLUGIN = "graph_tagged_run_metadata"

# Serialized plugin data TensorBoard attaches to migrated legacy values.
IMAGE_CONTENT = b"\x10\x01"              # ImagePluginData{converted_to_tensor: true}
_AUDIO_CONTENT = b"\x10\x0b\x18\x01"      # AudioPluginData{encoding: WAV, converted_to_tensor: true}

NULL_TENSOR = (dt.DT_FLOAT, np.zeros((0,), dtype=np.float32))  # hparams values without a tensor


_MD_CACHE: dict[bytes, Metadata] = {}
_MD_CACHE_SIZE = 4096


def metadata_from_proto(md) -> Metadata:
    # Writers repeat the same metadata on every value (TF2: always), so it is built once
    # per distinct serialization; Metadata is immutable, so sharing it is safe.
    key = md.SerializeToString()
    found = _MD_CACHE.get(key)
    if found is None:
        if len(_MD_CACHE) >= _MD_CACHE_SIZE:
            _MD_CACHE.clear()
        found = _MD_CACHE[key] = _metadata_from_proto(md)
    return found


def _metadata_from_proto(md) -> Metadata:
    return metadata_from_fields(md.plugin_data.plugin_name, bytes(md.plugin_data.content),
                                md.display_name, md.summary_description, md.data_class)


def metadata_from_fields(plugin_name: str, content: bytes, display_name: str, description: str,
                         data_class: int) -> Metadata:
    """The model's metadata of a SummaryMetadata's fields (a data class TensorBoard does not
    know is unknown)."""
    return Metadata(plugin_name=plugin_name, plugin_content=content, display_name=display_name,
                    description=description,
                    data_class=DataClass(data_class) if data_class in (0, 1, 2, 3)
                    else DataClass.UNKNOWN)


def legacy_metadata(plugin: str, value, content: bytes = b"") -> Metadata:
    """Fresh metadata of a migrated legacy value (data class set as the loader does)."""
    return _legacy_metadata(plugin, content, value.metadata.display_name or value.tag,
                            value.metadata.summary_description)


def legacy_value_metadata(plugin: str, tag: str, content: bytes = b"") -> Metadata:
    """:func:`legacy_metadata` of a value (a histogram, a ``simple_value``, an image) that
    carries no metadata of its own."""
    return _legacy_metadata(plugin, content, tag, "")


@lru_cache(maxsize=4096)
def _legacy_metadata(plugin: str, content: bytes, display_name: str, description: str) -> Metadata:
    return Metadata(plugin_name=plugin, plugin_content=content, display_name=display_name,
                    description=description, data_class=PLUGIN_DATA_CLASS[plugin])


def _packed_histogram(histo):
    """(bucket_limit, bucket) as float64 arrays read straight from the packed wire bytes.

    Converting ~600 repeated doubles element by element costs far more than
    serializing the message (C) and viewing its packed fields. None when the
    bytes are not the plain canonical form (then the caller takes the slow way).
    """
    raw = histo.SerializeToString()
    found = histo_records.histogram(raw, 0, len(raw))
    return None if found is None else found[2:]


def migrated_histogram(limits: np.ndarray, counts: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """TensorBoard's trimmed float32 ``[k, 3]`` tensor of a histogram's bucket limits and
    counts (float64 arrays; a limit for every bucket before the last one counted), its
    minimum and maximum."""
    full = counts > 0
    start = int(full.argmax()) if len(full) else 0
    if not len(full) or not full[start]:
        return np.zeros((0, 3), dtype=np.float32)
    end = len(full) - 1 - int(full[::-1].argmax())
    # [lefts, rights, counts] as columns, each cast to float32 as it is stored (the same
    # rounding as a cast of the whole; beyond float32 becomes inf, as TensorBoard's does)
    out = np.empty((end - start + 1, 3), dtype=np.float32)
    with np.errstate(over="ignore"):
        out[0, 0] = lo
        out[1:, 0] = out[:-1, 1] = limits[start:end]
        out[-1, 1] = hi
        out[:, 2] = counts[start:end + 1]
    return out


def migrate_histogram(histo, where: str = "histogram") -> np.ndarray:
    """A legacy ``HistogramProto`` as TensorBoard's trimmed float32 ``[k, 3]`` tensor."""
    packed = _packed_histogram(histo)
    limits, counts = packed if packed is not None else (
        np.asarray(histo.bucket_limit, dtype=np.float64), np.asarray(histo.bucket, dtype=np.float64))
    counted = np.flatnonzero(counts > 0)
    if len(counted) and len(limits) < counted[-1]:
        # TensorBoard's loader fails on such a value; it has no histogram to show.
        raise CorruptDataError(f"{where}: a histogram with {len(counts)} buckets but only "
                               f"{len(limits)} bucket limits")
    return migrated_histogram(limits, counts, histo.min, histo.max)


def migrate_value(value, where: str = "value", content=None):
    """A ``Summary.Value`` as ``(metadata or None, (code, array) or None)``; ``content``: its
    tensor's ``tensor_content`` read apart (see :func:`dtypes.proto_to_array`).

    Legacy values get TensorBoard's fresh metadata; tensor values keep theirs
    (``None`` when the value carries none). A value no real summary holds raises
    :class:`CorruptDataError`; contents that do not match their tensor's shape
    raise :class:`~tbconvert.dtypes.TensorDecodeError`.
    """
    kind = value.WhichOneof("value")
    if kind == "tensor":
        md = metadata_from_proto(value.metadata) if value.HasField("metadata") else None
        point = dt.proto_to_array(value.tensor, where, content)
        if md is not None and md.plugin_name == "audio":
            check_audio(point, where)
        return md, point
    if kind == "simple_value":
        return (legacy_metadata("scalars", value),
                (dt.DT_FLOAT, np.array(value.simple_value, dtype=np.float32)))
    if kind == "histo":
        return legacy_metadata("histograms", value), (dt.DT_FLOAT, migrate_histogram(value.histo, where))
    if kind == "image":
        img = value.image
        data = dt.string_array([str(img.width).encode(), str(img.height).encode(),
                                img.encoded_image_string])
        return legacy_metadata("images", value, IMAGE_CONTENT), (dt.DT_STRING, data)
    if kind == "audio":
        # TensorBoard stores [[clip, label]] and then drops the label (rank > 1 is strided).
        return (legacy_metadata("audio", value, _AUDIO_CONTENT),
                (dt.DT_STRING, dt.string_array([value.audio.encoded_audio_string])))
    md = metadata_from_proto(value.metadata) if value.HasField("metadata") else None
    return md, None


def check_audio(point, where: str) -> None:
    """TensorBoard keeps the first axis of audio tensors by striding over the others; with
    an empty trailing axis (shape ``[2, 0]``) there is no stride, and its loader fails."""
    _, arr = point
    if arr.ndim > 1 and arr.shape[0] and not int(np.prod(arr.shape[1:])):
        raise CorruptDataError(f"{where}: an audio tensor of shape {list(arr.shape)} "
                               f"holds no clips for its {arr.shape[0]} entries")


def with_data_class(md: Metadata) -> Metadata:
    """Metadata as the loader stores it: the data class filled in from the plugin."""
    if md.data_class != DataClass.UNKNOWN:
        return md
    dc = PLUGIN_DATA_CLASS.get(md.plugin_name)
    if dc is None:
        return md
    return Metadata(md.plugin_name, md.plugin_content, md.display_name, md.description, dc)


def fix_point(plugin: str, point):
    """Shape fix-ups TensorBoard applies to values of tags whose metadata lacked a data class."""
    if point is None:
        return NULL_TENSOR if plugin == "hparams" else None
    code, arr = point
    if plugin == "audio" and arr.ndim > 1:
        stride = int(np.prod(arr.shape[1:]))
        if not stride:     # shape [k, 0]: no clips at all (refused earlier when seen there)
            return code, arr.reshape(-1)[:0]
        return code, arr.reshape(-1)[::stride].reshape(arr.shape[:1])
    if plugin in GRAPH_SUB_PLUGINS and arr.ndim == 0:
        return code, arr.reshape((1,))
    return point
