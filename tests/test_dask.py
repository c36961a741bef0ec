"""``--scheduler``: runs converted by the workers of a real Dask cluster (worker processes on
127.0.0.1, started and stopped here), and ``tbconvert.to_dask`` reading a dataset back."""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import CLI_CWD, FIXTURES, cli_env
from oracle import assert_same_view, tb_view

import tbconvert

distributed = pytest.importorskip("distributed")

LOGDIRS = ["torch_logdir", "tf2_logdir", "tensorboardx_logdir"]


@pytest.fixture(scope="module")
def cluster():
    cluster = distributed.LocalCluster(n_workers=2, processes=True, host="127.0.0.1",
                                       threads_per_worker=1, dashboard_address="127.0.0.1:0",
                                       silence_logs=50)
    pids = _worker_pids(cluster)
    try:
        yield cluster
    finally:
        _stop(cluster, pids)


def _worker_pids(cluster) -> list:
    with distributed.Client(cluster) as client:
        return list(client.run(os.getpid).values())


def _stop(cluster, pids: list) -> None:
    """Close ``cluster``; a worker (of ``pids``) that outlived the close is stopped by its PID."""
    cluster.close(timeout=20)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _contents(out: Path) -> list:
    return sorted((str(p.relative_to(out)), hashlib.sha256(p.read_bytes()).hexdigest())
                  for p in out.rglob("*") if p.is_file())


def _event_contents(out: Path) -> list:
    """Files by content, event files by their run directory (their name holds a pid)."""
    found = []
    for p in out.rglob("*"):
        if p.is_file():
            where = p.parent if "tfevents" in p.name else p
            found.append((str(where.relative_to(out)), hashlib.sha256(p.read_bytes()).hexdigest()))
    return sorted(found)


@pytest.mark.slow
@pytest.mark.parametrize("logdir", LOGDIRS)
def test_fixtures_through_the_cluster(cluster, logdir, tmp_path):
    """Both destinations, through the cluster: TensorBoard sees the source's view, and the
    content is that of a conversion in this process."""
    src = FIXTURES / logdir
    address = cluster.scheduler_address
    events = tbconvert.convert(src, tmp_path / "events", to_format="tfevents", scheduler=address)
    assert_same_view(tb_view(tmp_path / "events"), tb_view(src))
    here = tbconvert.convert(src, tmp_path / "events_here", to_format="tfevents", jobs=1)
    assert _event_contents(tmp_path / "events") == _event_contents(tmp_path / "events_here")
    assert [i.message for i in events.issues] == [i.message for i in here.issues]

    dataset = tbconvert.convert(src, tmp_path / "dataset", to_format="parquet", scheduler=address)
    local = tbconvert.convert(src, tmp_path / "dataset_here", to_format="parquet", jobs=1)
    assert _contents(tmp_path / "dataset") == _contents(tmp_path / "dataset_here")
    assert (dataset.runs, dataset.series, dataset.points) == (local.runs, local.series, local.points)
    tbconvert.convert(tmp_path / "dataset", tmp_path / "back", to_format="tfevents")
    assert_same_view(tb_view(tmp_path / "back"), tb_view(src))


@pytest.mark.slow
@pytest.mark.parametrize("dst", ["out.parquet", "out.csv"])
def test_single_file_destinations_through_the_cluster(cluster, dst, tmp_path):
    """Runs encoded by the workers into a staging directory beside the output and added here
    in run order: the bytes of a conversion in this process."""
    src = tmp_path / "logs"
    for name in LOGDIRS:
        shutil.copytree(FIXTURES / name, src / name)
    there = tbconvert.convert(src, tmp_path / "there" / dst, scheduler=cluster.scheduler_address)
    here = tbconvert.convert(src, tmp_path / "here" / dst, jobs=1)
    assert (tmp_path / "there" / dst).read_bytes() == (tmp_path / "here" / dst).read_bytes()
    assert [i.message for i in there.issues] == [i.message for i in here.issues]
    assert there.runs == here.runs > 5
    assert os.listdir(tmp_path / "there") == [dst]     # the staging directory is gone


