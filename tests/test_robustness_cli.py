"""No escape, no damage, clear words: hostile names, killed and failing conversions,
read-only sources, symlink loops and unreadable directories, exit codes and messages."""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_CWD, FIXTURES, LOGDIRS, can_mount_tmpfs, cli_argv, cli_env

import tbconvert
from tbconvert import api, sourcefiles
from tbconvert.cli import main
from tbconvert.formats.base import Options
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries, TensorSeries
from tbconvert.output import TMP_MARK
from tbconvert.report import Report

ROOT = Path(__file__).resolve().parent.parent
SCALAR_MD = Metadata("scalars", b"", "", "", DataClass.SCALAR)
TEXT_MD = Metadata("text", b"", "", "", DataClass.TENSOR)
IMAGE_MD = Metadata("images", b"\x10\x01", "", "", DataClass.BLOB_SEQUENCE)

HOSTILE = ["..", "../..", "../../escape", "/abs/olute", "C:\\Windows\\evil", "C:evil", "a/../../b",
           "nul\x00byte", "ctrl\x01\x1b[31m\nline", "x" * 600, "é/" * 50 + "deep", ".", "./a",
           "a//b", "\\\\server\\share\\x", "con", "trailing. ", "%2E%2E", "a/./b", "~", "-rf",
           "\u202eevil", "a\\..\\..\\b"]


def _contents(out: Path) -> list:
    """The bytes of every file of an output, names aside (an event file's name holds the pid
    of the process that wrote it)."""
    files = [out] if out.is_file() else [p for p in out.rglob("*") if p.is_file()]
    return sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in files)


def _snapshot(root: Path, atime: bool = False) -> dict[str, tuple]:
    """Every file and directory under ``root``: content hash, size, mtime, ctime, mode (and
    the access time, read without disturbing it)."""
    out = {}
    for dirpath, dirnames, filenames in sourcefiles.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = (hashlib.sha256(sourcefiles.read_bytes(p)).hexdigest()
                      if stat.S_ISREG(st.st_mode) else None)
            out[str(p.relative_to(root))] = (digest, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                             st.st_mode) + ((st.st_atime_ns,) if atime else ())
    return out


def _all_paths(root: Path) -> set[Path]:
    return {Path(d) / n for d, ds, fs in os.walk(root) for n in ds + fs}


def _hostile_runs():
    rng = np.random.default_rng(0)
    for i, name in enumerate(HOSTILE):
        n = 3
        steps = np.arange(n, dtype=np.int64)
        walls = 1.6e9 + steps.astype(np.float64)
        tag = HOSTILE[(i + 3) % len(HOSTILE)]
        series = [
            ScalarSeries(run=name, tag=tag, metadata=SCALAR_MD, steps=steps, wall_times=walls,
                         hidden=None, values=rng.random(n).astype(np.float32)),
            TensorSeries(run=name, tag=tag + "/txt", metadata=TEXT_MD, steps=steps,
                         wall_times=walls, hidden=None, dtypes=np.full(n, 7, np.int32),
                         tensors=tuple(np.array([b"hi"], dtype=object) for _ in range(n))),
            BlobSequenceSeries.from_sequences(
                run=name, tag=tag + "/img", metadata=IMAGE_MD, steps=steps, wall_times=walls,
                hidden=None, sequences=[[b"1", b"1", _png()] for _ in range(n)]),
        ]
        yield Run(name, 1.6e9), series


def _png() -> bytes:
    import io

    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("fmt,dst_name", [("tfevents", "out"), ("tbdev", "out"),
                                          ("parquet", "out.parquet"),
                                          ("hdf5", "out.h5"),
                                          ("csv", "out.csv")])
