"""``--jobs N``: runs read in worker processes give byte for byte the output of ``--jobs 1``,
with the same report; interrupting stops the workers and leaves nothing behind."""

import hashlib
import os
import queue as queue_module
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_CWD, FIXTURES, cli_argv, cli_env, counting_progress

import tbconvert
from tbconvert.api import open_writer
from tbconvert.errors import UsageError
from tbconvert.formats.tfevents import reader as tfevents_reader
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = {"parquet": ".parquet", "hdf5": ".h5", "csv": ".csv", "tfevents": "", "tbdev": "",
          "parquet_dir": ""}


def scalar_logdir(path: Path, runs: int, points: int, tags: int = 2) -> Path:
    """``runs`` runs of ``tags`` float32 scalar tags with ``points`` points each."""
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    rng = np.random.default_rng(5)
    with open_writer(path, format="tfevents") as w:
        for r in range(runs):
            steps = np.arange(points, dtype=np.int64)
            w.write_run(Run(f"run{r}", 1.6e9), iter([
                ScalarSeries(run=f"run{r}", tag=f"tag{t}", metadata=md, steps=steps,
                             wall_times=1.6e9 + steps * 0.01, hidden=None,
                             values=rng.random(points).astype(np.float32))
                for t in range(tags)]))
    return path


def _contents(out: Path) -> list:
    """Every output file's bytes, by place (an event file's name holds the writer's pid)."""
    if out.is_file():
        return [hashlib.sha256(out.read_bytes()).hexdigest()]
    found = []
    for p in sorted(out.rglob("*")):
        if not p.is_file() or p.name == "blob_sequences.json":  # holds random blob ids
            continue
        where = str(p.relative_to(out))
        if "tfevents" in p.name or p.name.startswith("blob_"):
            where = str(p.parent.relative_to(out))
        found.append((where, hashlib.sha256(p.read_bytes()).hexdigest()))
    return sorted(found)


@pytest.fixture
def always_parallel(monkeypatch):
    monkeypatch.setattr(tfevents_reader, "PARALLEL_MIN_BYTES", 0)


def _damaged_copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "torch_logdir", src)
    event_file = sorted((src / "train").glob("*tfevents*"))[0]
    data = bytearray(event_file.read_bytes())
    data[len(data) // 2] ^= 0x40   # one damaged record: reported, in order, by either path
    event_file.write_bytes(bytes(data))
    return src


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "hdf5", "csv", "tfevents", "tbdev", "parquet_dir"])
def test_jobs_output_is_byte_identical(fmt, tmp_path, always_parallel):
    src = _damaged_copy(tmp_path)
    reports, outs = [], []
    for jobs in (1, 2):
        out = tmp_path / f"out{jobs}{SUFFIX[fmt]}"
        progress = counting_progress()
        reports.append(tbconvert.convert(src, out, to_format=fmt.replace("_dir", ""), jobs=jobs,
                                         restarts="keep-all" if fmt == "csv" else "visible",
                                         progress=progress))
        outs.append(_contents(out))
        assert progress.done == progress.total > 0   # every byte counted once
    assert outs[0] == outs[1]
    one, two = reports
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert any(i.kind == "corrupt_record" for i in one.issues)
    assert (one.runs, one.series, one.points) == (two.runs, two.series, two.points)


@pytest.mark.parametrize("lose", ["every", "every other"])
@pytest.mark.parametrize("fmt", ["tbdev", "parquet"])   # runs read in parts, runs in tasks
def test_progress_lost_on_its_way_from_workers_is_still_counted_once(fmt, lose, tmp_path,
                                                                      always_parallel,
                                                                      monkeypatch):
    # A worker stopped at the end can take its last reports with it (its queue sends from a
    # thread of its own): the leading process counts what the workers said they sent, over
    # every run, not only the last one.
    from tbconvert import workers
    taken = workers.ProgressQueues.get_nowait
    seen = []

    def lossy(self):
        n = taken(self)
        seen.append(n)
        if lose == "every" or len(seen) % 2:
            raise queue_module.Empty
        return n

    monkeypatch.setattr(workers.ProgressQueues, "get_nowait", lossy)
    src = scalar_logdir(tmp_path / "logs", runs=4, points=2000)
    progress = counting_progress()
    tbconvert.convert(src, tmp_path / f"o{SUFFIX[fmt]}", to_format=fmt, jobs=2,
                      progress=progress)
    assert seen   # reports were sent, and lost
    assert progress.done == progress.total > 0


