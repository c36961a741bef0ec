"""Bad, hostile and damaged input: seeded fuzzing of event files and exports.

Every case must end without a traceback (only :class:`TbconvertError` may
escape, and for event files nothing at all), without a hang (each case runs
under an alarm), without a huge allocation from a length field, with every
intact record still recovered and the damage reported with the file's name.
The other promises (no escape, no damage, clear words) are tested in
``test_robustness_cli.py``.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import pickle
import re
import shutil
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES
from limits import deadline

import tbconvert
from tbconvert.errors import TbconvertError, UnsupportedError
from tbconvert.formats.base import Options
from tbconvert.formats.tfevents import records
from tbconvert.formats.tfevents.reader import TfeventsReader
from tbconvert.report import Report

EVENT_FILES = {
    "tbx_run_b": FIXTURES / "tensorboardx_logdir/run_b/events.out.tfevents.1795299215.vm",
    "tf2_legacy": FIXTURES / "tf2_logdir/legacy_raw_pb/events.out.tfevents.1795299217.vm.18459.5.v2",
    "torch_train": FIXTURES / "torch_logdir/train/events.out.tfevents.1795299211.vm.18436.0",
}
EXPORT = next((FIXTURES / "tbdev_export").glob("experiment_*"))


# --------------------------------------------------------------------------------------------
# Event files: record-level mutations
# --------------------------------------------------------------------------------------------

def _event_cls():
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event


class Original:
    """An event file's records: where each one is and which points it carries."""

    def __init__(self, path: Path) -> None:
        self.buf = path.read_bytes()
        starts, lengths, damage = records.scan(self.buf)
        assert not damage
        self.offsets = (starts - records.HEADER).tolist()
        self.sizes = (lengths + records.HEADER + records.FOOTER).tolist()
        self.ends = [o + s for o, s in zip(self.offsets, self.sizes, strict=True)]
        assert self.ends[-1] == len(self.buf)
        self.tags: list[collections.Counter] = []
        cls = _event_cls()
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
            ev = cls.FromString(self.buf[s:s + n])
            c = collections.Counter()
            what = ev.WhichOneof("what")
            if what == "summary":
                for v in ev.summary.value:
                    if v.WhichOneof("value") is not None:
                        c[v.tag or v.node_name] += 1
            elif what == "graph_def":
                c["__run_graph__"] += 1
            elif what == "tagged_run_metadata":
                c[ev.tagged_run_metadata.tag] += 1
            self.tags.append(c)

    def record(self, i: int) -> bytes:
        return self.buf[self.offsets[i]:self.ends[i]]

    def untouched(self, lo: int, hi: int) -> list[int]:
        """Records that share no byte with ``[lo, hi)``."""
        return [i for i, (o, e) in enumerate(zip(self.offsets, self.ends, strict=True)) if e <= lo or o >= hi]

    def expected(self, intact) -> collections.Counter:
        total = collections.Counter()
        for i in intact:
            total.update(self.tags[i])
        return total


