"""What reports say, and that they say it all: runs a destination cannot hold, what restart
markers hid, the counters of sync, media and export reports, and a source read as a format
it is not in. Every case is a fixture converted as a user converts it."""

from __future__ import annotations

import collections
import json
import os
import shutil

import numpy as np
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.cli import main
from tbconvert.errors import CorruptDataError, FormatError, UnsupportedError
from tbconvert.formats.tfevents import assemble, records
from tbconvert.formats.tfevents.reader import TfeventsReader

TORCH = FIXTURES / "torch_logdir"
EXPORT_ID = "9bFlIkpYt5HfavHYMD5hzQ"
EXPORT = FIXTURES / "tbdev_export" / f"experiment_{EXPORT_ID}"


def _of_kind(report, kind: str) -> list:
    return [i for i in report.issues if i.kind == kind]


def _runs(path, **kw) -> list[str]:
    return [r.run for r in tbconvert.info(path, **kw).runs]


# -- a run without data, written to a TensorBoard.dev export --------------------------------

def test_a_run_without_data_left_out_of_an_export_is_reported(tmp_path):
    report = tbconvert.convert(TORCH, tmp_path / "exp", to_format="tbdev")
    # torch's add_scalars parent run "multi" holds only the file-version event
    assert _runs(tmp_path / "exp") == [r for r in _runs(TORCH) if r != "multi"]
    (issue,) = _of_kind(report, "run_without_data_left_out")
    assert (issue.run, issue.count, issue.lost) == ("multi", 1, False)
    assert issue.message.startswith("multi: ")
    assert report.runs == 7        # read and selected; the issue says what the export lacks


def test_runs_whose_selected_series_are_none_are_reported_too(tmp_path):
    report = tbconvert.convert(TORCH, tmp_path / "exp", to_format="tbdev", tags="^loss$")
    kept = _runs(tmp_path / "exp")
    assert kept == ["resumed", "resumed_purged", "train"]
    left = sorted(i.run for i in _of_kind(report, "run_without_data_left_out"))
    assert left == sorted(set(_runs(TORCH)) - set(kept))


def test_the_command_prints_the_run_left_out(tmp_path, capsys):
    assert main(["convert", str(TORCH), str(tmp_path / "exp"), "--to", "tbdev"]) == 0
    err = capsys.readouterr().err
    assert "note: 1 run without data left out" in err
    assert "  multi: the run holds no data the export layout can hold" in err


# -- restart markers an event-file destination does not write -------------------------------

def _marker_notes(report) -> dict[str, tuple[int, str]]:
    return {i.run: (i.count, i.message) for i in _of_kind(report, "restart_markers_not_written")
            if not i.lost}


def test_restart_marker_notes_say_what_the_markers_hid(tmp_path):
    notes = _marker_notes(tbconvert.convert(TORCH, tmp_path / "visible", to_format="tfevents"))
    # "resumed": its only START is the run's first, which TensorBoard takes as the start
    count, text = notes["resumed"]
    assert count == 1 and "hid none of the points written, so no point is affected" in text
    assert "left out" not in text
    count, text = notes["resumed_purged"]
    assert count == 2 and text.endswith("the points they hid are left out instead")
    kept = _marker_notes(tbconvert.convert(TORCH, tmp_path / "all", to_format="tfevents",
                                           restarts="keep-all"))
    assert kept["resumed"] == notes["resumed"]
    count, text = kept["resumed_purged"]
    assert count == 2 and "the 11 point(s) they hid are written" in text
    assert "left out" not in text


def test_keep_all_writes_hidden_points_that_arrive_in_chunks_of_their_own(tmp_path, monkeypatch):
    """Small reading blocks cut ``resumed_purged`` so that some chunks hold only hidden
    points; with keep-all each of them is written, none taken for the copy loop's witness.
    TensorBoard's view must be the one of the same conversion read in whole blocks."""
    from oracle import assert_same_view, tb_view
    kw = dict(to_format="tfevents", runs="^resumed_purged$", restarts="keep-all")
    tbconvert.convert(TORCH, tmp_path / "whole", **kw)
    monkeypatch.setattr(TfeventsReader, "block_size", 64)
    monkeypatch.setattr(assemble, "CHUNK_POINTS", 3)
    report = tbconvert.convert(TORCH, tmp_path / "cut", **kw)
    assert not report.lost
    view = tb_view(tmp_path / "cut")
    assert_same_view(view, tb_view(tmp_path / "whole"))
    want = tbconvert.read(TORCH, runs="^resumed_purged$", restarts="keep-all")
    for tag, series in want.series["resumed_purged"].items():   # no marker: all are shown
        assert [p[0] for p in view["resumed_purged"]["tags"][tag]["points"]] == \
            series.steps.tolist(), tag
    assert sum(len(t["points"]) for t in view["resumed_purged"]["tags"].values()) == 55


# -- the counters ---------------------------------------------------------------------------

def test_counters_count_what_was_read_and_the_issues_what_was_not_written(tmp_path):
    csv = tbconvert.convert(TORCH, tmp_path / "s.csv")
    for fmt in ("tfevents", "tbdev"):
        other = tbconvert.convert(TORCH, tmp_path / fmt, to_format=fmt)
        assert (other.runs, other.series, other.points) == (csv.runs, csv.series, csv.points)
    archive = tbconvert.convert(TORCH, tmp_path / "a.parquet")     # hidden points kept
    hidden = sum(i.count for i in _of_kind(csv, "hidden_points_left_out"))
    assert sum(archive.points.values()) == sum(csv.points.values()) + hidden
    rows = sum(1 for _ in open(tmp_path / "s.csv", encoding="utf-8")) - 1
    not_in_table = sum(i.count for i in _of_kind(csv, "not_in_table"))
    assert rows + not_in_table == sum(csv.points.values())
    assert rows == csv.points["scalar"]


