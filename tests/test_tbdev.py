"""TensorBoard.dev export format: reader, writer, tbdev-export, degenerate exports.

Everything is checked against the real export in fixtures/tbdev_export/ and
fixtures/expected/tbdev_export.json (what the export holds), and, once the
event-file writer is there, against TensorBoard's own reading (tests/oracle.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, out_of_memory
from oracle import tb_view

import tbconvert
from tbconvert import dtypes as dt
from tbconvert import read
from tbconvert.cli import main
from tbconvert.errors import FormatError, OutputExistsError, UnsupportedError, UsageError
from tbconvert.formats.tbdev import TbdevFormat, export_dir
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    ScalarSeries,
    TensorSeries,
)
from tbconvert.report import Report

EXP_ID = "9bFlIkpYt5HfavHYMD5hzQ"
EXPORT = FIXTURES / "tbdev_export" / f"experiment_{EXP_ID}"
EXPECTED = json.loads((FIXTURES / "expected" / "tbdev_export.json").read_text())




# -- helpers -----------------------------------------------------------------------------

def copy_export(tmp_path: Path, name: str | None = None) -> Path:
    dst = tmp_path / (name or f"experiment_{EXP_ID}")
    shutil.copytree(EXPORT, dst)
    return dst


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_lines(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(export_dir.dumps_line(d) for d in lines))


def edit_line(path: Path, run: str, tag: str, fn) -> None:
    lines = read_lines(path)
    hits = [d for d in lines if d["run"] == run and d["tag"] == tag]
    assert hits, (run, tag)
    for d in hits:
        fn(d)
    write_lines(path, lines)


def canonical_sha(arr: np.ndarray) -> str:
    """sha256 as fixtures/expected defines it (strings: 8-byte LE length + bytes)."""
    arr = np.asarray(arr)
    if arr.dtype == object or arr.dtype.kind == "S":
        h = hashlib.sha256()
        for v in arr.reshape(-1):
            b = bytes(v)
            h.update(len(b).to_bytes(8, "little") + b)
        return h.hexdigest()
    return hashlib.sha256(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"))
                          .tobytes()).hexdigest()


def dtype_name(arr) -> str:
    arr = np.asarray(arr)
    return "string" if arr.dtype == object or arr.dtype.kind == "S" else str(arr.dtype)


def kinds(report: Report) -> dict[str, int]:
    out: dict[str, int] = {}
    for issue in report.issues:
        out[issue.kind] = out.get(issue.kind, 0) + issue.count
    return out


def load_tbdev(path, **kw):
    return read(path, format="tbdev", restarts="keep-all", **kw)


def assert_matches_expected(loaded) -> None:
    """The model equals fixtures/expected/tbdev_export.json point for point."""
    assert sorted(loaded.series) == sorted(EXPECTED["runs"])
    for run, info in EXPECTED["runs"].items():
        assert sorted(loaded.series[run]) == sorted(info["tags"]), run
        for tag, exp in info["tags"].items():
            s = loaded.series[run][tag]
            md = s.metadata
            assert md.data_class == DataClass[exp["data_class"].replace("DATA_CLASS_", "")]
            assert md.plugin_name == exp["plugin_name"]
            assert md.display_name == exp["display_name"]
            assert md.plugin_content == __import__("base64").b64decode(exp["plugin_content_b64"])
            assert s.steps.tolist() == exp["steps"], (run, tag)
            assert s.wall_times.tolist() == exp["wall_times"], (run, tag)
            if "values" in exp:
                assert isinstance(s, ScalarSeries)
                assert s.values.dtype == np.float32
                assert s.values.astype(np.float64).tolist() == exp["values"]
            elif md.data_class == DataClass.TENSOR:
                assert isinstance(s, TensorSeries)
                for arr, code, pe in zip(s.tensors, s.dtypes, exp["points"], strict=True):
                    assert dtype_name(arr) == pe["dtype"]
                    assert list(arr.shape) == pe["shape"]
                    assert canonical_sha(arr) == pe["sha256"]
                    assert dt.NAMES[int(code)] == pe["dtype"]
            else:
                assert isinstance(s, BlobSequenceSeries)
                for seq, pe in zip(s.sequences(), exp["points"], strict=True):
                    assert len(seq) == pe["num_blobs"]
                    assert [len(b) for b in seq] == pe["blob_lengths"]
                    assert [hashlib.sha256(b).hexdigest() for b in seq] == pe["blob_sha256"]


# -- reading the real export -------------------------------------------------------------

def test_sniff(tmp_path):
    assert TbdevFormat.sniff(EXPORT)
    assert TbdevFormat.sniff(EXPORT.parent)                      # export root
    assert not TbdevFormat.sniff(FIXTURES / "torch_logdir")
    assert not TbdevFormat.sniff(tmp_path / "nope")
    (tmp_path / "scalars_abc.json").write_text("")
    assert TbdevFormat.sniff(tmp_path)                          # 2.0.x root
    assert TbdevFormat.sniff(tmp_path / "scalars_abc.json")


def test_reads_real_export_exactly():
    loaded = load_tbdev(EXPORT)
    assert_matches_expected(loaded)
    assert loaded.report.issues == []
    exp = loaded.experiment
    assert exp.experiment_id == EXP_ID
    assert exp.name == "torch demo run"
    assert exp.description.startswith("PyTorch SummaryWriter")
    assert exp.create_time == exp.update_time == "2026-11-21T22:13:53Z"
    # a run starts at its earliest point, not at conversion time
    walls = [w for s in loaded.series["train"].values() for w in s.wall_times]
    assert loaded.runs["train"].start_time == min(walls)


def test_reads_export_root_with_one_experiment():
    assert_matches_expected(load_tbdev(EXPORT.parent))


def test_root_with_several_experiments_needs_tbdev_export(tmp_path):
    copy_export(tmp_path)
    copy_export(tmp_path, "experiment_" + "A" * 22)
    with pytest.raises(UsageError) as exc:
        load_tbdev(tmp_path)
    # each in the words of who reads it
    assert f"'tbconvert tbdev-export {tmp_path} -o OUTDIR'" in exc.value.cli_message()
    assert f"tbconvert.tbdev_export({str(tmp_path)!r}, OUTDIR)" in str(exc.value)


def test_any_directory_name(tmp_path):
    d = copy_export(tmp_path, "my export")
    loaded = load_tbdev(d)
    assert_matches_expected(loaded)
    assert loaded.experiment.experiment_id == ""
    assert loaded.experiment.name == "torch demo run"


def test_run_and_tag_selection_skips_unwanted():
    loaded = load_tbdev(EXPORT, runs="^train$", tags="loss")
    assert list(loaded.series) == ["train"]
    assert sorted(loaded.series["train"]) == ["loss", "loss_hi", "loss_lo"]


# -- degenerate exports ------------------------------------------------------------------

def test_windows_paths_and_run_names(tmp_path):
    d = copy_export(tmp_path)
    for name in (export_dir.SCALARS, export_dir.TENSORS, export_dir.BLOB_SEQUENCES):
        lines = read_lines(d / name)
        for line in lines:
            line["run"] = line["run"].replace("/", "\\")
            pts = line["points"]
            if pts.get("tensors_file_path"):
                pts["tensors_file_path"] = pts["tensors_file_path"].replace("/", "\\")
            if "blob_file_paths" in pts:
                pts["blob_file_paths"] = [[p.replace("/", "\\") for p in seq]
                                          for seq in pts["blob_file_paths"]]
        write_lines(d / name, lines)
    loaded = load_tbdev(d)
    assert_matches_expected(loaded)
    k = kinds(loaded.report)
    assert set(k) == {"run_renamed"}
    assert not loaded.report.lost


def test_null_tensor_path_is_reported_not_a_crash(tmp_path):
    d = copy_export(tmp_path)
    edit_line(d / export_dir.TENSORS, "train", "grads/fc1",
              lambda line: line["points"].update(tensors_file_path=None))
    lines = read_lines(d / export_dir.TENSORS)
    lines.append({"points": {"steps": [], "tensors_file_path": None, "wall_times": []},
                  "run": "train", "summary_metadata": "CgYKBHRleHQSBWVtcHR5IAI=", "tag": "empty"})
    write_lines(d / export_dir.TENSORS, lines)
    loaded = load_tbdev(d)
    assert "grads/fc1" not in loaded.series["train"]
    assert len(loaded.series["train"]["empty"]) == 0          # zero points: kept, not an error
    assert kinds(loaded.report) == {"missing_tensors": 5}
    assert loaded.report.issues[0].tag == "grads/fc1"
    assert "tensors.json:3" in loaded.report.issues[0].message
    assert len(loaded.series["train"]["weights/fc1"]) == 5      # the rest is intact


def test_null_and_missing_blobs_keep_positions(tmp_path):
    d = copy_export(tmp_path)

    def hole(line):
        line["points"]["blob_file_paths"][1][1] = None
    edit_line(d / export_dir.BLOB_SEQUENCES, "train", "samples/image", hole)
    gone = read_lines(d / export_dir.BLOB_SEQUENCES)[1]["points"]["blob_file_paths"][0][2]
    (d / gone).unlink()                                        # samples/batch image blob
    (d / "blobs" / "blob_junkjunkjunkjunkjunk1.bin").write_bytes(b"")   # unreferenced junk
    loaded = load_tbdev(d)
    img = loaded.series["train"]["samples/image"]
    full = load_tbdev(EXPORT).series["train"]["samples/image"]
    assert img.sequence(0) == full.sequence(0)
    assert img.sequence(1) == (full.sequence(1)[0], None, full.sequence(1)[2])
    batch = loaded.series["train"]["samples/batch"].sequence(0)
    assert batch[2] is None and batch[0] == b"16" or len(batch[0]) > 0
    assert len(batch) == 3 and batch[2] is None
    assert kinds(loaded.report) == {"missing_blob": 2}
    assert all(i.lost for i in loaded.report.issues)


def test_paths_outside_the_export_are_refused(tmp_path):
    d = copy_export(tmp_path / "x")
    secret = tmp_path / "outside.npz"
    shutil.copy(d / "tensors" / "1795299211.646126.npz", secret)
    edit_line(d / export_dir.TENSORS, "train", "grads/fc1",
              lambda line: line["points"].update(tensors_file_path="../../outside.npz"))

    def bad_blob(line):
        line["points"]["blob_file_paths"][0][0] = "/etc/passwd"
        line["points"]["blob_file_paths"][1][0] = "..\\..\\outside.npz"
    edit_line(d / export_dir.BLOB_SEQUENCES, "train", "samples/image", bad_blob)
    loaded = load_tbdev(d)
    assert "grads/fc1" not in loaded.series["train"]
    seqs = list(loaded.series["train"]["samples/image"].sequences())
    assert seqs[0][0] is None and seqs[1][0] is None and seqs[0][1] == b"16"
    assert kinds(loaded.report)["unsafe_path"] == 3
    assert [i.message.split("' ", 1)[1] for i in loaded.report.issues
            if i.kind == "unsafe_path"] == ["has '..' parts; treated as missing",
                                            "is absolute; treated as missing",
                                            "has '..' parts; treated as missing"]


def test_tensor_count_mismatch_drops_chunk_never_truncates(tmp_path):
    d = copy_export(tmp_path)

    def extra_step(line):
        line["points"]["steps"].append(50)
        line["points"]["wall_times"].append(1795299211.7)
    edit_line(d / export_dir.TENSORS, "train", "weights/fc1", extra_step)
    loaded = load_tbdev(d)
    assert "weights/fc1" not in loaded.series["train"]
    assert kinds(loaded.report) == {"tensor_count_mismatch": 6}
    assert "6 steps" in loaded.report.issues[0].message


def _pickled_text_export(tmp_path: Path) -> Path:
    d = copy_export(tmp_path)
    path = d / "tensors" / "1795299211.678016.npz"
    arr0 = np.array(["Run notes: **bold**"], dtype=object)
    arr1 = np.array([b"second"], dtype=object)
    np.savez(path, arr0, arr1)                                 # what TensorBoard 2.3 wrote
    return d


def test_pickled_npz_is_refused_without_opt_in(tmp_path):
    d = _pickled_text_export(tmp_path)
    with pytest.raises(UnsupportedError, match="allow_pickle=True") as info:
        load_tbdev(d)
    assert "1795299211.678016.npz" in str(info.value)
    assert info.value.exit_code == 5
    loaded = load_tbdev(d, allow_pickle=True)
    text = loaded.series["train"]["notes/text_summary"]
    assert list(text.dtypes) == [dt.DT_STRING] * 2
    assert text.tensors[0].tolist() == [b"Run notes: **bold**"]
    assert text.tensors[1].tolist() == [b"second"]


def test_truncated_last_line_and_bad_lines(tmp_path):
    d = copy_export(tmp_path)
    raw = (d / export_dir.SCALARS).read_bytes()
    lines = raw.splitlines(keepends=True)
    lines.insert(3, b"{this is not json\n")
    lines.insert(4, b'{"points": {"steps": ["a"], "values": [1], "wall_times": [1]}, '
                    b'"run": "train", "summary_metadata": "CgkKB3NjYWxhcnMgAQ==", "tag": "t"}\n')
    lines[-1] = lines[-1][:len(lines[-1]) // 2]                # interrupted export
    (d / export_dir.SCALARS).write_bytes(b"".join(lines))
    loaded = load_tbdev(d)
    k = kinds(loaded.report)
    assert k == {"bad_line": 2, "truncated_line": 1}
    msgs = " ".join(i.message for i in loaded.report.issues)
    assert "scalars.json:4" in msgs and "scalars.json:5" in msgs and "scalars.json:13" in msgs
    assert "hparam/loss" not in loaded.series["train/1795299212.1548328"]
    assert len(loaded.series["train"]["loss"]) == 50


def test_nan_tokens_and_series_split_over_lines(tmp_path):
    d = copy_export(tmp_path)
    md = "CgkKB3NjYWxhcnMSBGxvc3MgAQ=="
    text = "".join([
        '{"points": {"steps": [0, 1], "values": [NaN, Infinity], "wall_times": [10.5, 11.0]}, '
        f'"run": "r", "summary_metadata": "{md}", "tag": "loss"}}\n',
        '{"points": {"steps": [], "values": [], "wall_times": []}, '
        f'"run": "other", "summary_metadata": "{md}", "tag": "x"}}\n',
        '{"points": {"steps": [2], "values": [-Infinity], "wall_times": [12.0]}, '
        f'"run": "r", "summary_metadata": "{md}", "tag": "loss"}}\n',
        '{"points": {"steps": [3], "values": [0.5], "wall_times": [13.0]}, '
        f'"run": "r", "summary_metadata": "{md}", "tag": "loss"}}',           # no final newline
    ])
    (d / export_dir.SCALARS).write_text(text)
    (d / export_dir.TENSORS).write_text("")
    (d / export_dir.BLOB_SEQUENCES).unlink()
    loaded = load_tbdev(d)
    assert list(loaded.series) == ["r", "other"]
    s = loaded.series["r"]["loss"]
    assert s.steps.tolist() == [0, 1, 2, 3]
    assert s.values.dtype == np.float32
    assert math.isnan(s.values[0]) and s.values[1] == np.inf and s.values[2] == -np.inf
    assert len(loaded.series["other"]["x"]) == 0
    assert loaded.report.issues == []


def test_float64_scalars_are_kept_and_noted(tmp_path):
    d = copy_export(tmp_path)
    edit_line(d / export_dir.SCALARS, "train", "lr",
              lambda line: line["points"].update(values=[0.1, 0.05, 2.0 ** 40 + 1, 1e300, 3.0]))
    loaded = load_tbdev(d)
    lr = loaded.series["train"]["lr"]
    assert lr.values.dtype == np.float64
    assert lr.values.tolist() == [0.1, 0.05, 2.0 ** 40 + 1, 1e300, 3.0]
    assert kinds(loaded.report) == {"float64_scalars": 1}
    assert not loaded.report.lost


def test_old_layout_scalars_id_json(tmp_path):
    """TensorBoard 2.0.1-2.1.0: D/scalars_<id>.json, no metadata, scalars only."""
    (tmp_path / "scalars_OLDEXPERIMENTID00000000.json").write_bytes(
        (EXPORT / export_dir.SCALARS).read_bytes())
    sources, is_root = export_dir.find_experiments(tmp_path)
    assert is_root and [s.experiment_id for s in sources] == ["OLDEXPERIMENTID00000000"]
    loaded = load_tbdev(tmp_path)
    assert loaded.experiment.experiment_id == "OLDEXPERIMENTID00000000"
    assert loaded.series["train"]["loss"].values.tolist() == \
        load_tbdev(EXPORT).series["train"]["loss"].values.tolist()
    assert sum(len(t) for t in loaded.series.values()) == 11


def test_scalars_only_and_empty_exports(tmp_path):
    """2.1.1/2.2: metadata.json + scalars.json; also empty files, no blobs/, metadata only."""
    d = tmp_path / "experiment_22"
    d.mkdir()
    shutil.copy(EXPORT / export_dir.METADATA, d)
    shutil.copy(EXPORT / export_dir.SCALARS, d)
    loaded = load_tbdev(d)
    assert sum(len(t) for t in loaded.series.values()) == 11
    assert loaded.report.issues == []
    e = tmp_path / "experiment_empty"
    e.mkdir()
    shutil.copy(EXPORT / export_dir.METADATA, e)
    loaded = load_tbdev(e)
    assert loaded.series == {} and loaded.experiment.name == "torch demo run"
    for name in (export_dir.SCALARS, export_dir.TENSORS, export_dir.BLOB_SEQUENCES):
        (e / name).write_bytes(b"")
    assert load_tbdev(e).series == {}
    f = copy_export(tmp_path)
    shutil.rmtree(f / "blobs")
    loaded = load_tbdev(f)
    assert kinds(loaded.report) == {"missing_blob": 10}
    assert loaded.series["train"]["samples/image"].sequence(0) == (None, None, None)


def test_conflicting_and_changed_metadata(tmp_path):
    d = copy_export(tmp_path)
    lines = read_lines(d / export_dir.SCALARS)
    extra = dict(lines[-1])
    extra["summary_metadata"] = "CgkKB3NjYWxhcnMgAQ=="          # no display name
    extra["points"] = {"steps": [5], "values": [1.0], "wall_times": [1795299300.0]}
    lines.append(extra)
    write_lines(d / export_dir.SCALARS, lines)
    loaded = load_tbdev(d)
    s = loaded.series["train/1795299212.1548328"]["hparam/loss"]
    assert s.steps.tolist() == [0, 5]
    assert s.metadata.display_name == "hparam/loss"
    assert kinds(loaded.report) == {"metadata_differs": 1}


# -- writing the export layout -----------------------------------------------------------

def test_tbdev_roundtrip_is_byte_identical(tmp_path):
    out = tmp_path / f"experiment_{EXP_ID}"
    report = tbconvert.convert(EXPORT, out, from_format="tbdev", to_format="tbdev")
    assert report.issues == []
    for name in (export_dir.METADATA, export_dir.SCALARS, export_dir.TENSORS):
        assert (out / name).read_bytes() == (EXPORT / name).read_bytes(), name
    assert sorted(p.name for p in (out / "tensors").iterdir()) == \
        sorted(p.name for p in (EXPORT / "tensors").iterdir())
    for p in (EXPORT / "tensors").iterdir():
        with np.load(p) as a, np.load(out / "tensors" / p.name) as b:
            assert a.files == b.files
            for k in a.files:
                assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
    ours, theirs = read_lines(out / export_dir.BLOB_SEQUENCES), read_lines(EXPORT / export_dir.BLOB_SEQUENCES)
    for a, b in zip(ours, theirs, strict=True):
        pa, pb = a.pop("points"), b.pop("points")
        assert a == b
        assert pa["steps"] == pb["steps"] and pa["wall_times"] == pb["wall_times"]
        for sa, sb in zip(pa["blob_file_paths"], pb["blob_file_paths"], strict=True):
            assert [(out / x).read_bytes() for x in sa] == [(EXPORT / x).read_bytes() for x in sb]
            assert all(export_dir.EXPERIMENT_ID_RE.fullmatch(x[len("blobs/blob_"):-4]) for x in sa)
    assert_matches_expected(load_tbdev(out))
    # deterministic: the same input gives the same blob ids
    again = tmp_path / "again" / f"experiment_{EXP_ID}"
    tbconvert.convert(EXPORT, again, from_format="tbdev", to_format="tbdev")
    assert (again / export_dir.BLOB_SEQUENCES).read_bytes() == (out / export_dir.BLOB_SEQUENCES).read_bytes()


def _md(plugin, dc, **kw):
    return Metadata(plugin_name=plugin, data_class=dc, **kw)


class _ModelReader:
    """A minimal stand-in reader over model objects."""

    def __init__(self, experiment, runs):
        self._experiment, self._runs = experiment, runs
        from tbconvert.formats.base import Options
        self.options = Options()

    def experiment(self):
        return self._experiment

    def iter_runs(self):
        from tbconvert.model import RunData
        for run, chunks in self._runs:
            yield RunData(run, iter(chunks))


def _write_model(tmp_path, runs, experiment=Experiment(), **kw):
    from tbconvert.api import copy, open_writer
    report = Report()
    out = tmp_path / "out"
    with open_writer(out, format="tbdev", report=report, **kw) as writer:
        copy(_ModelReader(experiment, runs), writer, report)
    return out, report


def test_writer_from_model_objects(tmp_path):
    common = dict(hidden=None)
    sc = _md("scalars", DataClass.SCALAR, display_name="loss")
    run = Run("a/b", start_time=1.0)
    chunks = [
        ScalarSeries(run="a/b", tag="loss", metadata=sc, steps=[0, 1], wall_times=[1.0, 2.0],
                     values=np.array([0.5, np.nan], np.float32), **common),
        TensorSeries(run="a/b", tag="txt", metadata=_md("text", DataClass.TENSOR),
                     steps=[0], wall_times=[1.25], dtypes=[dt.DT_STRING],
                     tensors=(dt.string_array([b"hi", b"nul\x00"], (2,)),), **common),
        ScalarSeries(run="a/b", tag="loss", metadata=sc, steps=[2], wall_times=[3.0],
                     values=np.array([np.inf], np.float32), **common),
        TensorSeries(run="a/b", tag="i64", metadata=_md("custom", DataClass.SCALAR),
                     steps=[0], wall_times=[1.0], dtypes=[dt.DT_INT64],
                     tensors=(np.array(7, np.int64),), **common),
        TensorSeries(run="a/b", tag="odd", metadata=_md("x", DataClass.UNKNOWN),
                     steps=[0], wall_times=[1.0], dtypes=[dt.DT_FLOAT],
                     tensors=(np.zeros(3, np.float32),), **common),
        TensorSeries(run="a/b", tag="empty", metadata=_md("histograms", DataClass.TENSOR),
                     steps=[], wall_times=[], dtypes=[], tensors=(), **common),
        BlobSequenceSeries.from_sequences(
            run="a/b", tag="img", metadata=_md("images", DataClass.BLOB_SEQUENCE),
            steps=[0, 1], wall_times=[1.0, 2.0], sequences=[[b"2", b"2", b"png"], [b"", None]],
            **common),
    ]
    exp = Experiment(experiment_id="X" * 22, name="n", description="d",
                     create_time="2020-01-01T00:00:00Z", update_time="2020-01-02T00:00:00Z",
                     extra={"converted_from": "somewhere"})
    out, report = _write_model(tmp_path, [(run, chunks)], exp)
    assert json.loads((out / export_dir.METADATA).read_text()) == {
        "converted_from": "somewhere", "create_time": "2020-01-01T00:00:00Z",
        "description": "d", "name": "n", "update_time": "2020-01-02T00:00:00Z"}
    k = kinds(report)
    assert k == {"string_nul_stripped": 1, "unsupported_series": 1, "experiment_id_not_kept": 1}
    scalars = read_lines(out / export_dir.SCALARS)
    assert [(d["tag"], d["points"]["steps"]) for d in scalars] == [("loss", [0, 1, 2]), ("i64", [0])]
    assert "NaN" in (out / export_dir.SCALARS).read_text()
    tensors = read_lines(out / export_dir.TENSORS)
    assert tensors[0]["points"]["tensors_file_path"] == "tensors/1.250000.npz"
    assert tensors[1]["points"] == {"steps": [], "tensors_file_path": None, "wall_times": []}
    back = load_tbdev(out)
    assert back.experiment.extra == {"converted_from": "somewhere"}
    assert back.series["a/b"]["loss"].values.tolist()[2] == np.inf
    assert back.series["a/b"]["txt"].tensors[0].tolist() == [b"hi", b"nul"]
    assert back.series["a/b"]["i64"].values.tolist() == [7.0]
    img = back.series["a/b"]["img"]
    assert list(img.sequences()) == [(b"2", b"2", b"png"), (b"", None)]
    assert "odd" not in back.series["a/b"]


def test_writer_refuses_existing_output_and_cleans_up(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        tbconvert.convert(EXPORT, out, from_format="tbdev", to_format="tbdev")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]

    class Boom(RuntimeError):
        pass

    def bad_chunks():
        yield ScalarSeries(run="r", tag="t", metadata=_md("scalars", DataClass.SCALAR),
                           steps=[0], wall_times=[1.0], hidden=None,
                           values=np.zeros(1, np.float32))
        raise Boom()
    with pytest.raises(Boom):
        _write_model(tmp_path / "b", [(Run("r"), bad_chunks())])
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    tbconvert.convert(EXPORT, out, from_format="tbdev", to_format="tbdev", force=True)
    assert not (out / "keep.txt").exists() and (out / export_dir.SCALARS).exists()


def test_buffer_limit_splits_lines_but_keeps_points(tmp_path):
    """Chunks past the memory budget become extra lines; reading merges them back."""
    loaded = load_tbdev(EXPORT)
    runs = [(loaded.runs[name], [s.take([i]) for s in tags.values() for i in range(len(s))])
            for name, tags in loaded.series.items()]
    out, report = _write_model(tmp_path, runs, loaded.experiment)
    assert len(read_lines(out / export_dir.TENSORS)) == 8          # within budget: one line each
    from tbconvert.api import copy, open_writer
    out2 = tmp_path / "small"
    with open_writer(out2, format="tbdev", report=report) as w:
        w.max_buffer_bytes = 1
        copy(_ModelReader(loaded.experiment, runs), w, report)
    assert len(read_lines(out2 / export_dir.TENSORS)) == 25
    assert len(read_lines(out2 / export_dir.SCALARS)) == 327
    for d in (out, out2):
        assert_matches_expected(load_tbdev(d))


# -- integer scalars ------------------------------------------------------------------------

def _integer_logdir(root: Path, tags: dict) -> Path:
    """Run ``r`` of an event-file logdir: per tag, one integer SCALAR tensor per step (int64
    and uint64 as TensorFlow logs them), in the shape of the arrays given."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.util import tensor_util

    from tbconvert.formats.tfevents import records
    events = [event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")]
    for tag, values in tags.items():
        for step, value in enumerate(values):
            ev = event_pb2.Event(wall_time=1000.0 + step, step=step)
            v = ev.summary.value.add(tag=tag)
            v.tensor.CopyFrom(tensor_util.make_tensor_proto(value))
            v.metadata.plugin_data.plugin_name = "scalars"
            v.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
            events.append(ev)
    path = root / "r" / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    return root


def test_integer_scalars_rounded_to_doubles_are_counted_exactly(tmp_path):
    i64, u64 = np.iinfo(np.int64), np.iinfo(np.uint64)
    logdir = _integer_logdir(tmp_path / "logs", {
        # rounded: 2**62+1, 2**53+1, the largest int64 (float64 gives 2**63, beyond int64);
        # exact however large: -2**63, 2**62
        "i": [np.int64(v) for v in (2**62 + 1, i64.min, 2**53 + 1, 2**53, i64.max, -5, 2**62)],
        # rounded: the largest uint64 (float64 gives 2**64), 2**53+1
        "u": [np.uint64(v) for v in (u64.max, 2**63, 2**53 + 1, 0, 2**60)],
        # points of shape [1] stay tensors, made single numbers in the export
        "t": [np.array([2**53 + 1], np.int64), np.array([2**53 + 2], np.int64)],
    })
    report = tbconvert.convert(logdir, tmp_path / "out", to_format="tbdev")
    rounded = {i.tag: i.count for i in report.issues if i.kind == "scalar_rounded"}
    assert rounded == {"i": 3, "u": 2, "t": 1}
    assert {i.tag: i.message for i in report.issues if i.kind == "scalar_rounded"}["i"] == \
        "r/i: 3 integer values beyond 2**53 were rounded to the export's doubles"
    lines = {d["tag"]: d["points"]["values"] for d in read_lines(tmp_path / "out" / export_dir.SCALARS)}
    assert lines["i"][2] == 2.0 ** 53   # what was reported is what happened


def test_one_integer_just_beyond_2_53_fails_strict(tmp_path):
    logdir = _integer_logdir(tmp_path / "logs", {"tokens": [np.int64(2**53 + 1)]})
    code, err = run_cli("convert", logdir, tmp_path / "out", "--to", "tbdev", "--strict")
    assert code == 8, err
    assert "r/tokens: 1 integer value beyond 2**53 was rounded to the export's doubles" in err
    exact = _integer_logdir(tmp_path / "exact", {"tokens": [np.int64(2**53 + 2), np.int64(-2**63)]})
    code, err = run_cli("convert", exact, tmp_path / "out2", "--to", "tbdev", "--strict")
    assert code == 0 and "rounded" not in err, err


# -- tbdev-export command -------------------------------------------------------------------

def run_cli(*argv) -> tuple[int, str]:
    import contextlib
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(map(str, argv)))
    return code, err.getvalue()


