"""HDF5 runs written apart (``Hdf5Writer.stage_run``, as a worker does) and appended in run
order (``append_staged``) give the archive ``write_run`` gives, byte for byte; whatever
fails, no scratch file is left behind."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_CWD, FIXTURES, can_mount_tmpfs, cli_env
from test_archives_roundtrip import SAMPLE_EXPERIMENT, sample_runs

import tbconvert
from tbconvert.api import open_reader, open_writer, selected_runs
from tbconvert.errors import OutputError, UnsupportedError
from tbconvert.formats.hdf5.writer import Hdf5Writer
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
from tbconvert.output import TMP_MARK
from tbconvert.report import Report
from tbconvert.verify import compare

SOURCES = ["torch_logdir", "tensorboardx_logdir", "tf2_logdir", "tbdev_export"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stage_all(src, dst: Path, stage_dir: Path, restarts="visible") -> Report:
    """``dst`` built as a parallel conversion does: every run staged into its own file first
    (what workers do), then all appended in run order."""
    report = Report()
    options = tbconvert.api.make_options(restarts=restarts)
    stage_dir.mkdir()
    staged = []
    with open_reader(src, options=options, report=report) as reader, \
            open_writer(dst, options=options, report=report) as writer:
        writer.write_experiment(reader.experiment())
        for i, (run, chunks) in enumerate(selected_runs(reader, options, report,
                                                        writer.keeps_hidden)):
            path = stage_dir / f"{i}.run"
            info = Hdf5Writer.stage_run(path, run, chunks, report, options)
            staged.append((path, info, run.name))
        assert sorted(p.name for p in stage_dir.iterdir()) == sorted(f"{i}.run" for i in
                                                                     range(len(staged)))
        for path, info, name in staged:
            writer.append_staged(path, info, name)
    assert list(stage_dir.iterdir()) == []
    return report


@pytest.mark.parametrize("source", SOURCES)
def test_staged_runs_give_the_bytes_of_write_run(tmp_path, source):
    direct = tmp_path / "direct.h5"
    one = tbconvert.convert(FIXTURES / source, direct)
    two = _stage_all(FIXTURES / source, tmp_path / "staged.h5", tmp_path / "stage")
    assert _digest(direct) == _digest(tmp_path / "staged.h5")
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert compare(FIXTURES / source, tmp_path / "staged.h5") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct.h5", "stage", "staged.h5"]


def test_hidden_points_kept_all_the_same_either_way(tmp_path):
    src = FIXTURES / "torch_logdir"
    direct = tmp_path / "direct.h5"
    tbconvert.convert(src, direct, restarts="keep-all", runs="^resumed_purged$")
    _stage_all(src, tmp_path / "staged.h5", tmp_path / "stage", restarts="keep-all")
    back = tbconvert.read(direct, restarts="keep-all")
    assert any(s.hidden is not None and s.hidden.any()
               for s in back.series["resumed_purged"].values())
    whole = tmp_path / "whole.h5"
    tbconvert.convert(src, whole, restarts="keep-all")
    assert _digest(whole) == _digest(tmp_path / "staged.h5")


def test_every_field_of_the_model_either_way(tmp_path):
    """Dense and ragged tensors (and a switch between them), blobs with holes, records,
    every scalar dtype, an empty run."""
    direct, staged = tmp_path / "direct.h5", tmp_path / "staged.h5"
    with open_writer(direct) as w:
        w.write_experiment(SAMPLE_EXPERIMENT)
        for run, chunks in sample_runs():
            w.write_run(run, iter(chunks))
    (tmp_path / "stage").mkdir()
    with open_writer(staged) as w:
        w.write_experiment(SAMPLE_EXPERIMENT)
        done = []
        for i, (run, chunks) in enumerate(sample_runs()):
            path = tmp_path / "stage" / f"{i}.run"
            done.append((path, Hdf5Writer.stage_run(path, run, iter(chunks), Report(), None),
                         run.name))
        for item in done:
            w.append_staged(*item)
    assert _digest(direct) == _digest(staged)
    assert list((tmp_path / "stage").iterdir()) == []
    assert compare(direct, staged) == []


def _scalars(run: str, tag: str = "loss", n: int = 100) -> ScalarSeries:
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    return ScalarSeries(run=run, tag=tag, metadata=md, steps=np.arange(n),
                        wall_times=np.arange(n) + 0.5, hidden=None,
                        values=np.linspace(0, 1, n, dtype=np.float32))


def _left(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir())


@pytest.mark.parametrize("where", ["run", "tag"])
def test_nul_in_a_name_is_refused_and_leaves_nothing(tmp_path, where):
    run = "a\x00b" if where == "run" else "a"
    chunks = [_scalars(run, tag="t\x00" if where == "tag" else "t")]
    with pytest.raises(UnsupportedError, match="NUL"):
        Hdf5Writer.stage_run(tmp_path / "0.run", Run(run), iter(chunks), Report(), None)
    assert _left(tmp_path) == []
    with pytest.raises(UnsupportedError, match="NUL"), open_writer(tmp_path / "o.h5") as w:
        w.write_run(Run(run), iter(chunks))
    assert _left(tmp_path) == []


def _staged_one(tmp_path: Path, name: str = "r") -> tuple[Path, dict]:
    path = tmp_path / "0.run"
    info = Hdf5Writer.stage_run(path, Run(name, 1.0), iter([_scalars(name)]), Report(), None)
    return path, info


def _damage(path: Path, info: dict) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path, info: dict) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _swap(path: Path, info: dict) -> None:
    info["crc32c"] ^= 1


@pytest.mark.parametrize("spoil,message", [
    (lambda p, i: p.unlink(), "is missing"),
    (_damage, "does not match its checksum"),
    (_truncate, "bytes long but was written"),
    (_swap, "does not match its checksum"),
])
def test_a_spoilt_staged_run_is_a_clear_error(tmp_path, spoil, message):
    out = tmp_path / "out"
    out.mkdir()
    path, info = _staged_one(tmp_path)
    spoil(path, info)
    with pytest.raises(OutputError, match=message) as caught, open_writer(out / "o.h5") as w:
        w.append_staged(path, info, "r")
    assert str(path) in str(caught.value)
    assert _left(out) == [] and not path.exists()


def test_a_foreign_file_without_its_facts_is_a_clear_error(tmp_path):
    path = tmp_path / "0.run"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(2000))
    with pytest.raises(OutputError, match="not a run written by tbconvert"), \
            open_writer(tmp_path / "o.h5") as w:
        w.append_staged(path, None, "r")
    assert _left(tmp_path) == []


def test_a_staged_run_of_another_name_is_refused(tmp_path):
    path, info = _staged_one(tmp_path, "first")
    with pytest.raises(OutputError, match="holds the run 'first' instead"), \
            open_writer(tmp_path / "o.h5") as w:
        w.append_staged(path, info, "second")
    assert _left(tmp_path) == []


def test_staging_never_overwrites_a_file(tmp_path):
    path = tmp_path / "0.run"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        Hdf5Writer.stage_run(path, Run("r"), iter([_scalars("r")]), Report(), None)
    assert path.read_bytes() == b"precious"


@pytest.mark.parametrize("staged", [False, True])
def test_an_interrupt_while_writing_a_run_leaves_nothing(tmp_path, staged):
    """Ctrl-C between two chunks (where reading the source is interruptible): the scratch
    file goes, and with ``write_run`` the whole output."""
    def chunks():
        yield _scalars("r", "a", 50000)
        os.kill(os.getpid(), signal.SIGINT)
        yield _scalars("r", "b")

    with pytest.raises(KeyboardInterrupt):
        if staged:
            Hdf5Writer.stage_run(tmp_path / "0.run", Run("r"), chunks(), Report(), None)
        else:
            with open_writer(tmp_path / "o.h5") as w:
                w.write_run(Run("r"), chunks())
    assert _left(tmp_path) == []


_FULL_DISK = textwrap.dedent("""
    import resource, signal, sys
    from pathlib import Path
    import numpy as np
    from tbconvert.formats.hdf5.writer import Hdf5Writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    from tbconvert.report import Report
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    rng = np.random.default_rng(0)
    def chunks():
        for i in range(20):
            n = 100000
            yield ScalarSeries(run="r", tag="t", metadata=md, steps=np.arange(n) + i * n,
                               wall_times=rng.random(n), hidden=None, values=rng.random(n))
    try:
        Hdf5Writer.stage_run(Path(sys.argv[1]), Run("r"), chunks(), Report(), None)
    except OSError as exc:
        print("OSError", exc.errno)