def test_hostile_names_never_escape(tmp_path, fmt, dst_name):
    work = tmp_path / "deep" / "er" / "work"
    work.mkdir(parents=True)
    outside = tmp_path / "outside_marker"
    outside.write_text("keep")
    before = _all_paths(tmp_path)
    dst = work / dst_name
    report = Report()
    writer = api.open_writer(dst, format=fmt, options=Options(), report=report)
    errors = []
    with writer:
        for run, series in _hostile_runs():
            try:
                writer.write_run(run, iter(series))
            except tbconvert.TbconvertError as exc:   # a clear refusal is fine, an escape is not
                errors.append(exc)
    # HDF5 strings cannot hold NUL: those runs are refused in one line, every other name is
    # written (escaped where it must be)
    refused = [str(e) for e in errors]
    if fmt == "hdf5":
        assert refused and all("NUL character" in e for e in refused), refused
    else:
        assert not refused, f"{fmt}: a hostile name was refused instead of escaped: {refused}"
    new = _all_paths(tmp_path) - before
    assert new, "nothing written"
    for p in new:
        assert p == dst or dst in p.parents, f"{fmt}: wrote outside the destination: {p}"
        assert len(p.name.encode()) <= 255
    assert outside.read_text() == "keep"
    assert not list(work.glob(f"*{TMP_MARK}*"))
    if fmt in ("tfevents", "tbdev"):
        # Every run comes back under its own name, or its renaming was reported (writing event
        # files turns names into paths; an export reads Windows separators as '/').
        back = tbconvert.read(dst, restarts="keep-all")
        renamed = {i.run for i in report.issues if i.kind == "run_renamed"}
        renamed |= {i.run for i in back.report.issues if i.kind == "run_renamed"}
        kept = set(back.runs)
        for name in HOSTILE:
            # (a\..\..\b reads as a/../../b~2: the export names a run a/../../b too)
            assert name in kept or name in renamed or any(
                r.split("~")[0] == name.replace("\\", "/") for r in renamed), name
        if fmt == "tfevents":
            assert "../../escape" in renamed and "../../escape" not in kept
        else:
            assert "../../escape" in kept and "/abs/olute" in kept


def test_hostile_names_media_never_escape(tmp_path, capsys):
    src = tmp_path / "src"
    with api.open_writer(src, format="tfevents") as w:
        for run, series in _hostile_runs():
            w.write_run(run, iter(series))
    before = _all_paths(tmp_path)
    code = main(["media", str(src), "-o", str(tmp_path / "media")])
    err = capsys.readouterr().err
    assert code in (0, 9), err
    assert "Traceback" not in err
    for p in _all_paths(tmp_path) - before:
        assert (tmp_path / "media") in p.parents or p == tmp_path / "media", p


def test_hostile_names_round_trip_through_event_files(tmp_path):
    """Renamed directories still read back under a name that stays inside the logdir."""
    src = tmp_path / "src"
    with api.open_writer(src, format="tfevents") as w:
        for run, series in _hostile_runs():
            w.write_run(run, iter(series))
    loaded = tbconvert.read(src, restarts="keep-all")
    assert len(loaded.runs) == len({r for r, _ in _hostile_runs()})


# --------------------------------------------------------------------------------------------
# Destinations: --force, killed conversions, full disks, file-size limits
# --------------------------------------------------------------------------------------------

