"""Names that cannot be paths or text as they are: bytes that are not UTF-8, lone
surrogates, clashing and over-long names. Each is kept, escaped or shortened and reported;
the rest of the conversion is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import hypothesis
import numpy as np
import pytest
from helpers import FIXTURES
from oracle import tb_view

import tbconvert
from tbconvert import api, names
from tbconvert.cli import main
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries

SCALAR_MD = Metadata("scalars", b"", "", "", DataClass.SCALAR)
IMAGE_MD = Metadata("images", b"\x10\x01", "", "", DataClass.BLOB_SEQUENCE)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
BYTES_NAME = os.fsdecode(b"run_\xff\xfe")          # a directory name that is not UTF-8
WRITERS = [("tfevents", "out"), ("parquet", "out.parquet"), ("hdf5", "out.h5"),
           ("csv", "out.csv"), ("tbdev", "out_export")]

posix_bytes = pytest.mark.skipif(
    os.name != "posix" or os.fsencode("\udcff") != b"\xff",
    reason="the file system does not take arbitrary bytes")


def _scalars(run: str, tag: str = "loss", n: int = 3) -> ScalarSeries:
    return ScalarSeries(run=run, tag=tag, metadata=SCALAR_MD, steps=np.arange(n),
                        wall_times=1.6e9 + np.arange(n, dtype=np.float64), hidden=None,
                        values=np.arange(n, dtype=np.float32))


def _images(run: str, tag: str) -> BlobSequenceSeries:
    return BlobSequenceSeries.from_sequences(
        run=run, tag=tag, metadata=IMAGE_MD, steps=np.arange(2), hidden=None,
        wall_times=1.6e9 + np.arange(2, dtype=np.float64), sequences=[[b"1", b"1", PNG]] * 2)


def _archive(path: Path, runs: dict) -> Path:
    with api.open_writer(path) as w:
        for run, series in runs.items():
            w.write_run(Run(run, 1.6e9), iter(series))
    return path


def _byte_named_logdir(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / BYTES_NAME)
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / "plain")
    return src


# ------------------------------------------------------------------ not UTF-8

@posix_bytes
@pytest.mark.parametrize("fmt,dst_name", WRITERS)
def test_non_utf8_run_directory_converts_with_every_writer(tmp_path, fmt, dst_name):
    src = _byte_named_logdir(tmp_path)
    report = tbconvert.convert(src, tmp_path / dst_name, to_format=fmt)
    escaped = names.text(BYTES_NAME)
    assert escaped == "run_%FF%FE"
    if fmt == "csv":       # written, not read back: the text must hold the escaped name
        text = (tmp_path / dst_name).read_text(encoding="utf-8")
        assert escaped in text and "plain" in text
        assert any(i.kind == "name_escaped" for i in report.issues)
        return
    loaded = tbconvert.read(tmp_path / dst_name, restarts="keep-all")
    if fmt == "tfevents":
        # spelled as text as every format spells it: TensorBoard's loader fails on the whole
        # logdir at a directory name that is not UTF-8
        assert set(os.listdir(tmp_path / dst_name)) == {escaped, "plain"}
        assert escaped in loaded.runs
        assert any(i.kind == "run_renamed" for i in report.issues)
        assert {run.split("/")[0] for run in tb_view(tmp_path / dst_name)} == {escaped, "plain"}
    else:
        assert escaped in loaded.runs and BYTES_NAME not in loaded.runs
        assert any(i.kind == "name_escaped" and i.run == escaped for i in report.issues)
    assert "plain" in loaded.runs
    assert main(["verify", str(src), str(tmp_path / dst_name)]) == 0   # same data, names as stored
    assert (loaded.series["plain"]["loss"].values
            == loaded.series[escaped]["loss"].values).all()


@posix_bytes
@pytest.mark.parametrize("command,out", [("media", "m"), ("hparams", "h.csv"),
                                         ("histograms", "h.parquet"), ("info", None)])
def test_non_utf8_run_directory_through_table_commands(tmp_path, capsys, command, out):
    src = _byte_named_logdir(tmp_path)
    argv = [command, str(src)] + (["-o", str(tmp_path / out)] if out else [])
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err


@posix_bytes
@pytest.mark.parametrize("argv", [
    ["convert", "{src}", "{out}.parquet"], ["convert", "{src}", "{out}", "--to", "parquet"],
    ["convert", "{src}", "{out}", "--to", "html"], ["convert", "{src}", "{out}.h5"],
    ["hparams", "{hp}", "-o", "{out}.parquet"], ["histograms", "{src}", "-o", "{out}.parquet"],
    ["sync", "{src}", "{out}"]])
def test_a_destination_named_by_other_bytes_than_utf8_is_written(tmp_path, capsys, argv):
    """Arrow's own path handling refuses such a name; the file is opened by its bytes."""
    out = tmp_path / os.fsdecode(b"o\xfft")
    argv = [a.format(src=FIXTURES / "torch_logdir", hp=FIXTURES / "tf2_logdir" / "hparams",
                     out=out) for a in argv]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err and "could not be read" not in captured.err
    written = Path(argv[-1] if argv[0] != "convert" or "--to" not in argv else argv[2])
    assert written.exists()
    if argv[0] in ("convert", "sync") and "html" not in argv:
        assert main(["verify", str(FIXTURES / "torch_logdir"), str(written),
                     "--no-plugin-files"]) == 0


