"""Event files in and out, proven against TensorBoard's own reading."""

import json
import math
import shutil

import numpy as np
import pytest
from helpers import FIXTURES, LOGDIRS
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.formats.tfevents import legacy, records
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
from tbconvert.report import Report


def _roundtrip(src, tmp_path, **kw):
    out = tmp_path / "out"
    report = tbconvert.convert(src, out, to_format="tfevents", **kw)
    return out, report


@pytest.mark.parametrize("name", LOGDIRS)
def test_fixture_roundtrip_equals_tensorboard_view(name, tmp_path):
    out, report = _roundtrip(FIXTURES / name, tmp_path)
    assert_same_view(tb_view(out), tb_view(FIXTURES / name))
    assert not report.lost


@pytest.mark.parametrize("name", LOGDIRS)
def test_reader_matches_expected_reading(name):
    expected = json.loads((FIXTURES / "expected" / f"{name}.json").read_text())
    data = tbconvert.read(FIXTURES / name, restarts="keep-all")
    runs = expected["runs"]
    assert sorted(data.runs) == sorted(runs)
    for run, info in runs.items():
        tags = info["tags"]
        assert sorted(data.series[run]) == sorted(tags), run
        for tag, exp in tags.items():
            s = data.series[run][tag].visible()
            assert s.metadata.plugin_name == exp["plugin_name"]
            assert len(s) == exp["num_points"], (run, tag)
            assert s.steps.tolist() == exp["steps"]
            assert s.wall_times.tolist() == exp["wall_times"]
            if "values" in exp and isinstance(s, ScalarSeries):
                want = [float(v) for v in exp["values"]]
                got = s.values.astype(np.float64).tolist()
                assert all((math.isnan(a) and math.isnan(b)) or a == b
                           for a, b in zip(got, want, strict=True))


def test_restart_rule_marks_instead_of_dropping():
    data = tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")
    resumed = data.series["resumed"]["loss"]
    purged = data.series["resumed_purged"]["loss"]
    assert len(resumed) == 50 and resumed.hidden_count == 0
    assert len(purged) == 50 and purged.hidden_count == 10
    hidden_steps = purged.steps[purged.hidden]
    assert hidden_steps.tolist() == list(range(20, 30))
    assert len(purged.visible()) == 40


def test_keep_all_writes_hidden_points(tmp_path):
    out, report = _roundtrip(FIXTURES / "torch_logdir", tmp_path, restarts="keep-all",
                             runs="^resumed_purged$")
    view = tb_view(out)
    assert len(view["resumed_purged"]["tags"]["loss"]["points"]) == 50


def test_histogram_migration_matches_spec_example():
    from tensorboard.compat.proto import summary_pb2
    h = summary_pb2.HistogramProto(min=0.5, max=2.5, bucket_limit=[0, 1, 2, 3, 1.7976931348623157e308],
                                   bucket=[0, 2, 3, 1, 0])
    got = legacy.migrate_histogram(h)
    assert got.dtype == np.float32
    assert got.tolist() == [[0.5, 1, 2], [1, 2, 3], [2, 2.5, 1]]
    assert legacy.migrate_histogram(summary_pb2.HistogramProto(bucket=[0, 0])).shape == (0, 3)


def test_legacy_image_audio_scalar_migration():
    from tensorboard.compat.proto import summary_pb2
    v = summary_pb2.Summary.Value(tag="img")
    v.image.width, v.image.height, v.image.encoded_image_string = 640, 480, b"PNGDATA"
    md, (code, arr) = legacy.migrate_value(v)
    assert code == dt.DT_STRING and arr.tolist() == [b"640", b"480", b"PNGDATA"]
    assert md.plugin_content == b"\x10\x01" and md.data_class == DataClass.BLOB_SEQUENCE
    assert md.display_name == "img"
    a = summary_pb2.Summary.Value(tag="snd")
    a.audio.encoded_audio_string = b"RIFF"
    md, (code, arr) = legacy.migrate_value(a)
    assert arr.tolist() == [b"RIFF"] and md.plugin_content == b"\x10\x0b\x18\x01"
    s = summary_pb2.Summary.Value(tag="x", simple_value=0.1)
    s.metadata.display_name = "X"
    md, (code, arr) = legacy.migrate_value(s)
    assert arr.dtype == np.float32 and arr == np.float32(0.1) and md.display_name == "X"
    assert md.plugin_name == "scalars" and md.data_class == DataClass.SCALAR


