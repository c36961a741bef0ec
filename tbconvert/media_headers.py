"""What the headers of media blobs say about them: a WAV clip's rate, channels and length, a
PNG image's channels. Legacy summaries repeat these facts beside the blob, where the model
keeps only the blob (as TensorBoard's migration does), so writers read them back from here."""

from __future__ import annotations

import io
import struct

# PNG colour type -> channels (grey, RGB, palette, grey + alpha, RGBA)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"


def wav_info(blob: bytes) -> tuple:
    """``(sample_rate, channels, length_frames)`` of a WAV clip, ``(None,) * 3`` otherwise."""
    import wave
    try:
        with wave.open(io.BytesIO(blob)) as w:
            return w.getframerate(), w.getnchannels(), w.getnframes()
    except (wave.Error, EOFError, ValueError, struct.error):
        return None, None, None


def png_channels(blob: bytes) -> int | None:
    """The channels of a PNG image, as writers give them in ``Summary.Image.colorspace``
    (1 grey, 2 grey and alpha, 3 RGB, 4 RGBA); None for anything else."""
    if len(blob) < 26 or not blob.startswith(_PNG_HEAD):
        return None
    return _PNG_CHANNELS.get(blob[25])
