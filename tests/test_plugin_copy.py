"""A logdir converted to event files keeps the files TensorBoard's plugins read beside the
event files (a run's ``plugins/NAME/``, the projector's config and what it names, the PyTorch
profiler's traces): copied byte for byte to the same place, under the run's new name where it
changed, and told. A real TensorBoard server's projector shows the copy as the source."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from helpers import FIXTURES, launch_tensorboard, run_tbconvert, stop_process, tensorboard_base

import tbconvert
from tbconvert.verify import compare

PROJECTOR_FILES = ["projector_config.pbtxt", "00000/features/metadata.tsv",
                   "00000/features/tensors.tsv"]
PROFILE = "plugins/profile/2026_11_29_12_00_00"


def _logdir(tmp_path: Path, name: str = "logs") -> Path:
    """The PyTorch fixture (its ``add_embedding`` wrote a projector config naming two TSV
    files in the run ``train``) with a profiler session and a PyTorch profiler trace there."""
    logs = tmp_path / name
    shutil.copytree(FIXTURES / "torch_logdir", logs)
    session = logs / "train" / PROFILE
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(bytes(range(256)) * 3)
    (session / "host.trace.json.gz").write_bytes(b"\x1f\x8b" + b"\x07" * 40)
    (logs / "train" / "host_1.1795299212.pt.trace.json").write_text('{"traceEvents": []}')
    return logs


def _carried(run: str = "train") -> list[str]:
    return [*PROJECTOR_FILES, f"{PROFILE}/host.xplane.pb", f"{PROFILE}/host.trace.json.gz",
            "host_1.1795299212.pt.trace.json"]


def _kinds(report, kind: str) -> list:
    return [i for i in report.issues if i.kind == kind]


def _same_files(src: Path, dst: Path, names) -> None:
    for name in names:
        assert (dst / name).read_bytes() == (src / name).read_bytes(), name


@pytest.mark.parametrize("jobs", [1, 2])
def test_event_files_carry_every_plugin_file_byte_for_byte_and_say_so(tmp_path, jobs):
    logs = _logdir(tmp_path)
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents", jobs=jobs)
    _same_files(logs / "train", out / "train", _carried())
    # nothing else of the source came along, and nothing is said to be left out
    extra = {p.relative_to(out).as_posix() for p in out.rglob("*")
             if p.is_file() and "tfevents" not in p.name}
    assert extra == {f"train/{n}" for n in _carried()}
    assert not _kinds(report, "plugin_files_not_read")
    copied = sorted(i.message for i in _kinds(report, "plugin_files_copied"))
    assert copied == sorted([
        f"{logs / 'train' / '*.pt.trace.json'}: 1 trace(s) of the PyTorch profiler copied to "
        "the output's train/*.pt.trace.json",
        f"{logs / 'train' / 'plugins' / 'profile'}: 2 file(s) of TensorBoard's profile plugin "
        "copied to the output's train/plugins/profile",
        f"{logs / 'train' / 'projector_config.pbtxt'}: the projector's configuration and the "
        "2 file(s) it names in its run copied to the output's train/projector_config.pbtxt",
    ])
    assert all(i.run == "train" and not i.lost for i in _kinds(report, "plugin_files_copied"))
    assert sum(i.count for i in _kinds(report, "plugin_files_copied")) == 6


def test_other_outputs_still_say_they_leave_them_out(tmp_path):
    report = tbconvert.convert(_logdir(tmp_path), tmp_path / "a.parquet")
    assert not _kinds(report, "plugin_files_copied")
    notes = _kinds(report, "plugin_files_not_read")
    assert len(notes) == 3
    assert all("only an event-file output carries" in i.message for i in notes)


def test_a_renamed_run_takes_its_plugin_files_along(tmp_path):
    """A run directory named like an event file is written as ``tf_events``: its files follow."""
    logs = _logdir(tmp_path)
    (logs / "train").rename(logs / "my.tfevents.run")
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents")
    _same_files(logs / "my.tfevents.run", out / "my.tf_events.run", _carried())
    assert not (out / "my.tfevents.run").exists()
    assert not _kinds(report, "plugin_files_not_read")
    assert "copied to the output's my.tf_events.run/projector_config.pbtxt" in \
        " ".join(i.message for i in _kinds(report, "plugin_files_copied"))


def test_only_the_runs_asked_for_bring_their_files(tmp_path):
    logs = _logdir(tmp_path)
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents", runs="multi")
    assert not (out / "train").exists()
    assert not _kinds(report, "plugin_files_copied")
    assert not _kinds(report, "plugin_files_not_read")


def test_what_cannot_be_copied_is_told_and_the_rest_is_copied(tmp_path):
    logs = _logdir(tmp_path)
    run = logs / "train"
    (tmp_path / "elsewhere.tsv").write_text("x\n")
    # the config also names a file above its run, one by an absolute path, and one not there
    with open(run / "projector_config.pbtxt", "a") as fh:
        fh.write('embeddings {\n  tensor_name: "b"\n  tensor_path: "../../elsewhere.tsv"\n'
                 f'  metadata_path: "{tmp_path / "elsewhere.tsv"}"\n'
                 '  sprite { image_path: "00000/gone.png" }\n}\n')
    os.mkfifo(run / PROFILE / "a.fifo")
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents")
    _same_files(run, out / "train", _carried())
    assert not (out / "train" / PROFILE / "a.fifo").exists()
    assert not (tmp_path / "out" / "elsewhere.tsv").exists()
    copied = {i.message.split(": ", 1)[0]: i.message for i in _kinds(report, "plugin_files_copied")}
    assert copied[str(run / "projector_config.pbtxt")].startswith(
        f"{run / 'projector_config.pbtxt'}: the projector's configuration and the 2 file(s) it "
        "names in its run copied to the output's train/projector_config.pbtxt; ")
    assert copied[str(run / "projector_config.pbtxt")].endswith(
        "; files it names were not copied (the copy still names them as they were): 1 named by "
        "an absolute path, 1 not there, 1 outside its run")
    failed = [i.message for i in _kinds(report, "plugin_files_not_read")]
    assert failed == [f"{run / PROFILE / 'a.fifo'}: cannot be read (is a FIFO (named pipe), "
                      "not a regular file); not copied"], failed


def test_the_command_tells_where_the_files_went(tmp_path):
    logs = _logdir(tmp_path)
    r = run_tbconvert("convert", logs, tmp_path / "out", "--to", "tfevents", "--strict")
    assert r.returncode == 0, r.stderr
    assert "tbconvert: note: 6 files of TensorBoard's plugins copied beside the runs" in r.stderr
    assert "not read" not in r.stderr
    _same_files(logs / "train", tmp_path / "out" / "train", _carried())


def _projector_view(logdir: Path, log: Path) -> dict:
    """What a real TensorBoard server on ``logdir`` shows in its projector: the runs with
    embeddings, each run's config, and each embedding's tensor and metadata bytes."""
    proc = launch_tensorboard(logdir, log, "--load_fast=false", "--reload_interval", "0",
                              "--reload_task", "blocking")
    base = ""

    def get(path: str, **params) -> bytes:
        query = "?" + urllib.parse.urlencode(params) if params else ""
        with urllib.request.urlopen(base + path + query, timeout=30) as resp:
            return resp.read()
    try:
        base = tensorboard_base(proc, log) + "/data/plugin/projector"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                runs = json.loads(get("/runs"))
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                assert time.monotonic() < deadline, "tensorboard did not start within 60 s"
                time.sleep(0.2)
        view = {"runs": sorted(runs)}
        for run in runs:
            info = json.loads(get("/info", run=run))
            for emb in info["embeddings"]:
                emb["tensorPath"] = os.path.relpath(emb["tensorPath"], logdir)
                emb["metadataPath"] = os.path.relpath(emb["metadataPath"], logdir)
                name = emb["tensorName"]
                view[(run, name, "tensor")] = get("/tensor", run=run, name=name)
                view[(run, name, "metadata")] = get("/metadata", run=run, name=name)
            view[run] = info
        return view
    finally:
        stop_process(proc)


@pytest.mark.slow
def test_tensorboards_projector_shows_the_copy_as_the_source(tmp_path):
    logs = _logdir(tmp_path)
    out = tmp_path / "out"
    tbconvert.convert(logs, out, to_format="tfevents")
    source = _projector_view(logs, tmp_path / "tb-source.log")
    copy = _projector_view(out, tmp_path / "tb-copy.log")
    assert source["runs"] == ["train"]
    assert source[("train", "features:00000", "tensor")]      # the embedding's float32 bytes
    assert copy == source


def test_verify_compares_two_logdirs_plugin_files_byte_for_byte(tmp_path):
    logs = _logdir(tmp_path)
    out = tmp_path / "out"
    tbconvert.convert(logs, out, to_format="tfevents")
    report = tbconvert.Report()
    assert compare(logs, out, report=report) == []
    assert not _kinds(report, "plugin_files_not_read")
    assert [(i.message, i.count) for i in _kinds(report, "plugin_files_compared")] == [
        ("6 files of TensorBoard's plugins the same, byte for byte, in both (of 6 in A and 6 in "
         "B)", 6)]
    # one byte changed, one file gone, one file more: each a difference, the command exits 10
    tensors = out / "train" / "00000" / "features" / "tensors.tsv"
    tensors.write_bytes(tensors.read_bytes()[:-1] + b"9")
    (out / "train" / "host_1.1795299212.pt.trace.json").unlink()
    (out / "train" / PROFILE / "extra.pb").write_bytes(b"x")
    r = run_tbconvert("verify", logs, out)
    assert r.returncode == 10, r.stderr
    assert r.stdout.splitlines() == [
        "plugin file train/host_1.1795299212.pt.trace.json: only in A",
        f"plugin file train/{PROFILE}/extra.pb: only in B",
        "plugin file train/00000/features/tensors.tsv: other bytes in B than in A"]


def test_verify_against_an_archive_still_notes_the_files_it_cannot_hold(tmp_path):
    logs = _logdir(tmp_path)
    tbconvert.convert(logs, tmp_path / "a.parquet")
    report = tbconvert.Report()
    assert compare(logs, tmp_path / "a.parquet", report=report) == []
    assert len(_kinds(report, "plugin_files_not_read")) == 3
    assert not _kinds(report, "plugin_files_compared")


def test_a_logdir_rebuilt_from_an_archive_differs_in_them_unless_told_to_leave_them(tmp_path):
    """An archive holds event data only: the logdir rebuilt from it has no plugin files, which
    verify says, and ``--no-plugin-files`` compares the event data alone."""
    logs = _logdir(tmp_path)
    tbconvert.convert(logs, tmp_path / "a.parquet")
    tbconvert.convert(tmp_path / "a.parquet", tmp_path / "back", to_format="tfevents")
    r = run_tbconvert("verify", logs, tmp_path / "back")
    assert r.returncode == 10
    assert "plugin file train/projector_config.pbtxt: only in A" in r.stdout.splitlines()
    r = run_tbconvert("verify", logs, tmp_path / "back", "--no-plugin-files")
    assert r.returncode == 0, r.stdout + r.stderr
    # (the files were left out on purpose: no advice to copy them)
    assert "plugin" not in r.stderr, r.stderr


def test_the_projector_config_is_read_as_tensorboard_reads_it(tmp_path):
    """Names with escapes (TensorBoard's own writer escapes a quote, older protobuf writes
    non-ASCII bytes in octal), single-quoted names; a link that leads out of the run, and an
    event file, are not copied, as TensorBoard's projector would not read them there."""
    logs = tmp_path / "logs"
    run = logs / "run"
    shutil.copytree(FIXTURES / "torch_logdir" / "multi", run, ignore=shutil.ignore_patterns("losses_*"))
    for name in ("it's", "café", "single", "emb"):
        (run / name).mkdir()
        (run / name / "t.tsv").write_text(f"{name}\t1\n")
    (tmp_path / "secret.tsv").write_text("outside\n")
    (run / "emb" / "link.tsv").symlink_to(tmp_path / "secret.tsv")
    event = next(run.glob("events.out.tfevents.*")).name
    (run / "projector_config.pbtxt").write_text(
        'embeddings { tensor_name: "a" tensor_path: "it\\\'s/t.tsv" }\n'
        'embeddings { tensor_name: "b" tensor_path: "caf\\303\\251/t.tsv" }\n'
        "embeddings { tensor_name: 'c' tensor_path: 'single/t.tsv' metadata_path: 'emb/t.tsv' }\n"
        'embeddings { tensor_name: "d" tensor_path: "emb/link.tsv" }\n'
        f'embeddings {{ tensor_name: "e" tensor_path: "{event}" }}\n', encoding="utf-8")
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents")
    for name in ("it's", "café", "single", "emb"):
        assert (out / "run" / name / "t.tsv").read_text() == f"{name}\t1\n"
    assert not (out / "run" / "emb" / "link.tsv").exists()
    assert len(list((out / "run").glob("*tfevents*"))) == 1
    [copied] = [i.message for i in _kinds(report, "plugin_files_copied")]
    assert copied.endswith("the projector's configuration and the 4 file(s) it names in its run "
                           "copied to the output's run/projector_config.pbtxt; files it names "
                           "were not copied (the copy still names them as they were): 1 event "
                           "file (converted, not copied), 1 outside its run"), copied