def test_a_damaged_run_is_reported_and_the_others_finish(cluster, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "torch_logdir", src)
    event_file = sorted((src / "train").glob("*tfevents*"))[0]
    data = bytearray(event_file.read_bytes())
    data[len(data) // 2] ^= 0x40
    event_file.write_bytes(bytes(data))
    report = tbconvert.convert(src, tmp_path / "out", to_format="parquet",
                               scheduler=cluster.scheduler_address)
    local = tbconvert.convert(src, tmp_path / "here", to_format="parquet", jobs=1)
    assert [i.message for i in report.issues] == [i.message for i in local.issues]
    assert any(i.kind == "corrupt_record" and i.run == "train" for i in report.issues)
    assert _contents(tmp_path / "out") == _contents(tmp_path / "here")


def _slow_logdir(path: Path, runs: int, points: int) -> Path:
    from test_jobs import scalar_logdir
    return scalar_logdir(path, runs=runs, points=points)


@pytest.mark.slow
def test_a_worker_killed_mid_job_costs_only_its_task(tmp_path):
    """A worker is killed (SIGKILL by its PID) while it converts a run: its task runs again
    on another worker, and the dataset is complete, each part once, as a local conversion
    writes it."""
    src = _slow_logdir(tmp_path / "logs", runs=4, points=200_000)
    local = tbconvert.convert(src, tmp_path / "here", to_format="parquet", jobs=1)
    cluster = distributed.LocalCluster(n_workers=2, processes=True, host="127.0.0.1",
                                       threads_per_worker=1, dashboard_address="127.0.0.1:0",
                                       silence_logs=50)
    pids = _worker_pids(cluster)
    killed = []
    try:
        def kill_one_busy():
            with distributed.Client(cluster) as client:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and not killed:
                    busy = [w for w, tasks in client.processing().items() if tasks]
                    if busy:
                        pid = client.run(os.getpid, workers=[busy[0]])[busy[0]]
                        time.sleep(0.3)    # well into the run's reading
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    time.sleep(0.05)
        killer = threading.Thread(target=kill_one_busy)
        killer.start()
        report = tbconvert.convert(src, tmp_path / "out", to_format="parquet",
                                   scheduler=cluster.scheduler_address)
        killer.join()
    finally:
        _stop(cluster, pids)
    assert killed, "no worker was killed"
    assert _contents(tmp_path / "out") == _contents(tmp_path / "here")
    assert not [p for p in (tmp_path / "out").iterdir() if "tbconvert-part" in p.name]
    assert (report.runs, report.points) == (local.runs, local.points)
    assert not [p for p in tmp_path.iterdir() if "tbconvert-tmp" in p.name]


@pytest.mark.slow
def test_a_run_whose_task_kills_every_worker_is_reported_and_the_others_finish(tmp_path):
    """A run whose task kills each worker that takes it (here: a worker plugin makes the
    task of run ``b`` end its process, on every worker the nanny starts again) is given up
    once the scheduler calls it a killed worker, and tried alone once more: the run is
    reported as unreadable, as a local conversion reports a run that kills its processes,
    and the other runs are in the output, as they are converted here, those that waited
    beside it on a dying worker (which the scheduler gives up on too) included."""
    import dask
    src = tmp_path / "logs"
    for run in ("a", "b", "c"):
        shutil.copytree(FIXTURES / "torch_logdir" / "train", src / run)

    class KillRunB(distributed.WorkerPlugin):
        def setup(self, worker):
            from tbconvert import runtasks
            real = runtasks.convert_run

            def convert_run(task):
                if task.name == "b":
                    os._exit(1)
                return real(task)
            runtasks.convert_run = convert_run

    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        cluster = distributed.LocalCluster(n_workers=2, processes=True, host="127.0.0.1",
                                           threads_per_worker=1, silence_logs=50,
                                           dashboard_address="127.0.0.1:0")
    pids = _worker_pids(cluster)
    try:
        with distributed.Client(cluster) as client:
            client.register_plugin(KillRunB())
        report = tbconvert.convert(src, tmp_path / "out", to_format="parquet",
                                   scheduler=cluster.scheduler_address)
        pids += _worker_pids(cluster)   # the workers started again in place of the dead
    finally:
        _stop(cluster, pids)
    lost = [i for i in report.issues if i.kind == "unreadable_run"]
    assert [(i.run, i.message) for i in lost] == [
        ("b", "b: every worker that took it died; skipped, the other runs were read")]
    # (the fixture's run holds a run of its own below it, b/<time>, which is converted)
    tbconvert.convert(src, tmp_path / "here", to_format="parquet", jobs=1, runs="^(?!b$)")
    assert _contents(tmp_path / "out") == _contents(tmp_path / "here")


@pytest.mark.slow
def test_a_scheduler_lost_while_the_tasks_run_is_one_line_and_exit_12(tmp_path):
    """The scheduler's process killed mid-conversion: one line (no Dask traceback), exit 12,
    no output."""

    class Hold(distributed.WorkerPlugin):
        """Each conversion task notes that it started, then waits (defined here: sent by
        value to the workers)."""

        def __init__(self, flag: str) -> None:
            self.flag = flag

        def setup(self, worker):
            from tbconvert import runtasks
            real, flag = runtasks.convert_run, self.flag

            def convert_run(task):
                Path(flag).touch()
                time.sleep(60)
                return real(task)
            runtasks.convert_run = convert_run
    # on a port it picks itself (one found free here could be taken first), told in its file
    where = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                                  "--host", "127.0.0.1", "--port", "0", "--scheduler-file",
                                  str(where), "--dashboard-address", "127.0.0.1:0"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = proc = None
    try:
        address = _scheduler_address(scheduler, where)
        with distributed.Client(address, timeout=60) as client:
            client.register_plugin(Hold(str(tmp_path / "started")))
            worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                       address, "--host", "127.0.0.1", "--nthreads", "1",
                                       "--dashboard-address", "127.0.0.1:0"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client.wait_for_workers(1, timeout=60)
        proc = subprocess.Popen([*_cli(), "convert", str(FIXTURES / "torch_logdir"),
                                 str(tmp_path / "out"), "--to", "parquet", "--scheduler",
                                 address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=CLI_CWD, env=cli_env())
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), "no task started"
        scheduler.kill()
        scheduler.wait(timeout=30)
        _, err = proc.communicate(timeout=120)
    finally:
        for p in (proc, worker, scheduler):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert proc.returncode == 12, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "connection to the Dask scheduler was lost" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow   # the connection is given its 10 s
def test_an_unreachable_scheduler_is_one_line(tmp_path):
    proc = subprocess.run([*_cli(), "convert", str(FIXTURES / "torch_logdir"),
                           str(tmp_path / "out"), "--to", "parquet",
                           "--scheduler", "tcp://127.0.0.1:9"],
                          capture_output=True, text=True, cwd=CLI_CWD, env=cli_env(),
                          timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "tcp://127.0.0.1:9" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("address", ["foo", "tcp://127.0.0.1:notaport", "http://127.0.0.1:8786"])
def test_a_malformed_address_is_told_as_such_at_once(tmp_path, address):
    """An address Dask cannot parse was called unreachable ("check that the scheduler is
    running"); nothing was tried, and the message now says what is wrong with it."""
    with pytest.raises(tbconvert.TbconvertError, match="not the address of a Dask scheduler"):
        tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "out", to_format="parquet",
                          scheduler=address)
    assert not list(tmp_path.iterdir())


def test_without_the_extra_scheduler_names_it(tmp_path):
    """``distributed`` not installed (imports of it blocked): one line naming the extra."""
    code = ("import sys\nsys.modules['distributed'] = None\nsys.modules['dask'] = None\n"
            "from tbconvert.cli import main\n"
            f"sys.exit(main(['convert', {str(FIXTURES / 'torch_logdir')!r}, "
            f"{str(tmp_path / 'out')!r}, '--to', 'parquet', '--scheduler', 'tcp://127.0.0.1:9']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=CLI_CWD, env=cli_env(), timeout=120, check=False)
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.count("\n") == 1 and "tbconvert[dask]" in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_source_that_cannot_be_split_is_refused(cluster, tmp_path):
    tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "a.h5")
    with pytest.raises(tbconvert.errors.UsageError, match="^scheduler converts an event-file logdir"):
        tbconvert.convert(tmp_path / "a.h5", tmp_path / "out", to_format="parquet",
                          scheduler=cluster.scheduler_address)
    assert not (tmp_path / "out").exists()
    # nor is HDF5 out
    with pytest.raises(tbconvert.errors.UsageError, match="^scheduler converts an event-file logdir"):
        tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "b.h5",
                          scheduler=cluster.scheduler_address)
    assert sorted(os.listdir(tmp_path)) == ["a.h5"]



