"""What many test modules share: where the fixtures are, how the command line is started the
way a user starts it, exact CSV parsing, and a progress counter.

Importable as ``helpers`` from every test module (``tests/`` is on the path, put there by
pytest's rootdir ``conftest.py``), whether the tests run against the source tree or against
the installed wheel from a copy of ``tests/`` (``tests/run-installed.sh``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FIXTURES = REPO / "fixtures"
BENCH = REPO / "bench"
FUZZ = REPO / "fuzz"
LOGDIRS = ["torch_logdir", "tensorboardx_logdir", "tf2_logdir"]

# The command line is run the way a user runs it: the installed ``tbconvert`` script next to
# this Python, and never from the repository root (where ``python -m`` would import the source
# tree instead of the installed package).
def session_dir(prefix: str, variable: str) -> Path:
    """A directory for the whole test session, removed when it ends: made by the process
    that runs the tests, and found through ``variable`` by the worker processes it spawns,
    which import test modules to unpickle their functions and end without running exit
    handlers (each would otherwise make one of its own and leave it behind)."""
    given = os.environ.get(variable)
    if given and Path(given).is_dir():
        return Path(given)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ[variable] = str(path)
    atexit.register(shutil.rmtree, path, True)
    return path


CLI_CWD = session_dir("tbconvert-cli-cwd-", "TBCONVERT_TESTS_CLI_CWD")


def cli_argv() -> list[str]:
    """The command prefix that starts the ``tbconvert`` command."""
    script = Path(sys.executable).with_name("tbconvert")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "tbconvert"]


def cli_env(**extra: str) -> dict:
    """The environment for the command: with ``python -m`` (no installed script), the same
    ``tbconvert`` package the tests import must be found from outside the repository."""
    import tbconvert
    env = {**os.environ, **extra}
    package_parent = str(Path(tbconvert.__file__).resolve().parent.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if package_parent not in parts:
        env["PYTHONPATH"] = os.pathsep.join([package_parent, *parts])
    return env


_PEAK_CHILD = """
import sys
from tbconvert.cli import main
code = main(sys.argv[1:])
peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')][0]
print(code, int(peak) // 1024)
"""


def peak_mib(*argv) -> int:
    """The peak memory (VmHWM, MiB) of ``tbconvert ARGV -q -j 1`` run as its own process,
    which must succeed."""
    out = subprocess.run([sys.executable, "-c", _PEAK_CHILD, *map(str, argv), "-q", "-j", "1"],
                         cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=600)
    code, peak = out.stdout.split()[-2:]
    assert code == "0", out.stderr
    return int(peak)


def run_tbconvert(*args, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    """Run ``tbconvert ARGS`` as its own process; text output captured."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    check = kw.pop("check", False)
    return subprocess.run([*cli_argv(), *map(str, args)], cwd=CLI_CWD, env=cli_env(),
                          timeout=timeout, check=check, **kw)


def csv_exact() -> dict:
    """``pandas.read_csv`` arguments that parse floats exactly: pandas before 3.0 uses a fast,
    inexact parser unless asked (pandas 3 is exact and deprecates the argument)."""
    import pandas as pd
    return {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}


def counting_progress():
    """A :class:`~tbconvert.formats.base.Progress` that adds up what it is told: ``total``
    (every ``start``), ``done`` (every ``advance``) and ``calls`` (how many advances).
    An advance of zero or less bytes is a bug in the caller, so it fails the test."""
    from tbconvert.formats.base import Progress

    class Counted(Progress):
        def __init__(self):
            self.total = self.done = self.calls = 0

        def start(self, total):
            self.total += total

        def advance(self, n):
            assert n > 0, f"advance({n})"
            self.done += n
            self.calls += 1

    return Counted()


def on_path(*dirs: Path) -> None:
    """Make modules in ``dirs`` (``BENCH``, ``FUZZ``: test tooling, not package) importable."""
    for d in dirs:
        if str(d) not in sys.path:
            sys.path.insert(0, str(d))


def can_mount_tmpfs() -> bool:
    """Whether this user can mount a private tmpfs (``unshare -Urm``): a real small disk."""
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def parquet_codecs(source) -> set[str]:
    """The compression codecs of every column chunk of a Parquet file (a path or an open
    binary file)."""
    import pyarrow.parquet as pq
    meta = pq.ParquetFile(source).metadata
    return {meta.row_group(g).column(c).compression
            for g in range(meta.num_row_groups) for c in range(meta.num_columns)}


@contextlib.contextmanager
def protobuf_only():
    """Event files read record by record through protobuf and the legacy migration: the bulk
    decoders, the templates of one record for a block's last few records, the legacy
    histogram events and the small messages read without protobuf all switched off (the
    oracle those paths are checked against)."""
    import pytest

    from tbconvert.formats.tfevents import (
        blob_templates,
        histo_records,
        reader,
        small_messages,
        summary_templates,
    )
    caches = (summary_templates._parse_metadata, summary_templates._metadata)
    mp = pytest.MonkeyPatch()
    mp.setattr(summary_templates, "MIN_GROUP", 1 << 62)
    mp.setattr(summary_templates, "WIDE_BYTES", 1 << 62)
    mp.setattr(blob_templates, "MIN_GROUP", 1 << 62)
    mp.setattr(reader, "FEW_LEFT", 0)
    mp.setattr(small_messages, "file_version", lambda *args: None)
    mp.setattr(small_messages, "summary_metadata", lambda raw: None)
    mp.setattr(histo_records, "parse", lambda *args: None)
    for cache in caches:
        cache.cache_clear()
    try:
        yield
    finally:
        mp.undo()
        for cache in caches:
            cache.cache_clear()


def same_float(a: float, b: float) -> bool:
    """Equal as stored: NaN equals NaN, and -0.0 is not 0.0."""
    import math
    return (math.isnan(a) and math.isnan(b)) or a == b and math.copysign(1, a) == math.copysign(1, b)


def edited(raw: bytes, edits) -> bytes:
    """``raw`` with ``edits`` made in turn: ``(op, at, byte)``, op one of "flip" (XOR the byte
    at ``at``, taken modulo the length, with ``byte`` or 1), "insert" and "delete"."""
    b = bytearray(raw)
    for op, at, byte in edits:
        if op == "insert":
            b.insert(at % (len(b) + 1), byte)
        elif op == "flip" and len(b):
            b[at % len(b)] ^= byte or 1
        elif len(b):
            del b[at % len(b)]
    return bytes(b)


def blocks_of(k: int):
    """A stand-in for ``records.scan_file`` that hands each file over ``k`` records per
    block (monkeypatch it in): reading across many blocks, whatever the file's size."""
    from tbconvert.formats.tfevents import records

    def scan_file(path, *, block_size=records.BLOCK_SIZE, start=0, stop=None):
        assert start == 0 and stop is None, "this stand-in reads whole files only"
        buf = Path(path).read_bytes()
        starts, lengths, damage = records.scan(buf)
        if not len(starts):
            yield records.Block(buf, 0, starts, lengths, damage)
            return
        for a in range(0, len(starts), k):
            b = min(a + k, len(starts))
            lo = int(starts[a]) - records.HEADER
            hi = int(starts[b - 1] + lengths[b - 1]) + records.FOOTER
            yield records.Block(buf[lo:hi], lo, starts[a:b] - lo, lengths[a:b],
                                damage if a == 0 else [])
    return scan_file


def out_of_memory(tried: list):
    """A stand-in for a function that the machine's memory runs out in: it notes its first
    argument in ``tried``, then raises as tbconvert does then."""
    from tbconvert.errors import OutOfResourcesError

    def short(first, *_args, **_kwargs):
        tried.append(first)
        raise OutOfResourcesError("the machine ran out of memory")
    return short


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a server a test started: SIGTERM, then SIGKILL if it does not end in time."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def launch_tensorboard(logdir: Path, log_path: Path, *flags: str) -> subprocess.Popen:
    """A real ``tensorboard`` serving ``logdir`` on 127.0.0.1, on a port it picks itself
    (``--port 0``: a port found free here could be taken by another process, such as the
    Rust data server of another TensorBoard, before this one binds it); its output in
    ``log_path``. :func:`tensorboard_base` tells where it listens."""
    with open(log_path, "wb") as log:
        return subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
                                 "--host", "127.0.0.1", "--port", "0", *flags],
                                stdout=log, stderr=subprocess.STDOUT)


