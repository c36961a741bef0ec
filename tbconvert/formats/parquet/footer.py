"""A Parquet footer (``FileMetaData``) read and written as plain Thrift compact structs.

A single-file archive converted with ``--jobs N`` is joined from runs that workers encoded
into Parquet files of their own (:mod:`tbconvert.formats.parquet.join`): their column chunks
are copied as they are, and only the footer is written anew, with its offsets moved. Arrow
writes a footer but lets nobody edit one, so this module decodes the Thrift compact protocol
without a schema (a struct is a list of ``[field id, type, value]`` in wire order) and
encodes it back the way Thrift's own C++ encoder does, so that an unchanged footer comes
back byte for byte.
"""

from __future__ import annotations

import gc
import struct

from tbconvert.errors import CorruptDataError

MAGIC = b"PAR1"

# compact protocol types
TRUE, FALSE, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)
_INTS = (I16, I32, I64)

# field ids of parquet.thrift
FILE_SCHEMA, FILE_NUM_ROWS, FILE_ROW_GROUPS, FILE_KEY_VALUE = 2, 3, 4, 5
KV_KEY, KV_VALUE = 1, 2
RG_COLUMNS, RG_TOTAL_BYTE_SIZE, RG_NUM_ROWS, RG_FILE_OFFSET = 1, 2, 3, 5
RG_TOTAL_COMPRESSED_SIZE, RG_ORDINAL = 6, 7
CC_FILE_OFFSET, CC_META = 2, 3
CC_OFFSET_INDEX_OFFSET, CC_COLUMN_INDEX_OFFSET = 4, 6
CM_UNCOMPRESSED_SIZE, CM_COMPRESSED_SIZE = 6, 7
CM_DATA_PAGE_OFFSET, CM_INDEX_PAGE_OFFSET, CM_DICTIONARY_PAGE_OFFSET = 9, 10, 11
CM_BLOOM_FILTER_OFFSET = 14


