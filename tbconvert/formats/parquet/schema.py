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
import json
from collections.abc import Iterator
from typing import Final

import numpy as np
import pyarrow as pa

# the marker's digest, kept where a sync that finds nothing new can check it without pyarrow
from tbconvert.formats.parquet import MARKER_DIGEST, marker_digest  # noqa: F401
from tbconvert.formats.recordlog import RecordLog, in_slices
from tbconvert.model import DataClass, Experiment, Metadata, Run, RunRecord

FORMAT_NAME: Final = "tbconvert-parquet"   # "format" key of the JSON metadata
SCHEMA_VERSION: Final = 1                   # bumped on any incompatible change
METADATA_KEY: Final = b"tbconvert"          # Parquet key-value metadata key
# SHA-256 (hex) of the JSON under METADATA_KEY: Parquet checksums pages, not its footer,
# and the JSON holds every name and plugin metadata of the archive.
DIGEST_KEY: Final = b"tbconvert.sha256"
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
# A row group is held in memory while it is written, and while it is verified when read
# (see digest.py): these caps keep a conversion's memory the same whatever a run's size.
ROW_GROUP_BYTES: Final = 32 << 20     # a row group holds at most about this many (Arrow) bytes
ROW_GROUP_ROWS: Final = 1 << 18       # ... and at most this many rows
READ_BATCH_ROWS: Final = 1 << 16
WRITE_SLICE_ROWS: Final = 1 << 16     # points turned into Arrow columns at a time
COMBINE_BYTES: Final = 1 << 20        # a row group of many batches below this is made one
COMBINE_BATCH_BYTES: Final = 64 << 10  # ... as is one of batches of less than this on average
DICTIONARY_COLUMNS: Final = ["run", "tag", "data_class", "plugin_name", "series", "tensor_dtype"]
COLUMN_ENCODING: Final = {"step": "DELTA_BINARY_PACKED", "wall_time": "BYTE_STREAM_SPLIT",
                          "value": "BYTE_STREAM_SPLIT"}
COMPRESSION: Final = "zstd"
COMPRESSION_LEVEL: Final = 3
# Tensor, string and blob payloads (histograms, images: little to gain) at zstd level 1: the
# same size as level 3 on TF2 histograms and PNG images, and a third less compression time.
PAYLOAD_COMPRESSION_LEVEL: Final = 1
COMPRESSION_LEVELS: Final = {
    **{name: COMPRESSION_LEVEL for name in COLUMNS},
    "tensor_shape.list.element": COMPRESSION_LEVEL,
    "tensor_content": PAYLOAD_COMPRESSION_LEVEL,
    "tensor_strings.list.element": PAYLOAD_COMPRESSION_LEVEL,
    "blobs.list.element": PAYLOAD_COMPRESSION_LEVEL,
}


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: str, where: str = "") -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise BadMetadata(f"{where} is not base64") from None


def experiment_to_json(exp: Experiment) -> dict:
    return {"experiment_id": exp.experiment_id, "name": exp.name,
            "description": exp.description, "create_time": exp.create_time,
            "update_time": exp.update_time, "extra": dict(exp.extra)}


def run_to_json(run: Run) -> dict:
    return {"name": run.name, "start_time": run.start_time,
            "records": [_record_to_json(r) for r in run.records]}


def _record_to_json(r) -> dict:
    return {"kind": r.kind, "step": int(r.step), "wall_time": float(r.wall_time),
            "payload": _b64(r.payload)}


def run_text(run: Run) -> Iterator[bytes]:
    """``dumps(run_to_json(run))`` a piece at a time: a run may hold millions of records,
    whose JSON as one list of dicts took a kilobyte each."""
    head = dumps({"name": run.name, "start_time": run.start_time, "records": []})
    yield head[:-2]     # (without its "]}")
    between = b""
    for part in in_slices(run.records, _RECORDS_SLICE):
        # the items of a JSON list as dumps gives them within the list
        yield between + dumps([_record_to_json(rec) for rec in part])[1:-1]
        between = b","
    yield b"]}"


_RECORDS_SLICE = 4096


def series_to_json(run_index: int, tag: str, kind: str, md: Metadata,
                   value_dtype: str | None) -> dict:
    content = md.plugin_content
    data_class = DATA_CLASS_NAMES.get(md.data_class)
    return {"run": run_index, "tag": tag, "kind": kind,
            "plugin_name": md.plugin_name, "plugin_content": _b64(content) if content else "",
            "display_name": md.display_name, "description": md.description,
            "data_class": DATA_CLASS_NAMES[DataClass(md.data_class)] if data_class is None
            else data_class,
            "value_dtype": value_dtype}


# Scalar dtypes a series may declare (``value_dtype``); nothing else is ever written.
SCALAR_DTYPES: Final = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                        "uint64", "float16", "float32", "float64")
ROW_GROUPS_KEY: Final = "row_groups"        # per row group: rows and CRC32C of each column
_INT64 = (-(1 << 63), (1 << 63) - 1)


class BadMetadata(ValueError):
    """A field of the JSON metadata has the wrong type or value (the message says which)."""


def _get(obj, key, kind, where, *, optional=False, default=None):
    """``obj[key]`` checked to be of ``kind`` (str, int, float, list, dict, bool)."""
    if not isinstance(obj, dict):
        raise BadMetadata(f"{where} is not an object")
    if key not in obj:
        if optional:
            return default
        raise BadMetadata(f"{where} has no {key!r}")
    value = obj[key]
    if optional and value is None:
        return default
    ok = {str: lambda v: isinstance(v, str),
          int: lambda v: isinstance(v, int) and not isinstance(v, bool)
          and _INT64[0] <= v <= _INT64[1],
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          list: lambda v: isinstance(v, list),
          dict: lambda v: isinstance(v, dict)}[kind](value)
    if not ok:
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            raise BadMetadata(f"{where}.{key} is {value}, outside int64")
        raise BadMetadata(f"{where}.{key} is not {'an' if kind is int else 'a'} "
                          f"{kind.__name__} ({type(value).__name__})")
    return float(value) if kind is float else value


