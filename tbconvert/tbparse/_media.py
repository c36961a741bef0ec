"""Decoding images and WAV audio the way TensorFlow's decoders do, without TensorFlow.

tbparse calls ``tf.image.decode_image`` (an ``uint8`` array of shape
``(height, width, channels)``) and ``tf.audio.decode_wav`` (``float32`` samples
in [-1, 1) of shape ``(frames, channels)`` and the sample rate). Pillow and
the standard ``wave`` module give the same arrays.
"""

from __future__ import annotations

import io
import wave

import numpy as np

from tbconvert.errors import MissingDependencyError


def decode_image(data: bytes) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependencyError("decoding images needs Pillow: pip install pillow") from None
    with Image.open(io.BytesIO(bytes(data))) as im:
        if im.mode.startswith("I;16") or im.mode == "I":
            # 16-bit greyscale: TensorFlow keeps one channel and each sample's high byte
            arr = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
            return arr[:, :, None]
        if im.mode == "P":
            # TensorFlow expands a palette to RGB, or RGBA when it has transparency
            im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        elif im.mode not in ("L", "LA", "RGB", "RGBA"):
            im = im.convert("RGBA" if "A" in im.mode else "RGB")
        arr = np.asarray(im, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr


_SCALE = {1: 128.0, 2: 32768.0, 4: 2147483648.0}


def decode_wav(data: bytes) -> tuple[np.ndarray, int]:
    """``(samples, sample_rate)``: samples ``float32`` of shape ``(frames, channels)``."""
    with wave.open(io.BytesIO(bytes(data))) as w:
        channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width == 1:  # 8-bit WAV is unsigned
        ints = np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0
    elif width in (2, 4):
        ints = np.frombuffer(raw, f"<i{width}").astype(np.float32)
    else:
        raise ValueError(f"unsupported WAV sample width: {width} bytes")
    samples = (ints / np.float32(_SCALE[width])).astype(np.float32)
    return samples.reshape(-1, channels), rate