def _struct(data, pos: int) -> tuple[list, int]:
    """The struct at ``pos`` as ``[field id, type, value]`` lists, and where it ends.

    Written as one loop over local names, varints read in place: a footer of many row
    groups is hundreds of thousands of fields, and a method call per byte made decoding
    it most of the time of joining the runs of one file."""
    fields = []
    append = fields.append
    last = 0
    while True:
        head = data[pos]
        pos += 1
        if head == 0:
            return fields, pos
        ctype = head & 0x0F
        if head >> 4:
            fid = last + (head >> 4)
        else:
            n, pos = _varint(data, pos)
            fid = (n >> 1) ^ -(n & 1)
        if ctype == TRUE or ctype == FALSE:
            value = ctype == TRUE
        elif ctype == I64 or ctype == I32 or ctype == I16:
            b = data[pos]
            if b < 0x80:
                pos += 1
                value = (b >> 1) ^ -(b & 1)
            else:
                n, pos = _varint(data, pos)
                value = (n >> 1) ^ -(n & 1)
        elif ctype == BINARY:
            n = data[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = _varint(data, pos)
            if pos + n > len(data):
                raise ValueError("binary runs past the footer")
            value = data[pos:pos + n]
            pos += n
        elif ctype == STRUCT:
            value, pos = _struct(data, pos)
        else:
            value, pos = _value(data, pos, ctype)
        append([fid, ctype, value])
        last = fid


def _value(data, pos: int, ctype: int) -> tuple[object, int]:
    """A value of type ``ctype`` at ``pos`` (the rarer types of a struct's fields, and list
    items), and where it ends."""
    if ctype in _INTS:
        n, pos = _varint(data, pos)
        return (n >> 1) ^ -(n & 1), pos
    if ctype == BINARY:
        n, pos = _varint(data, pos)
        if pos + n > len(data):
            raise ValueError("binary runs past the footer")
        return data[pos:pos + n], pos + n
    if ctype == STRUCT:
        return _struct(data, pos)
    if ctype in (LIST, SET):
        size, etype, pos = _list_head(data, pos)
        if etype in (TRUE, FALSE):
            end = pos + size
            if end > len(data):
                raise IndexError("a list runs past the footer")
            return (etype, [b == TRUE for b in data[pos:end]]), end
        items = []
        append = items.append
        if etype == STRUCT:
            for _ in range(size):
                item, pos = _struct(data, pos)
                append(item)
        else:
            for _ in range(size):
                item, pos = _value(data, pos, etype)
                append(item)
        return (etype, items), pos
    if ctype == I8:
        return struct.unpack("b", bytes([data[pos]]))[0], pos + 1
    if ctype == DOUBLE:
        return struct.unpack_from("<d", data, pos)[0], pos + 8
    raise ValueError(f"Thrift type {ctype} is not in a Parquet footer")


class _Encoder:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        _put_varint(self.out, n)

    def list_head(self, size: int, etype: int) -> None:
        if size < 15:
            self.out.append(size << 4 | etype)
        else:
            self.out.append(0xF0 | etype)
            self.varint(size)

    def bulk(self, data) -> None:
        """Bytes as they are: a bytes object, or an object giving them a block at a time
        (see :mod:`tbconvert.formats.parquet.spool`)."""
        if hasattr(data, "blocks"):
            for block in data.blocks():
                self.out += block
        else:
            self.out += data

    def struct(self, fields: list) -> None:
        _put_struct(self, self.out, fields)


def _put_varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_struct(enc: _Encoder, out: bytearray, fields: list) -> None:
    """Encode ``fields`` into ``out`` (the encoder's buffer, which it empties in place).

    One loop over local names, as for decoding: a joined file encodes every row group's
    struct of each run it copies."""
    append = out.append
    last = 0
    for fid, ctype, value in fields:
        if ctype == TRUE or ctype == FALSE:
            ctype = TRUE if value else FALSE
        delta = fid - last
        if 0 < delta <= 15:
            append(delta << 4 | ctype)
        else:
            append(ctype)
            _put_varint(out, (fid << 1) ^ (fid >> 63))
        last = fid
        if ctype == I64 or ctype == I32 or ctype == I16:
            n = (value << 1) ^ (value >> 63)
            if n <= 0x7F:
                append(n)
            else:
                _put_varint(out, n)
        elif ctype == BINARY:
            _put_varint(out, len(value))
            if type(value) is bytes and len(value) < _DIRECT:    # (else see _FileEncoder)
                out += value
            else:
                enc.bulk(value)
        elif ctype == STRUCT:
            if isinstance(value, Encoded):
                out += value
            else:
                _put_struct(enc, out, value)
        elif ctype == LIST or ctype == SET:
            etype, items = value
            enc.list_head(len(items), etype)
            if hasattr(items, "blocks"):    # structs encoded already, kept in a file
                enc.bulk(items)
            elif etype == STRUCT:
                for item in items:
                    if isinstance(item, Encoded):
                        out += item
                    else:
                        _put_struct(enc, out, item)
            else:
                for item in items:
                    _put_value(enc, out, etype, item)
        elif ctype != TRUE and ctype != FALSE:
            _put_value(enc, out, ctype, value)
    append(0)


def _put_value(enc: _Encoder, out: bytearray, ctype: int, value) -> None:
    """A list item, or a value of the rarer types of a struct's fields."""
    if ctype in _INTS:
        _put_varint(out, (value << 1) ^ (value >> 63))
    elif ctype == BINARY:
        _put_varint(out, len(value))
        enc.bulk(value)
    elif ctype == STRUCT:
        if isinstance(value, Encoded):
            out += value
        else:
            _put_struct(enc, out, value)
    elif ctype in (TRUE, FALSE):
        out.append(TRUE if value else FALSE)
    elif ctype in (LIST, SET):
        etype, items = value
        enc.list_head(len(items), etype)
        for item in items:
            _put_value(enc, out, etype, item)
    elif ctype == I8:
        out += struct.pack("b", value)
    elif ctype == DOUBLE:
        out += struct.pack("<d", value)
    else:
        raise ValueError(f"Thrift type {ctype} is not in a Parquet footer")


def decode(data: bytes) -> list:
    """The struct encoded in ``data`` (which it must fill exactly)."""
    try:
        fields, end = decode_prefix(data, 0)
    except ValueError as exc:
        raise CorruptDataError(f"a Parquet footer that does not decode ({exc})") from None
    if end != len(data):
        raise CorruptDataError("a Parquet footer with bytes after its end")
    return fields


def decode_prefix(data: bytes, pos: int) -> tuple[list, int]:
    """The struct encoded in ``data`` from ``pos`` on (a page header before its page), and
    where it ends; ValueError if it does not decode."""
    # A footer of many row groups decodes into a million small lists, each of which would
    # count towards the collector's next pass over every object alive: collecting during
    # the decoding took twice as long as the decoding (none of these lists is in a cycle).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _struct(data, pos)
    except (IndexError, struct.error) as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("structs nested deeper than a Parquet footer's") from None
    finally:
        if collecting:
            gc.enable()


def encode(fields: list) -> bytes:
    enc = _Encoder()
    enc.struct(fields)
    return bytes(enc.out)


# A binary value (or a spool of encoded structs) at least this long is written straight
# from where it is.
_DIRECT = 1 << 16


class _FileEncoder(_Encoder):
    """An encoder that writes to a file as it goes, long binary values (and spools of
    encoded structs) without a copy."""

    def __init__(self, fh) -> None:
        super().__init__()
        self.fh = fh
        self.size = 0

    def bulk(self, data) -> None:
        if (data.size if hasattr(data, "blocks") else len(data)) < _DIRECT:
            super().bulk(data)
            return
        self.flush()
        for block in data.blocks() if hasattr(data, "blocks") else (data,):
            self.fh.write(block)
            self.size += len(block)

    def flush(self) -> None:
        self.fh.write(self.out)
        self.size += len(self.out)
        del self.out[:]     # (in place: the struct being encoded holds it)


def write(fh, fields: list) -> None:
    """Write ``fields`` as a file's footer at the position of ``fh``, then its length and the
    magic bytes: the bytes ``encode`` gives, without copies of the archive's JSON (tens of
    MB for a run of 100,000 series)."""
    enc = _FileEncoder(fh)
    enc.struct(fields)
    enc.flush()
    fh.write(enc.size.to_bytes(4, "little") + MAGIC)


def add_key_value(path, key_value: dict[bytes, bytes]) -> None:
    """Add ``key_value`` to the key-value metadata of the Parquet file ``path``, after what it
    has: the file Arrow writes when given them before it closes, which holds several copies
    of them while it writes its footer."""
    with open(path, "r+b") as fh:
        fields, start = read(fh)
        _, items = get(fields, FILE_KEY_VALUE, (STRUCT, []))
        put(fields, FILE_KEY_VALUE, LIST, (STRUCT, list(items) + [
            [[KV_KEY, BINARY, k], [KV_VALUE, BINARY, v]] for k, v in key_value.items()]))
        fh.seek(start)
        fh.truncate()
        write(fh, fields)


def read(fh) -> tuple[list, int]:
    """The footer of the Parquet file open in ``fh`` and where it starts."""
    start, length = span(fh)
    fh.seek(start)
    return decode(fh.read(length)), start


def span(fh) -> tuple[int, int]:
    """Where the footer of the Parquet file open in ``fh`` starts, and its length, as the
    file's last eight bytes tell (CorruptDataError when they do not)."""
    fh.seek(0, 2)
    size = fh.tell()
    if size < 12:
        raise CorruptDataError("too short for a Parquet file")
    fh.seek(size - 8)
    tail = fh.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != MAGIC or length > size - 12:
        raise CorruptDataError("no Parquet footer at the end of the file")
    return size - 8 - length, length


def copied(fields: list) -> list:
    """A copy of the struct ``fields`` that shares nothing that :func:`put` changes (bytes,
    ints and floats are shared: they never change in place); several times faster than
    ``copy.deepcopy``, which keeps a memo of every object it meets."""
    return [[fid, ctype, _copied_value(ctype, value)] for fid, ctype, value in fields]


def _copied_value(ctype: int, value):
    if ctype == STRUCT:
        return copied(value)
    if ctype in (LIST, SET):
        etype, items = value
        if etype == STRUCT:
            return etype, [copied(item) for item in items]
        if etype in (LIST, SET):
            return etype, [_copied_value(etype, item) for item in items]
        return etype, list(items)
    return value


class Encoded(bytes):
    """A struct already encoded, which :func:`write` and :func:`encode` put in as it is (the
    row groups of a joined file, encoded as each is appended, not all at the end)."""


def get(fields: list, fid: int, default=None):
    for f in fields:
        if f[0] == fid:
            return f[2]
    return default


def put(fields: list, fid: int, ctype: int, value) -> None:
    """Set field ``fid`` (in its place; a new one goes where its id sorts)."""
    for f in fields:
        if f[0] == fid:
            f[2] = value
            return
    at = next((k for k, f in enumerate(fields) if f[0] > fid), len(fields))
    fields.insert(at, [fid, ctype, value])


def _skip(data, pos: int, ctype: int) -> int:
    """Where the value of type ``ctype`` at ``pos`` ends, nothing of it decoded (a footer's
    row groups are thousands of small structs: made into lists, about 50 KB a row group).
    Integers and binaries are skipped here, not in a call each: most of a footer's fields."""
    if ctype == STRUCT:
        while True:
            head = data[pos]
            pos += 1
            if head == 0:
                return pos
            if not head >> 4:   # a field id of its own, after the type
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            ctype = head & 0x0F
            if ctype in _INTS:
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            elif ctype == BINARY:
                n, pos = _varint(data, pos)
                pos += n
            elif ctype not in (TRUE, FALSE):
                pos = _skip(data, pos, ctype)
    if ctype in (TRUE, FALSE):
        return pos
    if ctype in _INTS:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if ctype == BINARY:
        n, pos = _varint(data, pos)
        return pos + n
    if ctype in (LIST, SET):
        size, etype, pos = _list_head(data, pos)
        if etype in (TRUE, FALSE):
            return pos + size
        for _ in range(size):
            pos = _skip(data, pos, etype)
        return pos
    if ctype == I8:
        return pos + 1
    if ctype == DOUBLE:
        return pos + 8
    raise ValueError(f"Thrift type {ctype} is not in a Parquet footer")


def _varint(data, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _field_head(data, pos: int, last: int) -> tuple[int | None, int, int]:
    """``(type, field id, where its value starts)`` of the struct field whose header is at
    ``pos`` (``last``: the id of the field before it); a type of None at the struct's end."""
    head = data[pos]
    pos += 1
    if head == 0:
        return None, 0, pos
    delta = head >> 4
    if delta:
        return head & 0x0F, last + delta, pos
    fid, pos = _varint(data, pos)
    return head & 0x0F, (fid >> 1) ^ -(fid & 1), pos


def _list_head(data, pos: int) -> tuple[int, int, int]:
    head = data[pos]
    size, etype = head >> 4, head & 0x0F
    if size == 15:
        size, pos = _varint(data, pos + 1)
        return size, etype, pos
    return size, etype, pos + 1


def without_key(data, key: bytes, groups=None) -> tuple[bytes, int, int] | None:
    """The footer ``data`` (a whole footer, as :func:`read` reads it) without its key-value
    entry ``key``, and where that entry's value lies in ``data``: a footer of the same file
    otherwise, for Arrow to read without the archive's JSON (it holds two copies of every
    value while the file is open). None if ``data`` has no such entry, has it more than
    once, or does not decode.

    ``groups`` (a list, or an ``array``), when given, gets where the footer's list of row
    groups starts, then where each row group's struct starts and where the last ends, as
    they lie in the footer returned (nothing when they do not lie there as in ``data``)."""
    try:
        return _without_key(data, key, groups)
    except (ValueError, IndexError, RecursionError):
        return None


def _without_key(data, key: bytes, groups):
    pos = last = 0
    listed = None
    found_groups = []
    while True:
        ctype, fid, pos = _field_head(data, pos, last)
        if ctype is None:
            break
        start = pos
        if groups is not None and fid == FILE_ROW_GROUPS and ctype == LIST:
            # (one walk: the footer's row groups are most of it)
            pos = _struct_starts(data, pos, found_groups)
        else:
            pos = _skip(data, pos, ctype)
        if fid == FILE_KEY_VALUE and ctype == LIST:
            listed = start, pos
        last = fid
    if pos != len(data) or listed is None:
        return None
    start, end = listed
    if groups is not None and found_groups and found_groups[-1] <= start:
        # (before the entry cut out: where they are in the footer returned)
        groups.extend(found_groups)
    size, etype, pos = _list_head(data, start)
    if etype != STRUCT:
        return None
    found = []
    for _ in range(size):
        entry = pos
        fields = []
        pos = _kv_fields(data, pos, fields)
        k = next((v for fid, ctype, v in fields if fid == KV_KEY and ctype == BINARY), None)
        if k is not None and data[k[0]:k[1]] == key:
            value = next((v for fid, ctype, v in fields if fid == KV_VALUE and ctype == BINARY),
                         None)
            found.append((entry, pos, value))
    if len(found) != 1 or found[0][2] is None:
        return None
    entry, entry_end, (lo, hi) = found[0]
    enc = _Encoder()
    enc.list_head(size - 1, STRUCT)
    items = _list_head(data, start)[2]
    with memoryview(data) as view:     # (one copy of the footer made, not four)
        rest = b"".join((view[:start], enc.out, view[items:entry], view[entry_end:]))
    return rest, lo, hi


def _struct_starts(data, pos: int, starts: list) -> int:
    """Skip the list at ``pos``; ``starts`` gets where it starts, then (a list of structs)
    where each item starts and where the last ends."""
    size, etype, items = _list_head(data, pos)
    if etype != STRUCT:
        return _skip(data, pos, LIST)
    starts.append(pos)
    starts.append(items)
    for _ in range(size):
        items = _skip(data, items, STRUCT)
        starts.append(items)
    return items


def _kv_fields(data, pos: int, fields: list) -> int:
    """The fields of the key-value struct at ``pos`` (binary ones as where their bytes
    lie) into ``fields``; where it ends."""
    last = 0
    while True:
        ctype, fid, pos = _field_head(data, pos, last)
        if ctype is None:
            return pos
        if ctype == BINARY:
            n, at = _varint(data, pos)
            pos = at + n
            if pos > len(data):
                raise ValueError("binary runs past the footer")
            fields.append((fid, ctype, (at, pos)))
        else:
            pos = _skip(data, pos, ctype)
        last = fid