def _copy_logdir(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    for p in [dst, *dst.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return dst


def test_existing_destination_untouched_without_force(tmp_path, capsys):
    src = _copy_logdir(tmp_path, "tensorboardx_logdir")
    for dst in (tmp_path / "old_dir", tmp_path / "old.parquet", tmp_path / "old.csv"):
        if dst.suffix:
            dst.write_bytes(b"old content")
        else:
            dst.mkdir()
            (dst / "keep.txt").write_text("old")
        snap = _snapshot(tmp_path / "old_dir") if not dst.suffix else dst.read_bytes()
        code = main(["convert", str(src), str(dst), "--to",
                     {"": "tfevents", ".parquet": "parquet", ".csv": "csv"}[dst.suffix]])
        err = capsys.readouterr().err
        assert code == 6, err
        assert err.startswith("tbconvert: error: ") and err.count("\n") == 1
        assert str(dst) in err and "--force" in err
        assert (_snapshot(dst) if not dst.suffix else dst.read_bytes()) == snap
    # with --force, replaced once complete
    code = main(["convert", str(src), str(tmp_path / "old_dir"), "--to", "tfevents", "--force"])
    assert code == 0
    assert not (tmp_path / "old_dir" / "keep.txt").exists()
    assert len(tbconvert.read(tmp_path / "old_dir").runs) == len(tbconvert.read(src).runs)
    assert not list(tmp_path.glob(f"*{TMP_MARK}*"))


def _big_logdir(path: Path, runs: int = 8, points: int = 60_000) -> None:
    rng = np.random.default_rng(1)
    with api.open_writer(path, format="tfevents") as w:
        for r in range(runs):
            steps = np.arange(points, dtype=np.int64)
            series = [ScalarSeries(run=f"run{r}", tag=f"tag{t}", metadata=SCALAR_MD, steps=steps,
                                   wall_times=1.6e9 + steps * 0.01, hidden=None,
                                   values=rng.random(points).astype(np.float32))
                      for t in range(3)]
            w.write_run(Run(f"run{r}", 1.6e9), iter(series))


@pytest.fixture(scope="module")
def big_logdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "logs"
    _big_logdir(path)
    return path


def _cli(*args, preexec=None, **kw):
    return subprocess.Popen([*cli_argv(), *args], cwd=CLI_CWD, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=preexec, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("to,name", [("tfevents", "dst"), ("parquet", "dst.parquet")])
def test_sigkill_leaves_old_destination_or_none(tmp_path, big_logdir, to, name):
    dst = tmp_path / name
    t0 = time.monotonic()
    p = _cli("convert", str(big_logdir), str(dst), "--to", to)
    out, err = p.communicate(timeout=120)
    full = time.monotonic() - t0
    assert p.returncode == 0, err.decode()[-2000:]
    old = _snapshot(dst) if dst.is_dir() else {"": hashlib.sha256(dst.read_bytes()).hexdigest()}
    _contents_old = _contents(dst)
    rng = np.random.default_rng(3)
    outcomes = []
    for delay in sorted(rng.uniform(0.05, full, 5).tolist()):
        p = _cli("convert", str(big_logdir), str(dst), "--to", to, "--force")
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
        outcomes.append(p.returncode)
        assert dst.exists(), f"killed after {delay:.2f}s: the old destination is gone"
        now = _snapshot(dst) if dst.is_dir() else {"": hashlib.sha256(dst.read_bytes()).hexdigest()}
        if now != old:
            # the new output was put in place before the kill (maybe while the old one was
            # still being removed): then it is complete, the same data as the old one
            assert _contents(dst) == _contents_old, f"killed after {delay:.2f}s"
        for left in tmp_path.iterdir():
            assert left == dst or TMP_MARK in left.name, left
        for left in tmp_path.glob(f"*{TMP_MARK}*"):   # leftovers of a kill: hidden, never final
            shutil.rmtree(left) if left.is_dir() else left.unlink()
    assert -signal.SIGKILL in outcomes


@pytest.mark.slow
@pytest.mark.parametrize("to,name", [
    ("tfevents", "dst"), ("parquet", "dst.parquet"), ("parquet", "dst_dataset"), ("csv", "dst.csv"),
    ("hdf5", "dst.h5"), ("tbdev", "dst_export")])
def test_interrupt_or_terminate_removes_partial_output(tmp_path, big_logdir, to, name):
    """Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal) at any moment: exit 130 / 143 /
    129 with one line and nothing left behind, or (if it came after the work was done) the
    complete output."""
    dst = tmp_path / name
    t0 = time.monotonic()
    p = _cli("convert", str(big_logdir), str(tmp_path / ("timed" + name)), "--to", to)
    out, err = p.communicate(timeout=120)
    full = time.monotonic() - t0
    assert p.returncode == 0, err.decode()[-2000:]
    shutil.rmtree(tmp_path / ("timed" + name)) if to in ("tfevents", "tbdev") or \
        (tmp_path / ("timed" + name)).is_dir() else (tmp_path / ("timed" + name)).unlink()
    rng = np.random.default_rng(11)
    interrupted = 0
    # most signals land while the work is under way (after start-up, before the end)
    for i, delay in enumerate(rng.uniform(0.4 * full, 0.9 * full, 6).tolist()):
        sig = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)[i % 3]
        before = [name] if dst.exists() else []    # an earlier round may have finished
        p = _cli("convert", str(big_logdir), str(dst), "--to", to, "--force")
        time.sleep(delay)
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
        err = err.decode()
        left = sorted(x.name for x in tmp_path.iterdir())
        assert "Traceback" not in err, err[-3000:]
        if p.returncode in (129, 130, 143):
            assert p.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143,
                                    signal.SIGHUP: 129}[sig]
            assert err.endswith("partial output was removed\n") and err.count("\n") == 1, err
            assert left == before, left
            interrupted += 1
        elif p.returncode == -sig:   # before tbconvert's handlers, or after the work was done
            assert left in (before, [name]), left
        else:
            assert p.returncode == 0, err[-2000:]
            assert left == [name], left
        if left:
            assert not any(TMP_MARK in x for x in left)
    assert interrupted, "no signal came while the conversion was under way"


def _limit_fsize(limit):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


@pytest.mark.parametrize("to,name", [
    ("tfevents", "dst"), ("parquet", "dst.parquet"), ("csv", "dst.csv"), ("hdf5", "dst.h5"),
    ("tbdev", "dst_export")])
def test_file_size_limit_is_a_clear_error(tmp_path, big_logdir, to, name):
    dst = tmp_path / name
    p = _cli("convert", str(big_logdir), str(dst), "--to", to, preexec=_limit_fsize(1 << 20))
    out, err = p.communicate(timeout=120)
    err = err.decode()
    assert p.returncode == 9, err[-2000:]
    assert "Traceback" not in err
    assert err.startswith("tbconvert: error: ") and "file-size limit" in err, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(),
                                 reason="needs a private tmpfs (unshare -Urm)")