def test_a_tasks_own_connection_error_is_not_told_as_a_lost_scheduler(cluster):
    """A task that fails with ConnectionError (a port that refuses) is a failed task; only
    the client's own connection lost is a lost scheduler (exit 12)."""
    import socket

    from tbconvert import cluster as C
    with socket.socket() as s:      # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()
    with pytest.raises(tbconvert.errors.TbconvertError) as caught:
        C._on_cluster(socket.create_connection, [closed], cluster.scheduler_address,
                      retries=0, progress=None, sizes=None, lost=None)
    assert not isinstance(caught.value, tbconvert.errors.ClusterError)
    assert str(caught.value).startswith("a task on the cluster failed: ConnectionRefusedError")

def _scheduler_address(scheduler: subprocess.Popen, where: Path) -> str:
    """The address a scheduler started with ``--scheduler-file where`` listens at."""
    import json
    deadline = time.monotonic() + 60
    while True:
        try:
            return json.loads(where.read_text())["address"]
        except (OSError, ValueError, KeyError):
            assert scheduler.poll() is None, "the scheduler exited at start"
            assert time.monotonic() < deadline, "the scheduler did not start within 60 s"
            time.sleep(0.1)


def _cli() -> list:
    from helpers import cli_argv
    return cli_argv()


# -- reading a dataset with Dask ----------------------------------------------------------