def test_jobs_reads_every_run(tmp_path, always_parallel):
    src = scalar_logdir(tmp_path / "logs", runs=5, points=3000)
    one = tbconvert.read(src, restarts="keep-all")
    report = tbconvert.convert(src, tmp_path / "o.parquet", jobs=3)
    assert report.runs == 5 and report.points["scalar"] == 5 * 2 * 3000
    back = tbconvert.read(tmp_path / "o.parquet", restarts="keep-all")
    for run, series in one.series.items():
        for tag, s in series.items():
            assert back.series[run][tag].values.tobytes() == s.values.tobytes()


@pytest.mark.parametrize("jobs", [-1, 1.5, "2", True])
def test_bad_jobs_is_a_usage_error(jobs, tmp_path):
    with pytest.raises(UsageError, match="^jobs must be a whole number of processes"):
        tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "o.parquet", jobs=jobs)


@pytest.mark.parametrize("dst,fmt", [("o.parquet", None), ("dataset", "parquet"),
                                     ("events", "tfevents")])
def test_a_source_without_records_is_still_an_error_in_parallel(tmp_path, always_parallel,
                                                                dst, fmt):
    for run in ("a", "b"):
        (tmp_path / "logs" / run).mkdir(parents=True)
        (tmp_path / "logs" / run / "x.tfevents.notes").write_text("not events\n" * 50)
    with pytest.raises(tbconvert.errors.CorruptDataError):
        tbconvert.convert(tmp_path / "logs", tmp_path / dst, to_format=fmt, jobs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def _children(pid: int) -> set:
    """PIDs of ``pid``'s descendants still alive (from /proc)."""
    kids, found = {pid}, set()
    for _ in range(4):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) in kids and fields[0] != "Z":
                found.add(int(entry.name))
        kids |= found
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("sig,code,dst", [(signal.SIGINT, 130, "out.parquet"),
                                          (signal.SIGTERM, 143, "out.parquet"),
                                          (signal.SIGINT, 130, "dataset")])
def test_interrupt_stops_workers_and_removes_output(tmp_path_factory, tmp_path, sig, code, dst):
    """Also where workers write the runs themselves (a dataset directory)."""
    src = tmp_path_factory.getbasetemp() / "jobs_big"
    if not src.exists():
        scalar_logdir(src, runs=4, points=600_000)
    dst = tmp_path / dst
    p = subprocess.Popen([*cli_argv(), "convert", str(src), str(dst), "--to", "parquet",
                          "--jobs", "2"],
                         cwd=CLI_CWD, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=cli_env())
    deadline = time.monotonic() + 30
    # --jobs 2: one worker beside the leading process (forked: no other child either)
    while not _children(p.pid) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
    workers = _children(p.pid)
    assert workers, "no worker processes were started"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    err = err.decode()
    assert "Traceback" not in err, err[-2000:]
    # The signal comes as soon as the workers exist, seconds before 4 runs of 600,000 points
    # are read: finishing first would mean the signal was lost, not a lucky race.
    assert p.returncode == code, err
    assert err.count("\n") == 1 and err.endswith("partial output was removed\n"), err
    assert list(tmp_path.iterdir()) == []
    time.sleep(0.5)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    assert not alive, f"worker processes left running: {alive}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux")
def test_the_commands_workers_are_its_only_children(tmp_path_factory, tmp_path):
    """--jobs 2 forks one worker and starts no other process (a queue of the spawn context
    would start multiprocessing's resource tracker, a Python of its own, as the conversion
    begins on both cores)."""
    src = tmp_path_factory.getbasetemp() / "jobs_children"
    if not src.exists():
        scalar_logdir(src, runs=4, points=150_000)
    p = subprocess.Popen([*cli_argv(), "convert", str(src), str(tmp_path / "o.parquet"),
                          "--jobs", "2"], cwd=CLI_CWD, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=cli_env())
    seen: dict = {}      # child: (its command line, the command's at that moment)
    while p.poll() is None:
        for pid in _children(p.pid) - set(seen):
            try:
                seen[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes(),
                             Path(f"/proc/{p.pid}/cmdline").read_bytes())
            except OSError:
                pass
        time.sleep(0.005)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err.decode()[-2000:]
    assert seen, "no worker was seen"
    assert all(child == own for child, own in seen.values()), seen


# -- a run's files read in parts -------------------------------------------------------------

