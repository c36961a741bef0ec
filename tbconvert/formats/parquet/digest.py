"""A checksum of each row group's decoded values, kept in the archive's own metadata.

Parquet checksums the bytes of each page, but not the page *headers*: one flipped bit
there can change how many values a page holds or how they are encoded, and the reader
then decodes other (or no) data without any error. So the writer records, per row
group, the row count and a CRC32C of every column's values as decoded; the reader
computes the same from what it decoded and refuses a row group that differs.

The checksum does not depend on how rows are split into record batches: each column
feeds a few byte streams (validity, lengths, values), each with its own running CRC.
"""

from __future__ import annotations

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _crc(crc: int, data) -> int:
    return crc32c.crc32c(memoryview(data).cast("B"), crc) if len(data) else crc


def _offsets(arr) -> np.ndarray:
    """The ``len + 1`` value offsets of a (sliced) binary or list array."""
    buf = arr.buffers()[1]
    width = 8 if pa.types.is_large_binary(arr.type) or pa.types.is_large_list(arr.type) \
        or pa.types.is_large_string(arr.type) else 4
    dtype = np.int64 if width == 8 else np.int32
    return np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr) + 1)[arr.offset:]


def _validity(arr) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), np.uint8)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), np.uint8)


def _lengths(offsets: np.ndarray, valid: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets).astype(np.int64)
    lengths[valid == 0] = -1
    return lengths


class ColumnDigest:
    """Running CRCs of one column's streams."""

    def __init__(self) -> None:
        self.crcs = [0, 0, 0, 0, 0]

    def update(self, arr) -> None:
        if isinstance(arr, pa.ChunkedArray):
            for piece in arr.chunks:
                self.update(piece)
            return
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        c = self.crcs
        valid = _validity(arr)
        c[0] = _crc(c[0], valid)
        t = arr.type
        if pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
                or pa.types.is_large_string(t):
            off = _offsets(arr)
            c[1] = _crc(c[1], _lengths(off, valid))
            if len(arr):
                c[2] = _crc(c[2], memoryview(arr.buffers()[2] or b"")[int(off[0]):int(off[-1])])
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            off = _offsets(arr)
            c[1] = _crc(c[1], _lengths(off, valid))
            child = arr.values.slice(int(off[0]), int(off[-1] - off[0])) if len(arr) else \
                arr.values.slice(0, 0)
            sub = ColumnDigest()
            sub.crcs = [c[2], c[3], c[4], 0, 0]
            sub.update(child)
            c[2], c[3], c[4] = sub.crcs[:3]
        else:
            if arr.null_count:
                arr = pc.fill_null(arr, pa.scalar(False if pa.types.is_boolean(t) else 0, t))
            values = arr.to_numpy(zero_copy_only=False)
            if values.dtype == bool:
                values = values.view(np.uint8)
            c[1] = _crc(c[1], np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"),
                                                                 copy=False)))

    def hexdigest(self) -> str:
        return "".join(f"{x:08x}" for x in self.crcs)


class RowGroupDigest:
    """Row count and per-column CRCs of one row group."""

    def __init__(self, names) -> None:
        self.names = list(names)
        self.rows = 0
        self.columns = {name: ColumnDigest() for name in self.names}

    def update(self, batch) -> None:
        self.rows += batch.num_rows
        for name in self.names:
            self.columns[name].update(batch.column(batch.schema.get_field_index(name)))

    def to_json(self) -> dict:
        return {"rows": self.rows,
                "crc32c": {name: self.columns[name].hexdigest() for name in self.names}}

    def mismatch(self, expected: dict) -> str | None:
        """What differs from the recorded ``expected`` (None: nothing)."""
        if self.rows != expected["rows"]:
            return f"{self.rows} rows read, {expected['rows']} written"
        bad = [name for name in self.names
               if self.columns[name].hexdigest() != expected["crc32c"][name]]
        if bad:
            return f"the values of column(s) {', '.join(bad)} differ from what was written"
        return None