# Dask's own reading calls a pandas method pandas 3.1 deprecates
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame.reset_index")
def test_to_dask_reads_a_dataset_with_its_dtypes(tmp_path):
    """The archive's dtypes; text as Arrow-backed ``string[pyarrow]`` (Dask's choice), the
    values those of pandas' own reading of the parts."""
    import pandas as pd
    tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "dataset", to_format="parquet")
    frame = tbconvert.to_dask(tmp_path / "dataset")
    got = frame.compute().reset_index(drop=True)
    parts = sorted(str(p) for p in (tmp_path / "dataset").glob("part-*.parquet"))
    want = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    assert list(got.columns) == list(want.columns) and len(got) == len(want) > 0
    text = [c for c in want.columns if pd.api.types.is_string_dtype(want[c].dtype)
            and want[c].dtype != object]
    assert set(text) >= {"run", "tag", "plugin_name", "data_class"}
    for column in want.columns:
        expected = pd.StringDtype("pyarrow") if column in text else want[column].dtype
        assert got[column].dtype == expected, column
        assert frame.dtypes[column] == expected, column   # known before computing
    pd.testing.assert_frame_equal(got, want.astype({c: pd.StringDtype("pyarrow") for c in text}))
    assert frame.npartitions == len(parts)


def test_to_dask_of_what_is_not_parquet_says_so(tmp_path):
    from tbconvert.errors import FormatError
    tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "logs.h5")
    with pytest.raises(FormatError, match=r"logs\.h5: a hdf5 source; to_dask reads Parquet "
                                          r"archives \(convert it to one first"):
        tbconvert.to_dask(tmp_path / "logs.h5")
    with pytest.raises(FormatError, match="no such file or directory"):
        tbconvert.to_dask(tmp_path / "missing.parquet")