def _on_small_disk(mnt: Path, size: str, *args: str) -> tuple[int, str]:
    """Run ``python -m tbconvert ARGS`` with a fresh tmpfs of ``size`` mounted on ``mnt`` in a
    mount namespace of its own; (exit code, stderr ending with a line ``left: <entries>``)."""
    mnt.mkdir()
    script = (f'mount -t tmpfs -o size={size} tmpfs "$1" || exit 99; shift; "$@"; rc=$?; '
              'echo "left: $(ls -A "$MNT")" >&2; exit $rc')
    p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", str(mnt), *cli_argv(), *args],
                       cwd=CLI_CWD, capture_output=True, timeout=120, env=cli_env(MNT=str(mnt)))
    return p.returncode, p.stderr.decode()


@needs_tmpfs
@pytest.mark.parametrize("to,name", [
    ("tfevents", "dst"), ("parquet", "dst.parquet"), ("csv", "dst.csv"), ("hdf5", "dst.h5"),
    ("tbdev", "dst_export")])
def test_real_full_disk_is_a_clear_error(tmp_path, big_logdir, to, name):
    """A real full file system (a 1 MiB tmpfs of the test's own): exit 9, nothing left."""
    mnt = tmp_path / "disk"
    code, err = _on_small_disk(mnt, "1m", "convert", str(big_logdir), str(mnt / name), "--to", to)
    assert code == 9, err[-2000:]
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith("tbconvert: error: ") and "disk is full" in lines[0], err
    assert lines[-1] == "left: ", err


@needs_tmpfs
def test_tbdev_export_on_a_full_disk_leaves_nothing(tmp_path):
    mnt = tmp_path / "disk"
    code, err = _on_small_disk(mnt, "16k", "tbdev-export", str(FIXTURES / "tbdev_export"),
                               "-o", str(mnt / "out"))
    assert code == 9, err
    lines = err.splitlines()
    assert lines[0].startswith("tbconvert: error: experiment ") and "disk is full" in lines[0], err
    assert "wrote none" not in err and "tbconvert-experiment.json" not in err
    assert lines[-1] == "left: ", err


def test_disk_full_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """ENOSPC while writing event files: exit 9, a clear message, nothing left behind."""
    import builtins

    from tbconvert.formats.tfevents import writer as tfw
    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return Full(f) if "x" in mode or "w" in mode else f

    monkeypatch.setattr(tfw, "open", fake_open, raising=False)
    src = _copy_logdir(tmp_path, "tensorboardx_logdir")
    dst = tmp_path / "out"
    code = main(["convert", str(src), str(dst), "--to", "tfevents"])
    err = capsys.readouterr().err
    assert code == 9, err
    assert "disk is full" in err and err.count("\n") == 1
    assert not dst.exists() and not list(tmp_path.glob(f"*{TMP_MARK}*"))


# --------------------------------------------------------------------------------------------
# Read-only sources, symlink loops, unreadable directories
# --------------------------------------------------------------------------------------------

def _read_only(root: Path) -> None:
    for p in sorted([root, *root.rglob("*")], key=lambda p: -len(p.parts)):
        os.chmod(p, 0o555 if p.is_dir() else 0o444)


def _age_access_times(root: Path) -> None:
    """Access times a year old: any plain read or listing would now update them (relatime)."""
    old = time.time_ns() - 365 * 86400 * 10**9
    for p in [root, *sorted(root.rglob("*"))]:
        os.utime(p, ns=(old, p.lstat().st_mtime_ns), follow_symlinks=False)


