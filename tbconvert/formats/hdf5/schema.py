"""The HDF5 archive schema: group, dataset and attribute names, declared once (version 1).

See docs/archives.md.

::

    /                               attrs: tbconvert_format, schema_version, experiment_*
    /run_names                      (R,) utf-8 strings: run i's name (the index)
    /runs/<i>                       i = 0..R-1 in run order; attrs: name, start_time (if known)
    /runs/<i>/tags                  (S,) utf-8 strings: series j's tag
    /runs/<i>/records/              only when the run has records:
        kind (str), step (int64), wall_time (float64), payload (vlen uint8)
    /runs/<i>/series/<j>            j = 0..S-1 in first-seen order; attrs: tag, kind,
                                    plugin_name, plugin_content (uint8 array), display_name,
                                    description, data_class, data_class_name
        steps (int64), wall_times (float64), hidden (bool)       always, length n
        kind "scalar":         values (n,) in the source dtype
        kind "tensor", attr layout "dense":  values (n, *shape); attr tensor_dtype (TF code)
        kind "tensor", attr layout "ragged": dtypes (n,) int32 TF codes; shapes (n,) vlen int64;
                               data (total bytes,) uint8 + data_offsets (n+1,) int64 (row-major
                               little-endian bytes of numeric points); strings (m,) vlen uint8 +
                               string_offsets (n+1,) int64 (elements of DT_STRING points)
        kind "blob_sequence":  blobs (m,) vlen uint8, blob_missing (m,) bool (True = blob lost
                               at the source), blob_offsets (n+1,) int64; version 2 only:
                               large_blobs/<k> (size,) uint8, blob k stored apart (over
                               16 MiB; its element in blobs is empty)

Names never appear in HDF5 paths: groups are numbered and names are attributes.
"""

from __future__ import annotations

from typing import Final

FORMAT_NAME: Final = "tbconvert-hdf5"
SCHEMA_VERSION: Final = 1
# The version of an archive that stores a large blob as a dataset of its own (large.py); the
# newest this version reads.
LATEST_VERSION: Final = 2

ATTR_FORMAT: Final = "tbconvert_format"
ATTR_VERSION: Final = "schema_version"
EXPERIMENT_ATTRS: Final = ("experiment_id", "name", "description", "create_time", "update_time")
ATTR_EXPERIMENT_PREFIX: Final = "experiment_"    # experiment_name, experiment_description, ...
ATTR_EXPERIMENT_EXTRA: Final = "experiment_extra"  # JSON object

RUNS: Final = "runs"
RUN_NAMES: Final = "run_names"
TAGS: Final = "tags"
SERIES: Final = "series"
RECORDS: Final = "records"

KIND_SCALAR: Final = "scalar"
KIND_TENSOR: Final = "tensor"
KIND_BLOB_SEQUENCE: Final = "blob_sequence"
KINDS: Final = (KIND_SCALAR, KIND_TENSOR, KIND_BLOB_SEQUENCE)
LAYOUT_DENSE: Final = "dense"
LAYOUT_RAGGED: Final = "ragged"

COMPRESSION: Final = "gzip"
COMPRESSION_LEVEL: Final = 4
CHUNK_BYTES: Final = 1 << 20           # target size of a dense tensor chunk
VLEN_CHUNK_ROWS: Final = 1024
# A run's records are read and written this many at a time (a run may hold millions).
RECORD_ROWS: Final = 1 << 16

READ_POINTS: Final = 1 << 20           # scalar points per chunk handed out
# tensor/blob payload per chunk handed out (about; as the Parquet reader's, tbconvert.formats.packed)
READ_BYTES: Final = 4 << 20


def run_path(i: int) -> str:
    return f"{RUNS}/{i}"


def series_path(i: int, j: int) -> str:
    return f"{RUNS}/{i}/{SERIES}/{j}"
