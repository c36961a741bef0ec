"""``tbconvert sync`` into a dataset in an object store: a real S3-compatible server (moto)
behind the recording proxy of tests/cloud_server.py, as in tests/test_cloud.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from cloud_server import Rule
from helpers import cli_argv, cli_env, parquet_codecs
from oracle import assert_same_view, tb_view
from test_cloud import bucket, download, keys, store, tbconvert_cli, upload  # noqa: F401
from test_sync import Events, scalar, session_start, tf2_tensor

import tbconvert
from tbconvert.errors import UsageError
from tbconvert.incremental.lock import LOCK_FILE
from tbconvert.incremental.store import StoreDataset, StoreLock
from tbconvert.report import Report

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def view_of(url: str, tmp: Path, name: str):
    back = tmp / name
    shutil.rmtree(back, ignore_errors=True)
    tbconvert.convert(url, back, to_format="tfevents")
    return tb_view(back)


def named_parts(store, url: str) -> set[str]:  # noqa: F811
    marker = json.loads(store.fs.cat_file(f"{url[5:]}/_tbconvert.json"))
    return {p["file"] for p in marker["parts"]}


def part_keys(store, url: str) -> set[str]:  # noqa: F811
    return {k.rsplit("/", 1)[1] for k in keys(store, url) if k.endswith(".parquet")}


def test_growth_steps_synced_to_s3_keep_tensorboards_view(store, bucket, tmp_path):  # noqa: F811
    src, url = tmp_path / "logs", f"s3://{bucket}/ds"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write(session_start(0))       # so that a later start purges
    for step in range(20):
        a.write(scalar(step))
    for step in range(3):
        a.write(tf2_tensor(step, first=step == 0))
    steps = [
        lambda: [a.write(scalar(s)) for s in range(20, 40)],
        lambda: Events(src / "b" / "events.out.tfevents.2.host").write_many(
            [scalar(s, tags=("lr",)) for s in range(10)]),
        lambda: a.write(session_start(5)),       # a restart: the run is read whole again
    ]
    for k in range(len(steps) + 1):
        if k:
            steps[k - 1]()
        store.proxy.clear()
        report = tbconvert.sync(src, url)
        reqs = store.proxy.requests(bucket)
        lists = [r for r in reqs if r.method == "GET" and "list-type" in r.query]
        assert len(lists) == 1, lists          # the prefix is listed once
        puts = [r.path.rsplit("/", 1)[1] for r in reqs if r.method == "PUT"]
        assert puts[0] == LOCK_FILE and puts[-1] == "_tbconvert.json", puts
        marker_at = max(i for i, r in enumerate(reqs) if r.method == "PUT"
                        and r.path.endswith("/_tbconvert.json"))
        # parts are replaced only once the new manifest is in
        assert all(i > marker_at for i, r in enumerate(reqs) if r.method == "DELETE"
                   and r.path.endswith(".parquet")), [(r.method, r.path) for r in reqs]
        assert report.parts_written == len(puts) - 2
        assert part_keys(store, url) == named_parts(store, url)
        assert LOCK_FILE not in {k.rsplit("/", 1)[1] for k in keys(store, url)}
        assert_same_view(view_of(url, tmp_path, f"back{k}"), tb_view(src))
    assert report.runs_rearchived == 1
    # nothing new: the lock, a listing and the manifest; no part
    store.proxy.clear()
    report = tbconvert.sync(src, url)
    assert report.parts_written == 0 and report.runs_unchanged == 2
    writes = [r.path for r in store.proxy.requests(bucket) if r.method == "PUT"]
    assert writes == [f"/{bucket}/ds/{LOCK_FILE}"]


@pytest.mark.slow
def test_killed_sync_leaves_the_previous_dataset_readable(store, bucket, tmp_path):  # noqa: F811
    src, url = tmp_path / "logs", f"s3://{bucket}/ds"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    for step in range(10):
        a.write(scalar(step))
    tbconvert.sync(src, url)
    before = tb_view(src)
    for step in range(10, 30):
        a.write(scalar(step))
    Events(src / "b" / "events.out.tfevents.2.host").write(scalar(0))
    rule = store.proxy.add(Rule(lambda m, p, q: m == "PUT" and p == f"/{bucket}/ds/_tbconvert.json",
                                stall=True))
    proc = subprocess.Popen([*cli_argv(), "sync", str(src), url], env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert rule.hit.wait(120), "the commit never started"
        proc.kill()         # SIGKILL: with every new part uploaded, before the manifest
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        rule.release.set()
    store.proxy.clear()
    # the new parts are there under names the manifest does not know; readers skip them
    assert part_keys(store, url) > named_parts(store, url)
    assert_same_view(view_of(url, tmp_path, "old"), before)
    # the lock of the killed sync is known stale; the next sync takes it over and cleans up
    ok = tbconvert_cli("sync", src, url)
    assert ok.returncode == 0, ok.stderr
    assert "taken over" in ok.stderr
    assert part_keys(store, url) == named_parts(store, url)
    assert_same_view(view_of(url, tmp_path, "new"), tb_view(src))


def test_concurrent_sync_refused(store, bucket, tmp_path):  # noqa: F811
    src, url = tmp_path / "logs", f"s3://{bucket}/ds"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    tbconvert.sync(src, url)
    held = StoreDataset(url)
    try:
        with StoreLock(held, Report()):
            # the store itself refuses a second lock object (If-None-Match: *)
            other = StoreDataset(url)
            assert StoreLock(other, Report())._create() is False
            other.cleanup()
            proc = tbconvert_cli("sync", src, url)
            assert proc.returncode == 2, proc.stderr
            assert "Traceback" not in proc.stderr
            assert "another sync is running" in proc.stderr and url in proc.stderr
            with pytest.raises(UsageError, match="another sync is running"):
                tbconvert.sync(src, url)
        assert LOCK_FILE not in {k.rsplit("/", 1)[1] for k in keys(store, url)}
    finally:
        held.cleanup()
    # a lock of a process that is gone is taken over, with a note
    store.fs.pipe_file(f"{bucket}/ds/{LOCK_FILE}", json.dumps(
        {"host": __import__("socket").gethostname(), "pid": 2**22 + 7, "time": 0}).encode())
    report = tbconvert.sync(src, url)
    assert [i.kind for i in report.issues] == ["stale_lock_taken_over"]


def test_a_lock_whose_answer_was_lost_is_known_as_its_own(store, bucket, tmp_path):  # noqa: F811
    # the store created the lock, the answer never came: the retried exclusive write finds a
    # lock, and it is this sync's (before: "another sync is running (process <itself>)")
    src, url = tmp_path / "logs", f"s3://{bucket}/ds"
    Events(src / "a" / "events.out.tfevents.1.host").write_many(scalar(s) for s in range(3))
    rule = store.proxy.add(Rule(lambda m, p, q: m == "PUT" and p.endswith(f"/ds/{LOCK_FILE}"),
                                lose_answer=True, times=1))
    report = tbconvert.sync(src, url)
    assert rule.hit.is_set() and report.runs_added == 1, report.summary()
    assert LOCK_FILE not in {k.rsplit("/", 1)[1] for k in keys(store, url)}
    assert tbconvert_cli("verify", src, url).returncode == 0


def test_source_and_dataset_both_in_the_store(store, bucket, tmp_path):  # noqa: F811
    src = tmp_path / "logs"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    for step in range(10):
        a.write(scalar(step))
    upload(store, src, f"s3://{bucket}/logs")
    r = tbconvert.sync(f"s3://{bucket}/logs", f"s3://{bucket}/ds")
    assert r.runs_added == 1
    for step in range(10, 15):
        a.write(scalar(step))
    store.fs.put_file(str(a.path), f"{bucket}/logs/a/{a.path.name}")      # grown in place
    r = tbconvert.sync(f"s3://{bucket}/logs", f"s3://{bucket}/ds")
    assert r.runs_extended == 1 and r.runs_rearchived == 0, r.summary()
    assert all("tbconvert-" not in o for o in r.outputs)
    assert_same_view(view_of(f"s3://{bucket}/ds", tmp_path, "back"), tb_view(src))
    with pytest.raises(UsageError, match="inside the source|is the source"):
        tbconvert.sync(f"s3://{bucket}/logs", f"s3://{bucket}/logs/ds")


def test_a_prefix_that_is_not_a_dataset_is_refused(store, bucket, tmp_path):  # noqa: F811
    src = tmp_path / "logs"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    store.fs.pipe_file(f"{bucket}/other/notes.txt", b"mine")
    proc = tbconvert_cli("sync", src, f"s3://{bucket}/other")
    assert proc.returncode == 6 and "not a tbconvert dataset" in proc.stderr, proc.stderr
    assert keys(store, f"s3://{bucket}/other") == [f"{bucket}/other/notes.txt"]


def test_memory_urls_take_the_generic_path(tmp_path):
    src, url = tmp_path / "logs", f"memory://sync-{uuid.uuid4().hex[:8]}/ds"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    for step in range(5):
        a.write(scalar(step))
    tbconvert.sync(src, url)
    for step in range(5, 9):
        a.write(scalar(step))
    r = tbconvert.sync(src, url)
    assert r.runs_extended == 1 and r.parts_written == 1
    assert_same_view(view_of(url, tmp_path, "back"), tb_view(src))
    # a dataset in a store never merges its parts: a small one is compressed all the same
    import fsspec
    fs = fsspec.filesystem("memory")
    tail = max(p for p in fs.ls(url[len("memory://"):], detail=False) if p.endswith(".parquet"))
    with fs.open(tail, "rb") as fh:
        assert parquet_codecs(fh) == {"ZSTD"}


def test_a_sync_that_finds_nothing_new_deletes_what_a_killed_one_uploaded(tmp_path):
    """Listing the prefix (DuckDB, Dask) shows every part key: what a killed sync uploaded
    goes at the next sync, even one with nothing to read."""
    import fsspec
    src, url = tmp_path / "logs", f"memory://sync-{uuid.uuid4().hex[:8]}/ds"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    tbconvert.sync(src, url)
    fs = fsspec.filesystem("memory")
    root = url[len("memory://"):]
    part = next(p for p in fs.ls(root, detail=False) if p.endswith(".parquet"))
    fs.copy(part, part.replace("-g0001", "-g0002"))
    r = tbconvert.sync(src, url)
    assert r.changed_nothing
    assert [p.rsplit("/", 1)[1] for p in fs.ls(root, detail=False) if p.endswith(".parquet")] \
        == [part.rsplit("/", 1)[1]]


def test_an_export_experiment_synced_to_a_url(tmp_path):
    from helpers import FIXTURES

    from tbconvert.verify import compare
    experiment = next((FIXTURES / "tbdev_export").glob("experiment_*"))
    url = f"memory://sync-{uuid.uuid4().hex[:8]}/ds"
    assert tbconvert.sync(experiment, url).runs_added > 0
    again = tbconvert.sync(experiment, url)
    assert again.parts_written == 0 and again.runs_added == 0
    tbconvert.convert(url, tmp_path / "back.h5")
    assert compare(tmp_path / "back.h5", experiment) == []
    # an export root needs one dataset per experiment: refused at a URL, in one line
    with pytest.raises(UsageError, match="export root"):
        tbconvert.sync(FIXTURES / "tbdev_export", url)


def test_no_such_bucket_is_one_line(store, tmp_path):  # noqa: F811
    from test_cloud import one_line_error
    src = tmp_path / "logs"
    Events(src / "a" / "events.out.tfevents.1.host").write(scalar(0))
    proc = tbconvert_cli("sync", src, "s3://no-such-bucket-sync/ds")
    assert proc.returncode == 11, proc.stderr
    one_line_error(proc, "s3://no-such-bucket-sync/ds", "no such bucket")


def test_an_object_rewritten_at_the_same_size_is_seen(store, bucket, tmp_path):  # noqa: F811
    # A source in a store is fetched anew by every sync: its files take their object's
    # modification time, so a rewrite at the same size is told by it, and an untouched
    # object is not read whole again.
    import time

    from tbconvert.formats.tfevents import records
    src, dst = tmp_path / "logs", tmp_path / "ds"
    a = Events(src / "a" / "events.out.tfevents.1.host")
    a.write_many([scalar(step) for step in range(400)])
    Events(src / "b" / "events.out.tfevents.1.host").write(scalar(0))
    upload(store, src, f"s3://{bucket}/logs")
    assert tbconvert.sync(f"s3://{bucket}/logs", dst).runs_added == 2
    r = tbconvert.sync(f"s3://{bucket}/logs", dst)
    assert r.runs_unchanged == 2 and r.runs_rearchived == 0, r.summary()
    data = bytearray(a.path.read_bytes())
    old = records.frame(scalar(200).SerializeToString())
    ev = scalar(200)
    ev.summary.value[0].simple_value = 1.5
    at = data.index(old)
    data[at:at + len(old)] = records.frame(ev.SerializeToString())
    a.path.write_bytes(bytes(data))
    time.sleep(1.1)     # a listing's times are in seconds
    store.fs.put_file(str(a.path), f"{bucket}/logs/a/{a.path.name}")
    r = tbconvert.sync(f"s3://{bucket}/logs", dst)
    assert r.runs_rearchived == 1 and r.runs_unchanged == 1, r.summary()
    assert_same_view(view_of(str(dst), tmp_path, "back"), tb_view(src))


def test_a_lock_the_failing_store_keeps_is_told_with_the_error(store, bucket, tmp_path):  # noqa: F811
    """The store refuses the commit and then the lock's removal: the one line says that the
    lock was left and what the next sync does with it."""
    src, url = tmp_path / "logs", f"s3://{bucket}/ds"
    Events(src / "a" / "events.out.tfevents.1.host").write_many([scalar(s) for s in range(5)])
    for method, what in (("PUT", "_tbconvert.json"), ("DELETE", LOCK_FILE)):
        store.proxy.add(Rule(lambda m, p, q, method=method, what=what:
                             m == method and p.endswith(f"/ds/{what}"),
                             status=403, code="AccessDenied"))
    try:
        proc = tbconvert_cli("sync", src, url)
    finally:
        store.proxy.clear()
    assert proc.returncode == 11, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"the dataset's lock {url}/{LOCK_FILE} could not be removed" in proc.stderr
    assert "--break-lock" in proc.stderr
