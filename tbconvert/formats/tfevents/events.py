"""Ordered entries to framed event records, values of one step and time sharing an ``Event``.

Consecutive values with the same step and the same wall time (bit for bit),
each of a later tag than the one before, go back into one ``Event`` as TF1's
``merge_all`` wrote them: TensorBoard reads every value of an event in turn,
so what it shows is unchanged, and the file loses the per-event overhead.
Everything is computed column-wise; only payload checksums of rare lengths
take one C call each.
"""

from __future__ import annotations

import struct

import numpy as np

from tbconvert.checksum import crc32c
from tbconvert.formats.tfevents import records
from tbconvert.formats.tfevents.encode import varint, varint_widths
from tbconvert.formats.tfevents.entries import VALUE, Entries, scatter, starts_of
from tbconvert.formats.tfevents.windows import windows

_WALL, _STEP, _SUMMARY, _VALUE = 0x09, 0x10, 0x2A, 0x0A
# A payload length shared by at least this many records gets its checksums column-wise.
_ROWS_CRC = 16
# A value at least this large alone in its event is written as its record's header and
# head, the value itself and the checksum, one after another: framing the record whole
# held the value three times over.
LARGE_VALUE_BYTES = 1 << 20


# The most values an event holds: a step of 100,000 tags is written as events of this many
# values each (the same step and wall time, which TensorBoard reads alike), so that
# reading them back takes the record templates' way (see summary_templates.MAX_VALUES), not
# protobuf's, one value at a time.
EVENT_VALUES = 4096


def group_starts(e: Entries) -> np.ndarray:
    """True where an entry begins a new event."""
    n = len(e)
    starts = np.ones(n, bool)
    if n > 1:
        wall_bits = e.wall.view(np.int64)
        same = ((e.kind[1:] == VALUE) & (e.kind[:-1] == VALUE)
                & (e.step[1:] == e.step[:-1]) & (wall_bits[1:] == wall_bits[:-1])
                & (e.tag[1:] > e.tag[:-1]))
        starts[1:] = ~same
    return starts