@pytest.mark.slow
def test_read_only_sources_are_never_modified(tmp_path, capsys):
    srcs = [_copy_logdir(tmp_path / "src", name) for name in LOGDIRS + ["tbdev_export"]]
    archives = [tmp_path / "src" / "arch.parquet", tmp_path / "src" / "arch_dataset",
                tmp_path / "src" / "arch.h5"]
    for a in archives:
        assert main(["convert", str(srcs[0]), str(a), "--to", "hdf5" if a.suffix == ".h5"
                     else "parquet"]) == 0
    for s in srcs + archives:
        _read_only(s)
    _age_access_times(tmp_path / "src")
    before = _snapshot(tmp_path / "src", atime=True)
    time.sleep(0.01)
    n = 0
    for s in srcs + archives:
        fmt = "tbdev" if "export" in s.name else "other"
        for args in (["convert", str(s), str(tmp_path / f"o{n}"), "--to", "tfevents"],
                     ["convert", str(s), str(tmp_path / f"o{n}.parquet")],
                     ["convert", str(s), str(tmp_path / f"o{n}.h5")],
                     ["convert", str(s), str(tmp_path / f"o{n}.csv")],
                     ["info", str(s)],
                     ["verify", str(s), str(tmp_path / f"o{n}")],
                     ["media", str(s), "-o", str(tmp_path / f"m{n}")],
                     ["hparams", str(s), "-o", str(tmp_path / f"h{n}.csv")]):
            code = main(args)
            err = capsys.readouterr().err
            assert code in (0, 10), (args, err)
        if fmt == "tbdev":
            assert main(["tbdev-export", str(s), "-o", str(tmp_path / f"t{n}")]) == 0
        if s in srcs:       # a sync reads what is new, and a second finds nothing new
            for _ in range(2):
                assert main(["sync", str(s), str(tmp_path / f"sync{n}")]) == 0, \
                    capsys.readouterr().err
        n += 1
    capsys.readouterr()
    after = _snapshot(tmp_path / "src", atime=True)
    assert after == before, [k for k in before if after.get(k) != before[k]][:10]


def test_symlink_loop_is_reported_and_skipped(tmp_path, capsys):
    src = _copy_logdir(tmp_path, "tensorboardx_logdir")
    os.symlink("..", src / "run_a" / "loop")
    os.symlink(str(src), src / "run_b" / "self")
    os.symlink("missing-target", src / "run_b" / "dangling.tfevents.x")
    expected = {r: {t: len(s) for t, s in v.items()}
                for r, v in tbconvert.read(FIXTURES / "tensorboardx_logdir",
                                           restarts="keep-all").series.items()}
    loaded = tbconvert.read(src, restarts="keep-all")
    assert {r: {t: len(s) for t, s in v.items()} for r, v in loaded.series.items()} == expected
    kinds = [i.kind for i in loaded.report.issues]
    assert kinds.count("symlink_loop") == 2 and "symlink_not_followed" not in kinds
    assert any("dangling.tfevents.x" in i.message for i in loaded.report.issues)
    code = main(["convert", str(src), str(tmp_path / "out"), "--to", "tfevents"])
    err = capsys.readouterr().err
    assert code == 0 and "symlink loop: 2 times" in err
    assert f"{src / 'run_a' / 'loop'}: leads back to {src}, a directory above it" in err
    assert "Traceback" not in err