def test_a_config_tensorboard_cannot_parse_is_copied_and_said_so(tmp_path):
    logs = _logdir(tmp_path)
    (logs / "train" / "projector_config.pbtxt").write_text("embeddings { tensor_path: ")
    report = tbconvert.convert(logs, tmp_path / "out", to_format="tfevents")
    [copied] = [i.message for i in _kinds(report, "plugin_files_copied")
                if "projector" in i.message]
    assert copied.endswith("copied to the output's train/projector_config.pbtxt; it is larger "
                           "than 16 MiB or not a config TensorBoard's projector can parse: the "
                           "files it names were not looked for"), copied


def test_a_file_a_parent_runs_config_names_in_a_renamed_child_run_is_not_put_where_it_would_hide_the_run(
        tmp_path):
    """A run's config may name a file in a child run's directory; when the child is written
    under a new name because its own is taken for an event file, that file is copied for the
    child, and not into a directory TensorBoard would take for an event file."""
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "multi", logs / "p",
                    ignore=shutil.ignore_patterns("losses_*"))
    child = logs / "p" / "c.tfevents.x"
    shutil.copytree(FIXTURES / "torch_logdir" / "multi" / "losses_val", child)
    (child / "emb").mkdir()
    (child / "emb" / "t.tsv").write_text("1\n")
    (child / "projector_config.pbtxt").write_text('embeddings { tensor_path: "emb/t.tsv" }\n')
    (logs / "p" / "projector_config.pbtxt").write_text(
        'embeddings { tensor_path: "c.tfevents.x/emb/t.tsv" }\n')
    out = tmp_path / "out"
    report = tbconvert.convert(logs, out, to_format="tfevents")
    assert (out / "p" / "c.tf_events.x" / "emb" / "t.tsv").read_text() == "1\n"
    assert not (out / "p" / "c.tfevents.x").exists()
    assert sorted(r.run for r in tbconvert.info(out).runs) == ["p", "p/c.tf_events.x"]
    [refused] = [i.message for i in _kinds(report, "plugin_files_not_read")]
    assert "below a directory named like an event file, which TensorBoard takes for one; not " \
           "copied" in refused


def test_a_dangling_link_among_plugin_files_is_told_once(tmp_path):
    logs = _logdir(tmp_path)
    (logs / "train" / PROFILE / "gone.pb").symlink_to(tmp_path / "nowhere.pb")
    report = tbconvert.convert(logs, tmp_path / "out", to_format="tfevents")
    told = [i for i in report.issues if "gone.pb" in i.message]
    assert [i.kind for i in told] == ["dangling_symlink"], told
    _same_files(logs / "train", tmp_path / "out" / "train", _carried())