def tensorboard_base(proc: subprocess.Popen, log_path: Path, timeout: float = 60) -> str:
    """``http://127.0.0.1:PORT`` of a server :func:`launch_tensorboard` started, once it has
    bound its port (it says where then); the test fails if it exits or takes longer."""
    import re
    import time

    import pytest
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(rb" at (http://127\.0\.0\.1:\d+)/", log_path.read_bytes())
        if found:
            return found.group(1).decode()
        if proc.poll() is not None:
            pytest.fail("tensorboard exited: " + log_path.read_text(errors="replace")[-2000:])
        if time.monotonic() > deadline:
            pytest.fail(f"tensorboard did not listen within {timeout:.0f} s")
        time.sleep(0.1)


def series_snapshot(data) -> dict:
    """Every series of ``data`` (what ``tbconvert.read`` gives) as plain values, for equality:
    each run's start time and tags in order, each series' class, metadata, steps, wall times,
    hidden flags and values (tensors as ``oracle.canonical`` gives them)."""
    import numpy as np
    from oracle import canonical
    out = {}
    for run, tags in data.series.items():
        out[(run, "start")] = data.runs[run].start_time
        out[(run, "order")] = list(tags)     # tags in order of first appearance
        for tag, s in tags.items():
            common = (type(s).__name__, s.metadata, s.steps.tobytes(), s.wall_times.tobytes(),
                      None if s.hidden is None else np.asarray(s.hidden).tobytes())
            if hasattr(s, "values"):
                payload = (s.values.dtype.str, s.values.tobytes())
            elif hasattr(s, "tensors"):
                payload = (s.dtypes.tobytes(), [canonical(t) for t in s.tensors])
            else:
                payload = (s.offsets.tobytes(), list(s.blobs))
            out[(run, tag)] = common + (payload,)
    return out