def _event_bytes(rng, step: int, kind: str) -> bytes:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    ev = event_pb2.Event(wall_time=1.7e9 + step, step=step)
    if kind == "start":
        ev.session_log.status = event_pb2.SessionLog.START
    elif kind == "fast":     # plain simple_value: decoded in bulk
        ev.summary.value.add(tag=f"s{rng.integers(2)}", simple_value=float(rng.random()))
    elif kind == "image":    # legacy Summary.Image: decoded in bulk as blob sequences
        ev.summary.value.add(tag="img", image=summary_pb2.Summary.Image(
            height=2, width=3, colorspace=3, encoded_image_string=bytes([step % 256]) * 20))
    elif kind == "two":      # one event, two tags: decoded one by one
        ev.summary.value.add(tag="a", simple_value=1.0)
        ev.summary.value.add(tag="b", simple_value=2.0)
    else:                    # a TF2 scalar tensor with metadata
        value = ev.summary.value.add(tag="t")
        value.metadata.plugin_data.plugin_name = "scalars"
        value.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
        value.tensor.CopyFrom(tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[step]))
    return ev.SerializeToString()


def _restart_run(run_dir: Path, seed: int) -> list[Path]:
    """A run of 2-5 event files whose steps go back within and across files, some files
    without a file_version record or with version 1, session starts here and there."""
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import records
    rng = np.random.default_rng(seed)
    run_dir.mkdir(parents=True)
    files = []
    step = int(rng.integers(0, 20))
    for k in range(int(rng.integers(2, 6))):
        path = run_dir / f"events.out.tfevents.{1700000000 + k}.host"
        out = []
        version = rng.choice(["brain.Event:2", "brain.Event:1", None, "late"])
        if version in ("brain.Event:2", "brain.Event:1"):
            out.append(event_pb2.Event(file_version=version).SerializeToString())
        for i in range(int(rng.integers(0, 12))):
            if version == "late" and i == 3:
                out.append(event_pb2.Event(file_version="brain.Event:2").SerializeToString())
            step = int(step + rng.integers(-6, 4)) if rng.random() < 0.4 else step + 1
            kind = rng.choice(["fast", "fast", "two", "tensor", "image", "start"])
            out.append(_event_bytes(rng, step, kind))
        path.write_bytes(b"".join(records.frame(e) for e in out))
        files.append(path)
    return files


def _series_facts(asm) -> tuple:
    run, series = asm.build()
    facts = []
    for s in series:
        hidden = None if s.hidden is None else s.hidden.tolist()
        values = s.values.tolist() if hasattr(s, "values") else (
            (s.offsets.tolist(), s.blobs) if hasattr(s, "blobs") else None)
        facts.append((s.tag, s.metadata, s.steps.tolist(), s.wall_times.tolist(), hidden, values))
    return run, facts


@pytest.mark.parametrize("seed", range(60))
def test_a_run_read_in_parts_is_the_run_read_whole(seed, tmp_path, monkeypatch):
    """Every way of cutting a run's files into parts, joined, gives what reading them all in
    one go gives: TensorBoard's restart rule purges across the cuts exactly as it would."""
    from tbconvert.formats.tfevents import blob_templates, summary_templates
    # these small files' scalars and images are decoded in bulk too
    monkeypatch.setattr(blob_templates, "MIN_GROUP", 2)
    monkeypatch.setattr(summary_templates, "MIN_GROUP", 2)
    from tbconvert.formats.base import Options
    from tbconvert.formats.tfevents.assemble import RunAssembler
    from tbconvert.report import Report
    files = _restart_run(tmp_path / "run", seed)
    reader = tfevents_reader.TfeventsReader(tmp_path, Options(), Report())
    whole = _series_facts(reader.read_run("run", files))
    for cut in range(1, len(files)):
        for second in (cut + 1, len(files)):
            groups = [files[:cut], files[cut:second], files[second:]]
            parts = [reader.read_run("run", g, detached=k > 0)
                     for k, g in enumerate(groups) if g]
            assert _series_facts(RunAssembler.joined("run", parts)) == whole, (cut, second)