def test_to_dask_of_a_dataset_missing_a_part_says_so_at_once(tmp_path):
    from tbconvert.errors import CorruptDataError
    tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "dataset", to_format="parquet")
    part = sorted((tmp_path / "dataset").glob("*.parquet"))[1]
    part.unlink()
    with pytest.raises(CorruptDataError, match=f"1 part\\(s\\) its _tbconvert.json lists are "
                                               f"missing \\({part.name}"):
        tbconvert.to_dask(tmp_path / "dataset")


@pytest.mark.slow
def test_tbdev_export_through_the_cluster(cluster, tmp_path):
    """An export's experiments, each converted by a task on the cluster: the logdir
    TensorBoard sees is the one a local run writes."""
    from helpers import run_tbconvert
    src = FIXTURES / "tbdev_export"
    here = run_tbconvert("tbdev-export", src, "-o", tmp_path / "here")
    assert here.returncode == 0, here.stderr
    there = run_tbconvert("tbdev-export", src, "-o", tmp_path / "there",
                          "--scheduler", cluster.scheduler_address)
    assert there.returncode == 0, there.stderr
    assert there.stderr == here.stderr.replace(str(tmp_path / "here"), str(tmp_path / "there"))
    assert_same_view(tb_view(tmp_path / "there"), tb_view(tmp_path / "here"))
    assert _event_contents(tmp_path / "there") == _event_contents(tmp_path / "here")


@pytest.mark.slow
def test_sync_through_the_cluster(cluster, tmp_path):
    """``sync --scheduler``: each changed run is read and its new part written by a task on
    the cluster. After every step the dataset holds what one full conversion holds and
    TensorBoard sees the source in it."""
    from test_sync import Events, check, scalar, session_start
    src, dst = tmp_path / "logs", tmp_path / "archive"
    address = cluster.scheduler_address
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write(session_start(0))       # a later start purges (the first one does not)
    for step in range(40):
        a.write(scalar(step))
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / "train")
    r = tbconvert.sync(src, dst, scheduler=address)
    runs = len(tbconvert.read(src).runs)
    assert r.runs_added == runs > 1
    check(src, dst, _made(tmp_path / "c1"))

    # bytes appended to a run, the last record half written, and a new run
    for step in range(40, 70):
        a.write(scalar(step))
    a.write(scalar(70), cut=11)
    b = Events(src / "b" / "events.out.tfevents.2.host")
    b.write_many(scalar(step, tags=("val",)) for step in range(25))
    r = tbconvert.sync(src, dst, scheduler=address)
    assert r.runs_extended == 1 and r.runs_added == 1 and r.runs_unchanged == runs - 1
    check(src, dst, _made(tmp_path / "c2"))

    # a restart that hides archived points: that run is read whole again, on the cluster
    a.finish_cut(scalar(70), 11)
    a.write(session_start(30))
    for step in range(30, 45):
        a.write(scalar(step))
    r = tbconvert.sync(src, dst, scheduler=address)
    assert r.runs_rearchived == 1
    check(src, dst, _made(tmp_path / "c3"))


def _made(path: Path) -> Path:
    path.mkdir()
    return path


