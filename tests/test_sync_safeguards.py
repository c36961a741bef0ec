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