def _restart_across_files(run_dir: Path) -> list[Path]:
    """One run of three files: the second starts with a second session START, which purges
    the end of the first; the third has no file_version record (the second's holds) and a damaged record."""
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import records
    rng = np.random.default_rng(3)
    run_dir.mkdir(parents=True)
    layout = [("brain.Event:2", 0, range(0, 400)), ("brain.Event:2", 300, range(300, 700)),
              (None, None, range(650, 900))]
    files = []
    for k, (version, start, steps) in enumerate(layout):
        out = []
        if version:
            out.append(event_pb2.Event(wall_time=1.7e9 + k, file_version=version))
        if start is not None:
            ev = event_pb2.Event(wall_time=1.7e9 + k, step=start)
            ev.session_log.status = event_pb2.SessionLog.START
            out.append(ev)
        for step in steps:
            for tag in ("loss", "acc"):
                ev = event_pb2.Event(wall_time=1.7e9 + step, step=step)
                ev.summary.value.add(tag=tag, simple_value=float(rng.random()))
                out.append(ev)
        data = bytearray(b"".join(records.frame(e.SerializeToString()) for e in out))
        if k == 2:
            data[len(data) // 2] ^= 0x40
        path = run_dir / f"events.out.tfevents.{1700000000 + k}.host"
        path.write_bytes(bytes(data))
        files.append(path)
    return files


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "tfevents"])
def test_the_files_of_one_run_are_read_in_parallel(fmt, tmp_path, always_parallel, monkeypatch):
    from tbconvert.formats.tfevents import parallel
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    src = tmp_path / "logs"
    files = _restart_across_files(src / "train")
    assert [len(p.files) for p in parallel.plan([("train", files)], 3)] == [1, 1, 1]
    reports, outs = [], []
    size = sum(f.stat().st_size for f in files)
    for jobs in (1, 3):
        out = tmp_path / f"out{jobs}{SUFFIX[fmt]}"
        progress = counting_progress()
        reports.append(tbconvert.convert(src, out, to_format=fmt, jobs=jobs, restarts="keep-all",
                                         progress=progress))
        outs.append(_contents(out))
        assert progress.total == progress.done == size   # every byte counted once
    assert outs[0] == outs[1]
    one, two = reports
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert any(i.kind == "corrupt_record" for i in one.issues)
    assert (one.runs, one.series, one.points) == (two.runs, two.series, two.points)
    loss = tbconvert.read(src, restarts="keep-all", jobs=3).series["train"]["loss"]
    hidden = loss.steps[loss.hidden]
    # the start in the second file hides the first file's steps from 300 on
    assert hidden.min() == 300 and len(hidden) >= 100


def test_a_large_run_is_cut_into_parts_of_whole_files(tmp_path):
    from tbconvert.formats.tfevents import parallel
    mib = 1 << 20

    def files(name, sizes):
        paths = []
        for k, size in enumerate(sizes):
            path = tmp_path / name / f"events.out.tfevents.{k}"
            path.parent.mkdir(exist_ok=True)
            with open(path, "wb") as f:
                f.truncate(size * mib)   # sparse: only the size counts
            paths.append(path)
        return paths

    runs = [("big", files("big", [16, 16, 16, 16])), ("one", files("one", [64])),
            ("small", files("small", [1, 1, 1])), ("many", files("many", [4] * 10))]
    parts = parallel.plan(runs, 2)
    assert [(p.name, len(p.files), p.first, p.last) for p in parts] == [
        ("big", 1, True, False), ("big", 1, False, False), ("big", 1, False, False),
        ("big", 1, False, True), ("one", 1, True, True), ("small", 3, True, True),
        ("many", 3, True, False), ("many", 3, False, False), ("many", 3, False, False),
        ("many", 1, False, True)]
    # in order, every file once
    assert [f for p in parts for f in p.files] == [f for _, fs in runs for f in fs]
    assert [len(p.files) for p in parallel.plan(runs[:1], 1)] == [2, 2]


# -- runs read and written in workers ------------------------------------------------------

def _event_files_by_name(out: Path) -> list:
    """Event files with their names (a run written by a worker is named as this process
    would name it), other files by content."""
    return sorted((str(p.relative_to(out)), hashlib.sha256(p.read_bytes()).hexdigest())
                  for p in out.rglob("*") if p.is_file())


@pytest.mark.parametrize("fmt", ["parquet", "tfevents", "file.parquet", "file.csv", "file.h5"])
def test_a_run_that_cannot_be_read_costs_only_itself_in_tasks(fmt, tmp_path, monkeypatch):
    """One task per run (here in this process, so the failure can be staged): a run that
    cannot be read is reported and has no part; the later parts are numbered as one
    process numbers them, and the marker lists the parts written."""
    from tbconvert import runtasks
    from tbconvert.api import open_reader

    real = tfevents_reader.TfeventsReader._read_file

    def read_file(self, path, asm):
        if asm.name == "run_a":
            raise ValueError("decoder fell over")
        return real(self, path, asm)
    monkeypatch.setattr(tfevents_reader.TfeventsReader, "_read_file", read_file)
    src = FIXTURES / "tensorboardx_logdir"
    suffix, fmt = ("." + fmt.split(".")[1], None) if "." in fmt else ("", fmt)
    one = tbconvert.convert(src, tmp_path / f"one{suffix}", to_format=fmt, jobs=1)
    two = tbconvert.Report()
    reader = open_reader(src, report=two)
    with reader, open_writer(tmp_path / f"two{suffix}", format=fmt, report=two) as writer:
        runtasks.copy_in_tasks(reader, writer, two)
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert any(i.kind == "unreadable_run" and "decoder fell over" in i.message for i in two.issues)
    assert (one.runs, one.series, one.points) == (two.runs, two.series, two.points)
    if suffix:
        assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"two{suffix}").read_bytes()
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"one{suffix}", f"two{suffix}"]
    else:
        assert _event_files_by_name(tmp_path / "one") == _event_files_by_name(tmp_path / "two")