def write_varints(out: np.ndarray, pos: np.ndarray, values: np.ndarray, widths: np.ndarray) -> None:
    u = values.astype(np.int64).view(np.uint64)
    for j in range(int(widths.max()) if len(widths) else 0):
        sel = widths > j
        byte = ((u[sel] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(widths[sel] > j + 1, 0x80, 0).astype(np.uint8)
        out[pos[sel] + j] = byte


def frame_entries(e: Entries) -> bytes:
    """The framed records of ordered entries, one event per group (see :func:`group_starts`)
    of at most :data:`EVENT_VALUES` values."""
    n = len(e)
    if not n:
        return b""
    starts = group_starts(e)
    if n > EVENT_VALUES:
        index = np.arange(n)
        starts |= (index - np.maximum.accumulate(np.where(starts, index, 0))) \
            % EVENT_VALUES == 0
    if starts.all() and (e.kind == VALUE).all():
        lengths = e.lengths
        if (lengths == lengths[0]).all():
            return _frame_single_values(e, int(lengths[0]))
    return _frame_general(e, starts)


def _frame_general(e: Entries, starts: np.ndarray) -> bytes:
    first = np.flatnonzero(starts)
    gid = np.cumsum(starts) - 1
    ng = len(first)
    lengths = e.lengths
    is_value = e.kind == VALUE
    lw = varint_widths(lengths)
    piece = np.where(is_value, 1 + lw + lengths, lengths)
    summary_len = np.add.reduceat(piece, first)
    g_value = is_value[first]
    g_step = e.step[first]
    step_w = varint_widths(g_step)
    sum_w = varint_widths(summary_len)
    head = np.where(g_value, 9 + 1 + step_w + 1 + sum_w, 0)
    payload_len = head + summary_len
    rec_len = records.HEADER + payload_len + records.FOOTER
    rec_start = starts_of(rec_len)
    out = np.empty(int(rec_start[-1] + rec_len[-1]), np.uint8)

    # Record headers: length and its masked checksum.
    len_bytes = payload_len.astype("<u8").view(np.uint8).reshape(-1, 8)
    hdr = np.empty((ng, 12), np.uint8)
    hdr[:, :8] = len_bytes
    hdr[:, 8:] = records.mask(records.crc32c_rows(len_bytes)).astype("<u4").view(np.uint8) \
        .reshape(-1, 4)
    windows(out, 12, writeable=True)[rec_start] = hdr
    p = rec_start + records.HEADER

    # Event heads of value groups: wall time, step, summary length.
    gv = np.flatnonzero(g_value)
    if len(gv):
        pv = p[gv]
        out[pv] = _WALL
        windows(out, 8, writeable=True)[pv + 1] = \
            e.wall[first[gv]].astype("<f8").view(np.uint8).reshape(-1, 8)
        out[pv + 9] = _STEP
        write_varints(out, pv + 10, g_step[gv], step_w[gv])
        q = pv + 10 + step_w[gv]
        out[q] = _SUMMARY
        write_varints(out, q + 1, summary_len[gv], sum_w[gv])

    # Where each entry's piece starts: after its event's head and the earlier pieces.
    before = np.cumsum(piece) - piece
    piece_start = p[gid] + head[gid] + before - before[first][gid]
    data_start = piece_start.copy()
    vi = np.flatnonzero(is_value)
    if len(vi):
        out[piece_start[vi]] = _VALUE
        write_varints(out, piece_start[vi] + 1, lengths[vi], lw[vi])
        data_start[vi] += 1 + lw[vi]
    scatter(e.data, e.offs[:-1], lengths, out, data_start)

    _fill_payload_crcs(out, p, payload_len)
    return out.tobytes()


def _frame_single_values(e: Entries, length: int) -> bytes:
    """Same bytes as the general path for one value of one length per event (a scalar column).

    Such records differ only in wall time, step and value, so each step width's
    records are built as one matrix from a template row.
    """
    n = len(e)
    widths = varint_widths(e.step)
    rec_lens = np.empty(n, np.int64)
    plans = []
    for w in np.unique(widths).tolist():
        template = _value_record_start(bytes(8), bytes(w), length)
        payload_len = len(template) - records.HEADER + length
        sel = np.flatnonzero(widths == w)
        rec_lens[sel] = records.HEADER + payload_len + records.FOOTER
        plans.append((w, sel, template, payload_len))
    rec_start = starts_of(rec_lens)
    out = np.empty(int(rec_start[-1] + rec_lens[-1]), np.uint8)
    values = e.data.reshape(n, length)
    p = records.HEADER
    for w, sel, template, payload_len in plans:
        mat = np.empty((len(sel), records.HEADER + payload_len + records.FOOTER), np.uint8)
        mat[:, :len(template)] = np.frombuffer(template, np.uint8)
        mat[:, p + 1:p + 9] = e.wall[sel].astype("<f8").view(np.uint8).reshape(-1, 8)
        u = e.step[sel].view(np.uint64)
        for j in range(w):
            byte = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
            mat[:, p + 10 + j] = byte | (0x80 if j < w - 1 else 0)
        mat[:, len(template):len(template) + length] = values[sel]
        crcs = records.crc32c_rows(mat[:, p:p + payload_len])
        mat[:, -4:] = records.mask(crcs).astype("<u4").view(np.uint8).reshape(-1, 4)
        if len(plans) == 1:
            return mat.tobytes()
        windows(out, mat.shape[1], writeable=True)[rec_start[sel]] = mat
    return out.tobytes()


def _fill_payload_crcs(out: np.ndarray, p: np.ndarray, payload_len: np.ndarray) -> None:
    crcs = np.empty(len(p), np.uint32)
    uniq, inverse, counts = np.unique(payload_len, return_inverse=True, return_counts=True)
    for u, (length, count) in enumerate(zip(uniq.tolist(), counts.tolist(), strict=True)):
        sel = np.flatnonzero(inverse == u) if len(uniq) > 1 else np.arange(len(p))
        if count >= _ROWS_CRC and length <= 4096:
            crcs[sel] = records.crc32c_rows(windows(out, length)[p[sel]])
        else:
            for j, start in zip(sel.tolist(), p[sel].tolist(), strict=True):
                crcs[j] = crc32c(out[start:start + length])
    windows(out, 4, writeable=True)[p + payload_len] = \
        records.mask(crcs).astype("<u4").view(np.uint8).reshape(-1, 4)


def _large_alone(e: Entries) -> np.ndarray:
    """Indices of the values of at least LARGE_VALUE_BYTES that are alone in their event."""
    large = np.flatnonzero(e.lengths >= LARGE_VALUE_BYTES)
    if not len(large):
        return large
    starts = np.append(group_starts(e), True)
    return large[(e.kind[large] == VALUE) & starts[large] & starts[large + 1]]


def _value_record_start(wall: bytes, step: bytes, length: int) -> bytes:
    """The start of the record of an event holding one value of ``length`` bytes: the
    record's header and its checksum, then the event up to the value (``wall``, ``step``:
    the fields' encoded bytes)."""
    piece = bytes([_VALUE]) + varint(length)
    head = bytes([_WALL]) + wall + bytes([_STEP]) + step + bytes([_SUMMARY]) \
        + varint(len(piece) + length) + piece
    header = struct.pack("<Q", len(head) + length)
    return header + struct.pack("<I", records.masked_crc32c(header)) + head


def _write_large_value(e: Entries, i: int, write) -> None:
    """Entry ``i`` (a value alone in its event) framed as :func:`frame_entries` frames it,
    in pieces that leave the value where it is."""
    start = _value_record_start(e.wall[i:i + 1].astype("<f8").tobytes(),
                                varint(int(e.step[i])), int(e.lengths[i]))
    value = memoryview(e.data[int(e.offs[i]):int(e.offs[i + 1])])
    write(start)
    write(value)
    head_crc = crc32c(start[records.HEADER:])
    write(struct.pack("<I", records.masked_crc32c_from_raw(crc32c(value, head_crc))))


class EventStream:
    """Frames ordered entries fed in pieces exactly as if they came in one piece.

    The last (possibly unfinished) event of each piece waits for the next one. An event
    may gather the pieces of many feeds (the first values of many tags, at one step and
    time): they wait as a short stack of parts, merged as it grows, so that gathering n
    entries costs n log n, not n squared.
    """

    def __init__(self, write) -> None:
        self.write = write
        self._parts: list[Entries] = []   # the waiting event, in order; none empty

    @property
    def carry(self) -> Entries:
        """The entries waiting for the next piece."""
        return Entries.concat(self._parts)

    def _wait(self, e: Entries) -> None:
        parts = self._parts
        parts.append(e)
        while len(parts) > 1 and len(parts[-1]) >= len(parts[-2]):
            top = parts.pop()
            parts[-1] = Entries.concat([parts[-1], top])

    def feed(self, e: Entries) -> None:
        if not len(e):
            return
        starts = group_starts(e)
        if self._parts:
            if _continues(self._parts[-1], e):
                starts[0] = False   # e's first entries finish the waiting event
            else:
                self._put(self.carry)
                self._parts = []
        begins = np.flatnonzero(starts)
        if not len(begins):
            self._wait(e)
            return
        first, last = int(begins[0]), int(begins[-1])
        if self._parts:
            self._put(Entries.concat(self._parts + [e.slice(0, first)]))
        if last > first:
            self._put(e.slice(first, last))
        self._parts = [e.slice(last, len(e))]

    def _put(self, e: Entries) -> None:
        """Write whole events ``e``, each large value alone in its event apart."""
        a, n = 0, len(e)
        for i in _large_alone(e).tolist():
            if i > a:
                self.write(frame_entries(e.slice(a, i)))
            _write_large_value(e, i, self.write)
            a = i + 1
        if a < n:
            self.write(frame_entries(e.slice(a, n) if a else e))

    def finish(self) -> None:
        if self._parts:
            self._put(self.carry)
        self._parts = []


def _continues(before: Entries, after: Entries) -> bool:
    """Whether ``after``'s first entry joins the event of ``before``'s last one (as
    :func:`group_starts` tells it of the two side by side)."""
    i = len(before) - 1
    return bool(before.kind[i] == VALUE and after.kind[0] == VALUE
                and before.step[i] == after.step[0]
                and before.wall[i:i + 1].view(np.int64)[0] == after.wall[:1].view(np.int64)[0]
                and after.tag[0] > before.tag[i])
