"""A destination that is, holds or lies inside the source is refused before anything is
written, by every command that writes; a failed conversion leaves no directories behind."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert import output
from tbconvert.cli import main
from tbconvert.errors import OutputError, UsageError


def _digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@pytest.fixture
def logs(tmp_path) -> Path:
    src = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir", src)
    return src


def _refused(argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == UsageError.exit_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tbconvert: error:"), err
    assert "source" in lines[0] and "Traceback" not in err
    return lines[0]


def _cases(tmp_path: Path, logs: Path):
    link = tmp_path / "link"
    link.symlink_to(logs, target_is_directory=True)
    return [
        ["convert", str(logs), str(logs), "--to", "tfevents", "--force"],
        ["convert", str(logs), str(link), "--to", "tfevents", "--force"],
        ["convert", str(link), str(logs), "--to", "tfevents", "--force"],
        ["convert", str(logs), str(logs / "sub"), "--to", "tfevents"],
        ["convert", str(logs), str(link / "new" / "deeper.parquet")],
        ["convert", str(logs), str(logs / ".." / "logs" / "x.h5")],
        ["convert", str(logs / "train"), str(logs), "--to", "parquet", "--force"],
        ["convert", str(logs / "train"), str(tmp_path), "--to", "tfevents", "--force"],
        ["media", str(logs), "-o", str(logs / "media")],
        ["media", str(logs / "train"), "-o", str(logs), "--force"],
        ["hparams", str(logs), "-o", str(link / "trials.csv")],
        ["histograms", str(logs), "-o", str(logs / "train" / "h.parquet")],
    ]


def test_destination_overlapping_source_is_refused_by_every_command(tmp_path, logs, capsys):
    before = _digest(logs)
    for argv in _cases(tmp_path, logs):
        _refused(argv, capsys)
        assert _digest(logs) == before, argv
    assert not (tmp_path / "new").exists()


def test_tbdev_export_into_its_own_export_is_refused(tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(FIXTURES / "tbdev_export", export)
    before = _digest(export)
    _refused(["tbdev-export", str(export), "-o", str(export / "logs")], capsys)
    _refused(["tbdev-export", str(export), "-o", str(export), "--force"], capsys)
    assert _digest(export) == before


def test_api_convert_refuses_source_as_destination(logs):
    before = _digest(logs)
    with pytest.raises(UsageError, match="is the source"):
        tbconvert.convert(logs, logs, to_format="tfevents", force=True)
    assert _digest(logs) == before


def test_hard_linked_file_is_the_same_file(tmp_path, logs):
    archive = tmp_path / "a.parquet"
    tbconvert.convert(logs, archive)
    twin = tmp_path / "twin.parquet"
    os.link(archive, twin)
    with pytest.raises(UsageError, match="is the source"):
        tbconvert.convert(archive, twin, force=True)


def test_separate_destination_still_converts(tmp_path, logs):
    tbconvert.convert(logs, tmp_path / "out", to_format="tfevents")
    tbconvert.convert(logs / "train", tmp_path / "logs_train.parquet")   # a sibling name
    assert (tmp_path / "out").is_dir() and (tmp_path / "logs_train.parquet").is_file()


def test_case_folded_names_compared_only_where_case_is_ignored(tmp_path, logs, monkeypatch):
    upper = tmp_path / "LOGS" / "out.parquet"
    # This file system tells case apart (probed, not assumed): LOGS is another directory.
    assert not output._case_insensitive(tmp_path)
    output.check_destination(logs, upper)
    # Where the probe finds case ignored, LOGS is the source.
    monkeypatch.setattr(output, "_case_insensitive", lambda d: True)
    with pytest.raises(UsageError, match="inside the source"):
        output.check_destination(logs, upper)


def test_case_probe_leaves_nothing_behind(tmp_path):
    output._CASE_PROBES.clear()
    output._case_insensitive(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_failed_conversion_removes_the_parents_it_created(tmp_path, logs):
    keep = tmp_path / "existing"
    keep.mkdir()
    dst = keep / "a" / "b" / "c" / "out.parquet"
    with pytest.raises(KeyError):
        with output.AtomicOutput(dst, force=False, directory=False).writing() as tmp:
            tmp.write_bytes(b"partial")
            raise KeyError("boom")
    assert keep.is_dir() and list(keep.iterdir()) == []


def _archive_with_nul_run(path: Path) -> None:
    import numpy as np

    from tbconvert import api
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    with api.open_writer(path) as w:
        for name in ("fine", "nul\x00byte"):
            w.write_run(Run(name, 1.0), iter([ScalarSeries(
                run=name, tag="loss", metadata=md, steps=np.arange(3), hidden=None,
                wall_times=np.arange(3, dtype=np.float64), values=np.ones(3, np.float32))]))


def test_failed_cli_conversion_leaves_no_new_directories(tmp_path, capsys):
    src = tmp_path / "src.parquet"
    _archive_with_nul_run(src)
    dst = tmp_path / "x" / "y" / "out.h5"      # HDF5 cannot hold the NUL: fails mid-way
    code = main(["convert", str(src), str(dst)])
    assert code not in (0, 1), capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.parquet"]


def test_parents_shared_with_a_committed_output_stay(tmp_path):
    root = tmp_path / "new"
    first = output.AtomicOutput(root / "one", force=False, directory=True)
    second = output.AtomicOutput(root / "two", force=False, directory=True)
    first.commit()
    second.abort()
    assert (root / "one").is_dir() and not (root / "two").exists()


def test_parent_creation_failure_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot create"):
        output.AtomicOutput(blocker / "sub" / "out", force=False, directory=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_destination_name_near_the_length_limit(tmp_path, logs):
    dst = tmp_path / ("é" * 120 + ".parquet")      # 248 bytes: the hidden temporary must fit too
    tbconvert.convert(logs, dst)
    assert dst.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([dst.name, "logs"])


def test_missing_source_is_still_exit_3(tmp_path, capsys):
    missing = tmp_path / "nope"
    assert main(["convert", str(missing), str(missing), "--to", "tfevents"]) == 3
    assert "no such file" in capsys.readouterr().err


def _appearing(monkeypatch, make) -> None:
    """Make the destination (``make(final)``) just before each output is committed."""
    commit = output.AtomicOutput.commit

    def commit_after(self):
        make(self.final)
        commit(self)
    monkeypatch.setattr(output.AtomicOutput, "commit", commit_after)


@pytest.mark.parametrize("dst, to", [("out.h5", "hdf5"), ("out.parquet", "parquet"),
                                     ("out.csv", "csv"), ("logdir", "tfevents"),
                                     ("dataset", "parquet")])
def test_destination_appearing_during_the_conversion_is_not_replaced(tmp_path, logs, capsys,
                                                                     monkeypatch, dst, to):
    final = tmp_path / dst

    def make(path):
        if to == "tfevents" or "." not in dst:
            path.mkdir()
            (path / "KEEP").write_text("precious")
        else:
            path.write_text("precious")
    _appearing(monkeypatch, make)
    code = main(["convert", str(logs), str(final), "--to", to, "-q"])
    err = capsys.readouterr().err
    assert code == 6, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "appeared while the output was being written" in lines[0], err
    assert "--force" in lines[0]
    kept = final / "KEEP" if final.is_dir() else final
    assert kept.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["logs", dst])


def test_empty_directory_destination_still_taken_and_filled_one_refused(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = output.AtomicOutput(empty, force=False, directory=True)
    (out.tmp / "a").write_text("new")
    out.commit()
    assert (empty / "a").read_text() == "new"

    filled = tmp_path / "filled"
    filled.mkdir()
    out = output.AtomicOutput(filled, force=False, directory=True)
    (filled / "theirs").write_text("theirs")
    with pytest.raises(tbconvert.errors.OutputExistsError):
        out.commit()
    assert [p.name for p in filled.iterdir()] == ["theirs"] and not out.tmp.exists()


@pytest.mark.parametrize("directory", [False, True])
def test_appearing_destination_refused_without_an_atomic_rename(tmp_path, monkeypatch,
                                                                directory):
    # where renameat2(RENAME_NOREPLACE) is missing (another system, some file systems)
    monkeypatch.setattr(output, "_rename_noreplace", lambda a, b: False)
    final = tmp_path / "out"
    out = output.AtomicOutput(final, force=False, directory=directory)
    if not directory:
        out.tmp.write_text("new")
    final.write_text("theirs")
    with pytest.raises(tbconvert.errors.OutputExistsError):
        out.commit()
    assert final.read_text() == "theirs" and not out.tmp.exists()
    again = output.AtomicOutput(tmp_path / "free", force=False, directory=directory)
    if not directory:
        again.tmp.write_text("new")
    again.commit()
    assert (tmp_path / "free").exists() and not again.tmp.exists()


def test_forced_output_still_replaces_what_appeared(tmp_path):
    final = tmp_path / "out.h5"
    out = output.AtomicOutput(final, force=True, directory=False)
    out.tmp.write_text("new")
    final.write_text("theirs")
    out.commit()
    assert final.read_text() == "new"


@pytest.mark.parametrize("exchange", [True, False], ids=["swapped", "moved-aside"])
def test_a_signal_while_a_forced_directory_is_put_in_place_keeps_the_complete_output(
        tmp_path, monkeypatch, exchange):
    # Ctrl-C right after the new output took the final name, before the old one was removed:
    # the new output stays, the old one goes, and the interrupt says the output is complete.
    import signal
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "old.txt").write_text("old")
    real_exchange = output._exchange

    def exchange_then_signal(a, b):
        done = real_exchange(a, b) if exchange else False
        os.kill(os.getpid(), signal.SIGINT)
        return done

    monkeypatch.setattr(output, "_exchange", exchange_then_signal)
    out = output.AtomicOutput(dst, force=True, directory=True)
    with pytest.raises(KeyboardInterrupt) as caught:
        with out.writing() as tmp:
            (tmp / "new.txt").write_text("new")
    assert caught.value.complete == dst
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in dst.iterdir()) == ["new.txt"]


def test_the_sweep_keeps_a_replaced_output_and_odd_names(tmp_path):
    """A killed --force replacement may leave the old output only under its "old-" name:
    that one is the user's and stays; so does a name whose process number is absurd."""
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    owner = output._owner().split("-")[0]
    kept_old = tmp_path / f".out{output.TMP_MARK}{owner}-{p.pid}-old-0123abcd"
    absurd = tmp_path / f".out{output.TMP_MARK}{owner}-99999999999999999999999-x"
    gone = tmp_path / f".out{output.TMP_MARK}{owner}-{p.pid}-0123456789ab"
    for d in (kept_old, absurd, gone):
        d.mkdir()
    out = output.AtomicOutput(tmp_path / "out", force=False, directory=True)
    out.abort()
    assert kept_old.exists() and absurd.exists() and not gone.exists()