def test_cli_refuses_nonempty_output_and_missing_input(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("x")
    copy_export(tmp_path / "root")
    copy_export(tmp_path / "root", "experiment_" + "B" * 22)
    code, err = run_cli("tbdev-export", tmp_path / "root", "-o", out)
    assert code == 6 and "--force" in err and "Traceback" not in err
    code, err = run_cli("tbdev-export", tmp_path / "missing", "-o", tmp_path / "o2")
    assert code == 3 and "no such file" in err
    (tmp_path / "empty").mkdir()
    code, err = run_cli("tbdev-export", tmp_path / "empty", "-o", tmp_path / "o3")
    assert code == 3 and "no TensorBoard.dev export" in err


def assert_logdir_holds_export(logdir: Path, expected_runs=None) -> None:
    """Every point of the export appears in TensorBoard's reading of ``logdir``."""
    view = tb_view(logdir)
    runs = expected_runs if expected_runs is not None else EXPECTED["runs"]
    assert sorted(view) == sorted(runs)
    for run, info in runs.items():
        tags = view[run]["tags"]
        assert sorted(tags) == sorted(info["tags"]), run
        walls = [w for e in info["tags"].values() for w in e["wall_times"]]
        assert view[run]["first_event"] <= min(walls) + 1e-6
        for tag, exp in info["tags"].items():
            got = tags[tag]
            assert got["plugin_name"] == exp["plugin_name"]
            assert got["data_class"] == DataClass[exp["data_class"][11:]].value
            assert got["plugin_content"] == __import__("base64").b64decode(exp["plugin_content_b64"])
            pts = got["points"]
            assert [p[0] for p in pts] == exp["steps"], (run, tag)
            assert np.allclose([p[1] for p in pts], exp["wall_times"], rtol=0, atol=1e-6)
            for i, (_, _, (kind, shape, data)) in enumerate(pts):
                if "values" in exp:
                    assert shape == ()
                    value = np.frombuffer(data, dtype=kind)[0]
                    assert float(np.float32(value)) == float(np.float32(exp["values"][i]))
                elif exp["data_class"] == "DATA_CLASS_TENSOR":
                    pe = exp["points"][i]
                    assert list(shape) == pe["shape"]
                    if kind == "string":
                        assert pe["dtype"] == "string"
                        arr = np.empty(len(data), object)
                        arr[:] = list(data)
                    else:
                        arr = np.frombuffer(data, dtype=kind).reshape(shape)
                        assert str(arr.dtype) == pe["dtype"]
                    assert canonical_sha(arr) == pe["sha256"]
                else:
                    pe = exp["points"][i]
                    assert kind == "string" and shape == (pe["num_blobs"],)
                    assert [hashlib.sha256(b).hexdigest() for b in data] == pe["blob_sha256"]
    assert view["train"]["graph"]


def test_tbdev_export_real_fixture(tmp_path):
    out = tmp_path / "logs"
    code, err = run_cli("tbdev-export", EXPORT, "-o", out)
    assert code == 0, err
    assert "tensorboard --logdir" in err
    assert_logdir_holds_export(out)
    # experiment facts are kept beside the logdir and come back on the way to an export
    back = tmp_path / f"experiment_{EXP_ID}"
    tbconvert.convert(out, back, from_format="tfevents", to_format="tbdev")
    assert (back / export_dir.METADATA).read_bytes() == (EXPORT / export_dir.METADATA).read_bytes()
    assert_matches_expected(load_tbdev(back))


def test_convert_from_tbdev_to_tfevents(tmp_path):
    out = tmp_path / "logs"
    code, err = run_cli("convert", EXPORT, out, "--from", "tbdev", "--to", "tfevents")
    assert code == 0, err
    assert_logdir_holds_export(out)


def test_tbdev_export_root_one_broken_experiment(tmp_path):
    root = tmp_path / "export"
    copy_export(root)
    bad_id = "B" * 22
    bad = copy_export(root, f"experiment_{bad_id}")
    np.savez(bad / "tensors" / "1795299211.678016.npz",
             np.array(["a"], dtype=object), np.array(["b"], dtype=object))
    (root / "scalars_OLD.json").write_bytes((EXPORT / export_dir.SCALARS).read_bytes())
    out = tmp_path / "logs"
    code, err = run_cli("tbdev-export", root, "-o", out)
    assert code == 5, err
    assert "--allow-pickle" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        sorted([EXP_ID, "OLD"])
    assert_logdir_holds_export(out / EXP_ID)
    scalars_only = {r: {"tags": {t: e for t, e in i["tags"].items() if "values" in e}}
                    for r, i in EXPECTED["runs"].items()}
    view = tb_view(out / "OLD")
    assert sorted(view) == sorted(scalars_only)
    # with the opt-in, all three convert; --force replaces the logdirs
    code, err = run_cli("tbdev-export", root, "-o", out, "--allow-pickle", "--force")
    assert code == 0, err
    text = tb_view(out / bad_id)["train"]["tags"]["notes/text_summary"]["points"]
    assert [p[2][2] for p in text] == [(b"a",), (b"b",)]


def test_an_empty_experiment_folder_of_a_root_fails_as_it_does_alone(tmp_path):
    # (an export cut short: no empty logdir for it, and the same word from sync)
    root = tmp_path / "export"
    copy_export(root)
    (root / "experiment_EMPTY").mkdir()
    report = tbconvert.tbdev_export(root, tmp_path / "logs")
    assert [(name, type(exc).__name__) for name, exc in report.failures] == \
        [("EMPTY", "FormatError")]
    assert "not a TensorBoard.dev export" in str(report.failures[0][1])
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [EXP_ID]
    synced = tbconvert.sync(root, tmp_path / "dataset")
    assert [type(exc).__name__ for _, exc in synced.failures] == ["FormatError"]
    with pytest.raises(FormatError):
        tbconvert.tbdev_export(root / "experiment_EMPTY", tmp_path / "alone")


def test_traversal_run_names_stay_inside(tmp_path):
    d = copy_export(tmp_path / "in")
    lines = read_lines(d / export_dir.SCALARS)
    for line, name in zip(lines, ["../../evil", "/abs/olute", "..\\..\\win", "", "a/../../b"], strict=False):
        line["run"] = name
    write_lines(d / export_dir.SCALARS, lines)
    out = tmp_path / "sandbox" / "logs"
    code, err = run_cli("tbdev-export", d, "-o", out)
    assert code == 0, err
    for p in tmp_path.rglob("*"):
        assert p.is_relative_to(d) or p.is_relative_to(out) or p == tmp_path / "sandbox" \
            or p.is_relative_to(tmp_path / "in"), p
    assert not Path("/abs/olute").exists() and not (tmp_path / "evil").exists()
    assert not (tmp_path / "win").exists() and not (tmp_path / "sandbox" / "b").exists()
    assert "not a safe path" in err
    view = tb_view(out)
    assert len(view) == 9
    total = sum(len(t["points"]) for r in view.values() for t in r["tags"].values())
    expected_total = sum(len(e["steps"]) for i in EXPECTED["runs"].values()
                         for e in i["tags"].values())
    assert total == expected_total


def test_logdir_to_tbdev_to_logdir_is_invisible(tmp_path):
    src = FIXTURES / "torch_logdir"
    exp = tmp_path / f"experiment_{EXP_ID}"
    tbconvert.convert(src, exp, from_format="tfevents", to_format="tbdev")
    back = tmp_path / "back"
    tbconvert.convert(exp, back, from_format="tbdev", to_format="tfevents")
    before, after = tb_view(src), tb_view(back)
    # runs without any series (torch's "multi") cannot exist in an export
    before = {r: v for r, v in before.items() if v["tags"]}
    for v in list(before.values()) + list(after.values()):
        v["meta_graph"] = False   # run-level records have no place in an export (reported)
    from oracle import assert_same_view
    assert_same_view(after, before, ignore_first_event=True)
    for run in after:
        assert after[run]["first_event"] <= min(
            p[1] for t in after[run]["tags"].values() for p in t["points"])


def test_symlink_out_of_the_export_is_refused(tmp_path):
    d = copy_export(tmp_path / "x")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"secret")
    first = read_lines(d / export_dir.BLOB_SEQUENCES)[0]["points"]["blob_file_paths"][0][0]
    (d / first).unlink()
    (d / first).symlink_to(secret)
    loaded = load_tbdev(d)
    assert loaded.series["train"]["__run_graph__"].sequence(0) == (None,)
    assert kinds(loaded.report) == {"unsafe_path": 1}