def test_relative_paths_reach_the_workers_whole(cluster, tmp_path, monkeypatch):
    """The workers do not run in the command's directory: relative SRC and DST are made
    absolute before they are sent (a relative source gave an empty archive, exit 0)."""
    shutil.copytree(FIXTURES / "torch_logdir", tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    address = cluster.scheduler_address
    report = tbconvert.convert("logs", "dataset", to_format="parquet", scheduler=address)
    assert not report.lost
    tbconvert.convert("logs", "dataset_here", to_format="parquet", jobs=1)
    assert _contents(tmp_path / "dataset") == _contents(tmp_path / "dataset_here")
    synced = tbconvert.sync("logs", "synced", scheduler=address)
    assert not synced.lost and synced.points == report.points
    tbconvert.convert("synced", "back", to_format="tfevents")
    assert_same_view(tb_view(tmp_path / "back"), tb_view(tmp_path / "logs"))


@pytest.mark.slow
@pytest.mark.parametrize("answer", [b"", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"])
def test_a_port_that_is_no_scheduler_is_one_line(tmp_path, answer):
    """A dashboard or web server on the port (answers in HTTP), or a peer that accepts and
    never answers: a usage error within the connect deadline, not a hang or a traceback."""
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    peers = []

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            peers.append(conn)
            if answer:
                conn.sendall(answer)
    threading.Thread(target=serve, daemon=True).start()
    try:
        proc = subprocess.run([*_cli(), "convert", str(FIXTURES / "torch_logdir"),
                               str(tmp_path / "out"), "--to", "parquet",
                               "--scheduler", f"tcp://127.0.0.1:{port}"],
                              capture_output=True, text=True, cwd=CLI_CWD, env=cli_env(),
                              timeout=120, check=False)
    finally:
        server.close()
        for conn in peers:
            conn.close()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"tcp://127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert "check the address" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_a_scheduler_without_workers_is_one_line_not_a_hang(tmp_path, monkeypatch):
    from tbconvert import cluster as tbcluster
    from tbconvert.errors import UsageError
    monkeypatch.setattr(tbcluster, "WORKERS_TIMEOUT", 2)
    empty = distributed.LocalCluster(n_workers=0, processes=True, host="127.0.0.1",
                                     dashboard_address="127.0.0.1:0", silence_logs=50)
    try:
        with pytest.raises(UsageError, match="the scheduler has no workers"):
            tbconvert.convert(FIXTURES / "torch_logdir", tmp_path / "out", to_format="parquet",
                              scheduler=empty.scheduler_address)
        assert not (tmp_path / "out").exists()
    finally:
        empty.close(timeout=20)


def test_a_workers_port_is_told_as_no_scheduler(cluster, tmp_path):
    with distributed.Client(cluster) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
    proc = subprocess.run([*_cli(), "convert", str(FIXTURES / "torch_logdir"),
                           str(tmp_path / "out"), "--to", "parquet", "--scheduler", worker],
                          capture_output=True, text=True, cwd=CLI_CWD, env=cli_env(),
                          timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not as a Dask scheduler" in proc.stderr, proc.stderr


def test_relative_paths_are_named_as_given_in_messages(cluster, tmp_path, monkeypatch):
    """Paths are made absolute for the workers; what the report and errors say names them
    as the user gave them, as a local conversion does."""
    shutil.copytree(FIXTURES / "torch_logdir", tmp_path / "logs")
    event_file = sorted((tmp_path / "logs" / "train").glob("*tfevents*"))[0]
    data = bytearray(event_file.read_bytes())
    data[len(data) // 2] ^= 0x40
    event_file.write_bytes(bytes(data))
    monkeypatch.chdir(tmp_path)
    address = cluster.scheduler_address
    report = tbconvert.convert("logs", "dataset", to_format="parquet", scheduler=address)
    local = tbconvert.convert("logs", "here", to_format="parquet", jobs=1)
    told = [i.message for i in report.issues]
    assert told == [i.message for i in local.issues] and any(
        m.startswith("logs/train/") for m in told), told
    assert str(tmp_path) not in " ".join(told)
    with pytest.raises(tbconvert.TbconvertError) as exists:
        tbconvert.convert("logs", "dataset", to_format="parquet", scheduler=address)
    assert str(exists.value).startswith("dataset already exists"), str(exists.value)
    synced = tbconvert.sync("logs", "synced", scheduler=address)
    assert str(tmp_path) not in " ".join(i.message for i in synced.issues), synced.issues