@pytest.mark.parametrize("suffix,share", [(".parquet", None), (".parquet", 1000),
                                          (".parquet", -1), (".csv", None), (".h5", None)])
def test_staged_runs_give_the_bytes_of_one_writer(suffix, share, tmp_path, monkeypatch):
    """A single-file output from runs written apart (staged) and added in run order is the
    file one writer writes: short runs sharing row groups, longer ones with row groups of
    their own, series numbered across runs, big batches cut into row groups, non-scalar
    series, points hidden by a restart."""
    from tbconvert import runtasks
    from tbconvert.api import open_reader
    from tbconvert.formats.parquet import schema as S
    from tbconvert.formats.parquet import shared
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 700)      # tasks run here, so this holds there
    monkeypatch.setattr(S, "ROW_GROUP_BYTES", 40_000)
    if share is not None:
        monkeypatch.setattr(shared, "RUN_ROWS", share)
    src = tmp_path / "logs"
    scalar_logdir(src / "a", runs=2, points=1500, tags=3)
    for name in ("torch_logdir", "tf2_logdir"):
        shutil.copytree(FIXTURES / name, src / name)
    options = dict(restarts="keep-all") if suffix == ".csv" else {}
    one = tbconvert.convert(src, tmp_path / f"one{suffix}", jobs=1, **options)
    two = tbconvert.Report()
    reader = open_reader(src, report=two, options=tbconvert.api.make_options(**options))
    with reader, open_writer(tmp_path / f"two{suffix}", report=two,
                             options=reader.options) as writer:
        assert writer.run_parts == "staged"
        runtasks.copy_in_tasks(reader, writer, two)
    assert (tmp_path / f"one{suffix}").read_bytes() == (tmp_path / f"two{suffix}").read_bytes()
    assert [i.message for i in one.issues] == [i.message for i in two.issues]
    assert one.runs == two.runs > 4
    if suffix == ".parquet":
        import pyarrow.parquet as pq
        assert pq.ParquetFile(tmp_path / "two.parquet").metadata.num_row_groups > 5
        back = tbconvert.read(tmp_path / "two.parquet")   # every row group's digest checked
        assert len(back.runs) == one.runs and not back.report.issues
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", f"one{suffix}", f"two{suffix}"]


@pytest.mark.slow
def test_tasks_name_event_files_as_one_process(tmp_path, always_parallel):
    """Event files written by worker processes carry this process's name and numbering, so
    the logdir is byte for byte, names included, the one ``--jobs 1`` writes."""
    src = scalar_logdir(tmp_path / "logs", runs=3, points=2000)
    outs = []
    for jobs in (1, 2):
        tbconvert.convert(src, tmp_path / f"out{jobs}", to_format="tfevents", jobs=jobs)
        outs.append(_event_files_by_name(tmp_path / f"out{jobs}"))
    assert outs[0] == outs[1] and len(outs[0]) == 3
    assert not list((tmp_path).glob(".*tbconvert-tmp*"))


def test_runs_tags_leave_without_data_get_no_event_file(tmp_path, always_parallel):
    """``--tags`` that chooses none of a run's tags leaves the run out, as ``--runs`` does:
    an empty event file would make TensorBoard list a run without data. One process and
    workers name the files of the other runs alike."""
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    steps = np.arange(50, dtype=np.int64)
    with open_writer(tmp_path / "logs", format="tfevents") as w:
        for r, tags in enumerate([("loss", "lr"), ("lr",), ("loss",)]):
            w.write_run(Run(f"run{r}", 1.6e9), iter([
                ScalarSeries(run=f"run{r}", tag=tag, metadata=md, steps=steps,
                             wall_times=1.6e9 + steps * 0.01, hidden=None,
                             values=np.ones(50, dtype=np.float32)) for tag in tags]))
    outs = []
    for jobs in (1, 2):
        tbconvert.convert(tmp_path / "logs", tmp_path / f"out{jobs}", to_format="tfevents",
                          tags="^loss$", jobs=jobs)
        outs.append(_event_files_by_name(tmp_path / f"out{jobs}"))
    assert outs[0] == outs[1]
    assert sorted(p.split("/")[0] for p, _ in outs[0]) == ["run0", "run2"]
    back = tbconvert.read(tmp_path / "out1")
    assert {run: sorted(tags) for run, tags in back.series.items()} == {
        "run0": ["loss"], "run2": ["loss"]}