def _without_root_read_override() -> list[str]:
    """A command prefix under which a mode-0 directory really cannot be read. Root reads
    anything through two capabilities; drop them (the process stays uid 0, so the Python
    installation under a private home directory stays usable)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and setpriv (util-linux) is not installed")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search"]


def test_unreadable_directory_is_reported_and_skipped(tmp_path):
    """A directory the user may not read: reported with its path, skipped, the rest converted."""
    src = _copy_logdir(tmp_path, "torch_logdir")
    bad = src / "multi"
    os.chmod(bad, 0)
    try:
        p = subprocess.run([*_without_root_read_override(), *cli_argv(),
                            "convert", str(src), str(tmp_path / "out"), "--to", "tfevents"],
                           cwd=CLI_CWD, env=cli_env(), capture_output=True, timeout=120)
    finally:
        os.chmod(bad, 0o755)
    err = p.stderr.decode()
    assert p.returncode == 0, err[-2000:]
    assert "Traceback" not in err
    assert "warning: unreadable directory\n" in err and str(bad) in err, err
    converted = tbconvert.read(tmp_path / "out", restarts="keep-all")
    expected = tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")
    assert sorted(converted.runs) == sorted(
        r for r in expected.runs if r != "multi" and not r.startswith("multi/"))
    assert {"train", "resumed", "resumed_purged"} <= set(converted.runs)


# --------------------------------------------------------------------------------------------
# Clear words: exit codes and one-line messages
# --------------------------------------------------------------------------------------------

def test_exit_codes_and_messages(tmp_path, capsys):
    src = _copy_logdir(tmp_path, "tensorboardx_logdir")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00garbage")
    not_events = tmp_path / "plain"
    not_events.mkdir()
    (not_events / "readme.txt").write_text("hi")
    cases = [
        (["convert", str(tmp_path / "nope"), str(tmp_path / "o1"), "--to", "tfevents"], 3, "nope"),
        (["convert", str(junk), str(tmp_path / "o2"), "--to", "tfevents"], 3, "junk.bin"),
        (["convert", str(not_events), str(tmp_path / "o3"), "--to", "tfevents"], 3, "plain"),
        (["convert", str(src), str(tmp_path / "o4"), "--to", "nosuchformat"], 2, "nosuchformat"),
        (["convert", str(src), str(tmp_path / "o5")], 2, "--to"),
        (["convert", str(src), str(tmp_path / "o6"), "--to", "tfevents", "--runs", "("], 2, "--runs"),
        (["convert", str(src), str(junk), "--to", "csv"], 6, "--force"),
        (["convert", str(src), str(src), "--to", "tfevents"], 2, "source"),
    ]
    for argv, code, needle in cases:
        got = main(argv)
        err = capsys.readouterr().err
        assert got == code, (argv, err)
        assert "Traceback" not in err
        assert err.startswith("tbconvert: error: ") and err.count("\n") == 1, err
        assert needle in err, (needle, err)
    assert main(["convert", "--bogus-option"]) == 2
    capsys.readouterr()


def test_control_characters_in_names_stay_on_one_line(tmp_path, capsys):
    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    steps = np.arange(3, dtype=np.int64)
    with api.open_writer(src, format="tfevents") as w:
        for name in ("evil\nTraceback (most recent call last):", "esc\x1b[2J"):
            w.write_run(Run(name, 1.0), iter([ScalarSeries(
                run=name, tag="t", metadata=SCALAR_MD, steps=steps, wall_times=steps + 1.0,
                hidden=None, values=rng.random(3).astype(np.float32))]))
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "o"), "--to", "tfevents", "-v"]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err
    for line in err.splitlines():
        assert line.startswith(("tbconvert: ", "  ")), repr(line)


def test_subprocess_corrupt_input_exit_codes(tmp_path):
    """Through a real process: a damaged logdir converts (0) or fails --strict (8), no traceback."""
    src = _copy_logdir(tmp_path, "tensorboardx_logdir")
    f = next((src / "run_b").glob("*tfevents*"))
    data = bytearray(f.read_bytes())
    data[200] ^= 0xFF
    f.write_bytes(bytes(data[:-5]))
    for extra, code in (([], 0), (["--strict"], 8)):
        p = _cli("convert", str(src), str(tmp_path / f"o{code}"), "--to", "tfevents", *extra)
        out, err = p.communicate(timeout=60)
        err = err.decode()
        assert p.returncode == code, err
        assert "Traceback" not in err and f.name in err
        assert "truncated record" in err and "corrupt record" in err


def test_ctrl_c_in_a_string_eval_still_exits_130_under_python_m(tmp_path):
    """Ctrl-C while modules load can land in code that dataclasses or namedtuple run with
    exec; CPython then remembers it and, for ``python -m``, ended the process with SIGINT
    (-2) after tbconvert had handled it and chosen 130 (1 in 25 early interrupts did)."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import sys\n"
        "from tbconvert import cli\n"
        "def main(argv=None):\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        return 130\n"
        "cli.main = main\n"
        "sys.exit(cli.console_main())\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], cwd=CLI_CWD, env=env,
                       capture_output=True, timeout=60)
    assert p.returncode == 130, p.stderr.decode()


@pytest.mark.parametrize("mode", [0, 0o444], ids=["unlisted", "unsearchable"])
@pytest.mark.parametrize("how", [["convert", "--from", "tfevents"], ["convert"], ["sync"],
                                 ["info", "--from", "tfevents"]])