def _mutations(orig: Original, other: Original, rng: np.random.Generator, stride: int = 1):
    """Yield ``(kind, mutated bytes, indices of intact records, damage must be reported)``.

    Deterministic cases first (truncation at every boundary and inside every
    record, huge lengths on every record), then seeded random ones.
    """
    buf = orig.buf
    n = len(buf)
    everything = list(range(len(orig.offsets)))
    # truncation at every record boundary: a clean end, nothing to report
    for k, end in enumerate(orig.ends):
        yield "cut_boundary", buf[:end], everything[:k + 1], False
    yield "empty", b"", [], False
    # truncation inside every record, at several offsets (header, length CRC, payload, data CRC)
    for k, (o, size) in list(enumerate(zip(orig.offsets, orig.sizes, strict=True)))[::stride]:
        for inside in sorted({1, 7, 8, 11, 12, 13, size // 2, size - 4, size - 1}):
            if 0 < inside < size:
                yield "cut_inside", buf[:o + inside], everything[:k], True
    # huge and garbage length fields, with and without a correct length CRC
    for o in list(orig.offsets)[::stride]:
        for length in (0xFFFFFFFFFFFFFFFF, 1 << 62, n, int(rng.integers(0, 1 << 40))):
            head = struct.pack("<Q", length)
            for good_crc in (False, True):
                crc = struct.pack("<I", records.masked_crc32c(head)) if good_crc else buf[o + 8:o + 12]
                m = buf[:o] + head + crc + buf[o + 12:]
                yield "length", m, orig.untouched(o, o + 12), True
    # a forged length with a correct CRC that spans the following records
    for k, o in list(enumerate(orig.offsets[:-2]))[::stride]:
        span = orig.ends[min(k + 3, len(orig.ends) - 1)] - o - records.HEADER - records.FOOTER
        head = struct.pack("<Q", span)
        m = buf[:o] + head + struct.pack("<I", records.masked_crc32c(head)) + buf[o + 12:]
        yield "forged_length", m, orig.untouched(o, o + 12), True
    # deleting and duplicating whole records: every remaining record is intact
    for k in range(0, len(orig.offsets), stride):
        m = buf[:orig.offsets[k]] + buf[orig.ends[k]:]
        yield "drop_record", m, [i for i in everything if i != k], False
    # random cases
    for _ in range(600):
        kind = rng.choice(["flip", "flips", "overwrite", "zeros", "insert", "splice", "replace",
                           "swap_crc", "shuffle"])
        if kind in ("flip", "flips"):
            m = bytearray(buf)
            pos = rng.integers(0, n, 1 if kind == "flip" else int(rng.integers(2, 6)))
            for p in pos.tolist():
                m[p] ^= 1 << int(rng.integers(0, 8))
            lo, hi = int(pos.min()), int(pos.max()) + 1
            touched = {i for i, (o, e) in enumerate(zip(orig.offsets, orig.ends, strict=True))
                       if any(o <= p < e for p in pos.tolist())}
            yield kind, bytes(m), [i for i in everything if i not in touched], True
        elif kind in ("overwrite", "zeros"):
            lo = int(rng.integers(0, n))
            hi = min(n, lo + int(rng.integers(1, 64)))
            fill = rng.bytes(hi - lo) if kind == "overwrite" else bytes(hi - lo)
            m = buf[:lo] + fill + buf[hi:]
            if m == buf:
                continue
            yield kind, m, orig.untouched(lo, hi), True
        elif kind == "insert":
            # garbage between (or inside) records; records around it are intact, shifted
            pos = int(rng.integers(0, n + 1))
            m = buf[:pos] + rng.bytes(int(rng.integers(1, 300))) + buf[pos:]
            yield kind, m, orig.untouched(pos, pos + 1) if pos not in orig.offsets else everything, True
        elif kind == "splice":
            # a whole valid record of another file, put at a record boundary
            j = int(rng.integers(0, len(other.offsets)))
            k = int(rng.integers(0, len(orig.offsets) + 1))
            at = orig.offsets[k] if k < len(orig.offsets) else n
            yield kind, buf[:at] + other.record(j) + buf[at:], everything, False
        elif kind == "replace":
            # a stretch of this file replaced by a stretch of another one
            lo = int(rng.integers(0, n))
            hi = min(n, lo + int(rng.integers(1, 200)))
            a = int(rng.integers(0, len(other.buf)))
            piece = other.buf[a:a + int(rng.integers(1, 200))]
            yield kind, buf[:lo] + piece + buf[hi:], orig.untouched(lo, hi), True
        elif kind == "swap_crc":
            k = int(rng.integers(0, len(orig.offsets)))
            e = orig.ends[k]
            m = buf[:e - 4] + bytes(4) + buf[e:]
            if m == buf:
                continue
            yield kind, m, [i for i in everything if i != k], True
        else:  # records in another order: all intact
            order = rng.permutation(len(orig.offsets)).tolist()
            yield kind, b"".join(orig.record(i) for i in order), everything, False


def _read_one_file(path: Path):
    report = Report()
    reader = TfeventsReader(path, Options(), report)
    counts = collections.Counter()
    for run_data in reader.iter_runs():
        for chunk in run_data.series:
            counts[chunk.tag] += len(chunk)
    return counts, report


@pytest.mark.parametrize("name,other,seed,stride", [
    ("tbx_run_b", "tf2_legacy", 1, 1),
    ("tf2_legacy", "tbx_run_b", 2, 1),
    # 227 records: every 9th for the exhaustive cases
    pytest.param("torch_train", "tbx_run_b", 3, 9, marks=pytest.mark.slow),
])
def test_fuzz_event_file_records(tmp_path, name, other, seed, stride):
    orig, donor = Original(EVENT_FILES[name]), Original(EVENT_FILES[other])
    rng = np.random.default_rng(seed)
    path = tmp_path / "events.out.tfevents.123.fuzz"
    cases = collections.Counter()
    for case, (kind, buf, intact, must_report) in enumerate(_mutations(orig, donor, rng, stride)):
        path.write_bytes(buf)
        what = f"{name} case {case} ({kind})"
        with deadline(5, what):
            try:
                counts, report = _read_one_file(path)
            except Exception as exc:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{what}: {type(exc).__name__}: {exc}")
        want = orig.expected(intact)
        short = {tag: (counts[tag], k) for tag, k in want.items() if counts[tag] < k}
        assert not short, f"{what}: intact points not recovered (got, want): {short}"
        damaged = len(intact) < len(orig.offsets) and must_report
        if damaged and buf:
            lost = [i for i in report.issues if i.lost]
            assert lost, f"{what}: damage not reported"
            assert all(i.path == str(path) and path.name in i.message for i in lost), what
        for issue in report.issues:
            assert "\n" not in issue.message
        cases[kind] += 1
    assert sum(cases.values()) > 700, cases


def test_fuzz_event_file_via_cli_summarises(tmp_path, capsys):
    """Many damaged records: one summary line per kind with counts, not one line each."""
    from tbconvert.cli import main
    orig = Original(EVENT_FILES["torch_train"])
    m = bytearray(orig.buf)
    for o, e in list(zip(orig.offsets, orig.ends, strict=True))[5::3]:
        m[(o + e) // 2] ^= 0x10   # a payload byte of every third record
    src = tmp_path / "logs" / "run"
    src.mkdir(parents=True)
    (src / "events.out.tfevents.1.x").write_bytes(bytes(m))
    code = main(["convert", str(tmp_path / "logs"), str(tmp_path / "out"), "--to", "tfevents"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err
    bad = len(orig.offsets[5::3])
    assert f"corrupt record: {bad} times" in err
    assert f"... and {bad - 5} more like this" in err
    assert "events.out.tfevents.1.x" in err
    code = main(["convert", str(tmp_path / "logs"), str(tmp_path / "out2"), "--to", "tfevents",
                 "--strict"])
    err = capsys.readouterr().err
    assert code == 8 and "tbconvert: error: --strict" in err
    assert (tmp_path / "out2").exists()   # --strict: written, but the exit code says data was skipped


def test_random_and_empty_files_named_tfevents(tmp_path):
    rng = np.random.default_rng(7)
    logdir = tmp_path / "logs"
    good = logdir / "good"
    good.mkdir(parents=True)
    shutil.copy(EVENT_FILES["tbx_run_b"], good / EVENT_FILES["tbx_run_b"].name)
    for i, size in enumerate([0, 1, 11, 12, 15, 16, 100, 4096, 100_000]):
        d = logdir / f"junk{i}"
        d.mkdir()
        (d / "events.out.tfevents.0.junk").write_bytes(rng.bytes(size))
    (logdir / "zeros").mkdir()
    (logdir / "zeros" / "x.tfevents.y").write_bytes(bytes(1 << 20))
    with deadline(20, "random files"):
        loaded = tbconvert.read(logdir, restarts="keep-all")
    assert len(loaded.series["good"]["loss"]) == 25
    kinds = {i.kind for i in loaded.report.issues}
    assert "not_an_event_file" in kinds
    named = {Path(i.path).parent.name for i in loaded.report.issues if i.kind == "not_an_event_file"}
    assert named >= {"junk2", "junk6", "junk7", "junk8", "zeros"}


def test_huge_length_does_not_allocate(tmp_path):
    """A length of 2**64-1 (and other huge ones) with a correct length CRC: no big allocation."""
    orig = Original(EVENT_FILES["tbx_run_b"])
    path = tmp_path / "events.out.tfevents.1.huge"
    for length in (0xFFFFFFFFFFFFFFFF, 1 << 40, 1 << 31, len(orig.buf) * 1000):
        head = struct.pack("<Q", length)
        o = orig.offsets[3]
        buf = (orig.buf[:o] + head + struct.pack("<I", records.masked_crc32c(head))
               + orig.buf[o + 12:])
        path.write_bytes(buf)
        tracemalloc.start()
        try:
            counts, report = _read_one_file(path)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 20 * 1024 * 1024, f"length {length:#x}: peak {peak} bytes"
        assert counts["loss"] >= 25 - 1
        assert any(i.kind == "corrupt_record" for i in report.issues)


def test_garbage_scan_is_linear():
    """Megabytes of garbage (zeros, random bytes) are skipped quickly, not byte by byte."""
    rng = np.random.default_rng(11)
    for buf in (bytes(8 << 20), rng.bytes(8 << 20)):
        with deadline(15, "garbage scan"):
            starts, _, damage = records.scan(buf + records.frame(b"tail"))
        assert len(starts) == 1 and len(damage) == 1


def test_forged_length_does_not_swallow_records():
    """A length field rewritten with a correct CRC to span the next records costs only itself."""
    recs = [records.frame(f"payload-{i}".encode()) for i in range(6)]
    inner = b"".join(recs[1:4])
    head = struct.pack("<Q", len(inner) - 4)
    forged = head + struct.pack("<I", records.masked_crc32c(head))
    buf = recs[0] + forged + inner + recs[4] + recs[5]
    starts, lengths, damage = records.scan(buf)
    assert [buf[s:s + n] for s, n in zip(starts, lengths, strict=True)] == [
        f"payload-{i}".encode() for i in range(6)]
    assert [d.reason for d in damage] == ["bad payload checksum"]


def test_many_forged_long_records_take_linear_time():
    """A crafted file: a correct-CRC header every 12 bytes, each claiming (nearly) the rest of
    the file. Checking every claim one by one would take time growing with the square of the
    size; the scan checks them in bulk, stays fast, and finds the intact records after it."""
    size = 8 << 20
    out = bytearray()
    while len(out) + 12 <= size:
        head = struct.pack("<Q", max(size - len(out) - 23, 0))
        out += head + struct.pack("<I", records.masked_crc32c(head))
    tail = [records.frame(f"after-{i}".encode()) for i in range(3)]
    buf = bytes(out) + b"".join(tail)
    with deadline(20, "forged long records"):
        starts, lengths, damage = records.scan(buf)
    found = [buf[s:s + n] for s, n in zip(starts, lengths, strict=True)]
    assert found == [b"after-0", b"after-1", b"after-2"]
    assert sum(d.length for d in damage) == len(out)


def test_fifo_and_device_named_tfevents_do_not_hang(tmp_path):
    logdir = tmp_path / "logs"
    (logdir / "good").mkdir(parents=True)
    shutil.copy(EVENT_FILES["tbx_run_b"], logdir / "good" / "events.out.tfevents.1.a")
    (logdir / "fifo").mkdir()
    os.mkfifo(logdir / "fifo" / "events.out.tfevents.1.fifo")
    (logdir / "dev").mkdir()
    os.symlink("/dev/zero", logdir / "dev" / "events.out.tfevents.1.zero")
    with deadline(10, "fifo / device"):
        loaded = tbconvert.read(logdir, restarts="keep-all")
    assert len(loaded.series["good"]["loss"]) == 25
    skipped = [i for i in loaded.report.issues if i.kind == "not_a_regular_file"]
    assert len(skipped) == 2
    assert all("events.out.tfevents" in i.message for i in skipped)


# --------------------------------------------------------------------------------------------
# TensorBoard.dev exports: broken lines, wrong types, bad files
# --------------------------------------------------------------------------------------------

def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _mutate_value(rng, value):
    """A value of a wrong type or shape."""
    choices = [None, "x", 1, -1, 1.5, True, [], {}, [None], ["a"], [[1]], {"a": 1}, 1e308,
               float("nan"), 2**70, "../../etc/passwd", "/abs/path", "C:\\x", "a\x00b"]
    if isinstance(value, list) and value:
        choices += [value[:-1], value + value[-1:], list(reversed(value)), value + ["x"],
                    [str(v) for v in value]]
    return choices[int(rng.integers(0, len(choices)))]


def _mutate_line(rng, line: str) -> str:
    kind = int(rng.integers(0, 9))
    if kind == 0:
        return line[:int(rng.integers(0, len(line)))]             # truncated line
    if kind == 1:
        return line.replace('"', "", 1)                            # broken JSON
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or not obj:
        return json.dumps(_mutate_value(rng, obj))
    if not isinstance(obj.get("points"), dict):
        obj["points"] = {}
    keys = [("top", k) for k in obj] + [("points", k) for k in obj["points"]]
    where, key = keys[int(rng.integers(0, len(keys)))]
    target = obj if where == "top" else obj["points"]
    if kind == 2:
        del target[key]                                            # missing key
    elif kind == 3:
        target[key] = _mutate_value(rng, target[key])              # wrong type
    elif kind == 4:
        obj["summary_metadata"] = rng.choice(["!!!notbase64", "CgkKB3Nj", "", "QQ", "////"])
    elif kind == 5:
        pts = obj["points"]
        for k, v in pts.items():
            if isinstance(v, list) and v:
                pts[k] = v[:-1]                                    # mismatched lengths
                break
    elif kind == 6:
        obj["run"] = rng.choice(["..", "../..", "/etc", "C:\\evil", "a/../../b", "\x00", "a" * 5000,
                                 "\\\\server\\share", "run\nname"])
    elif kind == 7:
        obj["tag"] = rng.choice(["..", "/abs", "x\x00y", "t" * 10000, "\u202e", ""])
    else:
        pts = obj["points"]
        if "tensors_file_path" in pts:
            pts["tensors_file_path"] = rng.choice(["../../outside.npz", "/etc/passwd",
                                                   "tensors/missing.npz", "tensors\\..\\..\\x.npz",
                                                   "tensors/"])
        elif "blob_file_paths" in pts and pts["blob_file_paths"]:
            pts["blob_file_paths"][0] = [rng.choice(["../../../etc/passwd", "/etc/hostname",
                                                     "blobs/missing.bin", "blobs/../metadata.json",
                                                     "blobs/"])]
    return json.dumps(obj, allow_nan=True)


def _copy_export(tmp_path: Path) -> Path:
    dst = tmp_path / "export" / EXPORT.name
    shutil.copytree(EXPORT, dst)
    for p in [dst, *dst.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _convert_or_refuse(src: Path, dst: Path, **kw):
    try:
        return tbconvert.convert(src, dst, to_format="tfevents", **kw)
    except TbconvertError as exc:
        assert "\n" not in str(exc)
        return exc


@pytest.mark.slow
def test_fuzz_export_lines(tmp_path):
    """Seeded line mutations of every export JSON file: read and convert, never a traceback."""
    rng = np.random.default_rng(5)
    src = _copy_export(tmp_path)
    files = ["scalars.json", "tensors.json", "blob_sequences.json", "metadata.json"]
    originals = {f: (src / f).read_text(encoding="utf-8") for f in files}
    before = _tree(tmp_path)
    outcomes = collections.Counter()
    for case in range(400):
        name = files[case % len(files)]
        lines = originals[name].splitlines()
        for _ in range(int(rng.integers(1, 4))):
            k = int(rng.integers(0, len(lines)))
            lines[k] = _mutate_line(rng, lines[k])
        (src / name).write_text("\n".join(lines) + ("\n" if rng.random() < 0.8 else ""),
                                encoding="utf-8")
        dst = tmp_path / "out"
        with deadline(10, f"export case {case} ({name})"):
            try:
                result = _convert_or_refuse(src, dst)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"export case {case} ({name}): {type(exc).__name__}: {exc}\n"
                            + "\n".join(lines))
        outcomes["error" if isinstance(result, TbconvertError) else "ok"] += 1
        if isinstance(result, TbconvertError):
            assert name in str(result) or str(src) in str(result), result
        assert _tree(tmp_path) - before <= {"out"} | {f"out/{p}" for p in _tree(dst)} if dst.exists() \
            else _tree(tmp_path) - before == set()
        shutil.rmtree(dst, ignore_errors=True)
        (src / name).write_text(originals[name], encoding="utf-8")
    assert outcomes["ok"] > 100, outcomes


@pytest.mark.slow
def test_fuzz_export_files(tmp_path):
    """Missing, empty, garbage and truncated npz and blob files; every outcome is clear."""
    rng = np.random.default_rng(9)
    src = _copy_export(tmp_path)
    victims = sorted(p for p in src.rglob("*") if p.is_file())
    saved = {p: p.read_bytes() for p in victims}
    cases = 0
    for victim in victims:
        for kind in ("missing", "empty", "garbage", "truncated", "zip_of_garbage", "directory"):
            if kind == "missing":
                victim.unlink()
            elif kind == "empty":
                victim.write_bytes(b"")
            elif kind == "garbage":
                junk = rng.bytes(int(rng.integers(1, 2000)))
                if victim.suffix == ".json":   # see test_non_utf8_json_line (a known bug)
                    junk = bytes(32 + b % 95 for b in junk)
                victim.write_bytes(junk)
            elif kind == "truncated":
                victim.write_bytes(saved[victim][:len(saved[victim]) // 2])
            elif kind == "zip_of_garbage" and victim.suffix != ".json":
                import zipfile
                with zipfile.ZipFile(victim, "w") as z:
                    z.writestr("arr_0.npy", rng.bytes(100))
                    z.writestr("arr_1.npy", b"\x93NUMPY\x01\x00" + b"\xff" * 20)
            else:
                victim.unlink()
                victim.mkdir()
            with deadline(10, f"{victim.name} {kind}"):
                try:
                    result = _convert_or_refuse(src, tmp_path / "out")
                except Exception as exc:  # noqa: BLE001
                    pytest.fail(f"{victim.relative_to(src)} {kind}: {type(exc).__name__}: {exc}")
            if isinstance(result, TbconvertError):
                assert victim.name in str(result) or str(src) in str(result), \
                    f"{victim.name} {kind}: error does not name the file: {result}"
            elif victim.suffix == ".npz" or (victim.suffix == ".bin" and kind in (
                    "missing", "directory")):   # any bytes, even none, are a valid blob
                lost = [i for i in result.issues if i.lost]
                assert lost, f"{victim.name} {kind}: not reported"
                assert any(victim.name in i.message or re.search(r"\.json:\d+: ", i.message)
                           for i in lost), \
                    f"{victim.name} {kind}: report does not name the file: {lost}"
            shutil.rmtree(tmp_path / "out", ignore_errors=True)
            if victim.is_dir():
                victim.rmdir()
            victim.write_bytes(saved[victim])
            cases += 1
    assert cases >= 30


def _npy_header(shape) -> bytes:
    head = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape!r}, }}".encode()
    head = head.ljust(118) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head


def test_npz_length_fields_never_cause_huge_allocations(tmp_path):
    """An npz member whose array header promises terabytes, and one whose zip entry promises
    4 GB from a few bytes: each costs its points (reported, naming the file), quickly,
    without allocating what they promise."""
    import zipfile
    src = _copy_export(tmp_path)
    npz = sorted(src.rglob("tensors/*.npz"))
    liar, bomb = npz[0], npz[1]
    with zipfile.ZipFile(liar, "w") as z:
        z.writestr("arr_0.npy", _npy_header((10**12,)) + b"\0" * 8)
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("arr_0.npy", _npy_header((8,)) + bytes(64))
    data = bytearray(bomb.read_bytes())     # the central directory now declares 4 GB
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    bomb.write_bytes(bytes(data))
    tracemalloc.start()
    try:
        with deadline(20, "npz length fields"):
            report = tbconvert.convert(src, tmp_path / "out", to_format="tfevents")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    lost = "\n".join(i.message for i in report.lost)
    assert liar.name in lost and "declares 8000000000000 bytes" in lost, lost
    assert bomb.name in lost and "compressed bytes" in lost, lost


def _pickled_export(tmp_path: Path, payload) -> Path:
    """An export whose one tensor series is an object array (TensorBoard 2.3 style)."""
    exp = tmp_path / "pickled" / "experiment_AAAAAAAAAAAAAAAAAAAAAA"
    (exp / "tensors").mkdir(parents=True)
    (exp / "blobs").mkdir()
    (exp / "metadata.json").write_text('{"create_time": "2020-01-01T00:00:00Z", "description": '
                                       '"", "name": "p", "update_time": "2020-01-01T00:00:00Z"}\n')
    (exp / "scalars.json").write_text("")
    (exp / "blob_sequences.json").write_text("")
    md = base64.b64encode(b"\x0a\x06\x0a\x04text\x20\x02").decode()
    line = {"points": {"steps": [0], "tensors_file_path": "tensors/1.000000.npz",
                       "wall_times": [1.0]}, "run": "train", "summary_metadata": md, "tag": "notes"}
    (exp / "tensors.json").write_text(json.dumps(line, sort_keys=True) + "\n")
    arr = np.empty((1,), dtype=object)
    arr[0] = payload
    np.savez(exp / "tensors" / "1.000000.npz", arr)
    return exp


class _Boom:
    """Unpickling this creates a marker file: proof that code from data ran."""

    marker = None

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_pickled_npz_is_refused_without_allow_pickle(tmp_path, capsys):
    from tbconvert.cli import main
    marker = tmp_path / "code-from-data-ran"
    _Boom.marker = str(marker)
    exp = _pickled_export(tmp_path, _Boom())
    for argv in (["convert", str(exp), str(tmp_path / "o1"), "--to", "tfevents"],
                 ["tbdev-export", str(exp), "-o", str(tmp_path / "o2")],
                 ["info", str(exp)]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 5, (argv, err)
        assert "--allow-pickle" in err and "1.000000.npz" in err
        assert err.count("tbconvert: error:") == 1 and "Traceback" not in err
    with pytest.raises(UnsupportedError):
        tbconvert.convert(exp, tmp_path / "o3", to_format="tfevents")
    assert not marker.exists()
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3"))


def test_pickled_npz_is_read_with_allow_pickle(tmp_path, capsys):
    from tbconvert.cli import main
    exp = _pickled_export(tmp_path, b"hello")
    code = main(["convert", str(exp), str(tmp_path / "out"), "--to", "tfevents", "--allow-pickle"])
    err = capsys.readouterr().err
    assert code == 0, err
    loaded = tbconvert.read(tmp_path / "out", restarts="keep-all")
    notes = loaded.series["train"]["notes"]
    assert bytes(np.asarray(notes.tensors[0]).reshape(-1)[0]) == b"hello"
    # pickled garbage with --allow-pickle: a clear error or a reported loss, never a traceback
    (exp / "tensors" / "1.000000.npz").write_bytes(b"PK\x03\x04" + pickle.dumps(object)[:10])
    code = main(["convert", str(exp), str(tmp_path / "out2"), "--to", "tfevents",
                 "--allow-pickle"])
    err = capsys.readouterr().err
    assert code in (0, 4), err
    assert "Traceback" not in err and "1.000000.npz" in err


def test_sync_of_a_pickled_export_is_refused_then_taken_with_allow_pickle(tmp_path, capsys):
    # the refusal names --allow-pickle: sync has it too
    from tbconvert.cli import main
    marker = tmp_path / "code-from-data-ran"
    _Boom.marker = str(marker)
    exp = _pickled_export(tmp_path, _Boom())
    assert main(["sync", str(exp), str(tmp_path / "ds")]) == 5
    err = capsys.readouterr().err
    assert "--allow-pickle" in err and not marker.exists() and not (tmp_path / "ds").exists()
    exp = _pickled_export(tmp_path / "ok", b"hello")
    assert main(["sync", str(exp), str(tmp_path / "ds"), "--allow-pickle"]) == 0, \
        capsys.readouterr().err
    notes = tbconvert.read(tmp_path / "ds", restarts="keep-all").series["train"]["notes"]
    assert bytes(np.asarray(notes.tensors[0]).reshape(-1)[0]) == b"hello"
    report = tbconvert.sync(exp.parent, tmp_path / "root", allow_pickle=True)
    assert report.runs_added == 1 and not report.failures


def test_non_utf8_json_line(tmp_path):
    src = _copy_export(tmp_path)
    with open(src / "scalars.json", "ab") as f:
        f.write(b'{"run": "\xff\xfe"}\n')
    result = _convert_or_refuse(src, tmp_path / "out")
    if not isinstance(result, TbconvertError):
        assert any("scalars.json" in i.message for i in result.issues)


# --------------------------------------------------------------------------------------------
# Archives: bit rot in Parquet and HDF5 files is found and reported, never read as data
# --------------------------------------------------------------------------------------------

def _archive_damage(data: bytes, body_end: int, rng, cases: int):
    """Seeded damage: bit flips, overwritten stretches (random or zero), truncation; half
    of the flips and stretches land in ``data[:body_end]`` (the data pages)."""
    for case in range(cases):
        buf = bytearray(data)
        limit = body_end if case % 2 else len(buf)
        kind = case % 3
        if kind == 0:
            for _ in range(int(rng.integers(1, 5))):
                i = int(rng.integers(limit))
                buf[i] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            i, k = int(rng.integers(limit)), int(rng.integers(1, 65))
            k = len(buf[i:i + k])
            buf[i:i + k] = bytes(k) if rng.random() < 0.5 else rng.bytes(k)
        else:
            buf = buf[:int(rng.integers(len(buf)))]
        yield case, bytes(buf)


@pytest.mark.parametrize("suffix", [".parquet", pytest.param(".h5", marks=pytest.mark.slow)])
def test_fuzz_archives_never_read_damage_as_data(tmp_path, suffix):
    from test_archives_roundtrip import write_sample

    from tbconvert import verify
    original = write_sample(tmp_path / f"original{suffix}")
    data = original.read_bytes()
    body_end = len(data)
    if suffix == ".parquet":
        body_end -= 8 + struct.unpack("<I", data[-8:-4])[0]
    outcomes = collections.Counter()
    for case, damaged in _archive_damage(data, body_end, np.random.default_rng(5), 240):
        path = tmp_path / f"damaged{suffix}"
        path.write_bytes(damaged)
        report = Report()
        with deadline(10, f"case {case}"):
            try:
                diffs = verify.compare(original, path, report=report)
            except TbconvertError as exc:
                assert str(path) in str(exc), (case, str(exc))
                outcomes["refused"] += 1
                continue
        if report.lost:
            assert all(str(path) in i.message for i in report.lost), (case, report.lost)
            outcomes["reported"] += 1
        else:   # nothing reported: then nothing may differ
            assert diffs == [], (case, diffs[:5])
            outcomes["unchanged"] += 1
    assert outcomes["refused"] + outcomes["reported"] > 150, outcomes
