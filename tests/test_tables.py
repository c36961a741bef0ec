"""Analysis tables: CSV, DataFrames/Arrow, hparams, histograms, text, media.

Fixture tests compare against TensorBoard's own reading
(``fixtures/expected/*.json``) bit for bit; unit tests use model objects.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import struct
import wave
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from helpers import LOGDIRS, csv_exact

import tbconvert
from tbconvert import api
from tbconvert.errors import OutputExistsError, UsageError
from tbconvert.formats.base import Options, Reader
from tbconvert.formats.csv import encode as _csv
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, RunData, ScalarSeries, TensorSeries
from tbconvert.report import Report

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
SOURCES = {name: FIX / name for name in LOGDIRS}
SOURCES["tbdev_export"] = FIX / "tbdev_export"


def expected(name: str) -> dict:
    return json.loads((FIX / "expected" / f"{name}.json").read_text())["runs"]


def _f(v) -> float:
    return float(v) if not isinstance(v, str) else {"NaN": math.nan, "Infinity": math.inf,
                                                    "-Infinity": -math.inf}[v]


def bits(values) -> list[int]:
    return np.asarray(values, np.float64).view(np.uint64).tolist()


def expected_series(name: str, plugin: str):
    for run, info in expected(name).items():
        for tag, t in info["tags"].items():
            if t["plugin_name"] == plugin:
                yield run, tag, t


# --------------------------------------------------------------------------- unit: CSV floats

SPECIAL = [0.0, -0.0, math.nan, math.inf, -math.inf, 1e-45, float(np.float32(1e-45)), 5e-324,
           1.7976931348623157e308, 2.0 ** 53 + 2, 1e16, 123456789012345678.0, 0.1, 1 / 3,
           float(np.float32(0.1)), 1795299212.156004, 100.0, -7.0]


def test_csv_floats_round_trip_bit_exact():
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 2 ** 64, 20000, dtype=np.uint64).view(np.float64)
    random_bits = random_bits[~np.isnan(random_bits)]  # NaN payloads are not text-representable
    f32 = rng.standard_normal(5000).astype(np.float32).astype(np.float64)
    values = np.concatenate([SPECIAL, random_bits, f32])
    table = pa.table({"run": pa.array(["a"] * len(values)).dictionary_encode(), "value": values})
    buf = io.BytesIO()
    _csv.write(table, buf)
    text = buf.getvalue().decode()
    df = pd.read_csv(io.StringIO(text), **csv_exact())
    assert df["value"].dtype == np.float64
    assert bits(df["value"]) == bits(values)
    parsed = [float(line.split(",")[1]) for line in text.splitlines()[1:]]
    assert bits(parsed) == bits(values)
    assert ",nan\n" in text and ",inf\n" in text and ",-inf\n" in text and ",-0.0\n" in text


def test_csv_quotes_only_when_needed():
    table = pa.table({"run": pa.array(["plain", 'a,"b"', "x\ny"]).dictionary_encode(),
                      "text": ["t", "comma,", 'q"'], "v": [1.0, None, 2.5]})
    buf = io.BytesIO()
    _csv.write(table, buf)
    text = buf.getvalue().decode()
    assert text.splitlines()[:2] == ["run,text,v", "plain,t,1.0"]
    df = pd.read_csv(io.StringIO(text), **csv_exact())
    assert list(df["run"]) == ["plain", 'a,"b"', "x\ny"]
    assert list(df["text"]) == ["t", "comma,", 'q"']
    assert math.isnan(df["v"][1]) and df["v"][2] == 2.5


# --------------------------------------------------------------------------- unit: model sources

SCALAR_MD = Metadata("scalars", b"", "", "", DataClass.SCALAR)


def scalar(run, tag, steps, values, hidden=None, dtype=np.float32):
    steps = np.asarray(steps)
    return ScalarSeries(run=run, tag=tag, metadata=SCALAR_MD, steps=steps,
                        wall_times=1000.0 + steps * 0.5, hidden=hidden,
                        values=np.asarray(values, dtype))


class MemoryReader(Reader):
    """A reader over runs built in memory."""

    def __init__(self, runs, options=None, report=None):
        super().__init__(Path("memory"), options or Options(), report or Report())
        self._runs = runs

    def iter_runs(self):
        for name, chunks in self._runs:
            yield RunData(Run(name), iter(chunks))


def histogram(run, tag, steps, arrays):
    return TensorSeries(run=run, tag=tag, metadata=Metadata("histograms", b"", "", "",
                                                            DataClass.TENSOR),
                        steps=np.asarray(steps), wall_times=np.asarray(steps, float) + 0.25,
                        hidden=None, dtypes=np.full(len(steps), 2), tensors=tuple(arrays))


def sample_runs():
    return [
        ("a", [scalar("a", "loss", [0, 1, 2], [0.5, -0.0, np.nan]),
               scalar("a", "loss", [3], [np.inf]),              # a second chunk
               scalar("a", "lr", [0, 2], [0.1, 0.01]),          # sparser tag
               histogram("a", "w", [0], [np.array([[0, 1, 2.0], [1, 2, 3]])])]),
        ("b", [scalar("b", "loss", [1, 5], [7, 8], dtype=np.int64),
               scalar("b", "acc", [5], [1e-45])]),
    ]


def test_scalars_long_from_reader_is_columnar_and_exact():
    report = Report()
    t = tbconvert.scalars_table(MemoryReader(sample_runs()), report=report)
    assert t.column_names == ["run", "tag", "step", "wall_time", "value"]
    assert pa.types.is_dictionary(t.schema.field("run").type)
    assert t.schema.field("value").type == pa.float64()
    assert t.num_rows == 9
    df = t.to_pandas()
    a_loss = df[(df.run == "a") & (df.tag == "loss")]
    assert list(a_loss.step) == [0, 1, 2, 3]
    assert bits(a_loss.value) == bits(np.array([0.5, -0.0, np.nan, np.inf], np.float32))
    assert df[df.tag == "acc"].value.iloc[0] == float(np.float32(1e-45))
    assert report.runs == 2 and report.points["scalar"] == 9


def test_scalars_select_runs_and_tags():
    df = tbconvert.scalars(MemoryReader(sample_runs()), runs="^a$", tags="^l")
    assert set(df.run) == {"a"} and set(df.tag) == {"loss", "lr"}


def test_wide_lines_up_tags_logged_at_different_steps():
    t = tbconvert.scalars_table(MemoryReader(sample_runs()), wide=True)
    assert t.column_names == ["run", "step", "wall_time", "acc", "loss", "lr"]
    rows = t.to_pylist()
    keyed = {(r["run"], r["step"]): r for r in rows}
    assert sorted(keyed) == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 5)]
    assert keyed[("a", 0)]["lr"] == pytest.approx(0.1) and keyed[("a", 1)]["lr"] is None
    assert keyed[("a", 2)]["lr"] == float(np.float32(0.01))
    assert math.isnan(keyed[("a", 2)]["loss"])     # NaN value, not missing
    assert keyed[("b", 1)]["acc"] is None and keyed[("b", 5)]["acc"] == float(np.float32(1e-45))
    assert keyed[("b", 5)]["loss"] == 8.0
    assert keyed[("a", 3)]["wall_time"] == 1001.5


def test_wide_duplicate_steps_keep_last_and_report():
    runs = [("r", [scalar("r", "x", [0, 1, 1, 2], [1, 2, 3, 4]), scalar("r", "x", [1], [5])])]
    report = Report()
    t = tbconvert.scalars_table(MemoryReader(runs), wide=True, report=report)
    assert t.column("x").to_pylist() == [1.0, 5.0, 4.0]
    dup = [i for i in report.issues if i.kind == "duplicate_step_in_wide"]
    assert len(dup) == 1 and dup[0].count == 2


def test_what_a_table_left_out_is_warned_of_when_no_report_hears_it():
    """A DataFrame has no place for what was left out: without a ``report``, the table
    functions warn (once, naming the kinds); with one, the report holds it and nothing is
    warned."""
    import warnings
    runs = [("r", [scalar("r", "x", [0, 1, 1, 2], [1, 2, 3, 4])])]
    with pytest.warns(tbconvert.DataLossWarning,
                      match=r"^tbconvert\.scalars: duplicate step in wide: 1 point \(pass "
                            r"report=tbconvert\.Report\(\) to see each\)$") as told:
        tbconvert.scalars(MemoryReader(runs), wide=True)
    assert len(told) == 1 and told[0].filename == __file__     # where the caller called
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tbconvert.scalars(MemoryReader(runs), wide=True, report=Report())
        tbconvert.scalars(MemoryReader(runs))       # the long table holds every point


def test_wide_refuses_keep_all():
    with pytest.raises(UsageError):
        tbconvert.scalars_table(MemoryReader(sample_runs()), wide=True, restarts="keep-all")


def test_restarts_visible_and_keep_all():
    hidden = np.array([False, True, True, False])
    runs = [("r", [scalar("r", "x", [0, 5, 6, 5], [1, 2, 3, 4], hidden=hidden)])]
    report = Report()
    visible = tbconvert.scalars(MemoryReader(runs), report=report)
    assert list(visible.step) == [0, 5] and list(visible.value) == [1.0, 4.0]
    assert any(i.kind == "hidden_points_left_out" and i.count == 2 for i in report.issues)
    kept = tbconvert.scalars(MemoryReader(runs), restarts="keep-all")
    assert list(kept.step) == [0, 5, 6, 5] and list(kept.hidden) == list(hidden)


def test_big_int_scalars_reported_when_inexact():
    runs = [("r", [scalar("r", "n", [0, 1], [2 ** 53 + 1, 3], dtype=np.int64)])]
    report = Report()
    tbconvert.scalars_table(MemoryReader(runs), report=report)
    assert [i.kind for i in report.issues] == ["inexact_value"]


def test_histogram_rows_from_model():
    t = tbconvert.histograms_table(MemoryReader(sample_runs()))
    assert t.column_names == ["run", "tag", "step", "wall_time", "left", "right", "count"]
    assert t.to_pydict()["count"] == [2.0, 3.0] and t.to_pydict()["step"] == [0, 0]


def test_csv_writer_through_copy_reports_non_scalars(tmp_path):
    report = Report()
    dst = tmp_path / "out.csv"
    writer = api.open_writer(dst, options=Options(), report=report)
    with writer:
        api.copy(MemoryReader(sample_runs()), writer, report)
    df = pd.read_csv(dst, **csv_exact())
    assert list(df.columns) == ["run", "tag", "step", "wall_time", "value"] and len(df) == 9
    lost = [i for i in report.issues if i.kind == "not_in_table"]
    assert len(lost) == 1 and lost[0].tag == "w" and lost[0].lost
    assert not list(tmp_path.glob(".*tbconvert-tmp*"))
    with pytest.raises(OutputExistsError):
        api.open_writer(dst, options=Options(), report=Report())


def test_missing_blob_reported_in_images_table():
    md = Metadata("images", b"\x10\x01", "", "", DataClass.BLOB_SEQUENCE)
    png = b"\x89PNG\r\n\x1a\n" + b"rest"
    s = BlobSequenceSeries.from_sequences(
        run="r", tag="im", metadata=md, steps=np.array([3]), wall_times=np.array([1.0]),
        hidden=None, sequences=[(b"4", b"2", png, None, b"GIF89a..")])
    report = Report()
    t = tbconvert.images_table(MemoryReader([("r", [s])]), report=report).to_pydict()
    assert t["index"] == [0, 2] and t["format"] == ["png", "gif"] and t["width"] == [4, 4]
    assert t["data"][0] == png
    assert [i.kind for i in report.issues] == ["missing_blob"]


def test_a_blob_the_source_lost_is_counted_once_by_tables_and_extraction(tmp_path):
    import shutil

    from helpers import FIXTURES
    export = tmp_path / "export"
    shutil.copytree(next((FIXTURES / "tbdev_export").glob("experiment_*")), export)
    lines = [json.loads(line) for line in (export / "blob_sequences.json").open()]
    for line in lines:
        if line["tag"] == "samples/image":
            line["points"]["blob_file_paths"][1][2] = None
    (export / "blob_sequences.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    tbconvert.convert(export, tmp_path / "archive.parquet")
    # the export's reading tells of the hole; the archive keeps it without a word, so there
    # the table tells of it
    for source in (export, tmp_path / "archive.parquet"):
        report = Report()
        table = tbconvert.images_table(source, tags="samples/image", report=report)
        assert [(i.kind, i.count) for i in report.issues] == [("missing_blob", 1)], source
        assert report.summary_lines()[0] == "warning: 1 missing blob (lost by the source)"
        assert table.num_rows == 1     # of the two images, the one kept
        report = tbconvert.extract_media(source, tmp_path / f"media-{source.name}",
                                         tags="samples/image")
        assert [(i.kind, i.count) for i in report.issues] == [("missing_blob", 1)], source


def test_read_gives_numpy_access():
    data = tbconvert.read(SOURCES["torch_logdir"], runs="^train$")
    loss = data.scalars("train", "loss")
    pairs = np.column_stack((loss.steps, loss.values))
    assert pairs.shape == (50, 2)
    exp = expected("torch_logdir")["train"]["tags"]["loss"]
    assert loss.steps.tolist() == exp["steps"]
    assert bits(loss.values.astype(np.float64)) == bits([_f(v) for v in exp["values"]])
    with pytest.raises(KeyError):
        data.scalars("train", "nope")
    assert tbconvert.scalars(data, tags="^loss$").shape == (50, 5)


# --------------------------------------------------------------------------- fixtures: scalars

@pytest.fixture(scope="module", params=list(SOURCES))
def source(request):
    return request.param


def _expected_scalars(name):
    rows = {}
    for run, tag, t in expected_series(name, "scalars"):
        rows[(run, tag)] = (t["steps"], t["wall_times"], [_f(v) for v in t["values"]])
    return rows


def _frame_by_series(df):
    out = {}
    for (run, tag), g in df.groupby(["run", "tag"], observed=True, sort=False):
        out[(run, tag)] = (g["step"].tolist(), g["wall_time"].tolist(), g["value"].tolist())
    return out


def _assert_same(actual: dict, exp: dict):
    assert sorted(actual) == sorted(exp)
    for key, (steps, walls, values) in exp.items():
        a_steps, a_walls, a_values = actual[key]
        assert a_steps == steps, key
        assert bits(a_walls) == bits(walls), key
        assert bits(a_values) == bits(values), key


def test_scalars_dataframe_matches_tensorboard(source):
    df = tbconvert.scalars(SOURCES[source])
    assert list(df.columns) == ["run", "tag", "step", "wall_time", "value"]
    _assert_same(_frame_by_series(df), _expected_scalars(source))


def test_csv_long_matches_tensorboard(source, tmp_path):
    dst = tmp_path / "s.csv"
    report = tbconvert.convert(SOURCES[source], dst)
    text = dst.read_text()
    assert text.startswith("run,tag,step,wall_time,value\n")
    df = pd.read_csv(dst, keep_default_na=False, **csv_exact(),
                     na_values={"value": ["nan"]}, dtype={"run": str, "tag": str})
    _assert_same(_frame_by_series(df), _expected_scalars(source))
    # every non-scalar series is accounted for in the report
    others = {(r, t) for r, info in expected(source).items() for t, v in info["tags"].items()
              if v["data_class"] != "DATA_CLASS_SCALAR"}
    reported = {(i.run, i.tag) for i in report.issues if i.kind == "not_in_table"}
    assert reported == others


def test_csv_wide_matches_tensorboard(source, tmp_path):
    dst = tmp_path / "w.csv"
    report = tbconvert.convert(SOURCES[source], dst, wide=True)
    df = pd.read_csv(dst, dtype={"run": str}, **csv_exact())
    exp = _expected_scalars(source)
    dups = {(i.run, i.tag) for i in report.issues if i.kind == "duplicate_step_in_wide"}
    assert len(df) == len(df.drop_duplicates(["run", "step"]))
    cells = 0
    for (run, tag), (steps, _walls, values) in exp.items():
        sub = df[df.run == run].set_index("step")[tag]
        last = dict(zip(steps, values, strict=True))  # the last value at each step wins
        assert bits(sub.loc[list(last)].to_numpy()) == bits(list(last.values())), (run, tag)
        assert sub.notna().sum() == len(last) or any(math.isnan(v) for v in values)
        if len(last) != len(steps):
            assert (run, tag) in dups
        cells += len(last)
    assert cells == int(df.drop(columns=["run", "step", "wall_time"]).notna().sum().sum()) or \
        any(math.isnan(v) for _s, _w, vs in exp.values() for v in vs)


def test_torch_resumed_restart_rule():
    df = tbconvert.scalars(SOURCES["torch_logdir"], runs="^resumed", tags="^loss$")
    assert (df.run == "resumed").sum() == 50 and (df.run == "resumed_purged").sum() == 40
    kept = tbconvert.scalars(SOURCES["torch_logdir"], runs="^resumed_purged$", tags="^loss$",
                             restarts="keep-all")
    assert len(kept) == 50 and kept.hidden.sum() == 10
    assert kept[~kept.hidden].step.tolist() == list(range(40))


# --------------------------------------------------------------------------- fixtures: tensors

def _tensor_sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"))
                          .tobytes()).hexdigest()


def test_histograms_match_tensorboard(source):
    t = tbconvert.histograms_table(SOURCES[source])
    df = t.to_pandas()
    exp = list(expected_series(source, "histograms"))
    assert exp
    assert len(df) == sum(p["shape"][0] for _r, _t, e in exp for p in e["points"])
    for run, tag, e in exp:
        sub = df[(df.run == run) & (df.tag == tag)]
        assert sub.step.unique().tolist() == sorted(set(e["steps"]), key=e["steps"].index)
        pos = 0
        arr = sub[["left", "right", "count"]].to_numpy()
        for step, wall, p in zip(e["steps"], e["wall_times"], e["points"], strict=True):
            k = p["shape"][0]
            point = arr[pos:pos + k].astype(p["dtype"])
            assert _tensor_sha(point) == p["sha256"], (run, tag, step)
            assert sub.wall_time.iloc[pos:pos + k].tolist() == [wall] * k
            pos += k


def test_text_matches_tensorboard():
    for name in ("torch_logdir", "tf2_logdir", "tensorboardx_logdir"):
        df = tbconvert.text(SOURCES[name])
        for run, tag, e in expected_series(name, "text"):
            sub = df[(df.run == run) & (df.tag == tag)]
            want = []
            for step, p in zip(e["steps"], e["points"], strict=True):
                texts = p["text"] if isinstance(p["text"], list) else [p["text"]]
                want += [(step, i, s) for i, s in enumerate(texts)]
            assert list(zip(sub.step, sub["index"], sub.text, strict=True)) == want
    table = tbconvert.text(SOURCES["tf2_logdir"], tags="config_table")
    assert table.dims.tolist() == ["2x2"] * 4
    assert np.array(table.text).reshape(2, 2).tolist() == [["k", "v"], ["lr", "0.01"]]


def _blob_points(name, plugin):
    for run, tag, e in expected_series(name, plugin):
        for step, p in zip(e["steps"], e["points"], strict=True):
            first = 2 if plugin == "images" else 0
            for i, sha in enumerate(p["blob_sha256"][first:]):
                yield run, tag, step, i, sha


def test_images_table_matches_and_decodes(source):
    pytest.importorskip("PIL")
    df = tbconvert.images(SOURCES[source])
    want = sorted(_blob_points(source, "images"))
    got = sorted((r, t, s, i, hashlib.sha256(d).hexdigest())
                 for r, t, s, i, d in zip(df.run, df.tag, df.step, df["index"], df.data, strict=True))
    assert got == want and want
    for data, w, h in zip(df.data, df.width, df.height, strict=True):
        img = tbconvert.open_image(data)
        img.load()
        assert img.size == (w, h)


# --------------------------------------------------------------------------- fixtures: hparams

def test_hparams_torch():
    hp = tbconvert.hparams(SOURCES["torch_logdir"])
    assert list(hp.columns) == ["run", "batch_size", "lr", "nesterov", "optimizer",
                                "hparam/accuracy", "hparam/loss", "status", "start_time",
                                "end_time"]
    row = hp.iloc[0].to_dict()
    assert len(hp) == 1 and row["run"] == "train/1795299212.1548328"
    assert (row["batch_size"], row["lr"], row["nesterov"], row["optimizer"]) == (32.0, 0.1, 1.0,
                                                                                "sgd")
    exp = expected("torch_logdir")["train/1795299212.1548328"]["tags"]
    assert row["hparam/accuracy"] == _f(exp["hparam/accuracy"]["values"][-1])
    assert row["hparam/loss"] == _f(exp["hparam/loss"]["values"][-1])
    assert row["status"] == "success"


def test_hparams_tensorboardx():
    hp = tbconvert.hparams(SOURCES["tensorboardx_logdir"])
    assert hp.to_dict("records")[0] | {"start_time": None, "end_time": None} == {
        "run": "run_a/1795299215.1055038", "layers": 3.0, "lr": 0.003, "opt": "adam",
        "hp/final_loss": _f(expected("tensorboardx_logdir")["run_a/1795299215.1055038"]["tags"]
                            ["hp/final_loss"]["values"][-1]),
        "status": "success", "start_time": None, "end_time": None}


def test_hparams_tf2_two_trials():
    t = tbconvert.hparams_table(SOURCES["tf2_logdir"])
    rows = t.to_pylist()
    exp = expected("tf2_logdir")
    assert [r["run"] for r in rows] == ["hparams/trial_0", "hparams/trial_1"]
    assert t.column_names[:5] == ["run", "batch_norm", "learning_rate", "optimizer", "units"]
    assert t.schema.field("batch_norm").type == pa.bool_()
    assert [(r["batch_norm"], r["learning_rate"], r["optimizer"], r["units"]) for r in rows] == \
        [(False, 0.1, "adam", 8.0), (True, 0.01, "sgd", 16.0)]
    for r in rows:
        assert r["accuracy"] == _f(exp[r["run"]]["tags"]["accuracy"]["values"][-1])
        assert r["validation/loss"] is None   # declared metric, no hparams/trial_*/validation run
        assert r["status"] == "unknown" and r["start_time"] > 1.7e9
    only = tbconvert.hparams(SOURCES["tf2_logdir"], runs="trial_1$")
    assert list(only.run) == ["hparams/trial_1"]


def test_hparams_without_experiment_uses_session_scalars():
    from tensorboard.plugins.hparams import plugin_data_pb2
    data = plugin_data_pb2.HParamsPluginData(version=0)
    data.session_start_info.hparams["lr"].number_value = 0.5
    md = Metadata("hparams", data.SerializeToString(), "", "", DataClass.TENSOR)
    start = TensorSeries(run="s", tag="_hparams_/session_start_info", metadata=md,
                         steps=np.array([0]), wall_times=np.array([1.0]), hidden=None,
                         dtypes=np.array([1]), tensors=(np.zeros(0, np.float32),))
    runs = [("s", [start, scalar("s", "acc", [0, 1], [0.5, 0.75])]),
            ("s/eval", [scalar("s/eval", "acc", [1], [0.25])]),
            ("other", [scalar("other", "acc", [1], [0.1])])]
    rows = tbconvert.hparams_table(MemoryReader(runs)).to_pylist()
    assert rows == [{"run": "s", "lr": 0.5, "acc": 0.75, "eval/acc": 0.25, "status": "unknown",
                     "start_time": None, "end_time": None}]


# --------------------------------------------------------------------------- fixtures: media

def test_media_files_decode_and_count(source, tmp_path):
    pytest.importorskip("PIL")
    out = tmp_path / "media"
    report = tbconvert.extract_media(SOURCES[source], out)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    images = list(_blob_points(source, "images"))
    audio = list(_blob_points(source, "audio"))
    texts = sum(math.prod(p["shape"]) for _r, _t, e in expected_series(source, "text")
                for p in e["points"])
    assert len(files) == len(images) + len(audio) + texts
    shas = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert {sha for *_k, sha in images + audio} <= shas
    for run, tag, step, i, sha in images:
        parts = [] if run == "." else run.split("/")
        matches = list(out.joinpath(*parts, *tag.split("/")).glob(f"{step}_{i}.*"))
        assert len(matches) == 1 and hashlib.sha256(matches[0].read_bytes()).hexdigest() == sha
        tbconvert.open_image(matches[0].read_bytes()).load()
        assert matches[0].suffix in (".png", ".jpg", ".gif")
    for path in files:
        if path.suffix == ".wav":
            with wave.open(str(path)) as w:
                assert w.getnframes() > 0
        if path.suffix == ".txt":
            path.read_bytes().decode("utf-8")
    assert not any(i.kind == "missing_blob" for i in report.issues)
    with pytest.raises(OutputExistsError):
        tbconvert.extract_media(SOURCES[source], out)


def test_media_names_made_safe(tmp_path):
    md = Metadata("audio", b"", "", "", DataClass.BLOB_SEQUENCE)
    wav = b"RIFF" + struct.pack("<I", 4) + b"WAVE"
    s = BlobSequenceSeries.from_sequences(
        run="../evil", tag="a/../b:c", metadata=md, steps=np.array([7]),
        wall_times=np.array([1.0]), hidden=None, sequences=[(wav, None)])
    root = BlobSequenceSeries.from_sequences(
        run=".", tag="t", metadata=md, steps=np.array([1]), wall_times=np.array([1.0]),
        hidden=None, sequences=[(b"xyz",)])
    out = tmp_path / "m"
    report = tbconvert.extract_media(MemoryReader([("../evil", [s]), (".", [root])]), out)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["%2E%2E/evil/a/%2E%2E/b:c/7_0.wav", "%2E/t/1_0.bin"]
    kinds = sorted(i.kind for i in report.issues)
    assert kinds == ["missing_blob", "name_made_safe"]


def test_media_series_whose_paths_meet_get_folders_of_their_own(tmp_path):
    """Run ``a`` with tag ``b/c`` and run ``a/b`` with tag ``c`` would share ``a/b/c``."""
    md = Metadata("text", b"", "", "", DataClass.TENSOR)

    def text(run, tag, step, value):
        return TensorSeries(run=run, tag=tag, metadata=md, steps=np.array([step]),
                            wall_times=np.array([1.0]), hidden=None, dtypes=np.array([7]),
                            tensors=(np.array(value, dtype=object),))
    out = tmp_path / "m"
    report = tbconvert.extract_media(MemoryReader([
        ("a", [text("a", "b/c", 0, b"first")]), ("a/b", [text("a/b", "c", 0, b"second")])]), out)
    assert (out / "a" / "b" / "c" / "0_0.txt").read_bytes() == b"first"
    assert (out / "a" / "b" / "c~2" / "0_0.txt").read_bytes() == b"second"
    assert [i.message for i in report.issues if i.kind == "name_clash"] == [
        "a/b/c: a/b/c holds run 'a', tag 'b/c' already; written under a/b/c~2"]


def test_without_pandas_the_message_names_the_extra(monkeypatch):
    import sys

    from tbconvert.errors import MissingDependencyError
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(MissingDependencyError, match=r"tbconvert\[pandas\]"):
        tbconvert.scalars(MemoryReader(sample_runs()))
    assert tbconvert.scalars(MemoryReader(sample_runs()), as_arrow=True).num_rows == 9


def test_media_keep_all_marks_hidden_files(tmp_path):
    md = Metadata("text", b"", "", "", DataClass.TENSOR)
    s = TensorSeries(run="r", tag="t", metadata=md, steps=np.array([5, 5]),
                     wall_times=np.array([1.0, 2.0]), hidden=np.array([True, False]),
                     dtypes=np.array([7, 7]),
                     tensors=(np.array(b"old", dtype=object), np.array(b"new", dtype=object)))
    tbconvert.extract_media(MemoryReader([("r", [s])]), tmp_path / "a")
    assert [p.read_bytes() for p in (tmp_path / "a" / "r" / "t").iterdir()] == [b"new"]
    tbconvert.extract_media(MemoryReader([("r", [s])]), tmp_path / "b", restarts="keep-all")
    got = {p.name: p.read_bytes() for p in (tmp_path / "b" / "r" / "t").iterdir()}
    assert got == {"5_0.hidden.txt": b"old", "5_0.txt": b"new"}


def test_tensor_table_reports_integers_a_double_rounds():
    md = Metadata("custom", b"", "", "", DataClass.TENSOR)
    t = TensorSeries(run="r", tag="t", metadata=md, steps=np.array([0, 1]),
                     wall_times=np.array([1.0, 2.0]), hidden=None, dtypes=np.array([9, 9]),
                     tensors=(np.array([2 ** 53 + 1, 5], np.int64), np.array([3], np.int64)))
    s = ScalarSeries(run="r", tag="s", metadata=Metadata("scalars", b"", "", "", DataClass.SCALAR),
                     steps=np.array([0]), wall_times=np.array([1.0]), hidden=None,
                     values=np.array([2 ** 60 + 1], np.int64))
    report = Report()
    table = tbconvert.tensors(MemoryReader([("r", [t, s])]), scalars=True, as_arrow=True,
                              report=report)
    assert table.num_rows == 3
    assert sorted(i.message for i in report.issues if i.kind == "inexact_value") == [
        "r/s: 1 integer value beyond 2**53 was rounded to the nearest float64 in the table",
        "r/t: 1 integer value beyond 2**53 was rounded to the nearest float64 in the table"]


def test_points_with_no_row_in_a_table_are_told(tmp_path):
    """A histogram of no buckets and a text of no cells are points TensorBoard shows; a
    table has no row for them and no file is extracted, so the report counts them."""
    md = Metadata("text", b"", "", "", DataClass.TENSOR)
    text = TensorSeries(run="r", tag="t", metadata=md, steps=np.array([0, 1]),
                        wall_times=np.array([1.0, 2.0]), hidden=None, dtypes=np.array([7, 7]),
                        tensors=(np.array([], dtype=object), np.array(b"kept", dtype=object)))
    hist = histogram("r", "h", [0, 1], [np.zeros((0, 3)), np.array([[0, 1, 2.0]])])
    source = MemoryReader([("r", [text, hist])])
    report = Report()
    assert tbconvert.histograms_table(source, report=report).num_rows == 1
    assert [(i.kind, i.count, i.message) for i in report.issues] == [
        ("empty_histogram", 1, "r/h: 1 point is a histogram of no buckets and not in the "
                               "histogram table")]
    report = Report()
    assert tbconvert.text_table(source, report=report).num_rows == 1
    assert [(i.kind, i.count) for i in report.issues] == [("empty_text", 1)]
    report = tbconvert.extract_media(source, tmp_path / "m")
    assert [p.name for p in (tmp_path / "m" / "r" / "t").iterdir()] == ["1_0.txt"]
    assert [(i.kind, i.count, i.message) for i in report.issues if i.kind != "not_media"] == [
        ("empty_text", 1, "r/t: 1 point is text of no cells (a shape with a 0 dimension); "
                          "no file was written for it")]
