"""Arrow columns built straight from numpy buffers.

A record batch of 65k points is assembled from a handful of contiguous
buffers (values, offsets, validity bitmaps) rather than from Python lists,
which costs a Python object per point and element. Going through
``Array.from_buffers`` also keeps ``pa.array``'s pandas probing (a third of a
second of imports) out of a conversion that never needs pandas.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

# Binary and list columns of the schema use 32-bit offsets.
MAX_OFFSET = (1 << 31) - 1


def validity(valid: np.ndarray | None) -> pa.Buffer | None:
    """The bitmap of ``valid`` (True = a value), or None when every slot holds one."""
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def fixed(values: np.ndarray, type_: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """A fixed-width column (numbers) over ``values``, already of the column's width."""
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(type_, len(data), [validity(valid), pa.py_buffer(data)])


def bools(values: np.ndarray) -> pa.Array:
    flags = np.ascontiguousarray(values, dtype=bool)
    return pa.Array.from_buffers(pa.bool_(), len(flags),
                                 [None, pa.py_buffer(np.packbits(flags, bitorder="little"))])


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """int32 offsets of consecutive lengths; a ValueError past the 32-bit range."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > MAX_OFFSET:
        raise ValueError(f"{offsets[-1]} bytes do not fit one Arrow binary column")
    return offsets.astype(np.int32)


def binary(data, lengths: np.ndarray, valid: np.ndarray | None = None,
           type_: pa.DataType | None = None) -> pa.Array:
    """A binary (or string: ``type_=pa.string()``) column: ``data`` holds the values back
    to back."""
    type_ = pa.binary() if type_ is None else type_
    offsets = offsets_of(lengths)
    buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    return pa.Array.from_buffers(type_, len(lengths),
                                 [validity(valid), pa.py_buffer(offsets), buf])


def binary_of(items: Sequence) -> pa.Array:
    """A binary column of ``bytes`` items, ``None`` for a null."""
    n = len(items)
    try:  # the usual case: no nulls, so C-level join and len
        data = b"".join(items)
        return binary(data, np.fromiter(map(len, items), np.int64, n))
    except TypeError:
        pass
    lengths = np.fromiter((0 if b is None else len(b) for b in items), np.int64, n)
    valid = np.fromiter((b is not None for b in items), bool, n)
    return binary(b"".join(b for b in items if b is not None), lengths, valid)


def strings(values: Sequence[str]) -> pa.Array:
    encoded = [v.encode("utf-8") for v in values]
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    return binary(b"".join(encoded), lengths, type_=pa.string())


def lists(child: pa.Array, lengths: np.ndarray, type_: pa.DataType,
          valid: np.ndarray | None = None) -> pa.Array:
    """A list column whose item i holds the next ``lengths[i]`` elements of ``child``."""
    offsets = offsets_of(lengths)
    return pa.Array.from_buffers(type_, len(lengths), [validity(valid), pa.py_buffer(offsets)],
                                 children=[child])


def const_dict(value: str, n: int, index_type=np.int32) -> pa.DictionaryArray:
    """``value`` n times, dictionary-encoded."""
    return pa.DictionaryArray.from_arrays(_zeros(n, np.dtype(index_type)), _one_string(value))


@functools.lru_cache(maxsize=16)
def _zeros(n: int, index_type: np.dtype) -> pa.Array:
    """An index column of ``n`` zeros (immutable: the runs of a sweep, of one length each,
    and their constant columns share it)."""
    return fixed(np.zeros(n, dtype=index_type), pa.from_numpy_dtype(index_type))


def some_strings(values: tuple[str, ...]) -> pa.Array:
    """A dictionary of ``values``: the tags of each run of a sweep are the same few, kept
    (a few at a time: a run of 100,000 tags has batches of thousands)."""
    return _few_strings(values) if len(values) <= 64 else strings(values)


@functools.lru_cache(maxsize=256)
def _few_strings(values: tuple[str, ...]) -> pa.Array:
    return strings(values)


@functools.lru_cache(maxsize=4096)
def _one_string(value: str) -> pa.Array:
    """A dictionary of one value (Arrow arrays are immutable: shared by every batch of a
    run, tag or plugin)."""
    return strings([value])


def dict_codes(codes: np.ndarray, names: dict, index_type=np.int8,
               valid: np.ndarray | None = None) -> pa.DictionaryArray:
    """A dictionary column of ``names[code]`` for an array of integer codes, the dictionary
    sorted by name; ``valid`` False: a null."""
    present = np.unique(codes if valid is None else codes[valid])
    uniq = sorted({names[int(c)] for c in present})
    pos = {v: i for i, v in enumerate(uniq)}
    lut_codes = present.astype(np.int64)
    lut = np.array([pos[names[int(c)]] for c in present], dtype=index_type)
    index = np.zeros(len(codes), dtype=index_type)
    if len(present):
        take = np.ones(len(codes), bool) if valid is None else valid
        index[take] = lut[np.searchsorted(lut_codes, codes[take])]
    return pa.DictionaryArray.from_arrays(
        fixed(index, pa.from_numpy_dtype(np.dtype(index_type)), valid), strings(uniq))


def validity_of(arr: pa.Array) -> np.ndarray:
    """One byte a slot: 1 where it holds a value (none does in a column of the null type)."""
    if arr.null_count == 0:
        return np.ones(len(arr), np.uint8)
    bits = arr.buffers()[0]
    if bits is None:     # a null type: nothing valid
        return np.zeros(len(arr), np.uint8)
    return np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little",
                         count=arr.offset + len(arr))[arr.offset:]


def numpy_type(t: pa.DataType) -> np.dtype:
    """The little-endian numpy type of an Arrow number type (``to_pandas_dtype`` would ask
    pyarrow's pandas shim, which imports pandas); TypeError for any other type."""
    dtype = _NUMPY_TYPES.get(t.id)
    if dtype is not None:
        return dtype
    width = t.bit_width // 8
    for test, kind in ((pa.types.is_signed_integer, "i"), (pa.types.is_unsigned_integer, "u"),
                       (pa.types.is_floating, "f")):
        if test(t):
            # (a number type's id tells its width too)
            dtype = _NUMPY_TYPES[t.id] = np.dtype(f"<{kind}{width}")
            return dtype
    raise TypeError(f"no numpy type for {t}")


_NUMPY_TYPES: dict = {}


def stored_values(arr: pa.Array) -> np.ndarray:
    """The values of a number or boolean column as its buffer holds them, little-endian
    (booleans as bytes 0 and 1; a null slot holds whatever was stored there), without a
    copy where it can; TypeError for any other type."""
    n, start = len(arr), arr.offset
    if pa.types.is_boolean(arr.type):
        bits = np.frombuffer(arr.buffers()[1], np.uint8)
        return np.unpackbits(bits, bitorder="little", count=start + n)[start:]
    return np.frombuffer(arr.buffers()[1], numpy_type(arr.type), count=start + n)[start:]


def to_numbers(arr: pa.Array) -> np.ndarray:
    """A number or boolean column as numpy, as ``Array.to_numpy(zero_copy_only=False)``
    gives it (a null: NaN, integers with nulls as float64) but for booleans with nulls
    (bool, a null False, where ``to_numpy`` gives objects); read from its buffers, since
    ``to_numpy`` asks pyarrow's pandas shim, which imports pandas."""
    values = stored_values(arr)
    if pa.types.is_boolean(arr.type):
        values = values.view(bool)
        return values & validity_of(arr).view(bool) if arr.null_count else values
    if not arr.null_count:
        return values
    return np.where(validity_of(arr).view(bool), values.astype(np.float64), np.nan)
