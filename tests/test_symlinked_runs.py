"""Symbolic links in a logdir, followed as TensorBoard follows them (its logdir walk enters
every path ``os.path.isdir`` accepts), with loops and links that lead nowhere reported."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from helpers import FIXTURES
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert import sourcefiles
from tbconvert.cli import main
from tbconvert.formats.tfevents import event_files, records
from tbconvert.tbparse import SummaryReader

WALL0 = 1_700_000_000.0


def _events(path: Path, tag: str, steps, wall: float = WALL0) -> Path:
    from tensorboard.compat.proto import event_pb2
    path.parent.mkdir(parents=True, exist_ok=True)
    events = [event_pb2.Event(wall_time=wall, file_version="brain.Event:2")]
    for s in steps:
        ev = event_pb2.Event(wall_time=wall + s, step=s)
        ev.summary.value.add(tag=tag, simple_value=float(s) / 4)
        events.append(ev)
    with open(path, "ab") as fh:
        fh.write(b"".join(records.frame(e.SerializeToString()) for e in events))
    return path


def _points(tags: dict) -> dict:
    return {tag: (list(s.steps), list(s.values)) for tag, s in tags.items()}


def _layout(tmp: Path) -> tuple[Path, dict]:
    """A logdir comparing runs kept elsewhere, and TensorBoard's view of it before the links
    it would follow without end are added (those the view is compared with)."""
    logdir, elsewhere = tmp / "logdir", tmp / "elsewhere"
    shutil.copytree(FIXTURES / "tensorboardx_logdir" / "run_b", elsewhere / "run_b")
    _events(logdir / "local" / "events.out.tfevents.1.host", "loss", range(3))
    solo = _events(elsewhere / "solo" / "events.out.tfevents.2.host", "acc", range(4), WALL0 + 9)
    _events(elsewhere / "pair" / "a" / "events.out.tfevents.3.host", "a", range(2))
    _events(elsewhere / "pair" / "b" / "events.out.tfevents.4.host", "b", range(2))
    # a run directory (with runs below it) linked relatively, and the same one absolutely
    os.symlink(os.path.join("..", "elsewhere", "run_b"), logdir / "linked")
    os.symlink(elsewhere / "run_b", logdir / "again")
    # an event file linked into a run directory of its own
    (logdir / "files").mkdir()
    os.symlink(solo, logdir / "files" / solo.name)
    # two directories linked to each other: the first link is a run TensorBoard shows
    os.symlink(elsewhere / "pair" / "a", logdir / "pair")
    os.symlink(os.path.join("..", "b"), elsewhere / "pair" / "a" / "to_b")
    view = tb_view(logdir)
    os.symlink(os.path.join("..", "a"), elsewhere / "pair" / "b" / "to_a")
    os.symlink("..", logdir / "local" / "up")
    # links that lead nowhere: a missing target, and two links naming each other
    os.symlink("gone-for-good", logdir / "gone")
    os.symlink("q", logdir / "p")
    os.symlink("p", logdir / "q")
    return logdir, view


def test_linked_runs_convert_to_what_tensorboard_shows(tmp_path, capsys):
    logdir, expected = _layout(tmp_path)
    assert {"linked", "again", "linked/compare/x", "again/compare/y", "files", "pair",
            "pair/to_b"} <= set(expected)
    started = time.monotonic()
    assert main(["convert", str(logdir), str(tmp_path / "out"), "--to", "tfevents"]) == 0
    err = capsys.readouterr().err
    assert time.monotonic() - started < 60
    assert "symlink loop: 2 times" in err and "dangling symlink: 3 times" in err, err
    assert f"{logdir / 'local' / 'up'}: leads back to {logdir}" in err
    assert f"{logdir / 'gone'}: a symbolic link to 'gone-for-good'" in err
    assert "Traceback" not in err
    assert_same_view(tb_view(tmp_path / "out"), expected)

    assert main(["convert", str(logdir), str(tmp_path / "all.parquet")]) == 0
    capsys.readouterr()
    archived = tbconvert.read(tmp_path / "all.parquet", restarts="keep-all")
    assert sorted(archived.series) == sorted(expected)
    assert _points(archived.series["again"]) == _points(archived.series["linked"])
    assert list(archived.series["files"]["acc"].steps) == [0, 1, 2, 3]


def test_what_is_not_followed_is_reported_with_the_data_kept(tmp_path):
    logdir, expected = _layout(tmp_path)
    problems = []
    runs = event_files.discover(logdir, lambda kind, msg: problems.append((kind, msg)))
    assert [name for name, _ in runs] == sorted(expected)
    assert [p[0] for p in problems].count("symlink_loop") == 2
    assert sorted(p[1].split(":")[0] for p in problems if p[0] == "dangling_symlink") == [
        str(logdir / n) for n in ("gone", "p", "q")]
    loaded = tbconvert.read(logdir, restarts="keep-all")
    assert sorted(loaded.series) == sorted(expected)
    assert {i.kind for i in loaded.report.issues} == {"symlink_loop", "dangling_symlink"}


def test_a_logdir_of_links_only_is_told_apart_and_converted(tmp_path, capsys):
    run = _events(tmp_path / "experiments" / "e1" / "events.out.tfevents.1.host", "loss",
                  range(3)).parent
    (tmp_path / "compare").mkdir()
    os.symlink(run, tmp_path / "compare" / "baseline")
    assert main(["convert", str(tmp_path / "compare"), str(tmp_path / "c.parquet")]) == 0
    assert capsys.readouterr().err == ""
    assert list(tbconvert.read(tmp_path / "c.parquet").series) == ["baseline"]


def test_links_that_multiply_paths_stay_bounded(tmp_path):
    """Twelve levels of two links each to the next would be 4,096 paths to the last one."""
    levels = 12
    for i in range(levels):
        (tmp_path / f"d{i}").mkdir()
    _events(tmp_path / f"d{levels}" / "events.out.tfevents.1.host", "loss", range(2))
    for i in range(levels):
        for link in ("a", "b"):
            os.symlink(os.path.join("..", f"d{i + 1}"), tmp_path / f"d{i}" / link)
    problems = []
    started = time.monotonic()
    runs = event_files.discover(tmp_path / "d0", lambda kind, msg: problems.append(kind))
    assert time.monotonic() - started < 10
    assert len(runs) == sourcefiles.MAX_PATHS_PER_DIRECTORY
    assert problems and set(problems) == {"symlink_not_followed"}
    assert runs[0][0] == "/".join(["a"] * levels)


def test_sync_lists_linked_runs_as_convert_does(tmp_path):
    logdir, _ = _layout(tmp_path)
    dst = tmp_path / "dataset"
    first = tbconvert.sync(logdir, dst)
    assert first.runs_added == len(event_files.discover(logdir, lambda *a: None))
    assert tbconvert.sync(logdir, dst).runs_unchanged == first.runs_added
    # the linked run grows where it really is: both of its names are extended
    _events(tmp_path / "elsewhere" / "run_b" / "events.out.tfevents.9.host", "late", range(2))
    assert tbconvert.sync(logdir, dst).runs_extended == 2
    full = tmp_path / "full.parquet"
    tbconvert.convert(logdir, full)
    synced = tbconvert.read(dst, restarts="keep-all").series
    converted = tbconvert.read(full, restarts="keep-all").series
    assert sorted(synced) == sorted(converted)
    assert _points(synced["linked"]) == _points(converted["linked"]) == _points(synced["again"])


def test_tbparse_compat_names_linked_runs_as_convert_does(tmp_path):
    logdir, expected = _layout(tmp_path)
    reader = SummaryReader(str(logdir), extra_columns={"dir_name"})
    named = {d or "." for d in reader.scalars.dir_name}
    assert named == {run for run, v in expected.items() if v["tags"]}


def test_a_directory_named_like_an_event_file(tmp_path, capsys):
    """TensorBoard opens such a directory as an event file: it loads nothing of it, nor of
    the run that holds it from there on; tbconvert reads both, says so, and writes them
    where TensorBoard reads them."""
    logdir = tmp_path / "logdir"
    _events(logdir / "run" / "events.out.tfevents.1.host", "loss", range(3))
    odd = logdir / "run" / "events.out.tfevents.2.host"
    _events(odd / "events.out.tfevents.3.host", "acc", range(4))
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    mux = pem.EventMultiplexer(size_guidance={"tensors": 0})
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    assert sorted(mux.Runs()) == ["run", "run/events.out.tfevents.2.host"]
    # (the run holding it stops there: its event files sorted after the directory are lost)
    assert [mux.Runs()[r]["tensors"] for r in sorted(mux.Runs())] == [["loss"], []]
    loaded = tbconvert.read(logdir)
    assert sorted(loaded.series) == ["run", "run/events.out.tfevents.2.host"]
    noted = [i for i in loaded.report.issues if i.kind == "event_file_named_directory"]
    assert len(noted) == 1 and not noted[0].lost and str(odd) in noted[0].message
    assert main(["convert", str(logdir), str(tmp_path / "out"), "--to", "tfevents"]) == 0
    err = capsys.readouterr().err
    assert "named like an event file" in err and "tf_events" in err, err
    view = tb_view(tmp_path / "out")
    assert sorted(view) == ["run", "run/events.out.tf_events.2.host"]
    assert [list(v["tags"]) for _, v in sorted(view.items())] == [["loss"], ["acc"]]
