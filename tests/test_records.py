"""Record framing and CRC-32C against the specification's test vectors."""

import numpy as np

from tbconvert.formats.tfevents import records


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
    assert [buf[s:s + n] for s, n in zip(starts, lengths)][2] == b"payload-2"


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
    payloads = [bytes(buf[s:s + n]) for s, n in zip(starts, lengths)]
    assert payloads == [b"payload-0", b"payload-2", b"payload-3", b"payload-4"]
    assert [d.reason for d in damage] == ["bad payload checksum"]


def test_scan_bad_length_resyncs_to_next_record():
    buf = bytearray(_file())
    second = len(records.frame(b"payload-0"))
    buf[second + 3] ^= 0xFF  # the length of record 1: framing lost until the next record
    starts, lengths, damage = records.scan(bytes(buf))
    payloads = [bytes(buf[s:s + n]) for s, n in zip(starts, lengths)]
    assert payloads == [b"payload-0", b"payload-2", b"payload-3", b"payload-4"]
    assert damage[0].reason == "bad length checksum"


def test_scan_garbage_between_records_and_huge_length():
    garbage = b"\xff" * 8 + b"\x00" * 50  # a length field of 2**64-1
    buf = records.frame(b"a") + garbage + records.frame(b"b")
    starts, lengths, damage = records.scan(buf)
    assert [buf[s:s + n] for s, n in zip(starts, lengths)] == [b"a", b"b"]
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
    for width in (0, 1, 3, 4, 5, 31, 64):
        rows = rng.integers(0, 256, (50, width), dtype=np.uint8)
        assert records.crc32c_rows(rows).tolist() == [crc32c(r.tobytes()) for r in rows]