def experiment_from_json(obj) -> Experiment:
    if obj is None:
        obj = {}
    w = "experiment"
    return Experiment(experiment_id=_get(obj, "experiment_id", str, w, optional=True, default=""),
                      name=_get(obj, "name", str, w, optional=True, default=""),
                      description=_get(obj, "description", str, w, optional=True, default=""),
                      create_time=_get(obj, "create_time", str, w, optional=True, default=""),
                      update_time=_get(obj, "update_time", str, w, optional=True, default=""),
                      extra=dict(_get(obj, "extra", dict, w, optional=True, default={})))


def record_from_json(r, where: str) -> RunRecord:
    return RunRecord(kind=_get(r, "kind", str, where), step=_get(r, "step", int, where),
                     wall_time=_get(r, "wall_time", float, where),
                     payload=_unb64(_get(r, "payload", str, where), where + ".payload"))


class StreamedRecords:
    """The records of run ``index``, each put in a :class:`RecordLog` as its JSON is read
    (see ``metajson``), up to the first that is damaged: :func:`run_from_json` reports that
    one where it would report it of a list."""

    def __init__(self, index: int) -> None:
        self.log = RecordLog()
        self.where = f"runs[{index}].records"
        self.damaged: tuple[int, object] | None = None
        self.count = 0

    def add(self, obj) -> None:
        if self.damaged is None:
            try:
                self.log.append(record_from_json(obj, f"{self.where}[{self.count}]"))
            except BadMetadata:
                self.damaged = self.count, obj
                self.log.close()
        self.count += 1

    def checked(self) -> RecordLog:
        if self.damaged is not None:
            k, obj = self.damaged
            record_from_json(obj, f"{self.where}[{k}]")
        return self.log


def run_from_json(obj, i: int = 0) -> Run:
    """The run ``obj`` lists; its records are taken out of ``obj`` (None in their place)."""
    w = f"runs[{i}]"
    start = _get(obj, "start_time", float, w, optional=True)
    listed = obj.get("records")
    if isinstance(listed, StreamedRecords):
        records = listed.checked()
    else:
        records = RecordLog()
        listed = _get(obj, "records", list, w, optional=True, default=[])
        for k, r in enumerate(listed):
            listed[k] = None    # (each record's JSON goes as its bytes come: a run may hold many)
            records.append(record_from_json(r, f"{w}.records[{k}]"))
    return Run(name=_get(obj, "name", str, w), start_time=start, records=records)


def series_from_json(obj, i: int, run_count: int) -> tuple:
    """``(run_index, tag, kind, metadata, scalar dtype or None)`` of ``series[i]``."""
    run = _get(obj, "run", int, f"series[{i}]")
    check_run(run, i, run_count)
    return series_entry(obj, i)


def check_run(run: int, i: int, run_count: int) -> None:
    if not 0 <= run < run_count:
        raise BadMetadata(f"series[{i}].run is {run}, but there are {run_count} runs")


def series_entry(obj, i: int) -> tuple:
    """What :func:`series_from_json` gives, the run not checked against the runs (the list
    of series may come first)."""
    w = f"series[{i}]"
    run = _get(obj, "run", int, w)
    kind = _KINDS.get(_get(obj, "kind", str, w))
    if kind is None:
        raise BadMetadata(f"{w}.kind is {obj['kind']!r}, not one of {', '.join(KINDS)}")
    dtype = None
    if kind == KIND_SCALAR:
        dtype = scalar_dtype(_get(obj, "value_dtype", str, w), w)
    return run, _get(obj, "tag", str, w), kind, metadata_from_json(obj, w), dtype


_KINDS = {k: k for k in KINDS}


def row_groups_from_json(obj) -> list[dict] | None:
    """The recorded row groups, or None for archives written before they were recorded."""
    if obj is None:
        return None
    if not isinstance(obj, list):
        raise BadMetadata(f"{ROW_GROUPS_KEY} is not a list")
    return [row_group_from_json(g, i) for i, g in enumerate(obj)]


def row_group_from_json(obj, i: int) -> dict:
    """Recorded row group ``i``: its rows and the checksums of its columns."""
    w = f"{ROW_GROUPS_KEY}[{i}]"
    rows = _get(obj, "rows", int, w)
    crcs = _get(obj, "crc32c", dict, w)
    if rows < 0 or set(crcs) != set(COLUMNS) or not all(isinstance(v, str) for v in crcs.values()):
        raise BadMetadata(f"{w} is damaged")
    return {"rows": rows, "crc32c": crcs}


def metadata_from_json(obj: dict, w: str = "series") -> Metadata:
    data_class = _get(obj, "data_class", str, w)
    if data_class not in DATA_CLASS_BY_NAME:
        raise BadMetadata(f"{w}.data_class is {data_class[:40]!r}")
    return Metadata(plugin_name=_get(obj, "plugin_name", str, w),
                    plugin_content=_unb64(_get(obj, "plugin_content", str, w), w + ".plugin_content"),
                    display_name=_get(obj, "display_name", str, w),
                    description=_get(obj, "description", str, w),
                    data_class=DATA_CLASS_BY_NAME[data_class])


def scalar_dtype(name: str, where: str = "series") -> np.dtype:
    if name not in SCALAR_DTYPES:
        raise BadMetadata(f"{where}.value_dtype is {name[:40]!r}, not a scalar dtype")
    return np.dtype(name)


def dumps(obj: dict | list) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
