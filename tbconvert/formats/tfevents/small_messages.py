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

from tbconvert.formats.tfevents.encode import event_head, read_field, read_text

# Event.file_version, Event.source_metadata; SourceMetadata.writer
_FILE_VERSION, _SOURCE_METADATA, _WRITER = 0x1A, 0x52, 0x0A
# SummaryMetadata: plugin_data, display_name, summary_description, data_class (varint);
# PluginData: plugin_name, content
_PLUGIN_DATA, _DISPLAY_NAME, _DESCRIPTION, _DATA_CLASS = 0x0A, 0x12, 0x1A, 0x20
_PLUGIN_NAME, _CONTENT = 0x0A, 0x12


def file_version(buf, start: int, end: int) -> tuple[float, str] | None:
    """``(wall_time, file_version)`` of the version event in ``buf[start:end]``, or None
    when it is anything else."""
    try:
        return _file_version(buf, start, end)
    except ValueError:          # a varint that runs past its message or 64 bits
        return None


def _file_version(buf, pos: int, end: int) -> tuple[float, str] | None:
    head = event_head(buf, pos, end)     # the version event's step is not used
    if head is None:
        return None
    wall, _, pos = head
    if read_field(buf, pos, end, _FILE_VERSION)[0] < 0:
        return None
    version, pos = read_text(buf, pos, end, _FILE_VERSION)
    at, stop = read_field(buf, pos, end, _SOURCE_METADATA)
    if at >= 0:
        # not kept, but protobuf would refuse a malformed one: only a plain one is passed over
        writer, at = read_text(buf, at, stop, _WRITER)
        if writer is None or at != stop:
            return None
        pos = stop
    if version is None or pos != end:
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
    at, stop = read_field(buf, pos, end, _PLUGIN_DATA)
    if at >= 0:
        plugin_name, at = read_text(buf, at, stop, _PLUGIN_NAME)
        content_at, content_stop = read_field(buf, at, stop, _CONTENT)
        if content_at >= 0:
            content = bytes(buf[content_at:content_stop])
            at = content_stop
        if at != stop:
            return None
        pos = stop
    display_name, pos = read_text(buf, pos, end, _DISPLAY_NAME)
    description, pos = read_text(buf, pos, end, _DESCRIPTION)
    if None in (plugin_name, display_name, description):
        return None
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
    return plugin_name, content, display_name, description, data_class
