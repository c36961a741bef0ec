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

import numpy as np
import pyarrow as pa

from tbconvert.checksum import crc32c
from tbconvert.formats.parquet import columns as C


def _crc(crc: int, data) -> int:
    return crc32c(memoryview(data).cast("B"), crc) if len(data) else crc


# The CRCs (from zero) of streams that a key tells whole: ``n`` valid slots, ``n`` nulls of a
# type, one value ``n`` times. A row group's constant columns (run, data class, plugin, the
# tensor columns of scalars) are these, and most row groups of a sync are the same length.
_MEMO: dict = {}
_MEMO_SIZE = 512


def _memo(crc: int, key, make) -> int:
    """``_crc(crc, make())``, from memory when ``crc`` is 0 and ``key`` was seen."""
    if crc:
        return _crc(crc, make())
    value = _MEMO.get(key)
    if value is None:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        value = _MEMO[key] = _crc(0, make())
    return value


def _valid_crc(crc: int, n: int) -> int:
    """The validity stream of ``n`` valid slots added to ``crc``."""
    return _memo(crc, ("valid", n), lambda: np.ones(n, np.uint8))


def _offsets(arr) -> np.ndarray:
    """The ``len + 1`` value offsets of a (sliced) binary or list array."""
    buf = arr.buffers()[1]
    dtype = np.int64 if arr.type.id in _LARGE_IDS else np.int32
    return np.frombuffer(buf, dtype=dtype, count=arr.offset + len(arr) + 1)[arr.offset:]


# (the type ids of the binary and list types with 64-bit offsets)
_LARGE_IDS = frozenset(t.id for t in (pa.large_binary(), pa.large_string(),
                                      pa.large_list(pa.int8())))


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) \
        or pa.types.is_large_string(t)


