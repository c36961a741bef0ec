"""Small runs given to worker processes in groups (``runtasks.RunGroup``), read together."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers import BENCH, on_path
from test_small_runs import _sweep

import tbconvert
from tbconvert import cluster, runtasks
from tbconvert.formats.tfevents import reader as tfevents_reader
from tbconvert.formats.tfevents import small_runs

on_path(BENCH)
import writers  # noqa: E402


def _worth(tmp_path) -> tuple[bool, int, int]:
    from tbconvert.api import open_reader, open_writer
    report = tbconvert.Report()
    reader = open_reader(tmp_path / "logs", report=report)
    with reader, open_writer(tmp_path / "out.parquet", report=report) as writer:
        worth = runtasks.worth_splitting(reader, writer, jobs=2)
        writer.abort()
    return worth, reader.parallel_size(), reader.task_size()


def test_small_runs_count_towards_tasks_by_what_they_cost(tmp_path, monkeypatch):
    """Tasks give small runs out in groups: a sweep's runs count towards worker processes by
    their bytes and a fixed cost each. The reader's own parallel read, a part per run, still
    leaves them out (a task each cost a sweep five times its time)."""
    _sweep(tmp_path / "logs")
    files = [f for f in (tmp_path / "logs").rglob("*") if f.is_file()]
    worth, parallel, tasks = _worth(tmp_path)
    assert not worth and parallel == 0
    runs = len(tbconvert.info(tmp_path / "logs").runs)
    assert runs == 18 and tasks == sum(f.stat().st_size for f in files) + \
        runs * small_runs.SMALL_RUN_COST
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", tasks)
    assert _worth(tmp_path) == (True, 0, tasks)
    writers.scalar_run(tmp_path / "logs" / "long", "pytorch", 20_000, seed=5)
    long = sum(p.stat().st_size for p in (tmp_path / "logs" / "long").iterdir())
    assert _worth(tmp_path) == (True, long, tasks + long)


def test_groups_of_runs_are_cut_where_the_reader_cuts_them():
    """Consecutive small runs up to the bytes and files of a group; a large run alone, the
    runs around it in groups of their own."""
    big = small_runs.SMALL_RUN_BYTES + 1
    assert small_runs.groups([10, 20, big, 30, 40, 50], [1] * 6) == [[0, 1], [2], [3, 4, 5]]
    assert small_runs.groups([10, 20, 30, 40], [1] * 4, cap=50) == [[0, 1], [2], [3]]
    most = small_runs.GROUP_FILES
    assert small_runs.groups([1, 1, 1], [most - 1, 1, 1]) == [[0, 1], [2]]
    assert small_runs.groups([], []) == []


def _outputs(out: Path) -> dict:
    """Every output file's bytes by place; an event file by its run (its name holds the
    process id)."""
    files = sorted(out.rglob("*")) if out.is_dir() else [out]
    found = {}
    for f in files:
        if f.is_file():
            where = f.relative_to(out).as_posix() if out.is_dir() else ""
            if "tfevents" in f.name:
                where = f.parent.relative_to(out).as_posix()
            found[where] = hashlib.sha256(f.read_bytes()).hexdigest()
    return found


@pytest.mark.parametrize("dst", ["out.parquet", "dataset", "logdir", "out.csv", "out.h5"])
def test_a_sweep_converted_in_groups_of_runs_is_the_conversion_in_one_process(dst, tmp_path,
                                                                             monkeypatch):
    """Worker processes that each convert groups of small runs, read together, give the
    output of one process byte for byte, and its report."""
    src = tmp_path / "logs"
    _sweep(src)
    for i in range(12):
        writers.scalar_run(src / f"s{i:02d}", "tf2" if i % 3 else "pytorch", 400, seed=i)
    to = {"dataset": "parquet", "logdir": "tfevents"}.get(dst)
    one = tbconvert.convert(src, tmp_path / "one" / dst, to_format=to, jobs=1)
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(small_runs, "GROUP_FILES", 6)    # several groups of several runs
    handed = []
    real = runtasks._items

    def items(*args):
        handed.extend(real(*args))
        return handed
    monkeypatch.setattr(runtasks, "_items", items)
    two = tbconvert.convert(src, tmp_path / "two" / dst, to_format=to, jobs=2)
    groups = [len(item.tasks) for item in handed if isinstance(item, runtasks.RunGroup)]
    assert len(groups) > 3 and max(groups) > 2
    assert _outputs(tmp_path / "one" / dst) == _outputs(tmp_path / "two" / dst)
    assert [(i.kind, i.message) for i in one.issues] == [(i.kind, i.message) for i in two.issues]
    assert (one.runs, one.series, one.points) == (two.runs, two.series, two.points)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [dst]


def _dying_item(item):
    """``runtasks._convert_item``, whose worker process dies on any item that holds run
    ``$TBCONVERT_TEST_KILLER`` (not in the leading process)."""
    import multiprocessing
    tasks = item.tasks if isinstance(item, runtasks.RunGroup) else [item]
    if multiprocessing.parent_process() is not None and \
            any(t.name == os.environ["TBCONVERT_TEST_KILLER"] for t in tasks):
        os._exit(3)
    return runtasks._convert_item(item)


def test_a_group_whose_process_keeps_dying_costs_only_the_run_that_kills_it(tmp_path,
                                                                           monkeypatch):
    """A group of runs whose worker died at every try is converted again a run at a time:
    the run that kills its process is reported and left out, its group's other run is
    converted."""
    src = tmp_path / "logs"
    for i in range(6):
        writers.scalar_run(src / f"r{i}", "pytorch", 90, seed=i)
    alone = tbconvert.convert(src, tmp_path / "alone.parquet", jobs=1, runs="^(?!r3$)")
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(small_runs, "GROUP_FILES", 2)
    monkeypatch.setenv("TBCONVERT_TEST_KILLER", "r3")
    monkeypatch.setattr(runtasks, "_convert_item", _dying_item)
    real = cluster.run_tasks
    calls = []

    def run_tasks(fn, items, **kw):
        calls.append([type(item).__name__ for item in items])
        assert not kw["share"]    # (the leading process adds the staged runs to the output)
        return real(fn, items, **kw)
    monkeypatch.setattr(cluster, "run_tasks", run_tasks)
    report = tbconvert.convert(src, tmp_path / "out.parquet", jobs=2)
    assert calls == [["RunGroup"] * 3, ["RunTask"] * 2]
    lost = [(i.run, i.message) for i in report.issues if i.kind == "unreadable_run"]
    assert lost == [("r3", "r3: the process converting it died 3 times; skipped, the other "
                           "runs were read")]
    assert (tmp_path / "out.parquet").read_bytes() == (tmp_path / "alone.parquet").read_bytes()
    assert (report.runs, report.points) == (alone.runs, alone.points)


@pytest.mark.parametrize("sendfile", [True, False])
def test_a_staged_range_of_rows_is_copied_whole(tmp_path, monkeypatch, sendfile):
    """A run's rows in its group's CSV staging file: from where they start to where they end,
    with the kernel's copy or without it (a file system that refuses it)."""
    import errno

    from tbconvert.formats.csv import writer as csv_writer
    if not sendfile:
        def refused(*args):
            raise OSError(errno.EINVAL, "not here")
        monkeypatch.setattr(os, "sendfile", refused)
    source = tmp_path / "group"
    data = bytes(range(256)) * 5000
    source.write_bytes(data)
    with open(tmp_path / "out", "wb") as fh:
        fh.write(b"head,")
        csv_writer._append_file(fh, source, 1000, 1_200_000)
        csv_writer._append_file(fh, source, 7, 9)
        csv_writer._append_file(fh, source)
    assert (tmp_path / "out").read_bytes() == b"head," + data[1000:1_200_000] + data[7:9] + data
    with open(tmp_path / "out2", "wb") as fh, pytest.raises(OSError, match="ended early"):
        csv_writer._append_file(fh, source, 0, len(data) + 1)
