"""Event encoding for the writer: bulk scalar records with numpy, the rest with protobuf.

Scalar points after a tag's first are framed all at once: every record of a
tag with the same step-varint width has the same bytes but for wall time,
step and value, so a whole column becomes one uint8 matrix (payload and
framing), and only the payload CRCs are computed per record (C code).
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import records


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint_widths(steps: np.ndarray) -> np.ndarray:
    u = steps.view(np.uint64)
    width = np.ones(len(u), dtype=np.int64)
    for k in range(1, 10):
        width += (u >= np.uint64(1) << np.uint64(7 * k)).astype(np.int64)
    return width


def scalar_records(tag: bytes, code: int, steps: np.ndarray, walls: np.ndarray,
                   values: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Framed records for scalar points without metadata.

    Returns ``[(point indices, uint8 matrix of whole records)]``, one entry per
    step-varint width.
    """
    if code == dt.DT_FLOAT:
        value_field, size = b"\x2a", 4   # float_val, packed
    else:
        value_field, size = b"\x32", 8   # double_val, packed
    tensor = b"\x08" + bytes([code]) + b"\x12\x00" + value_field + bytes([size])
    tensor_len = len(tensor) + size
    value_msg_head = b"\x0a" + _varint(len(tag)) + tag + b"\x42" + _varint(tensor_len) + tensor
    value_len = len(value_msg_head) + size
    summary = b"\x0a" + _varint(value_len) + value_msg_head
    summary_len = len(summary) + size
    summary_head = b"\x2a" + _varint(summary_len) + summary
    out = []
    widths = varint_widths(steps)
    value_bytes = np.ascontiguousarray(values.astype("<f4" if size == 4 else "<f8")).view(np.uint8) \
        .reshape(-1, size)
    wall_bytes = np.ascontiguousarray(walls.astype("<f8")).view(np.uint8).reshape(-1, 8)
    for k in np.unique(widths).tolist():
        idx = np.flatnonzero(widths == k)
        payload_len = 9 + 1 + k + len(summary_head) + size
        rec_len = records.HEADER + payload_len + records.FOOTER
        mat = np.empty((len(idx), rec_len), dtype=np.uint8)
        header = struct.pack("<Q", payload_len)
        mat[:, :8] = np.frombuffer(header, np.uint8)
        mat[:, 8:12] = np.frombuffer(struct.pack("<I", records.masked_crc32c(header)), np.uint8)
        p = records.HEADER
        mat[:, p] = 0x09
        mat[:, p + 1:p + 9] = wall_bytes[idx]
        mat[:, p + 9] = 0x10
        u = steps[idx].view(np.uint64)
        for j in range(k):
            byte = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
            mat[:, p + 10 + j] = byte | (0x80 if j < k - 1 else 0)
        q = p + 10 + k
        mat[:, q:q + len(summary_head)] = np.frombuffer(summary_head, np.uint8)
        mat[:, q + len(summary_head):q + len(summary_head) + size] = value_bytes[idx]
        _fill_payload_crcs(mat, payload_len)
        out.append((idx, mat))
    return out


def _fill_payload_crcs(mat: np.ndarray, payload_len: int) -> None:
    start = records.HEADER
    crcs = records.crc32c_rows(mat[:, start:start + payload_len])
    mat[:, -4:] = records.mask(crcs).astype("<u4").view(np.uint8).reshape(-1, 4)
