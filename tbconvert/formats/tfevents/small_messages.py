"""Two small messages read without protobuf: an event file's version record and SummaryMetadata.

Every event file opens with ``Event{wall_time, file_version}`` (PyTorch and TensorFlow add
``source_metadata{writer}``), and TensorFlow 2 repeats one ``SummaryMetadata`` on every value.
Both are tiny, but decoding them through protobuf means importing TensorBoard's generated
message modules: 20-35 ms of a short command's start, for files whose other records the
bulk decoders read without protobuf. Only the form protobuf writes is taken here (each field at
most once, in field order, nothing else, strings valid UTF-8); anything else gives None and
goes to protobuf, so what is read is what protobuf would have read.
"""

from __future__ import annotations

import struct

from tbconvert.formats.tfevents.encode import read_varint

_F64 = struct.Struct("<d")
# Event: wall_time (double), step (varint), file_version (string), source_metadata (message)
_WALL, _STEP, _FILE_VERSION, _SOURCE_METADATA = 0x09, 0x10, 0x1A, 0x52
# SourceMetadata.writer; SummaryMetadata: plugin_data, display_name, summary_description,
# data_class (varint); PluginData: plugin_name, content
_WRITER = 0x0A
_PLUGIN_DATA, _DISPLAY_NAME, _DESCRIPTION, _DATA_CLASS = 0x0A, 0x12, 0x1A, 0x20
_PLUGIN_NAME, _CONTENT = 0x0A, 0x12


def _field(buf, pos: int, end: int, key: int) -> tuple[int, int]:
    """The bounds of the length-delimited field ``key`` at ``pos``, or (-1, -1)."""
    if pos >= end or buf[pos] != key:
        return -1, -1
    length, pos = read_varint(buf, pos + 1, end)
    if pos + length > end:
        return -1, -1
    return pos, pos + length


def _text(buf, start: int, stop: int) -> str | None:
    try:
        return bytes(buf[start:stop]).decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_version(buf, start: int, end: int) -> tuple[float, str] | None:
    """``(wall_time, file_version)`` of the version event in ``buf[start:end]``, or None
    when it is anything else."""
    try:
        return _file_version(buf, start, end)
    except ValueError:          # a varint that runs past its message or 64 bits
        return None


def _file_version(buf, pos: int, end: int) -> tuple[float, str] | None:
    wall = 0.0
    if pos < end and buf[pos] == _WALL:
        if pos + 9 > end:
            return None
        wall = _F64.unpack_from(buf, pos + 1)[0]
        pos += 9
    if pos < end and buf[pos] == _STEP:
        _, pos = read_varint(buf, pos + 1, end)     # the version event's step is not used
    at, stop = _field(buf, pos, end, _FILE_VERSION)
    if at < 0:
        return None
    version = _text(buf, at, stop)
    if version is None:
        return None
    pos = stop
    at, stop = _field(buf, pos, end, _SOURCE_METADATA)
    if at >= 0:
        # not kept, but protobuf would refuse a malformed one: only a plain one is passed over
        writer_at, writer_stop = _field(buf, at, stop, _WRITER)
        if writer_at >= 0:
            if _text(buf, writer_at, writer_stop) is None:
                return None
            at = writer_stop
        if at != stop:
            return None
        pos = stop
    if pos != end:
        return None
    return wall, version


def summary_metadata(raw: bytes) -> tuple[str, bytes, str, str, int] | None:
    """``(plugin_name, content, display_name, summary_description, data_class)`` of a
    SummaryMetadata serialization, or None when it is not in the form protobuf writes."""
    try:
        return _summary_metadata(raw, 0, len(raw))
    except ValueError:
        return None


def _summary_metadata(buf, pos: int, end: int):
    plugin_name, content = "", b""
    at, stop = _field(buf, pos, end, _PLUGIN_DATA)
    if at >= 0:
        name_at, name_stop = _field(buf, at, stop, _PLUGIN_NAME)
        if name_at >= 0:
            plugin_name = _text(buf, name_at, name_stop)
            if plugin_name is None:
                return None
            at = name_stop
        content_at, content_stop = _field(buf, at, stop, _CONTENT)
        if content_at >= 0:
            content = bytes(buf[content_at:content_stop])
            at = content_stop
        if at != stop:
            return None
        pos = stop
    texts = []
    for key in (_DISPLAY_NAME, _DESCRIPTION):
        at, stop = _field(buf, pos, end, key)
        if at < 0:
            texts.append("")
            continue
        text = _text(buf, at, stop)
        if text is None:
            return None
        texts.append(text)
        pos = stop
    data_class = 0
    if pos < end and buf[pos] == _DATA_CLASS:
        # an enum is an int32: protobuf keeps the low 32 bits of a longer varint; only the
        # one-byte values writers use are taken here
        if pos + 2 > end or buf[pos + 1] & 0x80:
            return None
        data_class = buf[pos + 1]
        pos += 2
    if pos != end:
        return None
    return plugin_name, content, texts[0], texts[1], data_class