def test_sync_counts_the_series_it_wrote(tmp_path):
    first = tbconvert.sync(TORCH, tmp_path / "ds")
    full = tbconvert.convert(TORCH, tmp_path / "full.parquet")
    assert (first.runs, first.series, first.points) == (full.runs, full.series, full.points)
    assert first.to_dict()["series"] == full.series == 26
    again = tbconvert.sync(TORCH, tmp_path / "ds")
    assert (again.runs, again.series, sum(again.points.values())) == (7, 0, 0)


def test_sync_of_new_bytes_counts_only_their_series(tmp_path):
    from tensorboard.compat.proto import event_pb2
    src = tmp_path / "logs"
    shutil.copytree(TORCH / "multi" / "losses_train", src / "losses_train")
    tbconvert.sync(src, tmp_path / "ds")
    (events,) = (src / "losses_train").iterdir()
    ev = event_pb2.Event(wall_time=1795299300.0, step=30)
    ev.summary.value.add(tag="grad_norm", simple_value=0.5)
    with open(events, "ab") as fh:
        fh.write(records.frame(ev.SerializeToString()))
    grown = tbconvert.sync(src, tmp_path / "ds")
    assert grown.runs_extended == 1
    assert (grown.series, dict(grown.points)) == (1, {"scalar": 1})


def test_media_report_to_dict_holds_the_files(tmp_path):
    report = tbconvert.extract_media(TORCH, tmp_path / "media")
    out = report.to_dict()
    assert out["media"] == {"files": report.files} and report.files == 6
    assert sum(1 for p in (tmp_path / "media").rglob("*") if p.is_file()) == 6
    json.dumps(out)


def test_export_report_to_dict_holds_experiments_root_and_failures(tmp_path):
    root = tmp_path / "export"
    shutil.copytree(EXPORT, root / EXPORT.name)
    bad = root / f"experiment_{'B' * 22}"
    shutil.copytree(EXPORT, bad)
    npz = next((bad / "tensors").glob("*.npz"))     # pickled strings: refused by default
    np.savez(npz, np.array(["a"], dtype=object), np.array(["b"], dtype=object))
    report = tbconvert.tbdev_export(root, tmp_path / "logs")
    out = report.to_dict()["export"]
    assert (out["experiments"], out["root"]) == (2, True)
    (failure,) = out["failures"]
    assert failure["experiment"] == "B" * 22
    assert failure["error"] == UnsupportedError.__name__
    assert failure["message"] == str(report.failures[0][1])
    json.dumps(report.to_dict())


# -- a source read as a format it is not in -------------------------------------------------

def test_a_logdir_read_as_hdf5_is_a_directory_not_a_device(capsys):
    with pytest.raises(FormatError) as info:
        tbconvert.read(TORCH, format="hdf5")
    text = str(info.value)
    assert "is a directory, and HDF5 archives are single files" in text
    assert "FIFO" not in text and "looks like tfevents" in text
    assert main(["info", str(TORCH), "--from", "hdf5"]) == 3
    assert "leave --from out" in capsys.readouterr().err


def test_a_fifo_read_as_hdf5_is_still_refused_as_such(tmp_path):
    fifo = tmp_path / "x.h5"
    os.mkfifo(fifo)
    with pytest.raises(CorruptDataError, match=r"is a FIFO \(named pipe\), not a regular file"):
        tbconvert.read(fifo, format="hdf5")


def test_a_logdir_read_as_parquet_is_a_format_error_and_a_lost_marker_damage(tmp_path, capsys):
    with pytest.raises(FormatError, match="without _tbconvert.json.*looks like tfevents"):
        tbconvert.read(TORCH, format="parquet")
    assert main(["convert", str(TORCH), str(tmp_path / "o.csv"), "--from", "parquet"]) == 3
    assert not (tmp_path / "o.csv").exists()
    capsys.readouterr()
    dataset = tmp_path / "dataset"
    tbconvert.convert(TORCH, dataset, to_format="parquet")
    (dataset / "_tbconvert.json").unlink()
    with pytest.raises(CorruptDataError, match="damaged Parquet dataset"):
        tbconvert.read(dataset, format="parquet")


def test_a_directory_without_event_files_read_as_tfevents_is_a_format_error(tmp_path, capsys):
    with pytest.raises(FormatError, match="holds no event files.*looks like tbdev"):
        tbconvert.read(FIXTURES / "tbdev_export", format="tfevents")
    assert main(["convert", str(FIXTURES / "tbdev_export"), str(tmp_path / "o.csv"),
                 "--from", "tfevents"]) == 3
    assert not (tmp_path / "o.csv").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FormatError, match="holds no event files.*check the path"):
        tbconvert.read(empty, format="tfevents")
    with pytest.raises(FormatError, match="cannot tell the format"):   # as when not told
        tbconvert.read(empty)
    with pytest.raises(FormatError, match="holds no event files"):
        tbconvert.convert(empty, tmp_path / "o.parquet", from_format="tfevents")
    assert not (tmp_path / "o.parquet").exists()


def test_a_logdir_whose_runs_are_not_selected_is_no_error(tmp_path):
    data = tbconvert.read(TORCH, format="tfevents", runs="^nothing$")
    assert data.runs == {} and data.report.issues == []


def test_a_logdir_with_no_event_file_yet_still_syncs(tmp_path):
    (tmp_path / "logs").mkdir()
    report = tbconvert.sync(tmp_path / "logs", tmp_path / "ds")
    assert (report.runs, report.series, report.lost) == (0, 0, [])
    assert collections.Counter(report.points) == collections.Counter()