""")


def test_a_full_disk_while_staging_raises_its_os_error_and_leaves_nothing(tmp_path):
    import errno
    p = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path / "0.run")],
                       cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["OSError", str(errno.EFBIG)], p.stdout + p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert _left(tmp_path) == []


def test_write_run_keeps_its_scratch_file_beside_the_output(tmp_path):
    """The scratch file of ``write_run`` lives beside the output's temporary file, under a
    name carrying the temporary mark, and only while the run is written."""
    seen = []

    def chunks():
        yield _scalars("r")
        seen.extend(p.name for p in tmp_path.iterdir())
        yield _scalars("r", "b")

    with open_writer(tmp_path / "o.h5") as w:
        w.write_run(Run("r"), chunks())
        assert all(TMP_MARK in n for n in _left(tmp_path))
        assert len(_left(tmp_path)) == 1
    assert len(seen) == 2 and all(TMP_MARK in n for n in seen)
    assert _left(tmp_path) == ["o.h5"]


def test_appending_to_an_archive_given_up_is_a_clear_error(tmp_path):
    path, info = _staged_one(tmp_path)
    w = open_writer(tmp_path / "o.h5")
    w.abort()
    with pytest.raises(OutputError, match="no longer being written"):
        w.append_staged(path, info, "r")
    assert _left(tmp_path) == []


_STAGE_IN_CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from tbconvert.api import make_options, open_reader, selected_runs
    from tbconvert.formats.hdf5.writer import Hdf5Writer
    from tbconvert.report import Report
    report, options = Report(), make_options()
    staged = []
    with open_reader(sys.argv[1], options=options, report=report) as reader:
        for i, (run, chunks) in enumerate(selected_runs(reader, options, report, True)):
            path = Path(sys.argv[2]) / f"{i}.run"
            staged.append([str(path), Hdf5Writer.stage_run(path, run, chunks, report, options),
                           run.name])
    print(json.dumps(staged))
""")