def test_worker_death_costs_only_its_run(tmp_path):
    """A task whose process dies every time is given up after its retries; the others,
    run with it, finish."""
    from tbconvert import cluster
    results = cluster.run_tasks(_die_on_two, [1, 2, 3], jobs=2, retries=1,
                                lost=lambda item, why: f"lost {item}: {why}")
    assert results[0] == 10 and results[2] == 30
    assert results[1].startswith("lost 2: the process converting it died 2 times")


def test_a_worker_killed_by_sigkill_every_time_ends_the_conversion_as_out_of_memory():
    """SIGKILL is what the out-of-memory killer sends: the machine lacks memory, which is no
    fault of the item, and leaving it out would make the output depend on --jobs (one
    process is killed whole). A worker that crashes by a signal of its own costs its item."""
    from tbconvert import cluster
    from tbconvert.errors import OutOfResourcesError
    with pytest.raises(OutOfResourcesError) as caught:
        cluster.run_tasks(_killed_on_two, [1, 2, 3], jobs=2, retries=1,
                          lost=lambda item, why: "lost")
    assert "killed (SIGKILL) 2 times" in caught.value.cli_message()
    assert caught.value.cli_message().endswith("(--jobs 1)")
    assert cluster.run_tasks(_crash_on_two, [1, 2, 3], jobs=2, retries=1,
                             lost=lambda item, why: "lost") == [10, "lost", 30]


@pytest.mark.parametrize("jobs", [2, 3])
def test_items_not_yet_started_when_a_worker_dies_still_run(jobs):
    """The items a dead pool held are run again one at a time, to find the one that kills;
    then the items it never got go on in a full pool (they were once left out, and the
    caller found no result for them)."""
    from tbconvert import cluster
    for _ in range(3):
        results = cluster.run_tasks(_die_on_two, [1, 2, 3, 4, 5, 6], jobs=jobs, retries=1,
                                    lost=lambda item, why: "lost")
        assert results == [10, "lost", 30, 40, 50, 60]


def test_kept_workers_take_whole_shares_and_survive_a_death():
    """``run_in_shares``: the items split by size between this process and the kept
    workers; a worker that dies costs a rerun of its share (the item that kills every
    process it runs in is given up), and the pool works again on its next use, also when
    its worker was killed between two uses."""
    import signal

    from tbconvert import cluster
    from tbconvert.kept import KeptWorkers
    assert cluster._shares([5, 1, 1, 3, 2], 2) == [[0, 1], [2, 3, 4]]     # 6 and 6
    assert cluster._shares([1, 1], 3) == [[0], [1], []]
    pool = KeptWorkers(1)
    try:
        heard = {}
        assert cluster.run_in_shares(_times_ten, [1, 2, 3], [1, 1, 1], pool, lost=None,
                                     on_result=heard.__setitem__) == [10, 20, 30]
        assert heard == {0: 10, 1: 20, 2: 30}
        # equal sizes: items 2 and 4 are the worker's share, and 2 kills it every time
        results = cluster.run_in_shares(_die_on_two, [1, 2, 3, 4], [1, 1, 1, 1], pool,
                                        lost=lambda item, why: f"lost {item}")
        assert results == [10, "lost 2", 30, 40]
        assert cluster.run_in_shares(_times_ten, [1, 2], [1, 1], pool, lost=None) == [10, 20]
        for proc in list(pool.processes):
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
        assert cluster.run_in_shares(_times_ten, [1, 2], [1, 1], pool, lost=None) == [10, 20]
    finally:
        pool.stop()
    assert not pool.processes


def _killed_on_two(item):
    if item == 2:
        os.kill(os.getpid(), signal.SIGKILL)     # as the kernel's out-of-memory killer kills
    return item * 10


def _crash_on_two(item):
    if item == 2:
        os.abort()                               # a crash of its own (SIGABRT)
    return item * 10


def _die_on_two(item):
    if item == 2:
        os._exit(3)
    return item * 10


def _times_ten(item):
    return item * 10


def test_a_programs_own_child_processes_are_left_alone(tmp_path):
    """Stopping its workers (at the end, after a worker died, or on Ctrl-C) tbconvert stops
    the processes it started, never other children of the program that uses it."""
    import multiprocessing

    from tbconvert import cluster
    other = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    other.start()
    try:
        assert cluster.run_tasks(_times_ten, [1, 2, 3], jobs=2) == [10, 20, 30]
        results = cluster.run_tasks(_die_on_two, [1, 2, 3], jobs=2, retries=0,
                                    lost=lambda item, why: "lost")
        assert results == [10, "lost", 30]
        time.sleep(0.2)
        assert other.is_alive()
    finally:
        other.terminate()
        other.join()


