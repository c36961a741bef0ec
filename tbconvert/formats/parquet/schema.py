"""The Parquet archive layout, declared once (schema version 1; see docs/archives.md).

One row per point. Every row has the query columns (``run``, ``tag``,
``step``, ``wall_time``, ``value``, ``hidden``, ``data_class``,
``plugin_name``) plus ``series``, the index of its series in the file's
``tbconvert`` key-value metadata. The payload of non-scalar points sits in the
``tensor_*`` and ``blobs`` columns. The key-value metadata (JSON, written when
the file is closed) holds what is not per point: the experiment, the runs
with their start times and run-level records, and one entry per series with
its summary metadata (``plugin_content`` base64, byte for byte) and the
scalar dtype.

A directory archive holds one such file per run (``part-NNNNN-<name>.parquet``,
same schema, ``run`` column kept) plus ``_tbconvert.json`` listing the files
in run order and the experiment.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Final

import numpy as np
import pyarrow as pa

from tbconvert.model import DataClass, Experiment, Metadata, Run, RunRecord

FORMAT_NAME: Final = "tbconvert-parquet"   # "format" key of the JSON metadata
SCHEMA_VERSION: Final = 1                   # bumped on any incompatible change
METADATA_KEY: Final = b"tbconvert"          # Parquet key-value metadata key
# SHA-256 (hex) of the JSON under METADATA_KEY: Parquet checksums pages, not its footer,
# and the JSON holds every name and plugin metadata of the archive.
DIGEST_KEY: Final = b"tbconvert.sha256"
MARKER_FILE: Final = "_tbconvert.json"      # directory archives: file list, run order, experiment
MARKER_DIGEST: Final = "sha256"             # its key holding the SHA-256 of the rest (marker_digest)
PART_PREFIX: Final = "part-"

# Series kinds (the model container), stored per series in the JSON metadata.
KIND_SCALAR: Final = "scalar"
KIND_TENSOR: Final = "tensor"
KIND_BLOB_SEQUENCE: Final = "blob_sequence"
KINDS: Final = (KIND_SCALAR, KIND_TENSOR, KIND_BLOB_SEQUENCE)

# data_class column values (lower-case DataClass names)
DATA_CLASS_NAMES: Final = {dc: dc.name.lower() for dc in DataClass}
DATA_CLASS_BY_NAME: Final = {name: dc for dc, name in DATA_CLASS_NAMES.items()}

_NAME = pa.dictionary(pa.int32(), pa.string())
_SMALL_NAME = pa.dictionary(pa.int8(), pa.string())

SCHEMA: Final = pa.schema([
    pa.field("run", _NAME, nullable=False),            # run name ("." = logdir root)
    pa.field("tag", _NAME, nullable=False),
    pa.field("step", pa.int64(), nullable=False),
    pa.field("wall_time", pa.float64(), nullable=False),  # seconds since the epoch
    pa.field("value", pa.float64()),                    # scalars as float64; null otherwise
    pa.field("hidden", pa.bool_(), nullable=False),     # TensorBoard's restart rule hides it
    pa.field("data_class", _SMALL_NAME, nullable=False),  # unknown|scalar|tensor|blob_sequence
    pa.field("plugin_name", _NAME, nullable=False),
    pa.field("series", pa.int32(), nullable=False),     # index into JSON "series"
    pa.field("tensor_dtype", _SMALL_NAME),              # numpy-style name (dtypes.NAMES)
    pa.field("tensor_shape", pa.list_(pa.int64())),
    pa.field("tensor_content", pa.binary()),            # row-major little-endian bytes
    pa.field("tensor_strings", pa.list_(pa.binary())),  # DT_STRING elements, row-major
    pa.field("blobs", pa.list_(pa.binary())),           # null element = blob lost at the source
])
COLUMNS: Final = tuple(SCHEMA.names)

# Writer settings
ROW_GROUP_BYTES: Final = 64 << 20     # a row group holds at most about this many (Arrow) bytes
ROW_GROUP_ROWS: Final = 1 << 20       # ... and at most this many rows
READ_BATCH_ROWS: Final = 1 << 17
DICTIONARY_COLUMNS: Final = ["run", "tag", "data_class", "plugin_name", "series", "tensor_dtype"]
COLUMN_ENCODING: Final = {"step": "DELTA_BINARY_PACKED", "wall_time": "BYTE_STREAM_SPLIT",
                          "value": "BYTE_STREAM_SPLIT"}
COMPRESSION: Final = "zstd"
COMPRESSION_LEVEL: Final = 3


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def experiment_to_json(exp: Experiment) -> dict:
    return {"experiment_id": exp.experiment_id, "name": exp.name,
            "description": exp.description, "create_time": exp.create_time,
            "update_time": exp.update_time, "extra": dict(exp.extra)}


def experiment_from_json(obj: dict) -> Experiment:
    return Experiment(experiment_id=str(obj.get("experiment_id", "")),
                      name=str(obj.get("name", "")),
                      description=str(obj.get("description", "")),
                      create_time=str(obj.get("create_time", "")),
                      update_time=str(obj.get("update_time", "")),
                      extra=dict(obj.get("extra") or {}))


def run_to_json(run: Run) -> dict:
    return {"name": run.name, "start_time": run.start_time,
            "records": [{"kind": r.kind, "step": int(r.step), "wall_time": float(r.wall_time),
                         "payload": _b64(r.payload)} for r in run.records]}


def run_from_json(obj: dict) -> Run:
    start = obj.get("start_time")
    return Run(name=str(obj["name"]), start_time=None if start is None else float(start),
               records=tuple(RunRecord(kind=str(r["kind"]), step=int(r["step"]),
                                       wall_time=float(r["wall_time"]),
                                       payload=_unb64(r["payload"]))
                             for r in obj.get("records", ())))


def series_to_json(run_index: int, tag: str, kind: str, md: Metadata,
                   value_dtype: str | None) -> dict:
    return {"run": run_index, "tag": tag, "kind": kind,
            "plugin_name": md.plugin_name, "plugin_content": _b64(md.plugin_content),
            "display_name": md.display_name, "description": md.description,
            "data_class": DATA_CLASS_NAMES[DataClass(md.data_class)],
            "value_dtype": value_dtype}


def metadata_from_json(obj: dict) -> Metadata:
    return Metadata(plugin_name=str(obj["plugin_name"]),
                    plugin_content=_unb64(obj["plugin_content"]),
                    display_name=str(obj["display_name"]),
                    description=str(obj["description"]),
                    data_class=DATA_CLASS_BY_NAME[obj["data_class"]])


def scalar_dtype(name: str) -> np.dtype:
    dtype = np.dtype(name)
    if dtype.kind not in "fiub":
        raise ValueError(f"not a scalar dtype: {name}")
    return dtype


def marker_digest(marker: dict) -> str:
    """SHA-256 (hex) of a directory marker without its digest key, in one canonical form."""
    body = {k: v for k, v in marker.items() if k != MARKER_DIGEST}
    canonical = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def dumps(obj: dict) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