def _copy(tmp_path, name="tensorboardx_logdir"):
    dst = tmp_path / "src"
    shutil.copytree(FIXTURES / name, dst)
    return dst


def _event_file(run_dir):
    return sorted(p for p in run_dir.iterdir() if "tfevents" in p.name)[0]


def test_corrupt_middle_record_costs_only_that_record(tmp_path):
    src = _copy(tmp_path)
    f = _event_file(src / "run_b")
    buf = bytearray(f.read_bytes())
    starts, lengths, _ = records.scan(bytes(buf))
    victim = len(starts) // 2
    buf[int(starts[victim]) + 2] ^= 0x40   # payload bit flip: bad data CRC
    f.write_bytes(bytes(buf))
    data = tbconvert.read(src, runs="^run_b$", restarts="keep-all")
    loss = data.series["run_b"]["loss"]
    assert len(loss) == 24  # 25 points, one lost: TensorBoard would keep only those before it
    kinds = [i.kind for i in data.report.issues]
    assert kinds == ["corrupt_record"]
    assert str(f) in data.report.issues[0].message
    assert data.report.issues[0].message.endswith(
        "reading went on after them (TensorBoard stops reading the file there, so it showed "
        "none of the records after this)")


def test_truncated_last_record(tmp_path):
    src = _copy(tmp_path)
    f = _event_file(src / "run_b")
    f.write_bytes(f.read_bytes()[:-7])
    data = tbconvert.read(src, runs="^run_b$", restarts="keep-all")
    assert len(data.series["run_b"]["loss"]) == 24
    assert [i.kind for i in data.report.issues] == ["truncated_record"]
    assert data.report.issues[0].message.endswith("truncated record; skipped 35 bytes")


def test_not_an_event_file_is_reported_and_others_kept(tmp_path):
    src = _copy(tmp_path)
    (src / "run_b" / "zz.tfevents.notes").write_text("hello, I am not an event file\n" * 3)
    data = tbconvert.read(src, restarts="keep-all")
    assert len(data.series["run_b"]["loss"]) == 25
    told = [i.kind for i in data.report.issues if "zz.tfevents.notes" in i.message]
    assert told == ["not_an_event_file"]      # told once, not also as a bad record


def test_a_file_whose_records_are_all_damaged_is_told_record_by_record(tmp_path):
    """Records whose headers check out but whose data does not are an event file's damage:
    each is told, where a file with no record header at all is told once, as no event file."""
    src = _copy(tmp_path)
    f = _event_file(src / "run_b")
    raw = bytearray(f.read_bytes()[:200])
    raw[20] ^= 0xFF                       # the first record's data (its header checks out)
    (src / "run_b" / "events.out.tfevents.9.damaged").write_bytes(bytes(raw[:_first_record_end(raw)]))
    data = tbconvert.read(src, restarts="keep-all")
    kinds = [i.kind for i in data.report.issues if "tfevents.9.damaged" in i.message]
    assert kinds and "corrupt_record" in kinds


def _first_record_end(raw: bytes) -> int:
    """The end of the first record of ``raw``."""
    import struct
    return 16 + struct.unpack("<Q", bytes(raw[:8]))[0]


def _write(tmp_path, runs, name="out"):
    """Write model runs with the event-file writer."""
    from tbconvert.api import open_writer
    out = tmp_path / name
    report = Report()
    with open_writer(out, format="tfevents", report=report) as w:
        for run, series in runs:
            w.write_run(run, series)
    return out, report


def _scalar(run, tag, steps, values, dtype=np.float32, walls=None):
    steps = np.asarray(steps)
    walls = np.asarray(walls if walls is not None else 1.7e9 + steps * 0.5, dtype=np.float64)
    md = Metadata("scalars", b"", tag, "", DataClass.SCALAR)
    return ScalarSeries(run=run, tag=tag, metadata=md, steps=steps, wall_times=walls, hidden=None,
                        values=np.asarray(values, dtype=dtype))