def _write_late(path):
    time.sleep(1.0)
    Path(path).write_text("late")
    return path


def test_ctrl_c_returns_only_once_the_workers_are_stopped(tmp_path):
    """Ctrl-C while the tasks run: by the time it reaches the caller, which then removes what
    the tasks were writing into, no worker is left to write there. (Before Python 3.13 an
    interrupted ``Thread.join`` marks a running thread as ended: waiting for the thread that
    stops the workers with ``join`` returned at once, and a worker could still finish its
    file after the caller had cleaned up.)"""
    import multiprocessing
    import threading

    from tbconvert import cluster
    paths = [str(tmp_path / f"late{k}") for k in range(2)]
    before = set(multiprocessing.active_children())
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        cluster.run_tasks(_write_late, paths, jobs=2)
    assert set(multiprocessing.active_children()) - before == set()
    time.sleep(1.5)   # a worker left running would have written by now
    assert list(tmp_path.iterdir()) == []


def test_a_thread_is_waited_for_after_an_interrupted_wait():
    """The case above at its root: after Ctrl-C cut a wait short, waiting again still waits
    for the thread's work to be over."""
    import threading

    from tbconvert.interrupts import Thread
    over = []
    thread = Thread(target=lambda: (time.sleep(1.0), over.append(True)), name="slow")
    thread.start()
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        thread.wait()
    assert not over
    thread.wait()
    assert over


@pytest.mark.slow
@pytest.mark.parametrize("dst,kib", [("out.parquet", 256), ("out.parquet", 3072),
                                     ("out.csv", 48 << 10)])
def test_a_file_size_limit_while_staging_runs_is_one_clear_error(tmp_path_factory, tmp_path, dst,
                                                                 kib):
    """Runs staged by workers hit the limit there, or the file they are added to does (a
    Parquet run staged here is about 0.56 MB, the file 4.5 MB): one line naming the output,
    exit 9, nothing left beside it, the staging directory included."""
    import resource
    many = dst.endswith(".parquet")     # runs that fit in memory: no reading spill to hit it
    src = tmp_path_factory.getbasetemp() / ("jobs_many" if many else "jobs_big")
    if not src.exists():
        scalar_logdir(src, runs=8, points=80_000) if many else \
            scalar_logdir(src, runs=4, points=600_000)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (kib << 10, kib << 10))
    p = subprocess.run([*cli_argv(), "convert", str(src), str(tmp_path / dst), "--jobs", "2"],
                       cwd=CLI_CWD, capture_output=True, env=cli_env(), preexec_fn=limit,
                       timeout=300)
    err = p.stderr.decode()
    assert p.returncode == 9, err[-2000:]
    assert err == f"tbconvert: error: {tmp_path / dst}: file-size limit reached; partial output " \
                  "was removed\n", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("dst", ["out.parquet", "dataset", "out.h5", "out.csv"])
def test_the_command_with_forked_workers_writes_the_bytes_of_one_process(tmp_path_factory,
                                                                          tmp_path, dst):
    """The command forks its workers (tests/test_workers.py): what they write, staged or as
    parts, is byte for byte what ``--jobs 1`` writes, and they say nothing on stderr."""
    src = tmp_path_factory.getbasetemp() / "jobs_big"
    if not src.exists():
        scalar_logdir(src, runs=4, points=600_000)
    outputs = {}
    for jobs in ("1", "2"):
        out = tmp_path / jobs / dst
        out.parent.mkdir()
        p = subprocess.run([*cli_argv(), "convert", str(src), str(out), "--jobs", jobs]
                           + (["--to", "parquet"] if dst == "dataset" else []),
                           cwd=CLI_CWD, capture_output=True, env=cli_env(), timeout=300)
        assert p.returncode == 0 and p.stderr == b"", p.stderr.decode()[-2000:]
        files = sorted(out.rglob("*")) if out.is_dir() else [out]
        outputs[jobs] = {f.relative_to(out).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
                         for f in files if f.is_file()}
    assert outputs["1"] == outputs["2"]


def _dying_read(root, options, name, files, spill_dir, detached=False):
    """``parallel._read``, whose process dies while the count in the file named after the
    part's first file (in ``$TBCONVERT_TEST_DEATHS``) is above zero, one less each time."""
    from tbconvert.formats.tfevents import parallel
    marker = Path(os.environ["TBCONVERT_TEST_DEATHS"]) / Path(files[0]).name
    if marker.exists():
        left = int(marker.read_text())
        if left > 0:
            marker.write_text(str(left - 1))
            os._exit(3)
    # (a spawned worker has the module unpatched; a forked one has the real one put aside)
    real = getattr(parallel, "_real_read", parallel._read)
    return real(root, options, name, files, spill_dir, detached)


