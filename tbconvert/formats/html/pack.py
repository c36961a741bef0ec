"""Data files the page loads by ``<script>`` tag (``fetch`` of local files fails under
``file://``): each calls ``tbData.add(key, meta, payload)`` with JSON ``meta`` and the
columns as one base64 string of little-endian typed arrays, never one object per point."""

from __future__ import annotations

import base64
import json
import math

import numpy as np


def js_json(obj) -> str:
    """JSON as a JavaScript expression; ``<`` escaped too, so the text could even sit in a page."""
    return json.dumps(_finite(obj), ensure_ascii=True, allow_nan=False,
                      separators=(",", ":")).replace("<", "\\u003c")


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)       # "nan", "inf", "-inf": shown as text
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def columns(arrays: list[tuple[str, np.ndarray]]) -> tuple[dict, str]:
    """``(layout, base64)``: the arrays back to back (each 8-byte aligned), little-endian.

    ``layout`` maps each name to ``[dtype, offset, length]`` with dtype ``i4``, ``f4`` or ``f8``:
    integers that fit 32 bits (most steps) take half the bytes to load, float32 stays float32,
    everything else is float64.
    """
    layout, parts, offset = {}, [], 0
    for name, arr in arrays:
        dtype = _dtype(arr)
        raw = np.ascontiguousarray(arr, dtype=dtype).tobytes()
        layout[name] = [dtype.str[1:], offset, len(arr)]
        parts.append(raw)
        pad = (-len(raw)) % 8
        if pad:
            parts.append(b"\0" * pad)
        offset += len(raw) + pad
    return layout, base64.b64encode(b"".join(parts)).decode("ascii")


def _dtype(arr: np.ndarray) -> np.dtype:
    if arr.dtype == np.float32:
        return np.dtype("<f4")
    if arr.dtype.kind in "iu" and (not len(arr) or (int(arr.min()) >= -2 ** 31
                                                   and int(arr.max()) < 2 ** 31)):
        return np.dtype("<i4")
    return np.dtype("<f8")


def data_file(key: str, meta: dict, payload: str | None = None) -> bytes:
    """The text of one data file."""
    tail = "null" if payload is None else f'"{payload}"'
    return f"tbData.add({js_json(key)},{js_json(meta)},{tail});\n".encode("ascii")