def test_cli_old_scalars_file_and_strict(tmp_path):
    old = tmp_path / "scalars_OLDID.json"
    old.write_bytes((EXPORT / export_dir.SCALARS).read_bytes())
    code, err = run_cli("tbdev-export", old, "-o", tmp_path / "logs")
    assert code == 0, err
    view = tb_view(tmp_path / "logs")
    assert sum(len(t["points"]) for r in view.values() for t in r["tags"].values()) == 327
    d = copy_export(tmp_path / "in")
    edit_line(d / export_dir.BLOB_SEQUENCES, "train", "samples/batch",
              lambda line: line["points"]["blob_file_paths"][0].__setitem__(2, None))
    code, err = run_cli("tbdev-export", d, "-o", tmp_path / "strict", "--strict")
    assert code == 8 and "missing blob" in err, err


def test_a_run_named_with_backslashes_stays_apart_from_one_named_with_slashes(tmp_path):
    """``a\\b`` (an export made on Windows) reads as ``a/b``, unless the export has a run
    ``a/b`` of its own: two runs never merge into one."""
    d = copy_export(tmp_path)
    lines = read_lines(d / export_dir.SCALARS)
    twin = [dict(line, run=line["run"].replace("/", "\\")) for line in lines
            if line["run"] == "multi/losses_train"]
    write_lines(d / export_dir.SCALARS, twin + lines)
    loaded = tbconvert.read(d, restarts="keep-all")
    assert "multi/losses_train~2" in loaded.series and "multi/losses_train" in loaded.series
    assert [i.message for i in loaded.report.issues if i.kind == "run_renamed"] == [
        "run 'multi\\\\losses_train' uses Windows separators; read as 'multi/losses_train~2' "
        "(the export names a run 'multi/losses_train' too)"]
    ours = loaded.series["multi/losses_train"]["losses"]
    assert len(ours) == len(loaded.series["multi/losses_train~2"]["losses"]) == 10
    # notes on runs the selection leaves out are not given
    picked = tbconvert.read(d, runs="^train$")
    assert not [i for i in picked.report.issues if i.kind == "run_renamed"]