def test_an_interrupt_with_a_destination_that_appeared_is_not_told_complete(tmp_path,
                                                                             monkeypatch):
    import signal
    dst = tmp_path / "out.txt"
    out = output.AtomicOutput(dst, force=False, directory=False)
    real = output._rename_noreplace

    def appeared(a, b):
        dst.write_text("someone else's")
        os.kill(os.getpid(), signal.SIGINT)
        return real(a, b)

    monkeypatch.setattr(output, "_rename_noreplace", appeared)
    with pytest.raises(KeyboardInterrupt) as caught:
        with out.writing() as tmp:
            tmp.write_text("ours")
    assert getattr(caught.value, "complete", None) is None
    assert dst.read_text() == "someone else's"


@pytest.mark.parametrize("name", ["out.parquet/", "out.h5/", "out.csv/"])
def test_a_file_suffix_with_a_trailing_slash_is_refused(tmp_path, logs, capsys, name):
    """``out.parquet/`` asks for a directory under a name that says one file: it was written
    as that one file, slash ignored. Refused, naming both readings, before anything is read."""
    dst = f"{tmp_path}/{name}"
    assert main(["convert", str(logs), dst]) == UsageError.exit_code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trailing /" in err[0] and "leave out the /" in err[0], err
    with pytest.raises(UsageError, match="trailing /"):
        tbconvert.convert(logs, dst)
    assert not (tmp_path / name.rstrip("/")).exists()
    tbconvert.convert(logs, tmp_path / name.rstrip("/"))   # the same name without the slash
    assert (tmp_path / name.rstrip("/")).is_file()


def test_a_dangling_link_as_a_directory_destination_is_told_as_a_link(tmp_path, logs, capsys):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere")
    for extra in ([], ["--force"]):
        assert main(["convert", str(logs), str(link), "--to", "parquet", *extra]) == 6
        err = capsys.readouterr().err
        assert "is a symbolic link to" in err and "which does not exist" in err, err
        assert "is a file" not in err
    assert link.is_symlink() and not (tmp_path / "nowhere").exists()
