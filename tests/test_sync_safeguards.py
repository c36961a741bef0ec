"""What keeps an archive safe from the mistakes around it: a source that is suddenly empty
(a share not mounted, a mistyped path), lock files that are not a sync's, and an output
name that is a file. Real fixtures, the command as its own process where it prints."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from helpers import FIXTURES, run_tbconvert

import tbconvert
from tbconvert.errors import OutputExistsError
from tbconvert.incremental.lock import LOCK_FILE

TORCH = FIXTURES / "torch_logdir"
EXPORT_ROOT = FIXTURES / "tbdev_export"


def _runs(path) -> list[str]:
    return sorted(r.run for r in tbconvert.info(path).runs)


def test_an_empty_source_never_empties_the_archive(tmp_path):
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    tbconvert.sync(logs, dst)
    before = _runs(dst)
    shutil.rmtree(logs)
    logs.mkdir()          # the mount point of a share that is not mounted
    proc = run_tbconvert("sync", logs, dst)
    assert proc.returncode == 3
    assert proc.stderr == (f"tbconvert: error: {logs}: holds no event files, so this sync "
                           f"would take all 7 runs out of {dst}; nothing was changed (is SRC "
                           "mounted and spelt right? To empty the dataset, delete it)\n")
    assert _runs(dst) == before
    # runs that leave a source that still has some do leave the dataset, as documented
    shutil.copytree(TORCH / "train", logs / "train")
    report = tbconvert.sync(logs, dst)
    kept = _runs(logs)
    assert "train" in kept and report.runs_removed == len(before) - len(kept) > 0
    assert _runs(dst) == kept


def test_a_first_sync_of_an_empty_logdir_is_fine(tmp_path):
    (tmp_path / "logs").mkdir()
    report = tbconvert.sync(tmp_path / "logs", tmp_path / "archive")
    assert report.runs == 0 and (tmp_path / "archive" / "_tbconvert.json").exists()


@pytest.mark.parametrize("content", ['[1, 2]', '"x"', '{"host": "elsewhere", "pid": 1, "time": 1e20}',
                                     '{"host": "elsewhere", "pid": 1, "time": NaN}',
                                     '{"host": "elsewhere", "pid": 1, "time": true}'])
def test_a_lock_that_is_not_a_syncs_is_held_for_a_minute_then_taken_over(tmp_path, content):
    dst = tmp_path / "archive"
    tbconvert.sync(TORCH, dst)
    lock = dst / LOCK_FILE
    lock.write_text(content)
    proc = run_tbconvert("sync", TORCH, dst)     # fresh: it may be a lock being written
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "another sync is running on this dataset (another process); wait for it, or if " \
           "it is dead pass --break-lock" in proc.stderr
    old = time.time() - 120
    os.utime(lock, (old, old))
    report = tbconvert.sync(TORCH, dst)
    (issue,) = [i for i in report.issues if i.kind == "stale_lock_taken_over"]
    assert "(unreadable and over a minute old)" in issue.message
    assert not lock.exists()


def test_break_lock_takes_a_lock_that_is_not_a_syncs(tmp_path):
    dst = tmp_path / "archive"
    tbconvert.sync(TORCH, dst)
    (dst / LOCK_FILE).write_text("[1, 2]")
    report = tbconvert.sync(TORCH, dst, break_lock=True)
    assert [i.kind for i in report.issues] == ["stale_lock_taken_over"]
    assert not (dst / LOCK_FILE).exists()


@pytest.mark.parametrize("src", [EXPORT_ROOT, EXPORT_ROOT / "experiment_9bFlIkpYt5HfavHYMD5hzQ"])
@pytest.mark.parametrize("force", [False, True])
def test_an_export_written_over_a_file_is_refused_the_same_with_or_without_force(
        tmp_path, src, force):
    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises(OutputExistsError) as exc:
        tbconvert.tbdev_export(src, target, force=force)
    assert str(exc.value) == (f"{target} exists and is a file; refusing to replace it with a "
                              "directory; remove it first")
    assert target.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_sync_into_a_dataset_convert_wrote_reports_what_it_replaces(tmp_path):
    """Its runs are read whole once (run_read_whole), and those the source lacks are
    reported removed, as docs/archives.md says; they were counted as added and dropped
    without a word."""
    same, other = tmp_path / "same", tmp_path / "other"
    tbconvert.convert(TORCH, same, to_format="parquet")
    report = tbconvert.sync(TORCH, same)
    assert (report.runs_added, report.runs_rearchived, report.runs_removed) == (0, 7, 0)
    assert sorted(i.run for i in report.issues if i.kind == "run_read_whole") == _runs(TORCH)
    tf2 = FIXTURES / "tf2_logdir"
    tbconvert.convert(tf2, other, to_format="parquet")
    report = tbconvert.sync(TORCH, other)
    assert (report.runs_added, report.runs_removed) == (7, len(_runs(tf2)))
    assert sorted(i.run for i in report.issues if i.kind == "run_removed") == _runs(tf2)
    assert _runs(other) == _runs(TORCH)


def _same_as_convert(src, dst, tmp_path) -> None:
    full = tmp_path / "full"
    shutil.rmtree(full, ignore_errors=True)
    tbconvert.convert(src, full, to_format="parquet")
    proc = run_tbconvert("verify", "-q", "--restarts", "keep-all", dst, full)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _part_names(dst) -> set[str]:
    return {p.name for p in dst.iterdir() if p.name.startswith("part-")}


def test_parts_without_their_manifest_are_never_removed(tmp_path):
    """A dataset that lost its manifest (or a copy of its parts) is not taken for what a
    killed first sync leaves (which holds its lock): the sync refuses, whatever the source."""
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    tbconvert.sync(logs, dst)
    (dst / "_tbconvert.json").unlink()
    parts = _part_names(dst)
    for source in (logs, tmp_path / "empty"):
        source.mkdir(exist_ok=True)
        proc = run_tbconvert("sync", source, dst)
        assert proc.returncode == 6 and "Traceback" not in proc.stderr
        assert proc.stderr == (f"tbconvert: error: {dst}: holds {len(parts)} part file(s) of a "
                               "dataset but not its manifest _tbconvert.json; sync leaves them "
                               "alone. Put _tbconvert.json back from a copy, or sync into a new "
                               "directory (the parts themselves can be read with tbconvert "
                               "convert, one at a time)\n")
        assert _part_names(dst) == parts


def test_a_changed_manifest_is_refused_even_when_nothing_is_new(tmp_path):
    """The check that finds nothing new reads the manifest too: one changed there must not
    decide which parts are removed (here one part's name, one bit flipped)."""
    dst = tmp_path / "archive"
    tbconvert.sync(TORCH, dst)
    marker = dst / "_tbconvert.json"
    good = marker.read_bytes()
    bad = bytearray(good)
    at = bad.index(b"part-00000-") + len("part-00000-")
    bad[at] ^= 1
    marker.write_bytes(bytes(bad))
    parts = _part_names(dst)
    proc = run_tbconvert("sync", TORCH, dst)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert proc.stderr == (f"tbconvert: error: {marker}: damaged (its checksum does not "
                           "match); sync leaves the dataset as it is: put _tbconvert.json back "
                           "from a copy, or sync into a new directory (convert "
                           "--ignore-checksum reads what the dataset still holds)\n")
    assert _part_names(dst) == parts
    marker.write_bytes(good)
    assert tbconvert.sync(TORCH, dst).changed_nothing
    _same_as_convert(TORCH, dst, tmp_path)


@pytest.mark.parametrize("looked_up", [256, 0], ids=["looked-up", "listed"])
def test_a_missing_part_has_its_run_read_whole_again(tmp_path, monkeypatch, looked_up):
    """(Parts are looked up one by one, or past LOOKED_UP_PARTS found in one listing.)"""
    import tbconvert.incremental
    monkeypatch.setattr(tbconvert.incremental, "LOOKED_UP_PARTS", looked_up)
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    tbconvert.sync(logs, dst)
    gone = next(p for p in dst.iterdir() if p.name.startswith("part-") and "-train-" in p.name)
    gone.unlink()
    report = tbconvert.sync(logs, dst)
    assert (report.runs_rearchived, report.parts_written) == (1, 1) and not report.lost
    (issue,) = report.issues
    assert issue.kind == "run_read_whole" and issue.run == "train"
    assert f"(its part {gone.name} is missing from the dataset)" in issue.message
    _same_as_convert(logs, dst, tmp_path)
    assert tbconvert.sync(logs, dst).changed_nothing


def test_a_file_that_could_not_be_read_is_read_once_it_can(tmp_path, monkeypatch):
    """A file unreadable at a sync (an I/O error, permissions, a share's hiccup) is noted
    as archived only as far as it was read: the next sync reads the rest, though the file
    did not change meanwhile."""
    import errno

    from tbconvert.formats.tfevents import records
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    victim = sorted((logs / "resumed").glob("events.out.tfevents.*"))[-1]
    scan = records.scan_file

    def failing(path, *args, **kw):
        if path == victim:
            raise OSError(errno.EIO, "Input/output error")
        return scan(path, *args, **kw)
    monkeypatch.setattr(records, "scan_file", failing)
    report = tbconvert.sync(logs, dst)
    # (the fixture's projector files are noted besides)
    assert sorted({i.kind for i in report.issues} - {"plugin_files_not_read"}) == \
        ["unreadable_file"]
    monkeypatch.setattr(records, "scan_file", scan)
    report = tbconvert.sync(logs, dst)
    assert report.runs_extended == 1 and report.new_bytes == victim.stat().st_size
    _same_as_convert(logs, dst, tmp_path)
    assert tbconvert.sync(logs, dst).changed_nothing


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_an_event_file_does_not_stop_a_sync(tmp_path):
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    (logs / "fifo").mkdir()
    os.mkfifo(logs / "fifo" / "events.out.tfevents.1.host")
    for _ in range(2):
        proc = run_tbconvert("sync", logs, dst, timeout=120)
        assert proc.returncode == 0, proc.stderr
    os.mkfifo(logs / "train" / "events.out.tfevents.9999999999.host")   # after archived ones
    proc = run_tbconvert("sync", logs, dst, timeout=120)
    assert proc.returncode == 0 and "not a regular file" in proc.stderr
    assert tbconvert.sync(logs, dst).changed_nothing
    _same_as_convert(logs, dst, tmp_path)


def test_two_runs_stored_under_one_name_cost_only_the_second(tmp_path):
    """A directory name that is not UTF-8 is stored escaped (``%FF``), which can be the
    name of another run: the second is reported and left out, and syncs do not alternate
    between them."""
    logs, dst = tmp_path / "logs", tmp_path / "archive"
    shutil.copytree(TORCH, logs)
    os.rename(logs / "multi", logs / "bad%FFname")
    shutil.copytree(TORCH / "resumed", logs / os.fsdecode(b"bad\xffname"))
    for _ in range(2):
        report = tbconvert.sync(logs, dst)
        assert [i.kind for i in report.issues if i.kind != "plugin_files_not_read"] == \
            ["run_name_taken"]
        assert report.parts_written == 0 or report.runs_added == 7
    assert "bad%FFname" in _runs(dst) and len(_runs(dst)) == 7


def test_a_directory_where_the_lock_goes_is_a_clear_error(tmp_path):
    dst = tmp_path / "archive"
    tbconvert.sync(TORCH, dst)
    (dst / LOCK_FILE).mkdir()
    old = time.time() - 120
    os.utime(dst / LOCK_FILE, (old, old))
    proc = run_tbconvert("sync", TORCH, dst)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr == (f"tbconvert: error: {dst / LOCK_FILE}: a directory where this "
                           "dataset's lock file goes; no sync can run until it is removed\n")
    assert (dst / LOCK_FILE).is_dir()


def test_a_dataset_that_lost_a_part_is_read_with_ignore_checksum_as_far_as_it_can(tmp_path):
    dst = tmp_path / "archive"
    tbconvert.sync(TORCH, dst)
    gone = next(p for p in dst.iterdir() if p.name.startswith("part-") and "-train-" in p.name)
    gone.unlink()
    proc = run_tbconvert("convert", dst, tmp_path / "a.parquet")
    assert proc.returncode == 4 and proc.stderr == (
        f"tbconvert: error: {gone}: missing from the dataset listed in _tbconvert.json; "
        "restore it from a copy, or pass --ignore-checksum to read what can still be read\n")
    report = tbconvert.convert(dst, tmp_path / "b.parquet", ignore_checksum=True)
    assert [(i.kind, i.path) for i in report.lost] == [("damaged_archive", str(gone))]
    expected = tbconvert.scalars(TORCH)
    got = tbconvert.scalars(tmp_path / "b.parquet")
    assert set(got["run"]) == set(expected["run"]) - {"train"}
    # a manifest that does not parse: no advice that cannot help
    (dst / "_tbconvert.json").write_text("{bad")
    proc = run_tbconvert("sync", TORCH, dst)
    assert proc.returncode == 4 and "--ignore-checksum" not in proc.stderr, proc.stderr
    assert "sync into a new directory\n" in proc.stderr


@pytest.mark.parametrize("damage", ["manifest cut", "manifest gone"])
def test_a_damaged_dataset_is_told_as_damaged_without_from(tmp_path, damage):
    # (not "cannot tell the format": the directory is a dataset that lost its manifest)
    ds = tmp_path / "ds"
    tbconvert.sync(TORCH, ds)
    marker = ds / "_tbconvert.json"
    if damage == "manifest cut":
        marker.write_bytes(marker.read_bytes()[:20])
    else:
        marker.unlink()
    for command in (["info", ds], ["convert", ds, tmp_path / "out.parquet"], ["verify", ds, TORCH]):
        proc = run_tbconvert(*command)
        assert proc.returncode == 4, proc.stderr
        assert "_tbconvert.json" in proc.stderr and "cannot tell the format" not in proc.stderr


def test_a_dataset_whose_first_sync_did_not_finish_says_so(tmp_path):
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "_pending-part-00000-a-g0001.parquet.tmp").write_bytes(b"half")
    (ds / LOCK_FILE).write_text("{}")
    proc = run_tbconvert("info", ds)
    assert proc.returncode == 3 and "first sync has not finished" in proc.stderr, proc.stderr
    (ds / "_tbconvert.json").mkdir()
    proc = run_tbconvert("info", ds)
    assert proc.returncode == 4 and "a directory, not the dataset's JSON manifest" in proc.stderr
    assert "Errno" not in proc.stderr