def test_a_non_finite_wall_time_is_written_as_the_run_start(tmp_path):
    d = tmp_path / "experiment_NANWALLNANWALLNANWALL01"
    d.mkdir()
    (d / "scalars.json").write_text(
        '{"points": {"steps": [0, 1, 2], "values": [1.0, 2.0, 3.0], "wall_times": '
        '[1563406522.0, NaN, 1563406524.0]}, "run": "r", "summary_metadata": '
        '"CgkKB3NjYWxhcnMgAQ==", "tag": "t"}\n')
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(d, out)
    assert [i.message for i in report.issues if i.kind == "wall_time_replaced"] == [
        "r/t: 1 non-finite wall time written as the run's start time"]
    back = tbconvert.read(out)
    assert back.runs["r"].start_time == 1563406522.0
    assert back.series["r"]["t"].wall_times.tolist() == [1563406522.0, 1563406522.0,
                                                        1563406524.0]


def test_writing_a_run_named_with_a_backslash_says_how_it_reads_back(tmp_path):
    # On POSIX ``back\slash`` is one directory; an export's reader takes the backslash for a
    # Windows separator, so the writer says so (verify would otherwise be the first to tell).
    src = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "train", src / "back\\slash")
    report = tbconvert.convert(src, tmp_path / "export", to_format="tbdev")
    runs = sorted(tbconvert.read(src).series)
    renamed = [i.message for i in report.issues if i.kind == "run_renamed"]
    assert len(renamed) == len(runs) and all("reads back as 'back/slash" in m for m in renamed)
    assert sorted(tbconvert.read(tmp_path / "export").series) == \
        [r.replace("\\", "/") for r in runs]