def test_runs_staged_in_another_process_give_the_same_bytes(tmp_path):
    import json
    src = FIXTURES / "torch_logdir"
    (tmp_path / "stage").mkdir()
    p = subprocess.run([sys.executable, "-c", _STAGE_IN_CHILD, str(src), str(tmp_path / "stage")],
                       cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    with tbconvert.open_reader(src) as reader, open_writer(tmp_path / "staged.h5") as w:
        w.write_experiment(reader.experiment())
        for path, info, name in json.loads(p.stdout):
            w.append_staged(Path(path), info, name)
    tbconvert.convert(src, tmp_path / "direct.h5")
    assert _digest(tmp_path / "direct.h5") == _digest(tmp_path / "staged.h5")
    assert list((tmp_path / "stage").iterdir()) == []


_ONE_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import tbconvert
    from tbconvert.errors import OutputError
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    rng = np.random.default_rng(1)
    n = 200000
    chunks = [ScalarSeries(run="r", tag=f"t{i}", metadata=md, steps=np.arange(n),
                           wall_times=rng.random(n), hidden=None, values=rng.random(n))
              for i in range(2)]
    try:
        with tbconvert.open_writer(sys.argv[1]) as w:
            w.write_run(Run("r"), iter(chunks))
    except OutputError as exc:
        print("OutputError", exc)
""")


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs a private tmpfs (unshare -Urm)")
def test_a_disk_that_fills_while_a_run_is_copied_in_leaves_nothing(tmp_path):
    """The scratch file fits, the archive beside it does not: the disk fills during the copy.
    One clear error, and neither file is left."""
    run = [sys.executable, "-c", _ONE_RUN]
    p = subprocess.run([*run, str(tmp_path / "probe.h5")], cwd=CLI_CWD, env=cli_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and not p.stdout, p.stdout + p.stderr[-2000:]
    size = (tmp_path / "probe.h5").stat().st_size
    mnt = tmp_path / "disk"
    mnt.mkdir()
    kib = (size * 3 // 2) // 1024    # room for the scratch file, not for it and the archive
    script = (f'm="$1"; mount -t tmpfs -o size={kib}k tmpfs "$m" || exit 99; shift; "$@"; '
              'rc=$?; echo "left: $(ls -A "$m")"; exit $rc')
    p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", str(mnt), *run,
                        str(mnt / "o.h5")], cwd=CLI_CWD, env=cli_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("OutputError ") and "disk is full" in lines[0], p.stdout
    assert lines[-1] == "left: ", p.stdout