@pytest.mark.parametrize("run_name", ["../evil", "/abs/path", "a/../../b", "nul\x00byte", "x" * 400,
                                      "C:\\windows", "."])
def test_run_names_never_escape_destination(tmp_path, run_name):
    out, report = _write(tmp_path, [(Run(run_name), [_scalar(run_name, "t", [1, 2], [1, 2])])])
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 1
    assert files[0].resolve().is_relative_to(out.resolve())
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()
    if run_name != ".":
        assert any(i.kind == "run_renamed" for i in report.issues)


def test_bulk_scalar_path_equals_protobuf(tmp_path):
    """Many points go through the numpy encoder and decoder; TensorBoard must agree."""
    n = 3000
    steps = np.arange(n, dtype=np.int64) * 7 - 5  # negative, 1-, 2- and 3-byte varints
    vals = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    vals[:4] = [np.nan, np.inf, -np.inf, -0.0]
    s32 = _scalar("r", "f32", steps, vals)
    s64 = _scalar("r", "f64", steps, vals.astype(np.float64) / 3, dtype=np.float64)
    out, report = _write(tmp_path, [(Run("r", start_time=1.0), [s32, s64])])
    view = tb_view(out)["r"]["tags"]
    # float32 is the only scalar type both of TensorBoard's loaders show
    single = s64.values.astype(np.float32)
    for s, want in ((s32, vals), (s64, single)):
        pts = view[s.tag]["points"]
        assert [p[0] for p in pts] == s.steps.tolist()
        assert [p[1] for p in pts] == s.wall_times.tolist()
        assert b"".join(p[2][2] for p in pts) == want.tobytes()
    back = tbconvert.read(out, restarts="keep-all").series["r"]
    assert back["f32"].values.tobytes() == s32.values.tobytes()
    assert back["f64"].values.tobytes() == single.tobytes()
    changed = int(np.count_nonzero((single.astype(np.float64) != s64.values)
                                   & ~np.isnan(s64.values)))
    assert changed > n // 2
    assert [(i.kind, i.tag, i.count, i.lost) for i in report.issues] == \
        [("scalar_rounded_to_float32", "f64", changed, True)]
    assert tb_view(out)["r"]["first_event"] == 1.0