def _is_number(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds numbers or booleans."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _width(t: pa.DataType) -> int:
    """Bytes per value of a fixed-width column as decoded (booleans: one byte)."""
    return 1 if pa.types.is_boolean(t) else t.bit_width // 8


def _spans_nothing(arr) -> bool:
    """Whether the (null) slots of a binary or list column cover no bytes or elements."""
    t = arr.type
    if not (_is_binary(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
        return True
    off = _offsets(arr)
    return int(off[0]) == int(off[-1])


def _minus_ones(n: int) -> np.ndarray:
    return np.full(n, -1, np.int64)


def _fixed_values(arr, valid: np.ndarray | None) -> np.ndarray:
    """The little-endian values of a fixed-width column, nulls as zeros (booleans as bytes)."""
    try:
        values = C.stored_values(arr)
    except TypeError:   # not a type the archive writes: decoded the plain way
        return _decoded_values(arr)
    if valid is not None and arr.null_count:
        values = np.where(valid.view(bool), values, values.dtype.type(0))
    return np.ascontiguousarray(values)


def _decoded_values(arr) -> np.ndarray:
    import pyarrow.compute as pc
    if arr.null_count:
        arr = pc.fill_null(arr, pa.scalar(0, arr.type))
    values = arr.to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values.astype(values.dtype.newbyteorder("<"), copy=False))


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
            if arr.num_chunks == 1:
                arr = arr.chunk(0)
            else:
                if arr.num_chunks and self._fast_chunked(arr):
                    return
                for piece in arr.chunks:
                    self.update(piece)
                return
        if self._fast(arr):
            return
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        c = self.crcs
        valid = C.validity_of(arr)
        c[0] = _crc(c[0], valid)
        t = arr.type
        if _is_binary(t):
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
            c[1] = _crc(c[1], _fixed_values(arr, valid))

    # The fast paths below give the CRCs the general path above gives, without building
    # the decoded column: a run's columns are mostly one repeated dictionary value (run,
    # tag, plugin name) or all null (the tensor columns of a scalar series).

    def _fast(self, arr) -> bool:
        n, nulls, t = len(arr), arr.null_count, arr.type
        if n and nulls == n and _spans_nothing(arr):
            self._all_null(t, n)
            return True
        if not nulls and _is_number(t):
            c = self.crcs
            c[0] = _valid_crc(c[0], n)
            c[1] = _crc(c[1], _fixed_values(arr, None))
            return True
        return pa.types.is_dictionary(t) and self._dictionary(arr)

    def _fast_chunked(self, arr: pa.ChunkedArray) -> bool:
        """A row group of many small batches (a sync's part: a few points of each series)
        in one go, when its column is all null, numbers without nulls, or one dictionary
        value throughout."""
        n = len(arr)
        if n and arr.null_count == n:
            if all(_spans_nothing(piece) for piece in arr.chunks):
                self._all_null(arr.type, n)
                return True
            return False
        if arr.null_count:
            return False
        t = arr.type
        if _is_number(t):
            c = self.crcs
            c[0] = _valid_crc(c[0], n)
            for piece in arr.chunks:
                c[1] = _crc(c[1], _fixed_values(piece, None))
            return True
        if not pa.types.is_dictionary(t) or not _is_binary(t.value_type):
            return False
        values = {_only_value(piece, None) for piece in arr.chunks if len(piece)}
        if len(values) != 1 or None in values:
            return False
        self._repeated(n, None, values.pop())
        return True

    def _all_null(self, t: pa.DataType, n: int) -> None:
        c = self.crcs
        c[0] = _memo(c[0], ("null", n), lambda: bytes(n))
        if pa.types.is_dictionary(t):
            t = t.value_type
        if _is_binary(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            c[1] = _memo(c[1], ("lengths", -1, n), lambda: _minus_ones(n))
        else:
            width = _width(t)
            c[1] = _memo(c[1], ("zeros", n * width), lambda: bytes(n * width))

    def _dictionary(self, arr: pa.DictionaryArray) -> bool:
        """A dictionary column of strings whose valid slots all hold one value, or whose
        values come in a few stretches (the tags of short series sharing a row group)."""
        if not _is_binary(arr.dictionary.type):
            return False
        valid = C.validity_of(arr.indices) if arr.indices.null_count else None
        value = _only_value(arr, valid)
        if value is not None:
            self._repeated(len(arr), valid, value)
            return True
        return self._stretches(arr, valid)

    # In the methods below, ``valid`` is the validity of each slot, None when every slot
    # holds a value.

    def _stretches(self, arr: pa.DictionaryArray, valid: np.ndarray | None) -> bool:
        # From the codes: ``dictionary_decode`` imports pyarrow.compute, 27 ms in a fresh
        # process (a sync command), for a column of a few tags.
        words = arr.dictionary.to_pylist()
        if not words or None in words:
            return False
        codes = _fixed_values(arr.indices, None).astype(np.int64)
        live = None if valid is None else valid.view(bool)
        if live is not None:
            codes = np.where(live, codes, 0)     # a null slot's code may be anything
        if len(codes) and (codes.min() < 0 or codes.max() >= len(words)):
            return False
        live_codes = codes if live is None else codes[live]
        cuts = np.flatnonzero(live_codes[1:] != live_codes[:-1]) + 1
        if len(cuts) >= _MAX_STRETCHES:
            return False
        words = [w.encode("utf-8") if isinstance(w, str) else w for w in words]
        sizes = np.array([len(w) for w in words], dtype=np.int64)
        bounds = [0, *cuts.tolist(), len(live_codes)] if len(live_codes) else [0]
        firsts = live_codes[bounds[:-1]].tolist()
        c = self.crcs
        if live is None:
            c[0] = _valid_crc(c[0], len(codes))
            c[1] = _crc(c[1], sizes[codes])
        else:
            c[0] = _crc(c[0], valid)
            c[1] = _crc(c[1], np.where(live, sizes[codes], np.int64(-1)))
        c[2] = _crc(c[2], b"".join(words[k] * (b - a)
                                   for k, a, b in zip(firsts, bounds[:-1], bounds[1:],
                                                      strict=True)))
        return True

    def _repeated(self, n: int, valid: np.ndarray | None, value: bytes) -> None:
        """The streams of a string column of ``n`` slots whose valid ones all hold ``value``."""
        c = self.crcs
        live = n if valid is None else int(np.count_nonzero(valid))
        if live < n:
            c[0] = _crc(c[0], valid)
            c[1] = _crc(c[1], np.where(valid.view(bool), np.int64(len(value)), np.int64(-1)))
        else:
            c[0] = _valid_crc(c[0], n)
            c[1] = _memo(c[1], ("lengths", len(value), n),
                         lambda: np.full(n, len(value), np.int64))
        c[2] = _memo(c[2], ("value", value, live), lambda: value * live) \
            if len(value) <= _MEMO_VALUE_BYTES else _crc(c[2], value * live)

    def hexdigest(self) -> str:
        return _HEX.format(*self.crcs)


_HEX = "{:08x}" * 5
# More stretches of one value than this: the column is decoded instead.
_MAX_STRETCHES = 256
# A repeated value longer than this is not kept as a key of the memo.
_MEMO_VALUE_BYTES = 256


def _only_value(arr: pa.DictionaryArray, valid: np.ndarray | None) -> bytes | None:
    """The one value the valid slots of a dictionary column hold (None: several, or none);
    ``valid`` None: every slot is."""
    codes = _fixed_values(arr.indices, None)
    live = codes if valid is None else codes[valid.view(bool)]
    if not len(live):
        return None
    if len(arr.dictionary) == 1:
        if live.any():      # (a code out of the dictionary)
            return None
    elif live.min() != live.max():
        return None
    value = arr.dictionary[int(live[0])].as_py()
    return value.encode("utf-8") if isinstance(value, str) else value


class RowGroupDigest:
    """Row count and per-column CRCs of one row group."""

    def __init__(self, names) -> None:
        self.names = list(names)
        self.rows = 0
        self.columns = {name: ColumnDigest() for name in self.names}

    def update(self, batch) -> None:
        self.rows += batch.num_rows
        if batch.schema.names == self.names:
            for name, column in zip(self.names, batch.columns, strict=True):
                self.columns[name].update(column)
            return
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