def test_lone_surrogates_from_an_export_are_escaped_for_every_writer(tmp_path):
    """As directory names spell them (percent-escaped UTF-8), in every format alike."""
    export = tmp_path / "export"
    shutil.copytree(FIXTURES / "tbdev_export", export)
    scalars = next(export.rglob("scalars.json"))
    text = scalars.read_text()
    text = text.replace('"run": "multi/losses_train"', '"run": "multi/\\ud800lone"', 1)
    text = text.replace('"tag": "losses"', '"tag": "loss\\udfffes"', 1)
    scalars.write_text(text)
    run, tag = "multi/%ED%A0%80lone", "loss%ED%BF%BFes"
    for fmt, dst_name in WRITERS:
        report = tbconvert.convert(export, tmp_path / dst_name, to_format=fmt)
        kinds = {i.kind for i in report.issues}
        # event files spell the run as a directory name: that renaming is what they report
        assert ("run_renamed" if fmt == "tfevents" else "name_escaped") in kinds, (fmt, kinds)
        if fmt == "csv":
            assert run in (tmp_path / dst_name).read_text(encoding="utf-8")
            continue
        loaded = tbconvert.read(tmp_path / dst_name, restarts="keep-all")
        assert run in loaded.runs, fmt
        assert tag in loaded.series[run], fmt


def test_text_escapes_only_lone_surrogates():
    assert names.text("plain é ✓") == "plain é ✓"
    assert names.text("a\udcffb") == "a%FFb"
    assert names.text("\ud800") == "%ED%A0%80" == names.safe_part("\ud800")
    assert names.text("\U0001f600") == "\U0001f600"    # a real pair is not lone


def test_safe_part_never_fails_on_surrogates():
    for part in ("\ud800", "a\udcff", "\udcc3\udca9", "x" * 300 + "\udcff"):
        out = names.safe_part(part)
        assert 0 < len(os.fsencode(out)) <= 255
    # surrogates that would re-encode as valid UTF-8 (not what the file system gave) are
    # percent-escaped, so reading the directory back cannot merge them with "é"
    assert names.safe_part("\udcc3\udca9") == "%C3%A9" == names.text("\udcc3\udca9")


# ------------------------------------------------------------------ clashing and long names

def test_media_tag_clashing_with_a_file_of_another_tag(tmp_path):
    src = _archive(tmp_path / "src.parquet", {"r": [
        _images("r", "a"), _images("r", "a/0_0.png"), _images("r", "b/0_0.png/x"),
        _images("r", "b")]})
    report = tbconvert.extract_media(src, tmp_path / "media")
    files = sorted(p.relative_to(tmp_path / "media").as_posix()
                   for p in (tmp_path / "media").rglob("*") if p.is_file())
    assert len(files) == 8
    assert "r/a/0_0.png" in files and "r/a/0_0.png~2/0_0.png" in files
    assert "r/b/0_0.png/x/0_0.png" in files and "r/b/0_0~2.png" in files
    assert {i.kind for i in report.issues} >= {"name_clash"}
    assert all((tmp_path / "media" / f).read_bytes() == PNG for f in files)


def test_media_clash_through_the_cli_exits_zero(tmp_path, capsys):
    src = _archive(tmp_path / "src.parquet", {"r": [_images("r", "a"), _images("r", "a/0_0.png")]})
    assert main(["media", str(src), "-o", str(tmp_path / "media")]) == 0, capsys.readouterr().err


LONG_RUN = "/".join(["d" * 120] * 50)     # 6,050 characters: over PATH_MAX as one path


def test_very_long_run_path_is_shortened_for_event_files_and_media(tmp_path):
    src = _archive(tmp_path / "src.parquet", {
        "ok": [_scalars("ok")],
        LONG_RUN: [_scalars(LONG_RUN), _images(LONG_RUN, "t" * 3000)],
        LONG_RUN + "/x": [_scalars(LONG_RUN + "/x")]})
    report = tbconvert.convert(src, tmp_path / "out", to_format="tfevents")
    assert sum(i.kind == "run_renamed" for i in report.issues) == 2
    loaded = tbconvert.read(tmp_path / "out", restarts="keep-all")
    assert len(loaded.runs) == 3 and "ok" in loaded.runs
    for root, dirs, files in os.walk(tmp_path / "out"):
        rel = os.path.relpath(root, tmp_path / "out")
        assert len(os.fsencode(rel)) <= names.MAX_PATH_BYTES
        assert all(len(os.fsencode(n)) <= 255 for n in dirs + files)
    tbconvert.extract_media(src, tmp_path / "media")
    written = [p for p in (tmp_path / "media").rglob("*.png")]
    assert len(written) == 2
    assert all(len(os.fsencode(p.relative_to(tmp_path / "media"))) < 1024 for p in written)