def _deaths(monkeypatch, tmp_path, counts: dict) -> None:
    from tbconvert.formats.tfevents import parallel
    where = tmp_path / "deaths"
    where.mkdir(exist_ok=True)
    for path, n in counts.items():
        (where / path.name).write_text(str(n))
    monkeypatch.setenv("TBCONVERT_TEST_DEATHS", str(where))
    monkeypatch.setattr(parallel, "_real_read", parallel._read, raising=False)
    monkeypatch.setattr(parallel, "_read", _dying_read)


@pytest.mark.parametrize("deaths", [1, 2])
def test_a_part_of_a_run_whose_process_died_is_read_again(tmp_path, always_parallel,
                                                         monkeypatch, deaths):
    """The files of one run, read in parts by three processes: a process killed while it
    reads one (the out-of-memory killer, a stray kill) costs a rereading, not the run."""
    from tbconvert.formats.tfevents import parallel
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    src = tmp_path / "logs"
    files = _restart_across_files(src / "train")
    one = tbconvert.convert(src, tmp_path / "one.parquet", jobs=1)
    _deaths(monkeypatch, tmp_path, {files[1]: deaths})
    three = tbconvert.convert(src, tmp_path / "three.parquet", jobs=3)
    assert _contents(tmp_path / "one.parquet") == _contents(tmp_path / "three.parquet")
    assert [i.message for i in one.issues] == [i.message for i in three.issues]
    assert (tmp_path / "deaths" / files[1].name).read_text() == "0"


def test_a_part_that_kills_every_process_costs_its_run_alone(tmp_path, always_parallel,
                                                            monkeypatch):
    """Only a part read alone when its process dies is blamed: the run it belongs to is
    reported, never the run that was being waited for."""
    from tbconvert.formats.tfevents import parallel
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    src = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / "a")
    files = _restart_across_files(src / "b")
    shutil.copytree(FIXTURES / "torch_logdir" / "resumed", src / "c")
    _deaths(monkeypatch, tmp_path, {files[2]: 99})
    found = tbconvert.info(src, jobs=3)     # (one part per run written apart: runtasks)
    lost = [i for i in found.report.issues if i.kind == "unreadable_run"]
    assert [(i.run, i.message) for i in lost] == [
        ("b", f"b: the process reading it died {parallel.RETRIES + 1} times (crashed, or "
              "killed); skipped, the other runs were read")]
    whole = [r.run for r in tbconvert.info(src).runs]
    assert "b" in whole and [r.run for r in found.runs] == [r for r in whole if r != "b"]


def test_a_pool_found_broken_when_a_part_is_handed_over_reads_it_again(tmp_path,
                                                                         always_parallel,
                                                                         monkeypatch):
    """A worker that dies between two looks breaks the pool under the next hand-over: that
    part is read again like the parts the pool held, not lost with the whole read."""
    from concurrent.futures.process import BrokenProcessPool

    from tbconvert import workers
    from tbconvert.formats.tfevents import parallel
    monkeypatch.setattr(parallel, "PART_MIN_BYTES", 0)
    src = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / "a")
    _restart_across_files(src / "b")
    shutil.copytree(FIXTURES / "torch_logdir" / "resumed", src / "c")
    submit, calls = workers.Workers.submit, [0]

    def broken_on_the_fourth(self, fn, *args):
        calls[0] += 1
        if calls[0] == 4 and fn is parallel._read:
            raise BrokenProcessPool("a child process terminated abruptly")
        return submit(self, fn, *args)
    monkeypatch.setattr(workers.Workers, "submit", broken_on_the_fourth)
    found = tbconvert.info(src, jobs=3)
    alone = tbconvert.info(src)
    assert calls[0] > 4 and found.to_dict() == alone.to_dict()
    assert not [i for i in found.report.issues if i.kind == "unreadable_run"]


def _pid(_item) -> int:
    time.sleep(0.05)
    return os.getpid()


def test_jobs_beyond_the_cores_start_one_process_a_core():
    """``-j 999`` on a machine of two cores once started a worker per run (500 of them)."""
    from tbconvert import cluster
    from tbconvert.formats.base import cores, processes
    assert processes(999) == processes(0) == cores() and processes(1) == 1
    pids = cluster.run_tasks(_pid, range(4 * cores() + 4), jobs=999)
    assert len(set(pids)) <= cores() and os.getpid() not in pids
