"""TensorFlow ``DataType`` codes, their numpy storage, and TensorProto <-> ndarray.

The decoding rules are TensorBoard's (docs/format-notes.md, "Tensor values"): ``tensor_content``
wins; otherwise the typed field, where a single element fills the whole
shape. Types numpy lacks keep their bits: bfloat16 as uint16, quantized types
as the integer of their width. Anything else (resource, variant, float8...)
is kept as the serialized TensorProto under :data:`DT_RAW_PROTO`, so nothing
is dropped.
"""

from __future__ import annotations

import math

import numpy as np

from tbconvert import budget

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8 = 1, 2, 3, 4, 5, 6
DT_STRING, DT_COMPLEX64, DT_INT64, DT_BOOL = 7, 8, 9, 10
DT_QINT8, DT_QUINT8, DT_QINT32, DT_BFLOAT16, DT_QINT16, DT_QUINT16 = 11, 12, 13, 14, 15, 16
DT_UINT16, DT_COMPLEX128, DT_HALF, DT_UINT32, DT_UINT64 = 17, 18, 19, 22, 23
# Not a TensorFlow code: the point is a uint8 array holding a serialized TensorProto.
DT_RAW_PROTO = -1

# code -> (numpy storage dtype, TensorProto typed-value field)
_TABLE: dict[int, tuple[np.dtype, str]] = {
    DT_FLOAT: (np.dtype("<f4"), "float_val"),
    DT_DOUBLE: (np.dtype("<f8"), "double_val"),
    DT_INT32: (np.dtype("<i4"), "int_val"),
    DT_UINT8: (np.dtype("u1"), "int_val"),
    DT_INT16: (np.dtype("<i2"), "int_val"),
    DT_INT8: (np.dtype("i1"), "int_val"),
    DT_STRING: (np.dtype(object), "string_val"),
    DT_COMPLEX64: (np.dtype("<c8"), "scomplex_val"),
    DT_INT64: (np.dtype("<i8"), "int64_val"),
    DT_BOOL: (np.dtype("?"), "bool_val"),
    DT_QINT8: (np.dtype("i1"), "int_val"),
    DT_QUINT8: (np.dtype("u1"), "int_val"),
    DT_QINT32: (np.dtype("<i4"), "int_val"),
    DT_BFLOAT16: (np.dtype("<u2"), "half_val"),
    DT_QINT16: (np.dtype("<i2"), "int_val"),
    DT_QUINT16: (np.dtype("<u2"), "int_val"),
    DT_UINT16: (np.dtype("<u2"), "int_val"),
    DT_COMPLEX128: (np.dtype("<c16"), "dcomplex_val"),
    DT_HALF: (np.dtype("<f2"), "half_val"),
    DT_UINT32: (np.dtype("<u4"), "uint32_val"),
    DT_UINT64: (np.dtype("<u8"), "uint64_val"),
}

# numpy kind+size -> the natural TensorFlow code (for arrays made by users or other formats)
_FROM_NUMPY = {
    "f2": DT_HALF, "f4": DT_FLOAT, "f8": DT_DOUBLE,
    "i1": DT_INT8, "i2": DT_INT16, "i4": DT_INT32, "i8": DT_INT64,
    "u1": DT_UINT8, "u2": DT_UINT16, "u4": DT_UINT32, "u8": DT_UINT64,
    "c8": DT_COMPLEX64, "c16": DT_COMPLEX128, "b1": DT_BOOL,
}

NAMES = {
    DT_FLOAT: "float32", DT_DOUBLE: "float64", DT_INT32: "int32", DT_UINT8: "uint8",
    DT_INT16: "int16", DT_INT8: "int8", DT_STRING: "string", DT_COMPLEX64: "complex64",
    DT_INT64: "int64", DT_BOOL: "bool", DT_QINT8: "qint8", DT_QUINT8: "quint8",
    DT_QINT32: "qint32", DT_BFLOAT16: "bfloat16", DT_QINT16: "qint16", DT_QUINT16: "quint16",
    DT_UINT16: "uint16", DT_COMPLEX128: "complex128", DT_HALF: "float16",
    DT_UINT32: "uint32", DT_UINT64: "uint64", DT_RAW_PROTO: "raw_tensor_proto",
}
CODES = {name: code for code, name in NAMES.items()}