def test_names_an_exports_reader_refuses_are_told_where_they_are_written(tmp_path):
    """A name longer than an export's readers take would be lost only on reading back: the
    writer leaves it out and says so, with the name cut short in the message."""
    sc = _md("scalars", DataClass.SCALAR)

    def scalars(run, tag):
        return ScalarSeries(run=run, tag=tag, metadata=sc, steps=[0], wall_times=[1.0],
                            values=np.array([0.5], np.float32), hidden=None)
    long = "T" * 20_000
    out, report = _write_model(tmp_path, [(Run("a"), [scalars("a", long), scalars("a", "x")]),
                                          (Run(long), [scalars(long, "y")])])
    issues = [i for i in report.issues if i.kind == "unsupported_series"]
    assert [(i.run[:3], i.tag[:3], i.count) for i in issues] == [("a", "TTT", 1),
                                                               ("TTT", "y", 1)]
    assert all("(20000 characters)" in i.message and len(i.message) < 500 for i in issues)
    back = read(out)
    assert sorted(back.series) == ["a"] and list(back.series["a"]) == ["x"]
    assert not back.report.issues


def test_nan_payloads_an_export_cannot_spell_are_told(tmp_path):
    """An export's JSON spells every NaN ``NaN``: a signaling or signed NaN comes back plain,
    which the writer says (and without numpy's warning about the cast)."""
    import warnings
    sc = _md("scalars", DataClass.SCALAR)
    bits = np.array([0x7FA00001, 0x7FC00000, 0xFFC00000, 0x3F800000], np.uint32)
    chunk = ScalarSeries(run="a", tag="x", metadata=sc, steps=[0, 1, 2, 3],
                         wall_times=[1.0, 2.0, 3.0, 4.0], values=bits.view(np.float32),
                         hidden=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, report = _write_model(tmp_path, [(Run("a"), [chunk])])
    told = [i for i in report.issues if i.kind == "nan_payload_dropped"]
    assert [(i.tag, i.count) for i in told] == [("x", 2)]
    back = read(out).scalars("a", "x").values
    assert np.isnan(back[:3]).all() and back[3] == 1.0


def test_notes_of_an_export_root_name_their_experiment(tmp_path):
    """Each experiment of a root becomes ``logs/<id>/``: its notes say which experiment, name
    runs as TensorBoard shows them (``<id>/<run>``), and the facts file's note lists only the
    facts it keeps (an unreadable metadata.json keeps none but the id)."""
    root = tmp_path / "export"
    copy_export(root)
    broken = copy_export(root, "experiment_" + "B" * 22)
    (broken / "metadata.json").write_text("{bad")
    report = tbconvert.tbdev_export(root, tmp_path / "logs")
    assert not report.failures
    for issue in report.issues:
        assert issue.message.startswith(("experiment " + EXP_ID + ": ",
                                          "experiment " + "B" * 22 + ": ")), issue.message
        assert issue.run is None or issue.run.split("/")[0] in (EXP_ID, "B" * 22), issue.run
    kept = {i.message.split(":")[0]: i.message for i in report.issues
            if i.kind == "experiment_facts_sidecar"}
    assert "experiment id kept in" in kept["experiment " + "B" * 22]
    assert "name" not in kept["experiment " + "B" * 22].split("kept in")[0]
    assert "bad_metadata" in {i.kind for i in report.issues if i.message.startswith(
        "experiment " + "B" * 22)}


def test_an_export_root_stops_when_the_machine_runs_out(tmp_path, monkeypatch):
    """One broken experiment costs only itself, but no memory left is no experiment's fault:
    the root stops there, without trying the others."""
    from tbconvert import exports
    from tbconvert.errors import OutOfResourcesError
    root = tmp_path / "export"
    copy_export(root)
    copy_export(root, "experiment_" + "B" * 22)
    tried = []
    monkeypatch.setattr(exports, "_convert_one", out_of_memory(tried))
    with pytest.raises(OutOfResourcesError):
        tbconvert.tbdev_export(root, tmp_path / "logs")
    assert len(tried) == 1 and not (tmp_path / "logs").exists()


def test_a_root_takes_a_renamed_experiment_folder_and_tells_an_id_clash(tmp_path):
    # a folder renamed by hand is no reason to pass an experiment over; two experiments of one
    # id get two logdirs, and the second's name is told
    root = tmp_path / "export"
    copy_export(root)
    copy_export(root, "my_experiment")
    (root / f"scalars_{EXP_ID}.json").write_bytes((EXPORT / export_dir.SCALARS).read_bytes())
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(root, out)
    assert not report.failures and report.experiments == 3
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == \
        sorted([EXP_ID, f"{EXP_ID}_2", "my_experiment"])
    assert_logdir_holds_export(out / "my_experiment")
    [renamed] = [i for i in report.issues if i.kind == "experiment_renamed"]
    assert f"scalars_{EXP_ID}.json" in renamed.message and f"{EXP_ID}_2" in renamed.message
    synced = tbconvert.sync(root, tmp_path / "dataset")
    assert not synced.failures
    assert sorted(p.name for p in (tmp_path / "dataset").iterdir() if p.is_dir()) == \
        sorted([EXP_ID, f"{EXP_ID}_2", "my_experiment"])
    assert [i.kind for i in synced.issues if i.kind == "experiment_renamed"] == \
        ["experiment_renamed"]



def test_an_experiment_folder_of_an_unsafe_name_is_renamed_and_told(tmp_path):
    root = tmp_path / "export"
    copy_export(root, "my\nexperiment")
    report = tbconvert.tbdev_export(root, tmp_path / "logs")
    assert not report.failures
    assert [p.name for p in (tmp_path / "logs").iterdir() if p.is_dir()] == ["my%0Aexperiment"]
    [renamed] = [i for i in report.issues if i.kind == "experiment_renamed"]
    assert "'my\\nexperiment' is not a safe path; written as my%0Aexperiment" in renamed.message

def test_a_run_all_of_whose_lines_are_skipped_leaves_no_run_behind(tmp_path):
    d = copy_export(tmp_path / "in")
    lines = read_lines(d / export_dir.SCALARS)
    lines[0]["run"] = "lost"
    lines[0]["points"]["values"][0] = "x"
    write_lines(d / export_dir.SCALARS, lines)
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(d, out)
    assert [i.kind for i in report.issues if i.lost] == ["bad_line"]
    assert not (out / "lost").exists()
    assert "lost" not in tb_view(out)


def test_a_graph_blob_that_is_no_graphdef_is_written_and_told(tmp_path):
    d = copy_export(tmp_path / "in")
    graph = d / "blobs" / "blob_uTVlQjl4CNchZOR2g3Ef3w.bin"
    assert graph.exists()
    graph.write_bytes(b"\xff\xff\xff\xffgarbage")
    report = tbconvert.tbdev_export(d, tmp_path / "logs")
    [told] = [i for i in report.issues if i.kind == "graph_not_parsable"]
    assert told.run == "train" and not told.lost and "11 bytes" in told.message


def test_runs_of_a_root_answer_to_the_names_tensorboard_shows(tmp_path):
    root = tmp_path / "export"
    copy_export(root)
    copy_export(root, "experiment_OTHER")
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(root, out, runs=f"^{EXP_ID}/(train|resumed)$")
    assert sorted(p.name for p in (out / EXP_ID).iterdir() if p.is_dir()) == ["resumed", "train"]
    assert not [p for p in (out / "OTHER").iterdir() if p.is_dir()]
    assert not [i for i in report.issues if i.kind == "selection_matched_nothing"]
    # the run's own name still selects, in every experiment
    report = tbconvert.tbdev_export(root, tmp_path / "again", runs="^train$")
    assert (tmp_path / "again" / EXP_ID / "train").is_dir()
    assert (tmp_path / "again" / "OTHER" / "train").is_dir()


def test_a_long_blob_series_is_handed_on_in_chunks(tmp_path, monkeypatch):
    # (a series of many images is never held whole; what is written is the same)
    from tbconvert.formats.tbdev import payloads
    monkeypatch.setattr(payloads, "BLOB_CHUNK_BYTES", 1)
    with tbconvert.api.open_reader(EXPORT, format="tbdev", options=None,
                                   report=Report()) as reader:
        sizes = {}
        for run_data in reader.iter_runs():
            for chunk in run_data.series:
                if isinstance(chunk, BlobSequenceSeries):
                    sizes.setdefault((run_data.run.name, chunk.tag), []).append(len(chunk))
    assert sizes and all(all(n == 1 for n in ns) for ns in sizes.values()), sizes
    assert any(len(ns) > 1 for ns in sizes.values()), sizes
    tbconvert.tbdev_export(EXPORT, tmp_path / "logs")
    assert_logdir_holds_export(tmp_path / "logs")
