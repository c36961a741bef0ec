"""Record framing and CRC-32C against the published test vectors."""

import os
import struct
import time
import tracemalloc

import numpy as np
import pytest
from helpers import FUZZ, on_path
from hypothesis import given, settings
from hypothesis import strategies as st

from tbconvert.formats.tfevents import records

on_path(FUZZ)
import blockscan  # noqa: E402


def test_masked_crc_vectors():
    assert records.masked_crc32c(b"123456789") == 0xC78AB0E5
    assert records.masked_crc32c(bytes(32)) == 0x0FD7FFFA
    assert records.masked_crc32c(bytes([0x1A, 0x11]) + b"CRC test, one two") == 0x5794D08A


def test_vectorised_mask_matches_scalar():
    from crc32c import crc32c
    data = [b"a", b"hello", bytes(range(200))]
    raw = np.array([crc32c(d) for d in data], dtype=np.uint32)
    assert records.mask(raw).tolist() == [records.masked_crc32c(d) for d in data]


def test_frame_worked_examples():
    from tensorboard.compat.proto import event_pb2
    ev = event_pb2.Event(wall_time=1563406522.0, file_version="brain.Event:2")
    rec = records.frame(ev.SerializeToString())
    assert rec.hex() == ("1800000000000000" "a37f4b22" "090000802eec4bd741"
                         "1a0d627261696e2e4576656e743a32" "1449f1da")
    ev2 = event_pb2.Event(wall_time=1563406523.0, step=5)
    ev2.summary.value.add(tag="loss", simple_value=0.25)
    rec2 = records.frame(ev2.SerializeToString())
    assert rec2.hex() == ("1a00000000000000" "129bd82d" "090000c02eec4bd741" "1005"
                          "2a0d0a0b0a046c6f737315" "0000803e" "bbeea4f8")


def _file(n=5):
    return b"".join(records.frame(f"payload-{i}".encode()) for i in range(n))


def test_scan_clean():
    buf = _file()
    starts, lengths, damage = records.scan(buf)
    assert len(starts) == 5 and not damage
    assert [buf[s:s + n] for s, n in zip(starts, lengths, strict=True)][2] == b"payload-2"


def test_scan_truncated_tail_costs_only_last_record():
    buf = _file()
    for cut in range(1, len(records.frame(b"payload-4"))):
        starts, _, damage = records.scan(buf[:-cut])
        assert len(starts) == 4
        assert damage and damage[-1].reason == "truncated record"


def test_scan_bad_payload_crc_costs_one_record():
    buf = bytearray(_file())
    second = len(records.frame(b"payload-0"))
    buf[second + 14] ^= 0x01  # inside payload-1
    starts, lengths, damage = records.scan(bytes(buf))
    payloads = [bytes(buf[s:s + n]) for s, n in zip(starts, lengths, strict=True)]
    assert payloads == [b"payload-0", b"payload-2", b"payload-3", b"payload-4"]
    assert [d.reason for d in damage] == ["bad payload checksum"]


def test_scan_bad_length_resyncs_to_next_record():
    buf = bytearray(_file())
    second = len(records.frame(b"payload-0"))
    buf[second + 3] ^= 0xFF  # the length of record 1: framing lost until the next record
    starts, lengths, damage = records.scan(bytes(buf))
    payloads = [bytes(buf[s:s + n]) for s, n in zip(starts, lengths, strict=True)]
    assert payloads == [b"payload-0", b"payload-2", b"payload-3", b"payload-4"]
    assert damage[0].reason == "bad length checksum"


def test_scan_garbage_between_records_and_huge_length():
    garbage = b"\xff" * 8 + b"\x00" * 50  # a length field of 2**64-1
    buf = records.frame(b"a") + garbage + records.frame(b"b")
    starts, lengths, damage = records.scan(buf)
    assert [buf[s:s + n] for s, n in zip(starts, lengths, strict=True)] == [b"a", b"b"]
    assert sum(d.length for d in damage) == len(garbage)