def test_a_source_root_that_cannot_be_read_is_one_line_exit_3(tmp_path, how, mode):
    """Not an empty output, nor a traceback (its experiment facts file could not be looked
    at either), nor 'cannot tell the format'. Mode 0444: its entries are listed, none can be
    entered."""
    src = _copy_logdir(tmp_path, "torch_logdir")
    command, *extra = how
    out = tmp_path / ("out.parquet" if command == "convert" else "ds")
    args = [command, str(src)] + ([] if command == "info" else [str(out)])
    os.chmod(src, mode)
    try:
        p = subprocess.run([*_without_root_read_override(), *cli_argv(), *args, *extra],
                           cwd=CLI_CWD, env=cli_env(), capture_output=True, timeout=120)
    finally:
        os.chmod(src, 0o755)
    err = p.stderr.decode()
    assert p.returncode == 3, err
    if mode == 0:
        assert err == f"tbconvert: error: {src}: cannot be read (Permission denied)\n"
    else:
        last = err.strip().splitlines()[-1]
        assert last == f"tbconvert: error: {src}: cannot be read (Permission denied)" or \
            last.startswith(f"tbconvert: error: {src}: no run could be read; "), err
    assert "Traceback" not in err and not out.exists()

def _many_runs(root: Path, n: int) -> Path:
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import records
    for i in range(n):
        path = root / f"run{i:03d}" / "events.out.tfevents.1.host"
        path.parent.mkdir(parents=True)
        ev = event_pb2.Event(wall_time=1000.0, step=0)
        ev.summary.value.add(tag="loss", simple_value=float(i))
        path.write_bytes(records.frame(event_pb2.Event(wall_time=999.0,
                                                       file_version="brain.Event:2")
                                       .SerializeToString())
                         + records.frame(ev.SerializeToString()))
    return root


def _open_files(limit: int):
    def preexec():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return preexec


@pytest.mark.parametrize("command", ["convert", "sync"])
def test_running_out_of_file_handles_ends_the_command_instead_of_skipping_runs(tmp_path,
                                                                                command):
    """EMFILE is no fault of a run: never a run skipped (or a part of one) with exit 0, but
    one line and exit 9; or, where the limit happened to suffice, the whole data."""
    src = _many_runs(tmp_path / "logs", 60)
    for attempt in range(4):
        out = tmp_path / f"out{attempt}"
        dst = out.with_suffix(".h5") if command == "convert" else out
        p = subprocess.run([*cli_argv(), command, str(src), str(dst), "-j", "1", "-q"],
                           cwd=CLI_CWD, env=cli_env(), capture_output=True, timeout=120,
                           preexec_fn=_open_files(7 if command == "sync" else 5))
        err = p.stderr.decode()
        assert "Traceback" not in err, err
        if p.returncode == 9:
            told = ("partial output was removed" if command == "convert" else
                    "the dataset was left as it was")
            assert err == ("tbconvert: error: the machine ran out of file handles (the limit of "
                           f"open files, `ulimit -n`); {told}\n") \
                or "Too many open files" in err, err
            continue
        assert p.returncode == 0, err
        from tbconvert.verify import compare
        assert compare(src, dst) == [], attempt