def test_existing_destination_needs_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(tbconvert.errors.OutputExistsError):
        tbconvert.convert(FIXTURES / "tf2_logdir", out, to_format="tfevents")
    assert (out / "keep.txt").read_text() == "mine"
    tbconvert.convert(FIXTURES / "tf2_logdir", out, to_format="tfevents", force=True)
    assert not (out / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_value_named_only_by_node_name_is_not_purged_by_its_data_tag(tmp_path):
    # Below file version 2 a step going back purges the tags the event's values name in their
    # ``tag`` field; a tensor value with only the old ``node_name`` names none ("").
    from tensorboard.compat.proto import event_pb2, tensor_pb2
    events = [event_pb2.Event(wall_time=999.0, file_version="brain.Event:1")]
    for i, step in enumerate([0, 1, 2, 3, 4, 2]):
        ev = event_pb2.Event(wall_time=1000.0 + i, step=step)
        ev.summary.value.add(node_name="nn", tensor=tensor_pb2.TensorProto(dtype=1,
                                                                          float_val=[1.0]))
        events.append(ev)
    src = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    out, report = _roundtrip(tmp_path / "logs", tmp_path)
    expected = tb_view(tmp_path / "logs")
    assert [p[0] for p in expected["run"]["tags"]["nn"]["points"]] == [0, 1, 2, 3, 4, 2]
    assert_same_view(tb_view(out), expected)
    assert [i.kind for i in report.issues] == ["steps_not_increasing"]    # a note, no loss


def test_a_value_of_metadata_without_data_is_reported_not_dropped_silently(tmp_path):
    # TensorBoard's default loader shows such a value as an empty point, --load_fast=false
    # lists its tag without points: neither is a point an output can hold. An hparams value
    # without a tensor is TensorBoard's empty tensor, kept.
    from tensorboard.compat.proto import event_pb2, summary_pb2
    md = summary_pb2.SummaryMetadata()
    md.plugin_data.plugin_name = "text"
    events = [event_pb2.Event(wall_time=999.0, file_version="brain.Event:2")]
    ev = event_pb2.Event(wall_time=1000.0, step=3)
    ev.summary.value.add(tag="meta_only", metadata=md)
    ev.summary.value.add(tag="x", simple_value=1.5)
    events.append(ev)
    src = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    out, report = _roundtrip(tmp_path / "logs", tmp_path)
    issues = [i for i in report.issues if i.kind == "value_without_data"]
    assert len(issues) == 1 and issues[0].lost and issues[0].tag == "meta_only", report.issues
    assert "run/meta_only step 3" in issues[0].message
    assert sorted(tbconvert.read(out).series["run"]) == ["x"]
    hparams = tbconvert.read(FIXTURES / "tf2_logdir")
    assert not [i for i in hparams.report.issues if i.kind == "value_without_data"]


def test_a_graph_whose_point_a_restart_hides_stays_the_runs_graph(tmp_path):
    # TensorBoard keeps a run's graph (and lists __run_graph__ without points) when a later
    # session START purges the graph's point.
    from tensorboard.compat.proto import event_pb2, graph_pb2, node_def_pb2
    graph = graph_pb2.GraphDef(node=[node_def_pb2.NodeDef(name="g1", op="Const")])

    def scalar(step):
        ev = event_pb2.Event(wall_time=1000.0 + step, step=step)
        ev.summary.value.add(tag="a", simple_value=float(step))
        return ev

    def start(step):
        ev = event_pb2.Event(wall_time=1000.0 + step, step=step)
        ev.session_log.status = event_pb2.SessionLog.START
        return ev

    events = [event_pb2.Event(wall_time=999.0, file_version="brain.Event:2"), start(0),
              scalar(0), event_pb2.Event(wall_time=1005.0, step=5,
                                         graph_def=graph.SerializeToString()),
              scalar(6), start(3), scalar(3)]
    src = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    expected = tb_view(tmp_path / "logs")
    assert expected["run"]["graph"] and expected["run"]["tags"]["__run_graph__"]["points"] == []
    for dest in ("back", "x.parquet"):
        out = tmp_path / dest
        tbconvert.convert(tmp_path / "logs", out, to_format=None if "." in dest else "tfevents")
        if dest != "back":
            out = tmp_path / "again"
            tbconvert.convert(tmp_path / dest, out, to_format="tfevents")
        assert_same_view(tb_view(out), expected)


@pytest.mark.parametrize("via", [None, "x.parquet", "x.h5"])
def test_a_run_of_an_empty_event_file_comes_back_without_a_start(tmp_path, via):
    src = tmp_path / "logs"
    (src / "e").mkdir(parents=True)
    (src / "e" / "events.out.tfevents.1.host").write_bytes(b"")
    out = tmp_path / "back"
    first = src if via is None else tmp_path / via
    if via is not None:
        tbconvert.convert(src, first)
    tbconvert.convert(first, out, to_format="tfevents")
    expected = tb_view(src)
    assert expected["e"]["first_event"] is None
    assert_same_view(tb_view(out), expected)
    assert all(p.stat().st_size == 0 for p in (out / "e").iterdir())


def test_non_finite_wall_times_of_a_run_without_a_finite_start_are_told_as_zero(tmp_path):
    from tensorboard.compat.proto import event_pb2
    first = event_pb2.Event(wall_time=float("nan"), file_version="brain.Event:2")
    point = event_pb2.Event(wall_time=float("inf"), step=1)
    point.summary.value.add(tag="a", simple_value=1.0)
    src = tmp_path / "logs" / "run" / "events.out.tfevents.1.host"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in (first, point)))
    _, report = _roundtrip(tmp_path / "logs", tmp_path)
    told = [i.message for i in report.issues if i.kind == "wall_time_replaced"]
    assert told == ["run/a: 1 non-finite wall time written as 0.0 (the run has no finite "
                    "start time)"], report.issues
    # the run's start time too: the first event's wall time, which TensorBoard shows
    told = [i.message for i in report.issues if i.kind == "run_start_time_replaced"]
    assert told == ["run: start time nan written as 0.0 (TensorBoard's fast loader stops at "
                    "a NaN wall time)"], report.issues
