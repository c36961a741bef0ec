"""Sources and destinations in an object store: a real S3-compatible server (moto's server
mode) on 127.0.0.1, reached through a recording proxy (tests/cloud_server.py)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from cloud_server import Proxy, Rule, free_port, start_moto, stop
from helpers import FIXTURES, LOGDIRS, cli_argv, cli_env, counting_progress
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert import api
from tbconvert.output import TMP_MARK

pytest.importorskip("s3fs")
pytest.importorskip("moto")

_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


class Store:
    def __init__(self, proxy: Proxy) -> None:
        import s3fs
        self.proxy = proxy
        self.fs = s3fs.S3FileSystem(endpoint_url=proxy.url, use_listings_cache=False,
                                    skip_instance_cache=True)


@pytest.fixture(scope="session")
def store():
    proc, port = start_moto()
    proxy = Proxy(port)
    saved = {k: os.environ.get(k) for k in (*_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(_ENV, AWS_ENDPOINT_URL=proxy.url)
    try:
        yield Store(proxy)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proxy.close()
        stop(proc)


@pytest.fixture
def bucket(store) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    store.fs.mkdir(name)
    store.proxy.clear()
    yield name
    store.proxy.clear()


def upload(store, local: Path, url: str) -> None:
    store.fs.put(str(local), url[len("s3://"):], recursive=True)


def download(store, url: str, local: Path) -> Path:
    store.fs.get(url[len("s3://"):], str(local), recursive=True)
    return local


def keys(store, url: str) -> list[str]:
    try:
        return sorted(store.fs.find(url[len("s3://"):]))
    except FileNotFoundError:
        return []


def tbconvert_cli(*args, env_extra=None, drop=(), timeout=300):
    env = cli_env(**(env_extra or {}))
    for k in drop:
        env.pop(k, None)
    return subprocess.run([*cli_argv(), *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_line_error(proc, *needles):
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tbconvert: error:")]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ round trips

@pytest.mark.parametrize("logdir", LOGDIRS)
def test_logdir_round_trip_through_s3_keeps_tensorboards_view(store, bucket, logdir, tmp_path):
    src = f"s3://{bucket}/{logdir}"
    upload(store, FIXTURES / logdir, src)
    api.convert(src, f"s3://{bucket}/a.parquet")
    api.convert(f"s3://{bucket}/a.parquet", f"s3://{bucket}/a.h5")
    api.convert(f"s3://{bucket}/a.h5", f"s3://{bucket}/rebuilt", to_format="tfevents")
    rebuilt = download(store, f"s3://{bucket}/rebuilt", tmp_path / "rebuilt")
    local = tmp_path / "local"
    api.convert(FIXTURES / logdir, local, to_format="tfevents")
    assert_same_view(tb_view(rebuilt), tb_view(local))
    # nothing temporary is left beside the outputs
    assert not [k for k in keys(store, f"s3://{bucket}") if ".tbconvert-tmp-" in k]


def test_plugin_files_in_a_logdir_at_a_url_are_noted_not_fetched(store, bucket, tmp_path):
    """A logdir in a store is listed, not fetched whole: the files of TensorBoard's plugins
    there (the projector's config, a profiler session) are noted as a local logdir's are,
    under the URL."""
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "torch_logdir", src)
    store.fs.pipe(f"{bucket}/logs/train/plugins/profile/s1/host.xplane.pb", b"\0" * 4096)
    store.fs.pipe(f"{bucket}/logs/multi/host.1.pt.trace.json", b"{}")
    report = api.convert(src, tmp_path / "a.parquet")
    notes = sorted(i.message for i in report.issues if i.kind == "plugin_files_not_read")
    keep = "only an event-file output carries them (copy them beside any other output to keep them)"
    assert notes == [
        f"{src}/multi/*.pt.trace.json: 1 trace(s) of the PyTorch profiler (which its "
        f"TensorBoard plugin shows; not event data) were not read; {keep}",
        f"{src}/train/plugins/profile: 1 file(s) of TensorBoard's profile plugin (not event "
        f"data) were not read; {keep}",
        f"{src}/train/projector_config.pbtxt: the projector's configuration and the files it "
        f"names (not event data) were not read; {keep}"]
    assert not [i for i in report.issues if i.kind == "plugin_files_not_read" and i.lost]
    assert sorted(i.run for i in report.issues if i.kind == "plugin_files_not_read") == \
        ["multi", "train", "train"]
    # only the runs asked for are told of
    report = api.convert(src, tmp_path / "b.parquet", runs="^resumed$")
    assert not [i for i in report.issues if i.kind == "plugin_files_not_read"]


def test_plugin_files_go_from_a_url_into_event_files_and_from_event_files_to_a_url(
        store, bucket, tmp_path):
    """Event files carry the plugins' files from a logdir at a URL (fetched then, and only
    then) and into one, byte for byte, as from and to a local logdir."""
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "torch_logdir", src)
    xplane = bytes(range(256)) * 40
    store.fs.pipe(f"{bucket}/logs/train/plugins/profile/s1/host.xplane.pb", xplane)
    store.fs.pipe(f"{bucket}/logs/multi/host.1.pt.trace.json", b'{"traceEvents": []}')
    out = tmp_path / "out"
    report = api.convert(src, out, to_format="tfevents")
    assert not [i for i in report.issues if i.kind == "plugin_files_not_read"]
    assert sorted(i.message for i in report.issues if i.kind == "plugin_files_copied") == [
        f"{src}/multi/*.pt.trace.json: 1 trace(s) of the PyTorch profiler copied to the "
        "output's multi/*.pt.trace.json",
        f"{src}/train/plugins/profile: 1 file(s) of TensorBoard's profile plugin copied to the "
        "output's train/plugins/profile",
        f"{src}/train/projector_config.pbtxt: the projector's configuration and the 2 file(s) "
        "it names in its run copied to the output's train/projector_config.pbtxt"]
    assert (out / "train/plugins/profile/s1/host.xplane.pb").read_bytes() == xplane
    assert (out / "multi/host.1.pt.trace.json").read_bytes() == b'{"traceEvents": []}'
    for name in ("projector_config.pbtxt", "00000/features/tensors.tsv",
                 "00000/features/metadata.tsv"):
        assert (out / "train" / name).read_bytes() == \
            (FIXTURES / "torch_logdir" / "train" / name).read_bytes()
    # verify reads them from the store to compare them with the copy's
    from tbconvert.verify import compare
    report = tbconvert.Report()
    assert compare(src, out, report=report) == []
    assert [i.count for i in report.issues if i.kind == "plugin_files_compared"] == [5]
    # and back into the store
    dst = f"s3://{bucket}/copy"
    report = api.convert(out, dst, to_format="tfevents")
    assert len([i for i in report.issues if i.kind == "plugin_files_copied"]) == 3
    assert store.fs.cat(f"{bucket}/copy/train/plugins/profile/s1/host.xplane.pb") == xplane
    assert store.fs.cat(f"{bucket}/copy/train/00000/features/tensors.tsv") == \
        (FIXTURES / "torch_logdir" / "train" / "00000/features/tensors.tsv").read_bytes()


def test_a_plugin_file_whose_place_a_file_holds_is_told_and_the_rest_converted(
        store, bucket, tmp_path):
    """A store may hold both ``r/x.pt.trace.json`` and ``r/x.pt.trace.json/inner.pt.trace.json``,
    which no directory can: the second is not copied, and said so."""
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "torch_logdir" / "multi", f"{src}/r")
    store.fs.pipe(f"{bucket}/logs/r/x.pt.trace.json", b"{}")
    store.fs.pipe(f"{bucket}/logs/r/x.pt.trace.json/inner.pt.trace.json", b"[]")
    out = tmp_path / "out"
    report = api.convert(src, out, to_format="tfevents")
    assert (out / "r" / "x.pt.trace.json").read_bytes() == b"{}"
    assert [i.message for i in report.issues if i.kind == "plugin_files_not_read"] == [
        f"{src}/r/x.pt.trace.json/inner.pt.trace.json: the output already has "
        "r/x.pt.trace.json/inner.pt.trace.json (or a file in its path); not copied"]
    assert tbconvert.info(out).runs


@pytest.mark.slow
@pytest.mark.e2e
def test_cli_logdir_to_s3_and_back_with_force(store, bucket, tmp_path):
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "torch_logdir", src)
    dst = f"s3://{bucket}/archive.parquet"
    proc = tbconvert_cli("convert", src, dst)
    assert proc.returncode == 0, proc.stderr
    again = tbconvert_cli("convert", src, dst)
    assert again.returncode == 6
    one_line_error(again, dst, "--force")
    forced = tbconvert_cli("convert", FIXTURES / "tf2_logdir", dst, "--force")
    assert forced.returncode == 0, forced.stderr
    verify = tbconvert_cli("verify", dst, FIXTURES / "tf2_logdir")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_directory_output_replaced_with_force_drops_stale_objects(store, bucket, tmp_path):
    dst = f"s3://{bucket}/logs"
    api.convert(FIXTURES / "torch_logdir", dst, to_format="tfevents")
    first = keys(store, dst)
    api.convert(FIXTURES / "tf2_logdir", dst, to_format="tfevents", force=True)
    second = keys(store, dst)
    assert not set(first) & set(second)
    local = tmp_path / "local"
    api.convert(FIXTURES / "tf2_logdir", local, to_format="tfevents")
    assert_same_view(tb_view(download(store, dst, tmp_path / "got")), tb_view(local))


@pytest.mark.slow
def test_tbdev_export_from_s3_to_s3(store, bucket, tmp_path):
    upload(store, FIXTURES / "tbdev_export", f"s3://{bucket}/exports")
    proc = tbconvert_cli("tbdev-export", f"s3://{bucket}/exports", "-o", f"s3://{bucket}/logs")
    assert proc.returncode == 0, proc.stderr
    assert f"s3://{bucket}/logs" in proc.stderr
    assert "tbconvert-fetched-" not in proc.stderr + proc.stdout   # staging paths never shown
    local = tmp_path / "local"
    assert tbconvert_cli("tbdev-export", FIXTURES / "tbdev_export", "-o", local).returncode == 0
    got = download(store, f"s3://{bucket}/logs", tmp_path / "got")
    assert_same_view(tb_view(got), tb_view(local))


@pytest.mark.slow
def test_parquet_dataset_written_to_s3_is_read_by_pyarrow_from_s3(store, bucket):
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from pyarrow.fs import FSSpecHandler, PyFileSystem
    dst = f"s3://{bucket}/dataset"
    api.convert(FIXTURES / "torch_logdir", dst, to_format="parquet")
    files = [k for k in keys(store, dst) if k.endswith(".parquet")]
    assert len(files) > 1
    fs = PyFileSystem(FSSpecHandler(store.fs))
    table = ds.dataset(f"{bucket}/dataset", filesystem=fs, format="parquet").to_table()
    local = tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")
    points = sum(len(s) for tags in local.series.values() for s in tags.values())
    assert table.num_rows == points
    # and tbconvert reads it back point for point
    assert tbconvert_cli("verify", dst, FIXTURES / "torch_logdir").returncode == 0
    assert sum(pq.read_table(f, filesystem=fs).num_rows for f in files) == points


@pytest.mark.slow
def test_media_and_tables_to_s3(store, bucket):
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "torch_logdir", src)
    assert tbconvert_cli("media", src, "-o", f"s3://{bucket}/media").returncode == 0
    assert any(k.endswith(".png") for k in keys(store, f"s3://{bucket}/media"))
    proc = tbconvert_cli("hparams", src, "-o", f"s3://{bucket}/hp.csv")
    assert proc.returncode == 0, proc.stderr
    assert store.fs.cat_file(f"{bucket}/hp.csv").startswith(b"run")


# ------------------------------------------------------------------ requests

def test_reading_a_logdir_takes_one_listing_and_one_get_per_file(store, bucket, tmp_path):
    src = f"s3://{bucket}/logs"
    upload(store, FIXTURES / "tensorboardx_logdir", src)
    # a checkpoint beside the logs is never fetched
    for name in ("model.ckpt", "model.h5", "pytorch_model.bin", "config.json"):
        store.fs.pipe_file(f"{bucket}/logs/train/{name}", b"\0" * 100_000)
    n_files = sum(1 for k in keys(store, src) if "tfevents" in k)
    store.proxy.clear()
    api.convert(src, tmp_path / "x.parquet")
    reqs = store.proxy.requests(bucket)
    lists = [r for r in reqs if r.method == "GET" and "list-type" in r.query]
    gets = [r for r in reqs if r.method == "GET" and "list-type" not in r.query]
    assert len(lists) == 1
    assert len(gets) == n_files
    assert len(reqs) <= 2 * n_files + len(lists)
    assert all("tfevents" in r.path for r in gets)


def test_a_growing_file_is_read_from_its_old_end(store, bucket, tmp_path):
    from tbconvert.remote.source import SourceStage
    from tbconvert.report import Report
    first = FIXTURES / "torch_logdir" / "train"
    event = next(p for p in first.iterdir() if "tfevents" in p.name)
    data = event.read_bytes()
    half = len(data) // 2
    store.fs.pipe_file(f"{bucket}/run/{event.name}", data[:half])
    stage = SourceStage(f"s3://{bucket}/run", None, Report())
    try:
        local = stage.fetch()
        store.fs.pipe_file(f"{bucket}/run/{event.name}", data)
        store.proxy.clear()
        assert stage.refresh() == [event.name]
        gets = [r for r in store.proxy.requests(bucket)
                if r.method == "GET" and "list-type" not in r.query]
        assert [r.received for r in gets] == [len(data) - half]
        assert (local / event.name).read_bytes() == data
        store.proxy.clear()
        assert stage.refresh() == []
        assert not [r for r in store.proxy.requests(bucket) if "list-type" not in r.query]
    finally:
        stage.cleanup()


def test_unsafe_object_names_are_skipped_and_reported(store, bucket, tmp_path):
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")
    store.fs.pipe_file(f"{bucket}/logs/../evil.tfevents", b"x")
    report = api.convert(f"s3://{bucket}/logs", tmp_path / "x.parquet")
    assert any(i.kind == "remote_key_skipped" for i in report.issues)
    assert not list(tmp_path.parent.glob("evil*"))

@pytest.mark.skipif(os.name != "posix", reason="directory names of any bytes are POSIX's")
@pytest.mark.parametrize("to", ["tfevents", "media"])
def test_a_run_directory_named_by_other_bytes_than_utf8_reaches_the_store_escaped(
        store, bucket, tmp_path, to):
    # object keys are text: such a name is spelt %XX (as a local logdir spells it too), told
    # once, and nothing of the upload is left behind
    import shutil
    logs, spelt = tmp_path / "logs", tmp_path / "spelt"
    for root, name in ((logs, os.fsdecode(b"r\xff")), (spelt, "r%FF")):
        shutil.copytree(FIXTURES / "tensorboardx_logdir" / "run_a", root / name)
        shutil.copytree(FIXTURES / "tensorboardx_logdir" / "run_b", root / "plain")
    dst = f"s3://{bucket}/out"
    if to == "media":
        report = tbconvert.extract_media(logs, dst)
        local = tmp_path / "media"
        tbconvert.extract_media(logs, local)
        assert [k[len(f"{bucket}/out/"):] for k in keys(store, dst)] == sorted(
            p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    else:
        report = api.convert(logs, dst, to_format=to)
        # (event files spell the run's directory so wherever they go: a renamed run)
        notes = [i for i in report.issues if i.kind in ("name_escaped", "run_renamed")]
        assert notes and all("r%FF" in n.message and not n.lost for n in notes), notes
        if to != "tfevents":
            assert len(notes) == 1, notes    # (told once, not again for the upload)
        back = download(store, dst, tmp_path / "back")
        assert sorted(p.name for p in back.iterdir()) == ["plain", "r%FF"]
        assert_same_view(tb_view(back), tb_view(spelt))
    assert not [k for k in keys(store, f"s3://{bucket}") if TMP_MARK in k]


# ------------------------------------------------------------------ errors

def test_no_such_bucket(store):
    proc = tbconvert_cli("info", "s3://no-such-bucket-here/logs")
    assert proc.returncode == 3
    one_line_error(proc, "s3://no-such-bucket-here/logs", "no such bucket")


def test_no_credentials(store, tmp_path):
    proc = tbconvert_cli("info", "s3://whatever/logs",
                         env_extra={"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                                    "AWS_CONFIG_FILE": str(tmp_path / "none")},
                         drop=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"))
    assert proc.returncode == 11
    one_line_error(proc, "s3://whatever/logs", "no credentials")


SECRET = "sEcReT-vAlUe-4f9d2c"


@pytest.mark.parametrize("flags", [[], ["-v"], ["--debug"]])
def test_access_denied_names_the_url_and_never_the_secret(store, bucket, flags):
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")
    store.proxy.add(Rule(lambda m, p, q: p.startswith(f"/{bucket}"), status=403,
                         code="AccessDenied"))
    proc = tbconvert_cli("convert", f"s3://{bucket}/logs", f"s3://{bucket}/x.parquet",
                         "--storage-option", f"secret={SECRET}", "--storage-option",
                         "key=testing", *flags)
    assert proc.returncode == 11, proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    if "--debug" not in flags:
        one_line_error(proc, f"s3://{bucket}/logs", "access denied")


def test_a_refused_head_request_says_it_gave_no_reason(store, bucket, tmp_path):
    """A HEAD answered 403 has no body to say whether the key was wrong or lacks the right:
    the message gives both."""
    store.proxy.add(Rule(lambda m, p, q: m == "HEAD", status=403, code="AccessDenied"))
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", f"s3://{bucket}/x.parquet")
    assert proc.returncode == 11, proc.stderr
    one_line_error(proc, f"s3://{bucket}/x.parquet", "access denied (HTTP 403, no reason "
                   "given): the key pair or token may be wrong, or not allowed to write here")


@pytest.mark.slow
def test_access_denied_on_the_destination(store, bucket, tmp_path):
    store.proxy.add(Rule(lambda m, p, q: m in ("PUT", "POST"), status=403, code="AccessDenied"))
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", f"s3://{bucket}/x.parquet")
    assert proc.returncode == 11
    one_line_error(proc, f"s3://{bucket}/x.parquet", "access denied", "write")


@pytest.mark.slow
def test_unreachable_endpoint_fails_in_bounded_time(store):
    import time
    port = free_port()
    started = time.monotonic()
    proc = tbconvert_cli("info", "s3://b/logs",
                         env_extra={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    assert time.monotonic() - started < 120
    assert proc.returncode == 11
    one_line_error(proc, "s3://b/logs", "cannot reach the endpoint")


def test_throttling_is_retried_with_backoff(store, bucket, tmp_path):
    upload(store, FIXTURES / "torch_logdir", f"s3://{bucket}/logs")
    rule = store.proxy.add(Rule(lambda m, p, q: m == "GET", status=503, code="SlowDown",
                                times=2))
    report = api.convert(f"s3://{bucket}/logs", tmp_path / "x.parquet")
    assert rule.times == 0 and report.runs > 0


@pytest.mark.slow
def test_throttling_that_does_not_stop_is_one_line(store, bucket):
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")
    store.proxy.add(Rule(lambda m, p, q: m == "GET", status=503, code="SlowDown"))
    # fewer attempts per request than the default keep the test short; the backoff is the same
    proc = tbconvert_cli("info", f"s3://{bucket}/logs", "--storage-option",
                         "config_kwargs.retries.max_attempts=2")
    assert proc.returncode == 11
    one_line_error(proc, f"s3://{bucket}/logs", "throttling")


# ------------------------------------------------------------------ atomic commit

@pytest.mark.slow
@pytest.mark.parametrize("dst, to", [("x.parquet", None), ("x.h5", None),
                                     ("logs", "tfevents"), ("dataset", "parquet")])
def test_killed_midway_leaves_nothing_under_the_final_name(store, bucket, dst, to, tmp_path):
    """The conversion is killed (SIGKILL) while its upload is in flight. The local directory
    it built the output in stays behind, and the next command that makes one removes it."""
    final = f"s3://{bucket}/out/{dst}"
    rule = store.proxy.add(Rule(lambda m, p, q: m in ("PUT", "POST")
                                and p.startswith(f"/{bucket}/out/"), stall=True))
    args = ["convert", FIXTURES / "torch_logdir", final] + (["--to", to] if to else [])
    local_tmp = tmp_path / "tmp"
    local_tmp.mkdir()
    proc = subprocess.Popen([*cli_argv(), *map(str, args)], env=cli_env(TMPDIR=str(local_tmp)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert rule.hit.wait(120), "the upload never started"
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        rule.release.set()
    assert keys(store, final) == []
    assert [p.name.startswith("tbconvert-built-") for p in local_tmp.iterdir()] == [True]
    # the same conversion run again succeeds (nothing stale blocks it)
    store.proxy.clear()
    ok = tbconvert_cli(*args, env_extra={"TMPDIR": str(local_tmp)})
    assert ok.returncode == 0, ok.stderr
    assert keys(store, final)
    assert list(local_tmp.iterdir()) == []


def test_interrupted_directory_commit_starts_only_after_every_upload(store, bucket):
    """Objects under the final prefix are only ever made by copies, after all uploads."""
    final = f"s3://{bucket}/logs"
    api.convert(FIXTURES / "torch_logdir", final, to_format="tfevents")
    reqs = store.proxy.requests(bucket)
    writes = [r for r in reqs if r.method == "PUT"]
    to_final = [i for i, r in enumerate(reqs) if r.method == "PUT"
                and r.path.startswith(f"/{bucket}/logs/")]
    to_temp = [i for i, r in enumerate(reqs) if r.method == "PUT"
               and ".tbconvert-tmp-" in r.path]
    assert writes and to_final and to_temp
    assert max(to_temp) < min(to_final)


# ------------------------------------------------------------------ other stores

def test_memory_urls_take_the_generic_path(tmp_path):
    url = f"memory://tbconvert-{uuid.uuid4().hex[:8]}"
    api.convert(FIXTURES / "torch_logdir", f"{url}/a.parquet")
    api.convert(f"{url}/a.parquet", f"{url}/logs", to_format="tfevents")
    api.convert(f"{url}/logs", tmp_path / "back.h5")
    from tbconvert.verify import compare
    assert compare(tmp_path / "back.h5", FIXTURES / "torch_logdir") == []


def test_file_urls_are_local_paths(tmp_path):
    api.convert(f"file://{FIXTURES / 'torch_logdir'}", f"file://{tmp_path / 'a.parquet'}")
    assert (tmp_path / "a.parquet").is_file()


@pytest.mark.parametrize("url, extra", [("gs://b/logs", "gcs"), ("az://c/logs", "azure"),
                                        ("hf://datasets/x/y", "hf")])
def test_missing_protocol_package_names_the_extra(url, extra):
    import importlib.util
    module = {"gcs": "gcsfs", "azure": "adlfs", "hf": "huggingface_hub"}[extra]
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed")
    proc = tbconvert_cli("info", url)
    assert proc.returncode == 7
    one_line_error(proc, url, f"tbconvert[{extra}]")


def test_http_urls_are_read_only(tmp_path):
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", "https://example.invalid/x.parquet")
    assert proc.returncode == 2
    one_line_error(proc, "https://example.invalid/x.parquet", "only be read")


def test_storage_option_parsing():
    from tbconvert.remote.urls import parse_storage_options
    assert parse_storage_options(["anon=true", "client_kwargs.region_name=eu-west-1",
                                  "block_size=5", "profile=dev"]) == {
        "anon": True, "client_kwargs": {"region_name": "eu-west-1"}, "block_size": 5,
        "profile": "dev"}
    with pytest.raises(tbconvert.errors.UsageError):
        parse_storage_options(["novalue"])


def test_same_prefix_source_and_destination_is_refused(store, bucket):
    proc = tbconvert_cli("convert", f"s3://{bucket}/logs", f"s3://{bucket}/logs/x.parquet")
    assert proc.returncode == 2
    one_line_error(proc, "is inside")


def test_a_file_larger_than_a_block_is_read_in_ranges(store, bucket, tmp_path, monkeypatch):
    from tbconvert.remote import source
    monkeypatch.setattr(source, "BLOCK", 4096)
    upload(store, FIXTURES / "torch_logdir", f"s3://{bucket}/logs")
    sizes = [store.fs.size(k) for k in keys(store, f"s3://{bucket}/logs") if "tfevents" in k]
    store.proxy.clear()
    api.convert(f"s3://{bucket}/logs", tmp_path / "x.parquet")
    gets = [r for r in store.proxy.requests(bucket)
            if r.method == "GET" and "list-type" not in r.query]
    assert len(gets) == sum(-(-s // 4096) for s in sizes)
    from tbconvert.verify import compare
    assert compare(tmp_path / "x.parquet", FIXTURES / "torch_logdir") == []


def test_http_urls_read_single_files(tmp_path):
    pytest.importorskip("aiohttp")
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
    api.convert(FIXTURES / "torch_logdir", tmp_path / "a.parquet")

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/a.parquet"
        api.convert(url, tmp_path / "b.h5")
        from tbconvert.verify import compare
        assert compare(tmp_path / "b.h5", FIXTURES / "torch_logdir") == []
        missing = tbconvert_cli("info", url.replace("a.parquet", "nothing.parquet"))
        assert missing.returncode == 3
        one_line_error(missing, "nothing.parquet", "no such file")
    finally:
        server.shutdown()
        server.server_close()
    # (fsspec's HTTP store says "not found" for a refused connection too)
    gone = tbconvert_cli("info", f"http://127.0.0.1:{free_port()}/a.parquet")
    assert gone.returncode == 11
    one_line_error(gone, "a.parquet", "cannot reach the endpoint", "check the address")


def test_no_such_bucket_for_a_destination(store):
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", "s3://no-such-bucket-out/x.h5")
    assert proc.returncode == 11
    one_line_error(proc, "s3://no-such-bucket-out/x.h5", "no such bucket")


def test_secrets_are_scrubbed_from_every_message():
    from tbconvert.errors import StorageError
    from tbconvert.remote import failures
    failures.remember_secrets({"client_kwargs": {"aws_secret_access_key": SECRET}})
    err = StorageError(f"s3://b/x: failed with {SECRET} and "
                       "https://h/o?X-Amz-Signature=abcdef0123456789&X-Amz-Credential=AKIAXYZ")
    text = err.cli_message()
    assert SECRET not in text and "abcdef0123456789" not in text and "AKIAXYZ" not in text
    assert "s3://b/x" in text


@pytest.mark.slow
def test_sigterm_mid_upload_removes_the_temporary_objects(store, bucket):
    import signal
    final = f"s3://{bucket}/out/logs"
    rule = store.proxy.add(Rule(lambda m, p, q: m == "PUT" and ".tbconvert-tmp-" in p,
                                stall=True, times=1))
    args = ["convert", FIXTURES / "torch_logdir", final, "--to", "tfevents"]
    proc = subprocess.Popen([*cli_argv(), *map(str, args)], env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert rule.hit.wait(120), "the upload never started"
        proc.send_signal(signal.SIGTERM)
        rule.release.set()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert keys(store, final) == []
    assert not [k for k in keys(store, f"s3://{bucket}") if ".tbconvert-tmp-" in k]


def test_progress_counts_the_fetch_and_the_conversion(store, bucket, tmp_path):
    upload(store, FIXTURES / "torch_logdir", f"s3://{bucket}/logs")
    size = sum(store.fs.size(k) for k in keys(store, f"s3://{bucket}/logs") if "tfevents" in k)
    seen = counting_progress()
    api.convert(f"s3://{bucket}/logs", tmp_path / "x.parquet", options=api.make_options(
        progress=seen))
    assert seen.total == 2 * size
    assert size <= seen.done <= seen.total


def test_endpoint_and_keys_from_storage_options_alone(store, bucket):
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")
    proc = tbconvert_cli("info", f"s3://{bucket}/logs", "--storage-option",
                         f"endpoint_url={store.proxy.url}", "--storage-option", "key=testing",
                         "--storage-option", "secret=testing",
                         drop=("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    assert proc.returncode == 0, proc.stderr
    assert "train" in proc.stdout


def test_a_source_that_does_not_fit_locally_is_one_line(store, bucket):
    """The fetch hits a file-size limit (as it would a full disk): exit 9, one line."""
    import resource
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    proc = subprocess.run([*cli_argv(), "info", f"s3://{bucket}/logs"], env=cli_env(),
                          capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert proc.returncode == 9, proc.stderr
    one_line_error(proc, f"s3://{bucket}/logs", "TMPDIR")


def test_destination_names_are_checked_with_the_url(store, bucket):
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", f"s3://{bucket}/noext")
    assert proc.returncode == 2
    one_line_error(proc, f"s3://{bucket}/noext", "--to")
    whole = tbconvert_cli("convert", FIXTURES / "torch_logdir", f"s3://{bucket}", "--to",
                          "tfevents")
    assert whole.returncode == 2
    one_line_error(whole, "not the bucket itself")


def test_an_option_the_store_does_not_take_is_a_usage_error(store, bucket):
    upload(store, FIXTURES / "torch_logdir" / "train", f"s3://{bucket}/logs/train")
    proc = tbconvert_cli("info", f"s3://{bucket}/logs", "--storage-option", "bogus=1")
    assert proc.returncode == 2
    one_line_error(proc, f"s3://{bucket}/logs", "bogus")


@pytest.mark.parametrize("name, to", [("logs", "tfevents"), ("site", "html"), ("ds", "parquet")])
def test_a_file_is_not_replaced_by_a_directory_output(name, to):
    """A format that writes a directory refuses, even with --force, to replace a file at the URL."""
    import fsspec
    url = f"memory://tbconvert-{uuid.uuid4().hex[:8]}/{name}"
    with fsspec.open(url, "wb") as fh:
        fh.write(b"not a directory")
    with pytest.raises(tbconvert.errors.OutputExistsError, match="is a file; refusing"):
        api.convert(FIXTURES / "torch_logdir", url, to_format=to, force=True)


@pytest.mark.parametrize("key", ["a/../b.parquet", "../b.parquet", "p//ds", "p/./ds"])
def test_a_destination_url_with_dot_parts_or_empty_parts_is_refused(key):
    """A store would keep them as literal key names, which no reader resolves: nothing is
    written, for convert and sync alike."""
    import fsspec
    bucket = f"tbconvert-{uuid.uuid4().hex[:8]}"
    url = f"memory://{bucket}/{key}"
    with pytest.raises(tbconvert.errors.UsageError, match="may not hold '.', '..' or an empty"):
        api.convert(FIXTURES / "torch_logdir", url, to_format="parquet")
    with pytest.raises(tbconvert.errors.UsageError, match="may not hold '.', '..' or an empty"):
        tbconvert.sync(FIXTURES / "torch_logdir", url.removesuffix(".parquet"))
    assert not fsspec.filesystem("memory").find(f"/{bucket}")


def _uploads_interrupted(monkeypatch, again: bool) -> tuple[list, list]:
    """Ctrl-C while a directory's fourth upload is handed to the pool (``again``: pressed a
    second time while the uploads in flight are waited for): the uploads started, and those
    that had ended when ``_put`` let the interrupt through."""
    import concurrent.futures
    import signal
    import threading
    import time
    from types import SimpleNamespace

    from tbconvert.remote.dest import DestStage

    running, ended = [], []
    lock = threading.Lock()

    def put_file(local, key):
        with lock:
            running.append(key)
        time.sleep(0.4)
        with lock:
            ended.append(key)

    submit = concurrent.futures.ThreadPoolExecutor.submit
    calls = []

    def interrupted_submit(self, fn, *args, **kwargs):
        calls.append(args)
        if len(calls) == 4:
            if again:
                threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
            raise KeyboardInterrupt
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ThreadPoolExecutor, "submit", interrupted_submit)
    pairs = [(f"/local/{i}", f"bucket/tmp/{i}") for i in range(10)]
    with pytest.raises(KeyboardInterrupt):
        DestStage._put(SimpleNamespace(fs=SimpleNamespace(put_file=put_file)), pairs)
    return running, ended


def test_an_interrupt_while_uploads_are_submitted_waits_for_every_started_upload(monkeypatch):
    """A signal can land while a directory's uploads are still being handed to the pool:
    every upload already started must have ended before the output is cleaned up, or it
    lands in the store after the clean-up (seen under load: temporary objects left behind)."""
    running, ended = _uploads_interrupted(monkeypatch, again=False)
    assert len(running) == 3
    assert sorted(ended) == sorted(running), "uploads still running after the interrupt"


def test_a_second_interrupt_while_uploads_end_waits_too(monkeypatch):
    """Ctrl-C pressed again while the uploads in flight are waited for: they are still waited
    for (an upload left running would land after the clean-up, under a message saying the
    output was removed), and the interrupt comes after."""
    running, ended = _uploads_interrupted(monkeypatch, again=True)
    assert len(running) == 3
    assert sorted(ended) == sorted(running), "uploads still running after the interrupts"


# ------------------------------------------------------------------ interrupts and commits

def _interrupt_after_the_upload(monkeypatch):
    """Ctrl-C while a file's upload is in flight: the upload cannot be cut short, so the
    interrupt comes once it has ended (as _put waits for it)."""
    from tbconvert.remote.dest import DestStage
    put = DestStage._put

    def put_then_interrupt(self, pairs):
        put(self, pairs)
        raise KeyboardInterrupt
    monkeypatch.setattr(DestStage, "_put", put_then_interrupt)


@pytest.mark.parametrize("force", [False, True])
def test_an_upload_interrupted_leaves_the_old_object_or_none(store, bucket, monkeypatch, tmp_path,
                                                              capsys, force):
    from tbconvert.cli import main
    url = f"s3://{bucket}/a.parquet"
    if force:
        api.convert(FIXTURES / "tf2_logdir", url)
    before = store.fs.cat_file(url[len("s3://"):]) if force else None
    _interrupt_after_the_upload(monkeypatch)
    args = ["convert", str(FIXTURES / "torch_logdir"), url, *(["--force"] if force else [])]
    assert main(args) == 130
    assert capsys.readouterr().err.endswith("interrupted; partial output was removed\n")
    if force:     # the old archive, whole, and nothing else
        assert keys(store, f"s3://{bucket}") == [f"{bucket}/a.parquet"]
        assert store.fs.cat_file(url[len("s3://"):]) == before
    else:
        assert keys(store, f"s3://{bucket}") == []


def test_an_interrupt_held_back_by_a_commit_is_told_as_after_it(store, bucket, monkeypatch, capsys):
    """A signal while the output is put in place waits for it: the command then says the
    output is complete, not that partial output was removed."""
    import contextlib
    import signal as signals

    from tbconvert.cli import main
    from tbconvert.remote.dest import DestStage
    url = f"s3://{bucket}/logs"
    held = DestStage._held

    @contextlib.contextmanager
    def held_with_a_signal(self):
        with held(self) as done:
            os.kill(os.getpid(), signals.SIGINT)      # held back until the commit ends
            yield done
    monkeypatch.setattr(DestStage, "_held", held_with_a_signal)
    assert main(["convert", str(FIXTURES / "torch_logdir"), url, "--to", "tfevents"]) == 130
    assert capsys.readouterr().err.endswith(
        f"interrupted as {url} was being put in place: it is complete and kept\n")
    monkeypatch.undo()
    from tbconvert.verify import compare
    assert compare(url, FIXTURES / "torch_logdir") == []
    assert not [k for k in keys(store, f"s3://{bucket}") if ".tbconvert-tmp-" in k]


def test_sync_to_a_url_named_like_a_parquet_file_is_refused(store, bucket):
    url = f"s3://{bucket}/sfx/arch.parquet"
    api.convert(FIXTURES / "tf2_logdir", url)
    before = store.fs.cat_file(url[len("s3://"):])
    proc = tbconvert_cli("sync", FIXTURES / "torch_logdir", url)
    assert proc.returncode == 2
    one_line_error(proc, f"{url}: sync keeps a directory dataset; choose a name without the "
                         ".parquet suffix")
    assert keys(store, f"s3://{bucket}") == [f"{bucket}/sfx/arch.parquet"]
    assert store.fs.cat_file(url[len("s3://"):]) == before


def test_the_whole_store_as_a_source_is_a_usage_error(store):
    proc = tbconvert_cli("info", "s3://")
    assert proc.returncode == 2
    one_line_error(proc, "s3://: name a bucket (and a prefix or object in it), not the whole store")


def test_scheduler_with_a_url_says_why_it_is_refused(store, bucket, tmp_path):
    for args in ((FIXTURES / "torch_logdir", f"s3://{bucket}/out", "--to", "parquet"),
                 (f"s3://{bucket}/logs", tmp_path / "out", "--to", "parquet")):
        proc = tbconvert_cli("convert", *args, "--scheduler", "tcp://127.0.0.1:9")
        assert proc.returncode == 2
        one_line_error(proc, "--scheduler works with local (or mounted) SRC and DST only; "
                             "convert from or to a URL without it")
    assert keys(store, f"s3://{bucket}") == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, to", [("archive.parquet", "parquet"), ("logs", "tfevents")])
def test_destination_appearing_in_the_store_during_the_conversion_is_kept(store, bucket,
                                                                          monkeypatch, name, to):
    from tbconvert.errors import OutputExistsError
    from tbconvert.remote import dest
    url = f"s3://{bucket}/{name}"
    theirs = f"{bucket}/{name}" + ("/KEEP" if to == "tfevents" else "")
    commit = dest.DestStage.commit

    def commit_after(self):
        store.fs.pipe(theirs, b"precious")
        commit(self)
    monkeypatch.setattr(dest.DestStage, "commit", commit_after)
    with pytest.raises(OutputExistsError, match="appeared while the output was being written"):
        api.convert(FIXTURES / "torch_logdir", url, to_format=to)
    assert keys(store, f"s3://{bucket}") == [theirs]
    assert store.fs.cat(theirs) == b"precious"


def _refuse_copies_after(store, prefix: str, allowed: int) -> None:
    """The store refuses every PUT under ``prefix`` (the copies into place) after the first
    ``allowed``."""
    copies = [0]

    def refused(method, path, query):
        if method == "PUT" and path.startswith(prefix):
            copies[0] += 1
            return copies[0] > allowed
        return False
    store.proxy.add(Rule(refused, status=403, code="AccessDenied"))


@pytest.mark.parametrize("to, force", [("parquet", False), ("tfevents", False), ("parquet", True),
                                       ("tfevents", True)])
def test_a_commit_the_store_fails_midway_leaves_no_mix(store, bucket, to, force):
    """Objects are copied into place one by one: the store refusing the third copy leaves
    nothing of a new output, and a replaced dataset without its marker (refused by readers,
    never read as a mix of old and new parts); the message says which."""
    final = f"s3://{bucket}/out"
    if force:
        api.convert(FIXTURES / "tf2_logdir", final, to_format=to)
    _refuse_copies_after(store, f"/{bucket}/out/", 2)
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", final, "--to", to,
                         *(["--force"] if force else []))
    store.proxy.clear()
    assert proc.returncode == 11, proc.stderr
    line = one_line_error(proc, "the output was being put in place")
    left = keys(store, final)
    if not force:
        assert "nothing was left there" in line and left == []
    else:
        assert "partly replaced" in line and "run again with --force" in line and left
    if force and to == "parquet":
        assert not any(k.endswith("_tbconvert.json") for k in left)
        refused = tbconvert_cli("info", final)
        assert refused.returncode == 4, refused.stderr
        assert "damaged Parquet dataset: its part files are there but not _tbconvert.json" \
            in refused.stderr
    assert not [k for k in keys(store, f"s3://{bucket}") if TMP_MARK in k]


def test_to_dask_of_a_dataset_in_the_store(store, bucket):
    pytest.importorskip("dask.dataframe")
    from tbconvert.errors import CorruptDataError
    url = f"s3://{bucket}/dataset"
    api.convert(FIXTURES / "torch_logdir", url, to_format="parquet")
    frame = tbconvert.to_dask(url)
    import pyarrow.dataset as pads
    local = pads.dataset([f"{bucket}/dataset/{k.rsplit('/', 1)[1]}" for k in keys(store, url)
                          if k.endswith(".parquet")], filesystem=store.fs, format="parquet")
    assert len(frame) == local.count_rows() > 0
    part = next(k for k in keys(store, url) if k.endswith(".parquet"))
    store.fs.rm(part)
    with pytest.raises(CorruptDataError, match="part\\(s\\) its _tbconvert.json lists are missing"):
        tbconvert.to_dask(url)



@pytest.mark.parametrize("where", ["nosuchbucket-{u}/dataset", "{bucket}/nothing-here"])
def test_to_dask_of_what_is_not_in_the_store_says_so(store, bucket, where):
    pytest.importorskip("dask.dataframe")
    from tbconvert.errors import CorruptDataError, FormatError
    url = "s3://" + where.format(u=uuid.uuid4().hex[:8], bucket=bucket)
    with pytest.raises(FormatError) as caught:
        tbconvert.to_dask(url)
    assert not isinstance(caught.value, CorruptDataError)
    assert str(caught.value).startswith(f"{url}: no such "), caught.value

def test_a_directory_appearing_while_the_output_is_uploaded_aside_is_kept(store, bucket,
                                                                          monkeypatch):
    from tbconvert.errors import OutputExistsError
    from tbconvert.remote import dest
    url = f"s3://{bucket}/logs"
    put = dest.DestStage._put

    def put_then_appear(self, pairs):
        put(self, pairs)
        store.fs.pipe(f"{bucket}/logs/KEEP", b"precious")    # while the upload ran
    monkeypatch.setattr(dest.DestStage, "_put", put_then_appear)
    with pytest.raises(OutputExistsError, match="appeared while the output was being written"):
        api.convert(FIXTURES / "torch_logdir", url, to_format="tfevents")
    assert keys(store, f"s3://{bucket}") == [f"{bucket}/logs/KEEP"]


def test_a_replaced_logdir_cut_short_is_told_by_what_it_was(store, bucket):
    # an event-file logdir replaced by a dataset: the old output had no marker to remove
    final = f"s3://{bucket}/out"
    api.convert(FIXTURES / "tf2_logdir", final, to_format="tfevents")
    _refuse_copies_after(store, f"/{bucket}/out/", 2)
    proc = tbconvert_cli("convert", FIXTURES / "torch_logdir", final, "--to", "parquet",
                         "--force")
    store.proxy.clear()
    line = one_line_error(proc, "partly replaced")
    assert "marker" not in line and "run again with --force" in line, line