@pytest.mark.parametrize("raised", ["memory", "chained", "arrow"])
def test_running_out_of_memory_is_one_line_exit_9(tmp_path, monkeypatch, capsys, raised):
    """However the shortage shows (numpy's or Arrow's MemoryError, or an error raised while
    one was handled), it is told in one line, the partial output removed."""
    import pyarrow as pa

    from tbconvert.formats.tfevents.reader import TfeventsReader

    def short(*_args, **_kw):
        if raised == "memory":
            raise MemoryError("Unable to allocate 8.00 GiB")
        if raised == "arrow":
            raise pa.ArrowMemoryError("malloc of size 1073741824 failed")
        try:
            raise MemoryError()
        except MemoryError:
            raise SystemError("deallocated bytearray object has exported buffers") from None

    monkeypatch.setattr(TfeventsReader, "iter_runs", short)
    out = tmp_path / "out.parquet"
    code = main(["convert", str(FIXTURES / "torch_logdir"), str(out)])
    err = capsys.readouterr().err
    assert code == 9, err
    assert err == "tbconvert: error: the machine ran out of memory; partial output was removed\n"
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["info", "sync"])
def test_running_out_of_memory_tells_what_became_of_the_output(tmp_path, monkeypatch, capsys,
                                                               command):
    """``info`` writes nothing, and a sync cut short leaves the dataset as it was: neither
    speaks of partial output."""
    from tbconvert.formats.tfevents import event_files
    src, dst = tmp_path / "logs", tmp_path / "dataset"
    shutil.copytree(FIXTURES / "torch_logdir", src)
    if command == "sync":
        assert main(["sync", str(src), str(dst), "-q"]) == 0
        before = sorted(p.name for p in dst.iterdir())
        with open(next(src.rglob("*tfevents*")), "ab") as fh:
            fh.write(b"more")     # something new, so that the sync reads the runs

    def short(*_args, **_kw):
        raise MemoryError("Unable to allocate 8.00 GiB")
    monkeypatch.setattr(event_files, "discover", short)
    code = main([command, str(src), *([str(dst)] if command == "sync" else [])])
    err = capsys.readouterr().err
    assert code == 9, err
    told = {"info": "", "sync": "; the dataset was left as it was"}[command]
    assert err == f"tbconvert: error: the machine ran out of memory{told}\n", err
    if command == "sync":
        assert sorted(p.name for p in dst.iterdir()) == before


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_a_killed_conversion_are_swept_and_never_read_as_runs(tmp_path):
    """SIGKILL leaves a hidden temporary output behind: the next conversion to the same name
    removes it (its process is gone), one of a live process stays, and a logdir holding one
    does not read its partial runs."""
    from tbconvert import output
    logs = _copy_logdir(tmp_path, "tensorboardx_logdir")
    owner = output._owner().split("-")[0]
    dead = logs / f".restored{TMP_MARK}{owner}-{_dead_pid()}-0123456789ab"
    live = logs / f".restored{TMP_MARK}{owner}-{os.getpid()}-0123456789ab"
    for leftover in (dead, live):
        shutil.copytree(FIXTURES / "torch_logdir" / "train", leftover / "partial")
    report = tbconvert.info(logs)
    assert not [r for r in report.runs if TMP_MARK in r.run]
    skipped = [i.message for i in report.report.issues if i.kind == "leftover_output_skipped"]
    assert len(skipped) == 2 and all("an incomplete output of tbconvert" in m for m in skipped)
    tbconvert.convert(FIXTURES / "torch_logdir", logs / "restored", to_format="tfevents")
    assert not dead.exists() and live.exists()


def test_a_directory_that_fails_while_listed_costs_itself_alone(tmp_path, monkeypatch):
    """An I/O error reading a directory (NFS, FUSE) names a descriptor or nothing in its
    filename: the directory is reported by its path and skipped, the others are read."""
    import errno as errno_
    src = _copy_logdir(tmp_path, "torch_logdir")
    real = sourcefiles._entries

    def failing(path):
        if os.path.basename(path) == "multi":
            raise OSError(errno_.EIO, "Input/output error", 3)
        return real(path)

    monkeypatch.setattr(sourcefiles, "_entries", failing)
    data = tbconvert.read(src)
    issues = [i for i in data.report.issues if i.kind == "unreadable_directory"]
    assert [i.message for i in issues] == [
        f"{src / 'multi'}: cannot be read (Input/output error); skipped"]
    assert "train" in data.runs and not any(r.startswith("multi") for r in data.runs)


@pytest.mark.parametrize("fmt", ["x.parquet", "x.h5"])
def test_running_out_of_memory_reading_an_archive_is_not_damage(tmp_path, monkeypatch, capsys,
                                                                fmt):
    import pyarrow as pa
    archive = tmp_path / fmt
    tbconvert.convert(FIXTURES / "torch_logdir", archive)
    if fmt.endswith(".parquet"):
        from tbconvert.formats.parquet import reader as R

        def short(*_a, **_k):
            raise pa.ArrowMemoryError("malloc of size 67108864 failed")
        monkeypatch.setattr(R.ArchiveFile, "verified", short)
    else:
        import h5py

        def short(*_a, **_k):
            raise OSError(errno.EMFILE, "Too many open files")
        monkeypatch.setattr(h5py, "File", short)
    code = main(["convert", str(archive), str(tmp_path / "back"), "--to", "tfevents"])
    err = capsys.readouterr().err
    assert code == 9, err
    assert "the machine ran out of" in err and "damaged" not in err
    assert not (tmp_path / "back").exists()