def test_scan_random_bytes_never_raises():
    rng = np.random.default_rng(0)
    for size in (0, 1, 11, 12, 100, 5000):
        starts, _, damage = records.scan(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        assert len(starts) == 0
        assert (size == 0) == (not damage)


def test_bulk_crc_matches_c_crc():
    from crc32c import crc32c
    rng = np.random.default_rng(3)
    # few rows, many rows of few bytes (the column loop), one wide row (a large image), and
    # rows that are a strided view
    for n, width in [(50, w) for w in (0, 1, 3, 4, 5, 31, 64)] + [(2000, 7), (3000, 64),
                                                                    (1, 1 << 20), (3, 40_001)]:
        rows = rng.integers(0, 256, (n, width), dtype=np.uint8)
        assert records.crc32c_rows(rows).tolist() == [crc32c(r.tobytes()) for r in rows]
        view = rows[:, 1:] if width > 1 else rows
        assert records.crc32c_rows(view).tolist() == [crc32c(r.tobytes()) for r in view]


@given(st.integers(1, 120), st.integers(1, 60), st.data())
@settings(max_examples=100, deadline=None)
def test_bulk_crc_of_rows_alike_but_for_a_few_bytes_matches_c_crc(width, n, data):
    """Rows of one layout (a template with a few bytes that vary, as wall time, step and
    value do in events), the first row's CRC corrected by what their differing bytes add."""
    from crc32c import crc32c
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    rows = np.tile(rng.integers(0, 256, width, dtype=np.uint8), (n, 1))
    varying = data.draw(st.lists(st.integers(0, width - 1), max_size=max(1, width // 3)))
    for j in varying:
        rows[:, j] = rng.integers(0, 256, n, dtype=np.uint8)
    assert records.crc32c_rows(rows).tolist() == [crc32c(r.tobytes()) for r in rows]


def test_reset_value_brings_the_crc_register_back():
    from crc32c import crc32c
    rng = np.random.default_rng(5)
    for size in (0, 1, 7, 8, 60, 1000):
        m, after = rng.bytes(size), rng.bytes(9)
        slot = struct.pack("<I", ~crc32c(m) & 0xFFFFFFFF ^ records._RESET)
        assert crc32c(m + slot) == 0
        assert crc32c(m + slot + after) == crc32c(after)


def _framed(payloads) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    buf = b"".join(records.frame(p) for p in payloads)
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    ends = np.cumsum(lengths + records.HEADER + records.FOOTER)
    starts = ends - lengths - records.FOOTER
    return np.frombuffer(bytearray(buf), dtype=np.uint8), starts, lengths


def _valid_prefix(data, starts, lengths) -> int:
    return records._valid_prefix(data, memoryview(data), starts, lengths)


@given(st.lists(st.binary(max_size=80), min_size=1, max_size=40), st.data())
@settings(max_examples=300, deadline=None)
def test_span_check_finds_what_record_by_record_checks_find(payloads, data):
    """Damage anywhere (one byte or the same byte in several records): the first damaged
    record is the one the record-by-record check finds."""
    buf, starts, lengths = _framed(payloads)
    where = data.draw(st.lists(st.integers(0, len(buf) - 1), max_size=3))
    flip = data.draw(st.integers(1, 255))
    same = data.draw(st.booleans())
    for pos in where:
        buf[pos] ^= flip
    if same and len(payloads) > 1:
        # the same change at the same place of another record of the same length
        k = data.draw(st.integers(0, len(payloads) - 1))
        twins = np.flatnonzero(lengths == lengths[k])
        rel = data.draw(st.integers(-records.HEADER, int(lengths[k]) + records.FOOTER - 1))
        for t in twins[:3]:
            buf[starts[t] + rel] ^= flip
    expected = records._checked_prefix(buf, memoryview(buf), starts, lengths)
    assert _valid_prefix(buf, starts, lengths) == expected


@given(st.lists(st.integers(0, 30), min_size=1, max_size=5), st.integers(60, 140),
       st.lists(st.integers(0, 30), max_size=3), st.data())
@settings(max_examples=150, deadline=None)
def test_span_check_of_repeating_lengths_finds_what_record_by_record_checks_find(
        pattern, periods, odd, data):
    """Records whose lengths repeat (read as a matrix of periods) with others around them."""
    lengths = odd + pattern * periods + odd[::-1]
    payloads = [bytes([i % 251]) * k for i, k in enumerate(lengths)]
    buf, starts, lengths = _framed(payloads)
    assert records._periodic_stretches(lengths) or periods < records._MIN_PERIODS + 2
    assert _valid_prefix(buf, starts, lengths) == len(payloads)
    for pos in data.draw(st.lists(st.integers(0, len(buf) - 1), max_size=2)):
        buf[pos] ^= data.draw(st.integers(1, 255))
    expected = records._checked_prefix(buf, memoryview(buf), starts, lengths)
    assert _valid_prefix(buf, starts, lengths) == expected


def test_span_check_catches_two_records_damaged_alike(monkeypatch):
    payloads = [b"x" * 40] * 6
    buf, starts, lengths = _framed(payloads)
    assert _valid_prefix(buf, starts, lengths) == 6
    for k in (2, 4):                 # the same bit in two records: a plain XOR would cancel
        buf[starts[k] + 7] ^= 0x10
    assert _valid_prefix(buf, starts, lengths) == 2
    monkeypatch.setattr(records, "_SPAN_MAX", 130)   # spans of two records each
    assert _valid_prefix(buf, starts, lengths) == 2
    buf, starts, lengths = _framed(payloads)
    assert _valid_prefix(buf, starts, lengths) == 6


# --- damage inside records, forged prefixes ------------------------------------------------


def _event_record(tag: str, step: int) -> bytes:
    from tensorboard.compat.proto import event_pb2
    ev = event_pb2.Event(wall_time=1.0 + step, step=step)
    ev.summary.value.add(tag=tag, simple_value=float(step))
    return records.frame(ev.SerializeToString())


_payloads = blockscan.payloads


def _text_record_holding(inner: bytes, broken: bool) -> bytes:
    """A text-summary record whose string holds the bytes of a complete framed event."""
    from tensorboard.compat.proto import event_pb2
    ev = event_pb2.Event(wall_time=5.0, step=5)
    ev.summary.value.add(tag="notes", tensor=dict(dtype=7, string_val=[b"<" + inner + b">"]))
    rec = bytearray(records.frame(ev.SerializeToString()))
    if broken:
        rec[-1] ^= 0xFF            # the payload CRC no longer matches
    return bytes(rec)


@pytest.mark.parametrize("where", ["middle", "last"])
def test_no_point_invented_from_inside_a_damaged_record(where):
    inner = _event_record("ghost", 99)
    before = [_event_record("loss", i) for i in range(3)]
    after = [_event_record("loss", i) for i in range(6, 9)] if where == "middle" else []
    buf = b"".join(before) + _text_record_holding(inner, broken=True) + b"".join(after)
    starts, lengths, damage = records.scan(buf)
    got = _payloads(buf, starts, lengths)
    assert inner[records.HEADER:-records.FOOTER] not in got
    assert got == [r[records.HEADER:-records.FOOTER] for r in before + after]
    assert [d.reason for d in damage] == ["bad payload checksum"]


def test_forged_length_landing_on_a_record_still_finds_the_records_it_covers():
    recs = [_event_record("loss", i) for i in range(8)]
    # record 2's length now claims records 2..5, ending exactly where record 6 starts
    span = sum(len(r) for r in recs[2:6]) - records.HEADER - records.FOOTER
    head = struct.pack("<Q", span)
    buf = bytearray(b"".join(recs))
    o = len(recs[0]) + len(recs[1])
    buf[o:o + 12] = head + struct.pack("<I", records.masked_crc32c(head))
    starts, lengths, damage = records.scan(bytes(buf))
    got = _payloads(buf, starts, lengths)
    assert got == [r[12:-4] for i, r in enumerate(recs) if i != 2]
    assert len(damage) == 1 and damage[0].offset == o and damage[0].length == len(recs[2])


def test_spliced_file_truncated_record_then_appended_records():
    """A crash cut record 3 short, then a writer appended records: the claimed length runs
    past the end of the file, and the appended records are a chain to the end of the file."""
    recs = [_event_record("loss", i) for i in range(4)]
    appended = [_event_record("acc", i) for i in range(5)]
    buf = b"".join(recs[:3]) + recs[3][:20] + b"".join(appended)
    starts, lengths, damage = records.scan(buf)
    got = _payloads(buf, starts, lengths)
    assert got == [r[12:-4] for r in recs[:3] + appended]
    assert len(damage) == 1 and damage[0].length == 20


def test_embedded_event_in_a_truncated_last_record_is_not_read():
    inner = _event_record("ghost", 99)
    text = _text_record_holding(inner, broken=False)
    cut = text[:text.index(inner) + len(inner) + 2]       # the file ends inside the text
    buf = _event_record("loss", 0) + cut
    starts, lengths, damage = records.scan(buf)
    assert _payloads(buf, starts, lengths) == [_event_record("loss", 0)[12:-4]]
    assert [d.reason for d in damage] == ["truncated record"]


def test_forged_prefix_of_one_mib_costs_nothing_after_it():
    """A MiB of forged headers with correct CRCs, each claiming a different long length
    (random, into the intact records, past the end): every intact record after it is found,
    in time linear in the size."""
    rng = np.random.default_rng(5)
    tail = b"".join(_event_record("loss", i) for i in range(200))
    size = 1 << 20
    out = bytearray()
    while len(out) + 12 <= size:
        length = int(rng.integers(0, size + len(tail)))
        head = struct.pack("<Q", length)
        out += head + struct.pack("<I", records.masked_crc32c(head))
    buf = bytes(out) + tail
    t0 = time.perf_counter()
    starts, lengths, damage = records.scan(buf)
    elapsed = time.perf_counter() - t0
    assert len(starts) == 200
    assert sum(d.length for d in damage) == len(out)
    assert elapsed < 10


def test_zeros_and_random_bytes_are_scanned_fast():
    """Zeros pass at memory speed (about 600 MB/s here; byte-wise candidate checks ran at
    26 MB/s), random bytes at several hundred MB/s."""
    rng = np.random.default_rng(1)
    for junk, limit in ((bytes(96 << 20), 3), (rng.bytes(32 << 20), 4)):
        t0 = time.perf_counter()
        starts, _, damage = records.scan(junk + records.frame(b"end"))
        assert len(starts) == 1 and damage[0].length == len(junk)
        assert time.perf_counter() - t0 < limit


# --- scan_file: bounded blocks, holes, huge records -----------------------------------------

def _blocks_as_scan(path, **kw):
    found = blockscan.in_blocks(path, **kw)
    return found.payloads, found.damage


def _merged(damage):
    out = []
    for off, length in sorted(damage):
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + length)
        else:
            out.append((off, length))
    return out


@pytest.mark.parametrize("block_size,lookahead", [
    (320, None), (500, None), (1000, None), (4096, None), (1 << 20, None),
    # lookahead shorter than the block, and than some records: blocks end earlier
    (1000, 40), (1000, 320), (4096, 500)])
def test_scan_file_blocks_find_what_scan_finds(tmp_path, monkeypatch, block_size, lookahead):
    """Records up to 316 bytes, damage and garbage anywhere: blocks change nothing."""
    if lookahead is not None:
        monkeypatch.setattr(records, "LOOKAHEAD", lookahead)
    rng = np.random.default_rng(block_size + (lookahead or 0))
    parts = []
    for i in range(300):
        parts.append(records.frame(rng.bytes(int(rng.integers(0, 300)))))
        if i % 37 == 5:
            parts.append(rng.bytes(int(rng.integers(1, 90))))     # garbage between records
    buf = bytearray(b"".join(parts))
    for p in rng.integers(0, len(buf), 6).tolist():
        buf[p] ^= 0x10
    _blocks_find_what_scan_finds(tmp_path, bytes(buf), block_size)


def _blocks_find_what_scan_finds(tmp_path, buf: bytes, block_size: int):
    """The file of ``buf`` read in blocks gives the records and damage one scan gives; the
    file's path."""
    path = tmp_path / "events.out.tfevents.1.x"
    path.write_bytes(buf)
    starts, lengths, damage = records.scan(buf)
    payloads, bdamage = _blocks_as_scan(path, block_size=block_size)
    assert payloads == _payloads(buf, starts, lengths)
    assert sum(n for _, n in bdamage) == sum(d.length for d in damage)
    return path


@pytest.mark.parametrize("block_size", [4096, 20_000, 1 << 20])
def test_scan_file_blocks_of_wide_records_find_what_scan_finds(tmp_path, block_size):
    """Records of a few hundred bytes each (histograms, images) are read in blocks of twice
    the size; damage and garbage anywhere: blocks change nothing."""
    rng = np.random.default_rng(block_size)
    parts = [records.frame(rng.bytes(int(rng.integers(300, 1500)))) for _ in range(400)]
    for k in sorted(rng.integers(20, 400, 4).tolist(), reverse=True):
        parts.insert(k, rng.bytes(int(rng.integers(1, 90))))
    buf = bytearray(b"".join(parts))
    for p in rng.integers(len(buf) // 10, len(buf), 6).tolist():
        buf[p] ^= 0x10
    buf = bytes(buf)
    assert records._wide_records(buf[:records._PROBE])
    path = _blocks_find_what_scan_finds(tmp_path, buf, block_size)
    first = next(records.scan_file(path, block_size=block_size))
    assert first.end > block_size or first.end >= len(buf)     # a wide block


@pytest.mark.parametrize("lengths, wide", [
    ([20] + [800] * 30, True),            # a file version record, then histograms
    ([20] + [40] * 500, False),           # scalars
    ([20] + [800] * 5, False),            # too few records to tell
    ([20] + [100_000] * 8, False),        # events of thousands of values
])
def test_wide_records_are_told_by_their_length_fields(lengths, wide):
    head = b"".join(records.frame(bytes(n)) for n in lengths)[:records._PROBE]
    assert records._wide_records(head) == wide
    # a length field of garbage ends the guess there
    assert not records._wide_records(struct.pack("<Q", 1 << 40) + head)


def test_scan_file_reads_a_record_larger_than_the_block(tmp_path):
    big = os.urandom(3 << 20)
    buf = records.frame(b"a") + records.frame(big) + records.frame(b"b")
    path = tmp_path / "events.out.tfevents.1.big"
    path.write_bytes(buf)
    payloads, damage = _blocks_as_scan(path, block_size=1 << 16)
    assert payloads == [b"a", big, b"b"] and not damage


def test_scan_file_skips_a_huge_claim_without_holding_it(tmp_path):
    """A correct header claiming 64 MiB that lines up with the next record but whose payload
    is garbage: checked by streaming, skipped whole, never held in memory."""
    size = 64 << 20
    head = struct.pack("<Q", size)
    path = tmp_path / "events.out.tfevents.1.claim"
    with open(path, "wb") as f:
        f.write(records.frame(b"a") + head + struct.pack("<I", records.masked_crc32c(head)))
        f.seek(size + 4, os.SEEK_CUR)
        f.write(records.frame(b"b"))
    tracemalloc.start()
    try:
        payloads, damage = _blocks_as_scan(path, block_size=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert payloads == [b"a", b"b"]
    assert peak < 24 << 20
    assert sum(n for _, n in damage) == size + 16


def test_sparse_gib_file_is_quick_and_small(tmp_path):
    path = tmp_path / "events.out.tfevents.1.sparse"
    with open(path, "wb") as f:
        f.write(records.frame(b"first"))
        f.truncate(1 << 30)
        f.seek((1 << 30) - 4096)
        f.write(records.frame(b"last"))
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        payloads, damage = _blocks_as_scan(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert payloads == [b"first", b"last"]
    assert time.perf_counter() - t0 < 20
    assert peak < 200 << 20
    total = len(records.frame(b"first")) + sum(n for _, n in damage) + len(records.frame(b"last"))
    assert total == os.path.getsize(path)


def test_a_file_cut_short_while_read_is_told_so_not_as_a_hole(tmp_path):
    """The file was longer when it was opened (its size taken then): what is missing is
    told as cut off, where a hole at the end of a sparse file keeps the file's size."""
    path = tmp_path / "events.out.tfevents.1.cut"
    path.write_bytes(records.frame(b"first") + records.frame(b"second"))
    kept = len(records.frame(b"first"))
    with open(path, "rb+") as f:
        size = os.fstat(f.fileno()).st_size
        f.truncate(kept)
        blocks = list(records._blocks(f.fileno(), size, 1 << 16, records.MAX_RECORD))
    damage = [d for b in blocks for d in b.damage]
    assert [d.reason for d in damage] == [f"the file was cut to {kept} bytes while it was read"]
    assert (damage[0].offset, damage[0].length) == (kept, size - kept)


def test_hole_inside_a_valid_record_is_read(tmp_path):
    """A copy made with ``cp --sparse=always`` turns zero runs inside payloads into holes."""
    payload = b"x" + bytes(1 << 20) + b"y"
    path = tmp_path / "events.out.tfevents.1.holey"
    rec = records.frame(payload)
    with open(path, "wb") as f:
        f.write(rec[:4096 * 2])
        f.seek(len(rec) - 4096 * 2)
        f.write(rec[-4096 * 2:])
        f.write(records.frame(b"z"))
    payloads, damage = _blocks_as_scan(path, block_size=1 << 16)
    assert payloads == [payload, b"z"] and not damage


def test_scan_file_refuses_a_fifo(tmp_path):
    from tbconvert import sourcefiles
    fifo = tmp_path / "events.out.tfevents.1.fifo"
    os.mkfifo(fifo)
    with pytest.raises(sourcefiles.NotRegularFile):
        list(records.scan_file(fifo))


def test_scan_file_forged_prefix_claiming_past_the_end(tmp_path):
    """Forged headers whose claims run past the end of the file are not record boundaries,
    so they never stand in for the end of the file: the records after them are found."""
    rng = np.random.default_rng(9)
    size = 1 << 20
    out = bytearray()
    while len(out) + 12 <= size:
        head = struct.pack("<Q", int(rng.integers(0, 2 * size)))
        out += head + struct.pack("<I", records.masked_crc32c(head))
    tail = [records.frame(b"after-%d" % i) for i in range(100)]
    path = tmp_path / "events.out.tfevents.1.forged"
    path.write_bytes(bytes(out) + b"".join(tail))
    payloads, damage = _blocks_as_scan(path, block_size=1 << 18)
    assert payloads == [b"after-%d" % i for i in range(100)]
    assert sum(n for _, n in damage) == len(out)


@pytest.mark.parametrize("block_size", [96, 128, 200])
def test_scan_file_spliced_chain_ending_in_a_cut_record(tmp_path, block_size):
    """A record cut short, records appended after it, and the last of them cut short too:
    the appended chain runs to the end of the file, in blocks as in one piece."""
    first = [records.frame(b"a%02d" % i * 8) for i in range(3)]
    cut = records.frame(b"c" * 300)[:40]
    appended = [records.frame(b"b%02d" % i * 8) for i in range(5)]
    last = records.frame(b"z" * 200)[:60]
    buf = b"".join(first) + cut + b"".join(appended) + last
    path = tmp_path / "events.out.tfevents.1.splice"
    path.write_bytes(buf)
    starts, lengths, _ = records.scan(buf)
    whole = _payloads(buf, starts, lengths)
    assert whole == [r[12:-4] for r in first + appended]
    payloads, _ = _blocks_as_scan(path, block_size=block_size)
    assert payloads == whole


def test_scan_file_judges_a_claim_of_up_to_two_blocks_as_a_whole_file_scan(tmp_path):
    """A forged length over intact records, claiming more than a block (but not more than a
    block and its lookahead): the records it covers are found in blocks too."""
    inner = [records.frame(b"event %03d " % i + b"x" * 24) for i in range(14)]
    forged = sum(len(r) for r in inner[4:12]) - records.FOOTER
    head = struct.pack("<Q", forged)
    head += struct.pack("<I", records.masked_crc32c(head))
    prefix = b"".join(inner[:4])
    data = prefix + head + b"".join(inner[4:])
    claim = len(head) + forged + records.FOOTER
    assert 256 < claim <= 512                                     # between one and two blocks
    assert len(prefix) < 256 < 512 < len(prefix) + claim          # and crosses the first read
    path = tmp_path / "events.out.tfevents.1.x"
    path.write_bytes(data)
    whole = blockscan.whole_file(data)
    assert len(whole) == 14
    assert blockscan.in_blocks(path, block_size=256).payloads == whole


def test_a_record_longer_than_a_span_is_checked_in_place(monkeypatch):
    """A record past the span size (a large graph) is checked where it lies, never copied."""
    payloads = [bytes(300), b"small", bytes(250)]
    buf, starts, lengths = _framed(payloads)
    monkeypatch.setattr(records, "_SPAN_MAX", 100)
    copied = []
    real = records._span_ok
    monkeypatch.setattr(records, "_span_ok", lambda *a: copied.append(a) or real(*a))
    assert _valid_prefix(buf, starts, lengths) == 3
    assert not copied
    buf[starts[2] + 9] ^= 1
    assert _valid_prefix(buf, starts, lengths) == 2
