"""A summary value holding a large tensor (an image, a big array), serialized around its payload.

Filling the message copies the payload, and protobuf's serializer holds the message's
bytes about twice while it makes them: a 100 MB tensor cost three copies besides the
series it came from. Its bytes are joined instead from small messages protobuf makes
without the payload and the payload's own fields. A message's encoding is its fields in
field-number order, so the bytes are those protobuf gives for the filled message (a
value whose small parts do not come out in that order takes protobuf's way).
"""

from __future__ import annotations

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents.encode import varint

# Payloads below this go through protobuf: copies of them cost little.
LARGE_PAYLOAD_BYTES = 1 << 20

_VALUE_TENSOR = 8       # Summary.Value.tensor
_VALUE_METADATA = 9     # Summary.Value.metadata
_TENSOR_CONTENT = 4     # TensorProto.tensor_content
_STRING_VAL = 8         # TensorProto.string_val


def _key(number: int, length: int) -> bytes:
    """A length-delimited field's key and length."""
    return varint(number << 3 | 2) + varint(length)


def _payload(code: int, arr: np.ndarray) -> list | None:
    """The tensor's payload fields as pieces (the values' own buffers among them), or None
    for a small payload or one :func:`dtypes.array_to_proto` puts elsewhere."""
    if code == dt.DT_STRING:
        items = [bytes(v) for v in arr.reshape(-1)]
        if sum(map(len, items)) < LARGE_PAYLOAD_BYTES:
            return None
        pieces = []
        for item in items:
            pieces += [_key(_STRING_VAL, len(item)), item]
        return pieces
    if code == dt.DT_RAW_PROTO or arr.size <= 1 or arr.nbytes < LARGE_PAYLOAD_BYTES:
        return None     # (a single number goes to a typed field)
    content = np.ascontiguousarray(arr, dtype=dt.numpy_dtype(code)).reshape(-1)
    return [_key(_TENSOR_CONTENT, content.nbytes), memoryview(content).cast("B")]


def value_bytes(value, code: int, arr, tensor_cls) -> bytes | None:
    """The bytes of the ``Summary.Value`` ``value`` (its tag and metadata set, nothing else)
    once ``value.tensor`` holds ``(code, arr)`` as :func:`dtypes.array_to_proto` puts it;
    None when the payload is small (or not of a form built here): protobuf's way then."""
    pieces = value_pieces(value, code, arr, tensor_cls)
    return None if pieces is None else b"".join(pieces)


def value_pieces(value, code: int, arr, tensor_cls) -> list | None:
    """:func:`value_bytes` as the pieces they are joined from, the payload's own buffers
    among them (written one after the other, the point is not copied)."""
    arr = np.asarray(arr)
    pieces = _payload(code, arr)
    if pieces is None:
        return None
    head = tensor_cls()
    dt.tensor_head(head, code, arr.shape)
    tensor = [head.SerializeToString(), *pieces]
    rest = value.SerializeToString()
    tag = type(value)(tag=value.tag).SerializeToString()
    after = rest[len(tag):]
    # the tensor goes between the tag and the metadata: nothing else may lie there
    if not rest.startswith(tag) or (after and after[0] != _VALUE_METADATA << 3 | 2):
        return None
    size = sum(len(p) for p in tensor)
    return [tag, _key(_VALUE_TENSOR, size), *tensor, after]