def bfloat16_values(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 kept as their bits (the upper half of a float32)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


class TensorDecodeError(ValueError):
    """A TensorProto whose contents do not match its dtype and shape."""


def quieted(values: np.ndarray) -> np.ndarray:
    """Float32 (or complex64) ``values`` as TensorBoard reads them from ``simple_value``,
    ``float_val`` and ``scomplex_val``: through Python floats, which quiet a signaling NaN
    (its quiet bit set, sign and payload kept). ``values`` itself when it holds none."""
    if values.dtype.str not in ("<f4", "<c8") or not np.isnan(values).any():
        return values
    bits = np.ascontiguousarray(values).view(np.uint32)
    signaling = ((bits & 0x7F800000) == 0x7F800000) & ((bits & 0x007FFFFF) != 0) \
        & ((bits & 0x00400000) == 0)
    if not signaling.any():
        return values
    return (bits | (signaling.astype(np.uint32) << 22)).view(values.dtype)


def numpy_dtype(code: int) -> np.dtype:
    """numpy storage dtype for a TensorFlow code (object for strings)."""
    if code == DT_RAW_PROTO:
        return np.dtype("u1")
    return _TABLE[code][0]


def tf_dtype_of(dtype) -> int:
    """The natural TensorFlow code for a numpy dtype (``S``/``O``/``U`` -> string)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return DT_STRING
    key = f"{dtype.kind}{dtype.itemsize}"
    try:
        return _FROM_NUMPY[key]
    except KeyError:
        raise TensorDecodeError(f"numpy dtype {dtype} has no TensorFlow equivalent") from None


def string_array(values, shape=None) -> np.ndarray:
    """An object array of ``bytes`` (the model's form of DT_STRING tensors)."""
    vals = [v if type(v) is bytes else bytes(v) for v in values]
    arr = np.empty(len(vals), dtype=object)
    arr[:] = vals
    return arr.reshape(shape) if shape is not None else arr


# What one string element costs once decoded, whatever its length: its pointer, a Python
# object, and what the writers build per element (an empty string takes 2 bytes of input).
STRING_ELEMENT_BYTES = 64


def _check_expansion(decoded: int, tp, encoded_at_least: int, where: str) -> None:
    """:func:`budget.check_expansion` against the proto's encoded size, which is measured only
    when a lower bound of it does not already allow the value: protobuf measures a message by
    encoding it, a transient copy as large as the tensor (hundreds of MiB for a large image)."""
    if decoded > budget.EXPANSION_BASE + budget.EXPANSION_RATIO * encoded_at_least:
        budget.check_expansion(decoded, tp.ByteSize(), where)


def proto_to_array(tp, where: str = "tensor", content=None) -> tuple[int, np.ndarray]:
    """Decode a ``TensorProto`` into ``(code, array)``; unknown types stay raw.
    ``content``: its ``tensor_content``, read apart from ``tp`` (a large payload, see
    :mod:`tbconvert.formats.tfevents.large_records`); only a numeric tensor takes one.

    Contents that do not match the shape raise :class:`TensorDecodeError` (the
    caller may keep the raw bytes). A shape no real tensor has (more than
    :data:`budget.MAX_DIMS` dimensions, or one value filling far more bytes than
    the proto took, e.g. ``[2**40]`` from one ``float_val``) raises
    :class:`~tbconvert.errors.CorruptDataError` before anything is allocated.
    """
    code = int(tp.dtype)
    if content is not None and (code == DT_STRING or code not in _TABLE):
        raise TensorDecodeError(f"a {NAMES.get(code, code)} tensor holds no tensor_content")
    if code == DT_STRING:
        dims = tp.tensor_shape.dim
        vals = tp.string_val
        # the common form (images, audio, text): a vector with one string per element
        if len(dims) == 1 and dims[0].size == len(vals):
            _check_expansion(len(vals) * STRING_ELEMENT_BYTES, tp, 2 * len(vals),
                             f"{where} of shape [{len(vals)}]")
            arr = np.empty(len(vals), dtype=object)
            arr[:] = list(vals)
            return code, arr
    if code not in _TABLE:
        return DT_RAW_PROTO, np.frombuffer(tp.SerializeToString(), dtype=np.uint8)
    dims = tp.tensor_shape.dim
    if len(dims) > budget.MAX_DIMS:
        budget.check_dims(range(len(dims)), where)
    shape = tuple(int(d.size) for d in dims)
    if any(s < 0 for s in shape):
        raise TensorDecodeError(f"tensor has an unknown dimension in shape {list(shape)}")
    n = math.prod(shape)
    np_dtype, field_name = _TABLE[code]
    if content is None:
        content = tp.tensor_content if code != DT_STRING else b""
    _check_expansion(n * (STRING_ELEMENT_BYTES if code == DT_STRING else np_dtype.itemsize),
                     tp, len(content), f"{where} of shape {list(shape)}")
    if code == DT_STRING:
        vals = tp.string_val
        if len(vals) == n:
            return code, string_array(vals, shape)
        if len(vals) == 1:
            return code, string_array([vals[0]] * n, shape)
        raise TensorDecodeError(f"string tensor of shape {list(shape)} holds {len(vals)} values")
    if content:
        if len(content) != n * np_dtype.itemsize:
            raise TensorDecodeError(
                f"tensor_content has {len(content)} bytes; shape {list(shape)} of "
                f"{NAMES[code]} needs {n * np_dtype.itemsize}")
        return code, np.frombuffer(content, dtype=np_dtype).reshape(shape)
    vals = getattr(tp, field_name)
    if field_name == "half_val":
        arr = np.asarray(vals, dtype=np.int64).astype(np.uint16).view(np_dtype)
    elif field_name in ("scomplex_val", "dcomplex_val"):
        flat = np.asarray(vals, dtype="<f4" if code == DT_COMPLEX64 else "<f8")
        if len(flat) % 2:
            raise TensorDecodeError("complex tensor holds an odd number of parts")
        # pairs of parts viewed as complex numbers: arithmetic (re + 1j * im) would make
        # 1+inf j a NaN and drop the sign of a -0.0 imaginary part
        arr = flat.view(np_dtype)
        if code == DT_COMPLEX64:
            arr = quieted(arr)
    else:
        arr = np.asarray(vals).astype(np_dtype) if len(vals) else np.zeros(0, np_dtype)
        if code == DT_FLOAT:
            arr = quieted(arr)
    if len(arr) == n:
        return code, arr.reshape(shape)
    if len(arr) == 1:
        return code, np.full(shape, arr[0], dtype=np_dtype)
    raise TensorDecodeError(f"tensor of shape {list(shape)} holds {len(arr)} {NAMES[code]} values")


def tensor_head(tp, code: int, shape: tuple) -> None:
    """The dtype and shape of the ``TensorProto`` ``tp``, as :func:`array_to_proto` sets them."""
    tp.dtype = code
    for size in shape:
        tp.tensor_shape.dim.add(size=int(size))
    if not shape:
        tp.tensor_shape.SetInParent()


def array_to_proto(code: int, arr: np.ndarray, proto_cls, into=None):
    """Encode ``(code, array)`` as a ``TensorProto`` of class ``proto_cls``, or into the
    empty ``TensorProto`` ``into`` (a field of the message to be sent: copying a finished
    proto there would hold a large tensor once more).

    Strings go to ``string_val``; rank-0 float/double/int32/int64 to their
    typed field (as TensorBoard's own encoder does, and as the data server
    requires for scalars); everything else to ``tensor_content``.
    """
    if into is not None:
        into.SetInParent()  # present even when empty, as a copied proto would be
    if code == DT_RAW_PROTO:
        raw = np.asarray(arr, dtype=np.uint8).tobytes()
        if into is None:
            return proto_cls.FromString(raw)
        into.MergeFromString(raw)
        return into
    tp = proto_cls() if into is None else into
    arr = np.asarray(arr)
    tensor_head(tp, code, arr.shape)
    if code == DT_STRING:
        tp.string_val.extend(bytes(v) for v in arr.reshape(-1))
        return tp
    np_dtype, field_name = _TABLE[code]
    if arr.size == 1 and field_name in ("float_val", "double_val", "int_val", "int64_val") \
            and code in (DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64):
        value = arr.reshape(())
        getattr(tp, field_name).append(value.item())
        # a NaN whose payload the typed field would not give back (a signalling NaN is
        # quieted on its way through a Python float) goes to tensor_content
        if value == value or np.asarray(getattr(tp, field_name), np_dtype).tobytes() \
                == value.astype(np_dtype).tobytes():
            return tp
        tp.ClearField(field_name)
    if arr.size:
        tp.tensor_content = np.ascontiguousarray(arr, dtype=np_dtype).tobytes()
    return tp