def test_path_parts_fit_the_budget_and_stay_distinct():
    a = names.path_parts(LONG_RUN)
    b = names.path_parts(LONG_RUN + "/x")
    assert a != b
    for parts in (a, b):
        assert sum(len(p.encode()) + 1 for p in parts) <= names.MAX_PATH_BYTES
    assert names.path_parts("a/b") == ["a", "b"]


def _unescaped(part: str) -> str:
    """What :func:`names.safe_part` spelt, read back: an ``%XX`` it writes is one character."""
    out, i = [], 0
    while i < len(part):
        code = part[i + 1:i + 3].upper()
        if part[i] == "%" and code in names._ESCAPED_CODES:
            out.append(chr(int(code, 16)))
            i += 3
        else:
            out.append(part[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("name, part", [
    ("50%", "50%"), ("%41", "%41"), ("acc_90%_run", "acc_90%_run"), ("%", "%"),
    ("a\\b", "a%5Cb"), ("a%5Cb", "a%255Cb"), ("%25", "%2525"), ("%2e", "%252e"),
    ("x%ff", "x%25ff"), ("tab\t", "tab%09"), ("%%01", "%%2501")])
def test_a_percent_sign_is_escaped_only_where_it_would_read_as_an_escape(name, part):
    assert names.safe_part(name) == part
    assert _unescaped(part) == name


@pytest.mark.skipif(os.name == "nt", reason="Windows escapes more characters")
@hypothesis.settings(max_examples=500, deadline=None)
@hypothesis.given(hypothesis.strategies.text(
    alphabet="%\\\x01\x7f .aA09eEfF5cC2", max_size=24))
def test_safe_parts_read_back_as_the_names_they_came_from(name):
    """Distinct names never share a directory: every spelling reads back one way."""
    hypothesis.assume(name not in ("", ".", ".."))
    assert _unescaped(names.safe_part(name)) == name


def test_run_dirs_that_clash_get_a_suffix(tmp_path):
    taken: set = set()
    first, changed1 = names.run_dir(tmp_path, "run", taken)
    second, changed2 = names.run_dir(tmp_path, "run", taken)
    root, _ = names.run_dir(tmp_path, ".", taken)
    root2, changed3 = names.run_dir(tmp_path, ".", taken)
    assert first == tmp_path / "run" and not changed1
    assert second == tmp_path / "run~2" and changed2
    assert root == tmp_path and root2 != tmp_path and changed3


def test_media_of_the_root_run_is_not_reported_as_renamed(tmp_path):
    src = _archive(tmp_path / "src.parquet", {".": [_images(".", "img")]})
    report = tbconvert.extract_media(src, tmp_path / "media")
    assert (tmp_path / "media" / "%2E" / "img" / "0_0.png").is_file()
    assert not [i for i in report.issues if i.kind in ("name_made_safe", "name_clash")]


def test_run_dirs_differing_in_case_get_a_suffix_where_case_is_ignored(tmp_path, monkeypatch):
    taken: set = set()
    assert not names.case_insensitive(tmp_path)        # probed: this file system tells case
    assert names.run_dir(tmp_path, "Run", taken)[0] != names.run_dir(tmp_path, "run", taken)[0]
    monkeypatch.setattr(names, "case_insensitive", lambda root: True)
    taken = set()
    first, _ = names.run_dir(tmp_path, "Run", taken)
    second, changed = names.run_dir(tmp_path, "run", taken)
    assert first == tmp_path / "Run" and second == tmp_path / "run~2" and changed


POSIX_NAMES = ["2024-01-01T12:00:00", "lr=0.1|bs=32", "what?", "a*b", '"quoted" <x>', "trail.",
               "trail ", "subset_50%", "%41"]


@pytest.mark.skipif(os.name == "nt", reason="Windows refuses these characters in file names")
def test_run_names_a_posix_file_system_holds_are_kept(tmp_path):
    """An ISO time (or any name TensorBoard shows on this file system) as a run name comes
    back from an archive as the same run, not an escaped one."""
    from oracle import assert_same_view, tb_view
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tbconvert.formats.tfevents import records
    logdir = tmp_path / "logs"
    for i, name in enumerate(POSIX_NAMES):
        (logdir / name).mkdir(parents=True)
        events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2"),
                  event_pb2.Event(wall_time=2.0, step=i, summary=summary_pb2.Summary(
                      value=[summary_pb2.Summary.Value(tag="loss", simple_value=float(i))]))]
        (logdir / name / "events.out.tfevents.1.x").write_bytes(
            b"".join(records.frame(e.SerializeToString()) for e in events))
    tbconvert.convert(logdir, tmp_path / "a.parquet")
    report = tbconvert.convert(tmp_path / "a.parquet", tmp_path / "back", to_format="tfevents")
    assert not [i for i in report.issues if i.kind == "run_renamed"]
    assert sorted(p.name for p in (tmp_path / "back").iterdir() if p.is_dir()) == \
        sorted(POSIX_NAMES)
    assert_same_view(tb_view(tmp_path / "back"), tb_view(logdir))
