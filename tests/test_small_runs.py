"""Small runs read together (``small_runs``) read exactly as each run read alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import BENCH, FIXTURES, LOGDIRS, on_path, series_snapshot

import tbconvert
from tbconvert.formats.tfevents import records, small_runs

on_path(BENCH)
import writers  # noqa: E402


def _snapshot(logdir: Path) -> dict:
    data = tbconvert.read(logdir, restarts="keep-all")
    return {"report": [(i.kind, i.message, i.run) for i in data.report.issues],
            "runs": list(data.series),
            "records": {run: [(r.kind, r.step, r.wall_time, r.payload)
                              for r in data.runs[run].records] for run in data.runs},
            **series_snapshot(data)}


@pytest.fixture
def groups(monkeypatch):
    """How many groups of runs were read together, and how many runs they held."""
    made = {"groups": 0, "runs": 0}
    real = small_runs.Group.__init__

    def counted(self, reader, runs):
        real(self, reader, runs)
        made["groups"] += 1
        made["runs"] += len(self._files)
    monkeypatch.setattr(small_runs.Group, "__init__", counted)
    return made


def _alone(logdir: Path, monkeypatch) -> dict:
    """The snapshot with every run read on its own."""
    with monkeypatch.context() as mp:
        mp.setattr(small_runs, "SMALL_RUN_BYTES", -1)
        return _snapshot(logdir)


def _sweep(logdir: Path) -> None:
    """Small runs of every real writer's form, tags in another order from run to run, some
    runs of several files, an empty file and a placeholder among them."""
    forms = ["pytorch", "tf2", "keras", "tf1_merge_all", "histo_tf2", "images_legacy",
             "images_tf2", "tensorboardx"]
    for i, form in enumerate(forms):
        writers.write_form(form, logdir / f"r{i:02d}", 240 if form == "tf1_merge_all" else 60)
    writers.histogram_run(logdir / "r08" / "run", "legacy", 6)
    writers.merge_all_histogram_run(logdir / "r09" / "run", 8)
    for i, tags in enumerate([("a", "b", "c"), ("c", "a", "b"), ("b", "c", "a")]):
        writers.scalar_run(logdir / f"tags{i}", "pytorch", 90, seed=i, tags=tags)
    for i in range(3):
        writers.scalar_run(logdir / f"tags{i}", "tf2", 45, seed=10 + i, tags=("a", "z"))
    (logdir / "tags1" / "events.out.tfevents.1.empty.0.v2").write_bytes(b"")
    (logdir / "tags2" / "events.out.tfevents.1.x.profile-empty").write_bytes(b"\0" * 40)
    for name in ("multi", "resumed_purged"):
        shutil.copytree(FIXTURES / "torch_logdir" / name, logdir / name)


@pytest.mark.parametrize("name", LOGDIRS)
def test_real_writers_logdirs_read_together_as_alone(name, groups, monkeypatch):
    assert _snapshot(FIXTURES / name) == _alone(FIXTURES / name, monkeypatch)
    assert groups["groups"] >= 1


def test_small_runs_of_every_form_read_together_as_alone(tmp_path, groups, monkeypatch):
    _sweep(tmp_path)
    together = _snapshot(tmp_path)
    assert groups == {"groups": 1, "runs": 18}
    assert together == _alone(tmp_path, monkeypatch)
    # and so to the same archive, byte for byte
    tbconvert.convert(tmp_path, tmp_path.with_name("together.parquet"), jobs=1)
    with monkeypatch.context() as mp:
        mp.setattr(small_runs, "SMALL_RUN_BYTES", -1)
        tbconvert.convert(tmp_path, tmp_path.with_name("alone.parquet"), jobs=1)
    assert tmp_path.with_name("together.parquet").read_bytes() == \
        tmp_path.with_name("alone.parquet").read_bytes()


@pytest.mark.parametrize("limit", [("GROUP_BYTES", 64 << 10), ("GROUP_FILES", 4)])
def test_groups_are_cut_by_size_and_large_runs_read_alone(tmp_path, groups, monkeypatch,
                                                          limit):
    _sweep(tmp_path)
    writers.scalar_run(tmp_path / "r05", "pytorch", 20_000, seed=99)   # now a large run
    monkeypatch.setattr(small_runs, *limit)
    together = _snapshot(tmp_path)
    assert groups["groups"] > 1 and groups["runs"] < 18
    assert together == _alone(tmp_path, monkeypatch)


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["payload", "length", "cut", "garbage"])
def test_damage_in_one_run_is_told_as_when_read_alone(tmp_path, groups, monkeypatch, damage):
    _sweep(tmp_path)
    path = sorted((tmp_path / "r00").rglob("events.out.tfevents.*"))[0]
    size = path.stat().st_size
    if damage == "payload":
        _flip(path, size // 2)
    elif damage == "length":
        starts, _, _ = records.scan(path.read_bytes())
        _flip(path, int(starts[3]) - records.HEADER)
    elif damage == "cut":
        os.truncate(path, size - 7)
    else:
        with open(path, "ab") as fh:
            fh.write(b"not a record")
    together = _snapshot(tmp_path)
    assert together == _alone(tmp_path, monkeypatch)
    assert together["report"]


def test_a_run_that_cannot_be_read_whole_is_read_alone(tmp_path, groups, monkeypatch):
    _sweep(tmp_path)
    fifo = tmp_path / "tags0" / "events.out.tfevents.9.fifo.0.v2"
    os.mkfifo(fifo)
    together = _snapshot(tmp_path)
    assert groups == {"groups": 1, "runs": 17}
    assert together == _alone(tmp_path, monkeypatch)
    assert any(kind == "not_a_regular_file" for kind, _, _ in together["report"])
