"""``tbconvert verify``: equal sources pass, every kind of difference is named."""

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, peak_mib

import tbconvert
from tbconvert.cli import main
from tbconvert.formats.tfevents import records
from tbconvert.report import Report
from tbconvert.verify import compare


def test_verify_equal_after_roundtrip(tmp_path, capsys):
    out = tmp_path / "out"
    tbconvert.convert(FIXTURES / "torch_logdir", out, to_format="tfevents")
    assert main(["verify", str(FIXTURES / "torch_logdir"), str(out)]) == 0
    assert "same data" in capsys.readouterr().out


def _one_corrupt_record(src: Path) -> Path:
    """The tensorboardX fixture at ``src`` with one record of ``run_b`` damaged: one point
    fewer, and a record reported lost while reading."""
    shutil.copytree(FIXTURES / "tensorboardx_logdir", src)
    f = next(p for p in (src / "run_b").iterdir() if "tfevents" in p.name)
    buf = bytearray(f.read_bytes())
    starts, _, _ = records.scan(bytes(buf))
    buf[int(starts[5]) + 2] ^= 0x10
    f.write_bytes(bytes(buf))
    return src


def test_verify_names_differences(tmp_path, capsys):
    src = _one_corrupt_record(tmp_path / "src")
    code = main(["verify", str(FIXTURES / "tensorboardx_logdir"), str(src)])
    out, err = capsys.readouterr()
    assert code == 10
    assert "run_b/loss: 25 points != 24 points" in out
    assert "differ" in err and "Traceback" not in err


def test_verify_claims_no_sameness_for_what_it_could_not_read(tmp_path, capsys):
    """Both sources lose the same damaged record: nothing differs in what was read, but
    that record was compared on neither side."""
    a = _one_corrupt_record(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert main(["verify", str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"same data as far as it could be read: {a} and {b} (2 items "
                          "could not be read;"), out
    assert "corrupt record" in err
    assert main(["verify", str(a), str(b), "--strict"]) == 8


def test_verify_detects_changed_value(tmp_path):
    from tbconvert.verify import compare
    data = tbconvert.read(FIXTURES / "tf2_logdir", restarts="keep-all")
    loss = data.series["eager"]["loss"]
    changed = loss.values.copy()
    changed[3] = np.nextafter(changed[3], np.float32(10))
    from tbconvert.api import open_writer
    out = tmp_path / "changed"
    with open_writer(out, format="tfevents") as w:
        for run_name, run in data.runs.items():
            series = list(data.series[run_name].values())
            if run_name == "eager":
                series = [s if s.tag != "loss" else type(s)(
                    run=s.run, tag=s.tag, metadata=s.metadata, steps=s.steps,
                    wall_times=s.wall_times, hidden=None, values=changed) for s in series]
            w.write_run(run, series)
    diffs = compare(FIXTURES / "tf2_logdir", out)
    assert diffs == ["eager/loss: values differ at step 3"]


# -- sources written with TensorBoard's protos ------------------------------------------------

def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return event_pb2, summary_pb2


def write_run(root: Path, run: str, events=()) -> Path:
    """An event file of ``run`` under ``root``: the version record, then ``events``."""
    event_pb2, _ = _pb()
    path = root / run / "events.out.tfevents.1.host"
    path.parent.mkdir(parents=True)
    head = event_pb2.Event(wall_time=1000.0, file_version="brain.Event:2")
    path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in (head, *events)))
    return root


def int_scalar(step: int, value, tag: str = "n"):
    """A SCALAR tensor of ``value``'s dtype, as TensorFlow logs integer scalars."""
    from tensorboard.util import tensor_util
    event_pb2, summary_pb2 = _pb()
    ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
    v = ev.summary.value.add(tag=tag)
    v.tensor.CopyFrom(tensor_util.make_tensor_proto(value))
    v.metadata.plugin_data.plugin_name = "scalars"
    v.metadata.data_class = summary_pb2.DATA_CLASS_SCALAR
    return ev


def simple(step: int, value: float = 1.0, tag: str = "loss"):
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
    ev.summary.value.add(tag=tag, simple_value=value)
    return ev


def meta_graph(step: int):
    from tensorboard.compat.proto import graph_pb2, meta_graph_pb2
    event_pb2, _ = _pb()
    graph = graph_pb2.GraphDef()
    graph.node.add(name="x", op="Const")
    mg = meta_graph_pb2.MetaGraphDef()
    mg.graph_def.CopyFrom(graph)
    return event_pb2.Event(wall_time=1000.5, step=step, meta_graph_def=mg.SerializeToString())


def log_message(step: int, text: str):
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=1001.0 + step, step=step)
    ev.log_message.message = text
    return ev


def session_start(step: int):
    event_pb2, _ = _pb()
    ev = event_pb2.Event(wall_time=1001.5 + step, step=step)
    ev.session_log.status = event_pb2.SessionLog.START
    return ev


def test_integer_scalars_compare_exactly(tmp_path):
    big = write_run(tmp_path / "big", "r", [int_scalar(0, np.int64(2**53 + 1)),
                                           int_scalar(1, np.int64(-2**63))])
    export = tmp_path / "export"
    report = tbconvert.convert(big, export, to_format="tbdev")
    assert [i.kind for i in report.lost] == ["scalar_rounded"]
    assert compare(big, export, wall_time_tolerance=1e-6) == ["r/n: values differ at step 0"]
    # 2**53 + 1 and 2**53 differ, though their doubles are equal
    near = write_run(tmp_path / "near", "r", [int_scalar(0, np.int64(2**53)),
                                             int_scalar(1, np.int64(-2**63))])
    assert compare(big, near) == ["r/n: values differ at step 0"]
    # archives keep them exactly
    archive = tmp_path / "big.parquet"
    tbconvert.convert(big, archive)
    assert compare(big, archive) == []
    # by value, 128 bits wide: the largest uint64 is not the int64 -1 of the same bits
    signed = write_run(tmp_path / "signed", "s", [int_scalar(0, np.int64(2**53 + 1)),
                                                 int_scalar(1, np.int64(-1))])
    unsigned = write_run(tmp_path / "unsigned", "s", [int_scalar(0, np.uint64(2**53 + 1)),
                                                     int_scalar(1, np.uint64(2**64 - 1))])
    assert compare(signed, unsigned) == ["s/n: values differ at step 1"]


def dtype_notes(report) -> list[str]:
    return [i.message for i in report.issues if i.kind == "scalar_dtypes_differ"]


def test_scalar_dtypes_are_noted_not_differences(tmp_path, capsys):
    ints = write_run(tmp_path / "ints", "r", [int_scalar(0, np.int64(5)), int_scalar(1, np.int64(-7))])
    doubles = write_run(tmp_path / "doubles", "r", [int_scalar(0, np.float64(5)),
                                                   int_scalar(1, np.float64(-7))])
    report = Report()
    assert compare(ints, doubles, report=report) == []
    assert dtype_notes(report) == ["r/n: scalars are int64 in A and float64 in B"]
    assert not report.lost
    # an export keeps every scalar as a double, read back as float32 where that is exact
    export = tmp_path / "export"
    assert tbconvert.convert(ints, export, to_format="tbdev").lost == []
    report = Report()
    assert compare(ints, export, report=report) == []
    assert dtype_notes(report) == ["r/n: scalars are int64 in A and float32 in B"]
    # the same values of one dtype are no note; at the command line a note keeps exit 0
    big = write_run(tmp_path / "big", "r", [int_scalar(0, np.int64(2**63 - 1)),
                                           int_scalar(1, np.int64(2**53 + 1))])
    as_unsigned = write_run(tmp_path / "as_unsigned", "r", [int_scalar(0, np.uint64(2**63 - 1)),
                                                           int_scalar(1, np.uint64(2**53 + 1))])
    archive = tmp_path / "big.h5"
    tbconvert.convert(big, archive)
    report = Report()
    assert compare(big, archive, report=report) == [] and dtype_notes(report) == []
    assert main(["verify", str(big), str(as_unsigned)]) == 0
    out, err = capsys.readouterr()
    assert "same data" in out and "r/n: scalars are int64 in A and uint64 in B" in err


def test_run_level_events_lost_by_an_export_differ(tmp_path, capsys):
    logs = write_run(tmp_path / "logs", "mg", [meta_graph(0), simple(0)])
    export = tmp_path / "export"
    report = tbconvert.convert(logs, export, to_format="tbdev")
    assert [i.kind for i in report.lost] == ["run_records_dropped"]
    code = main(["verify", str(logs), str(export)])
    out, err = capsys.readouterr()
    assert code == 10, err
    assert out == ("run 'mg': 1 run-level event only in A (meta_graph_def at step 0); "
                   "a TensorBoard.dev export has no place for them\n")
    archive = tmp_path / "logs.h5"
    tbconvert.convert(logs, archive)
    assert main(["verify", str(logs), str(archive)]) == 0
    assert "same data" in capsys.readouterr().out


def test_run_level_events_compare_as_a_multiset(tmp_path):
    a = write_run(tmp_path / "a", "r", [simple(0), log_message(1, "hello"), log_message(2, "x"),
                                       log_message(2, "x")])
    b = write_run(tmp_path / "b", "r", [simple(0), log_message(1, "hello!"), log_message(2, "x")])
    assert compare(a, b) == [
        "run 'r': 2 run-level events only in A (log_message at step 1, log_message at step 2)",
        "run 'r': 1 run-level event only in B (log_message at step 1)",
    ]
    # a restart marker only hides points, and the points are compared: event files written
    # from any source leave the marker out
    c = write_run(tmp_path / "c", "r", [simple(0), session_start(0), log_message(1, "hello"),
                                       log_message(2, "x"), log_message(2, "x")])
    assert compare(a, c) == []


def test_runs_without_series_compare_where_both_formats_keep_them(tmp_path):
    logs = write_run(tmp_path / "logs", "train", [simple(0)])
    write_run(logs, "idle")
    write_run(logs, "notes", [log_message(3, "started")])
    fewer = write_run(tmp_path / "fewer", "train", [simple(0)])
    write_run(fewer, "notes", [log_message(3, "started")])
    assert compare(logs, fewer) == ["run 'idle': only in A (no series)"]
    archive = tmp_path / "logs.parquet"
    tbconvert.convert(logs, archive)
    assert compare(logs, archive) == []
    # an export knows a run only by its series: one without is left out, its events with it
    export = tmp_path / "export"
    tbconvert.convert(logs, export, to_format="tbdev")
    assert compare(logs, export) == [
        "run 'notes': only in A (no series, 1 run-level event: log_message at step 3; "
        "a TensorBoard.dev export has no place for them)"]


def test_a_tolerance_that_is_no_duration_is_a_usage_error(capsys):
    import pytest

    from tbconvert.errors import UsageError
    src = FIXTURES / "torch_logdir"
    for bad in ("-1", "nan", "-inf", "inf"):
        assert main(["verify", str(src), str(src), f"--wall-time-tolerance={bad}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "0 or more" in err, err
    with pytest.raises(UsageError):
        compare(src, src, wall_time_tolerance=-0.5)
    assert main(["verify", str(src), str(src), "--wall-time-tolerance", "0.001"]) == 0


def test_run_start_times_compare_and_an_export_tells_the_one_it_drops(tmp_path):
    """TensorBoard orders and colours runs by their start (the first event's wall time): two
    logdirs that differ only there differ. An export has no start times: writing one says
    which it drops, whether the run started before its first point or after it."""
    event_pb2, _ = _pb()
    a = write_run(tmp_path / "a", "run", [simple(0), simple(1)])
    b = tmp_path / "b" / "run" / "events.out.tfevents.1.host"
    b.parent.mkdir(parents=True)
    late = event_pb2.Event(wall_time=5000.0, file_version="brain.Event:2")   # after the points
    b.write_bytes(b"".join(records.frame(e.SerializeToString())
                           for e in (late, simple(0), simple(1))))
    assert compare(a, tmp_path / "b") == ["run 'run': start time 1000.0 in A, 5000.0 in B"]
    assert compare(a, a) == []
    for src, when in ((a, "before"), (tmp_path / "b", "after")):
        report = tbconvert.convert(src, tmp_path / f"export-{when}", to_format="tbdev")
        dropped = [i.message for i in report.issues if i.kind == "run_start_time_dropped"]
        assert len(dropped) == 1 and f"comes {when} its first point (1001.0)" in dropped[0]
        # (an export's runs start at their first point: not compared with one)
        assert compare(src, tmp_path / f"export-{when}") == []


# -- what an archive holds beyond the points: which points are hidden, experiment facts, start
# times, NaN wall times ---------------------------------------------------------------------

def _archive(path, data, *, series_of=lambda run, series: series, run_of=lambda run: run,
             experiment=None):
    """``data`` (a ``tbconvert.read`` result) written to an archive at ``path``, each run's
    series and the run itself passed through ``series_of`` and ``run_of``."""
    from tbconvert.api import open_writer
    with open_writer(path) as w:
        w.write_experiment(experiment if experiment is not None else data.experiment)
        for name, run in data.runs.items():
            w.write_run(run_of(run), series_of(name, list(data.series[name].values())))
    return path


def test_keep_all_compares_which_points_are_hidden_not_only_how_many(tmp_path):
    import dataclasses

    from tbconvert.formats.base import Options
    data = tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")

    def moved(name, series):
        out = []
        for s in series:
            if name == "resumed_purged" and s.tag == "loss":
                hidden = s.hidden.copy()
                first, visible = np.flatnonzero(hidden)[0], np.flatnonzero(~hidden)[-1]
                hidden[first], hidden[visible] = False, True     # as many, other points
                s = dataclasses.replace(s, hidden=hidden)
            out.append(s)
        return out
    a = _archive(tmp_path / "a.parquet", data)
    b = _archive(tmp_path / "b.parquet", data, series_of=moved)
    assert compare(a, b, options=Options(restarts="keep-all")) == [
        "resumed_purged/loss: other points hidden by the restart rule (10 each), first at step 20"]
    assert compare(a, b) != []      # what TensorBoard shows differs too


def test_experiment_facts_lost_or_changed_are_differences(tmp_path):
    import dataclasses
    data = tbconvert.read(FIXTURES / "tbdev_export")
    a = _archive(tmp_path / "a.parquet", data)
    assert compare(FIXTURES / "tbdev_export", a, wall_time_tolerance=1e-6) == []
    changed = dataclasses.replace(data.experiment, create_time="2020-01-01T00:00:00Z",
                                  experiment_id="other")
    b = _archive(tmp_path / "b.parquet", data, experiment=changed)
    assert compare(a, b) == [
        "experiment experiment id: '9bFlIkpYt5HfavHYMD5hzQ' in A, 'other' in B",
        "experiment create time: '2026-11-21T22:13:53Z' in A, '2020-01-01T00:00:00Z' in B"]
    from tbconvert.model import Experiment
    c = _archive(tmp_path / "c.parquet", data, experiment=Experiment())
    assert len(compare(a, c)) == 5      # id, name, description and both times only in A


def test_a_run_start_time_lost_is_a_difference(tmp_path):
    import dataclasses
    data = tbconvert.read(FIXTURES / "torch_logdir")
    a = _archive(tmp_path / "a.parquet", data)
    b = _archive(tmp_path / "b.parquet", data, run_of=lambda run: dataclasses.replace(
        run, start_time=None) if run.name == "multi" else run)
    [diff] = compare(a, b)
    assert diff.startswith("run 'multi': start time ") and diff.endswith(
        " in A, None in B (a run without one shows TensorBoard no start)")


def test_a_nan_wall_time_is_a_difference_whatever_the_tolerance(tmp_path):
    import dataclasses
    data = tbconvert.read(FIXTURES / "tf2_logdir")

    def nan(name, series):
        out = []
        for s in series:
            if name == "eager" and s.tag == "loss":
                walls = s.wall_times.copy()
                walls[2] = np.nan
                s = dataclasses.replace(s, wall_times=walls)
            out.append(s)
        return out
    a = _archive(tmp_path / "a.parquet", data)
    b = _archive(tmp_path / "b.parquet", data, series_of=nan)
    expected = ["eager/loss: wall times differ (NaN in one, a time in the other, at 1 point, the "
                "first at step 2)"]
    assert compare(a, b, wall_time_tolerance=1e-6) == expected
    assert compare(a, b) == ["eager/loss: wall times differ at step 2"]


def test_strict_still_lists_the_differences_and_exits_10(tmp_path, capsys):
    src = _one_corrupt_record(tmp_path / "src")
    code = main(["verify", str(FIXTURES / "tensorboardx_logdir"), str(src), "--strict"])
    out, err = capsys.readouterr()
    assert code == 10
    assert "run_b/loss: 25 points != 24 points" in out
    assert "corrupt" in err


# -- where a series differs ---------------------------------------------------------------------

def _rewritten(src: Path, dest: Path, change) -> Path:
    """The event files of ``src`` (read keeping hidden points) written again to ``dest``, each
    series passed through ``change(run, series)``."""
    from tbconvert.api import open_writer
    data = tbconvert.read(src, restarts="keep-all")
    with open_writer(dest, format="tfevents") as w:
        for name, run in data.runs.items():
            w.write_run(run, [change(name, s) for s in data.series[name].values()])
    return dest


def test_verify_names_the_step_where_a_scalar_differs(tmp_path, capsys):
    import dataclasses
    logs = tmp_path / "logs"
    tbconvert.convert(FIXTURES / "torch_logdir", logs, to_format="tfevents")

    def nudged(run, s):
        if run == "multi/losses_train" and s.tag == "losses":   # steps 0, 3, 6, ...
            values = s.values.copy()
            values[4] = np.nextafter(values[4], np.float32(np.inf))
            s = dataclasses.replace(s, values=values)
        return s
    changed = _rewritten(logs, tmp_path / "changed", nudged)
    assert compare(logs, changed, plugin_files=False) == [
        "multi/losses_train/losses: values differ at step 12"]
    assert main(["verify", str(logs), str(changed), "--no-plugin-files", "-v"]) == 10
    assert capsys.readouterr().out == "multi/losses_train/losses: values differ at step 12\n"
    # the same files written again hold the same data
    same = _rewritten(logs, tmp_path / "same", lambda run, s: s)
    assert main(["verify", str(logs), str(same), "--no-plugin-files"]) == 0
    assert "same data" in capsys.readouterr().out


def _long_run(path: Path, steps, values, walls=None) -> Path:
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    steps = np.asarray(steps, np.int64)
    walls = 1000.0 + np.arange(len(steps)) * 0.5 if walls is None else walls
    series = ScalarSeries(run="r", tag="loss", steps=steps, wall_times=walls, hidden=None,
                          values=values, metadata=Metadata("scalars", data_class=DataClass.SCALAR))
    with open_writer(path, format=None if path.suffix else "tfevents") as w:
        w.write_run(Run("r", start_time=999.0), [series])
    return path


def test_verify_narrows_a_difference_in_a_long_series(tmp_path, capsys):
    """100,000 points: one value changed is named by its step; two in a stretch of steps, by
    a range holding the first that is a small part of the series. What is kept per series to
    tell where is bounded whatever its length (buckets of steps, not points)."""
    from tbconvert.formats.base import Options
    from tbconvert.verify import fingerprints
    n = 100_000
    steps = np.arange(n) * 3 + 7
    values = np.random.default_rng(0).random(n).astype(np.float32)
    a = _long_run(tmp_path / "a", steps, values)
    sketch = fingerprints(a, fmt=None, options=Options(), report=Report(),
                          keep_walls=False).series["r"]["loss"].sketch
    assert sketch.rows.shape[0] <= 64
    one = values.copy()
    one[61_234] += 1
    b = _long_run(tmp_path / "b", steps, one)
    assert compare(a, b) == [f"r/loss: values differ at step {steps[61_234]}"]
    two = one.copy()
    two[61_240] += 1
    [diff] = compare(a, _long_run(tmp_path / "c", steps, two))
    low, high = (int(x) for x in diff.split(" at steps ")[1].split(" (")[0].split(" to "))
    assert diff.endswith("(first differing range)")
    assert low <= steps[61_234] <= high and high - low < 3 * n // 32, diff
    walls = 1000.0 + np.arange(n) * 0.5
    walls[99_999] += 1e-3
    assert compare(a, _long_run(tmp_path / "d", steps, values, walls)) == [
        f"r/loss: wall times differ at step {steps[99_999]}"]
    # a copy written again holds the same data
    assert main(["verify", str(a), str(_long_run(tmp_path / "e", steps, values))]) == 0
    assert "same data" in capsys.readouterr().out


def test_verify_names_the_step_of_a_blob_missing_in_an_export(tmp_path, capsys):
    """A TensorBoard.dev export's null blob path is a hole; event files have none, so the
    conversion writes an empty blob there (and says so), and verify tells where and which."""
    export = tmp_path / "export"
    shutil.copytree(FIXTURES / "tbdev_export", export)
    sequences = export / "experiment_9bFlIkpYt5HfavHYMD5hzQ" / "blob_sequences.json"
    sequences.chmod(0o644)
    text = sequences.read_text()
    assert text.count('"blobs/blob_UYIQbUDlH4jHgRJueyn8CA.bin"') == 1
    sequences.write_text(text.replace('"blobs/blob_UYIQbUDlH4jHgRJueyn8CA.bin"', "null"))
    assert main(["tbdev-export", str(export), "-o", str(tmp_path / "logs"), "-q"]) == 0
    capsys.readouterr()
    a = export / "experiment_9bFlIkpYt5HfavHYMD5hzQ"
    b = tmp_path / "logs" / "9bFlIkpYt5HfavHYMD5hzQ"
    assert main(["verify", str(a), str(b), "-v"]) == 10
    assert capsys.readouterr().out == (
        "train/samples/image: values differ at step 0 (a blob missing in A, empty in B)\n")


def test_verify_places_differences_at_any_int64_steps(tmp_path):
    """Steps out of order, negative and at both ends of int64, in an archive (which keeps
    points in the order written, none hidden)."""
    steps = np.array([2**62, -5, 7, -2**63, 2**63 - 1, 0, -2**40, 3, 2**33, 1, -1], np.int64)
    values = np.arange(len(steps), dtype=np.float64)
    a = _long_run(tmp_path / "a.parquet", steps, values)
    assert compare(a, _long_run(tmp_path / "same.parquet", steps, values)) == []
    for i in range(len(steps)):
        changed = values.copy()
        changed[i] = -1.5
        b = _long_run(tmp_path / f"b{i}.parquet", steps, changed)
        assert compare(a, b) == [f"r/loss: values differ at step {steps[i]}"]


def _fingerprint(chunks):
    from tbconvert.verify.fingerprint import Fingerprint, metadata_key
    fp = Fingerprint("scalars", "SCALAR", metadata=metadata_key(chunks[0]))
    for c in chunks:
        fp.add(c)
    return fp


def _differences(a, b):
    from tbconvert.verify import _compare_series
    return _compare_series("r", "t", _fingerprint(a), _fingerprint(b), 0.0, Report())


def test_scalar_class_tensors_compare_alike_however_they_are_chunked():
    """A tag of the scalar data class read as tensors (dtypes that change, or a point that is
    no single number): each point is hashed alike whatever chunk a reader puts it in."""
    from tbconvert.model import DataClass, Metadata, TensorSeries
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)

    def tensors(steps, points, codes):
        return TensorSeries(run="r", tag="t", metadata=md, steps=np.array(steps, np.int64),
                            wall_times=np.zeros(len(steps)), hidden=None,
                            dtypes=np.array(codes, np.int32), tensors=tuple(points))
    big = [np.array(2**53 + 1, np.int64), np.array(1.5, np.float32)]
    assert _differences([tensors([0, 1], big, [9, 1])],
                        [tensors([0], big[:1], [9]), tensors([1], big[1:], [1])]) == []
    mixed = [np.array(1.0, np.float32), np.array(2.0, np.float32), np.array([3.0, 4.0], np.float32)]
    assert _differences([tensors([0, 1, 2], mixed, [1] * 3)],
                        [tensors([0], mixed[:1], [1]), tensors([1, 2], mixed[1:], [1, 1])]) == []
    changed = mixed[:2] + [np.array([3.0, 5.0], np.float32)]
    assert _differences([tensors([0, 1, 2], mixed, [1] * 3)],
                        [tensors([0, 1, 2], changed, [1] * 3)]) == ["r/t: values differ at step 2"]


def test_values_are_not_placed_where_only_the_steps_differ():
    """Values are placed by their steps: with other steps, the first place they differ would
    be the steps' difference, told already."""
    from tbconvert.model import DataClass, Metadata, ScalarSeries
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)

    def scalars(steps, values):
        return ScalarSeries(run="r", tag="t", metadata=md, steps=np.array(steps, np.int64),
                            wall_times=np.zeros(len(steps)), hidden=None,
                            values=np.array(values, np.float32))
    assert _differences([scalars([5, 100], [1.0, 2.0])], [scalars([7, 100], [1.0, 3.0])]) == [
        "r/t: steps differ (ranges (5, 100) vs (7, 100)), first at step 5",
        "r/t: values differ"]


def test_digests_depend_on_the_order_of_points_not_on_their_chunks():
    """A series' digest row is the same however its points are cut into chunks and wherever
    the chunks lie among other series'; any point moved or changed changes it."""
    from tbconvert.model import DataClass, Metadata, ScalarSeries
    from tbconvert.verify.digest import Digests
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    steps = np.arange(10, dtype=np.int64) * 2

    def scalars(tag, at, values=None, walls=None, hidden=None):
        values = (steps * 0.5).astype(np.float32) if values is None else values
        walls = 1000.0 + steps if walls is None else walls
        return ScalarSeries(run="r", tag=tag, metadata=md, steps=steps[at],
                            wall_times=walls[at], values=values[at],
                            hidden=None if hidden is None else hidden[at])

    def digests(*chunks):
        d = Digests()
        for s in chunks:
            d.add(d.row("r", s.tag, s), s)
        d.flush()
        return d

    whole = digests(scalars("t", slice(None)))
    cut = digests(scalars("t", slice(0, 3)), scalars("u", slice(0, 5)),
                  scalars("t", slice(3, 4)), scalars("u", slice(5, 10)),
                  scalars("t", slice(4, 10)))
    assert whole.same(0, cut, cut.numbers["r"]["t"])
    assert whole.scalar_dtypes(0) == cut.scalar_dtypes(0) == [["float32", 10]]
    swapped = np.arange(10)
    swapped[[3, 4]] = [4, 3]
    values = (steps * 0.5).astype(np.float32)
    values[7] = np.nextafter(values[7], np.float32(1e9))
    walls = 1000.0 + steps
    walls[9] += 1e-9
    hidden = np.zeros(10, bool)
    hidden[2] = True
    for other in (scalars("t", swapped), scalars("t", slice(None), values=values),
                  scalars("t", slice(None), walls=walls),
                  scalars("t", slice(None), hidden=hidden), scalars("t", slice(0, 9))):
        assert not whole.same(0, digests(other), 0)


def test_series_read_again_are_told_as_those_kept(tmp_path, monkeypatch):
    """A source of more series than verify keeps fingerprints of is compared by digests, and
    the differing series are read again: the same differences and notes, in the same order,
    however few are read again at a time."""
    import dataclasses

    import tbconvert.verify as verify
    from tbconvert.api import open_writer
    logs = tmp_path / "logs"
    tbconvert.convert(FIXTURES / "torch_logdir", logs, to_format="tfevents")

    def changed(s):
        if s.tag == "losses":
            values = s.values.copy()
            values[-1] += 1
            return dataclasses.replace(s, values=values)
        if s.tag == "accuracy":     # (an archive keeps float64: a note, no difference)
            return dataclasses.replace(s, values=s.values.astype(np.float64))
        if s.tag == "loss_hi":      # (told by the digests alone)
            return s.take(np.arange(len(s) - 1))
        if s.tag == "lr":
            md = dataclasses.replace(s.metadata, display_name="learning rate")
            return dataclasses.replace(s, metadata=md)
        if s.data_class.name == "SCALAR" and len(s) > 2:
            walls = s.wall_times.copy()
            walls[1] += 1e-3
            return dataclasses.replace(s, wall_times=walls)
        return s
    data = tbconvert.read(logs, restarts="keep-all")
    other = tmp_path / "other.parquet"
    with open_writer(other) as w:
        for name, run in data.runs.items():
            w.write_run(run, [changed(s) for s in data.series[name].values()
                              if s.tag != "loss_lo"])

    def compared(**kw) -> tuple:
        report = Report()
        diffs = compare(logs, other, report=report, **kw)
        return diffs, [i.message for i in report.issues]
    kept = compared()
    tolerant = compared(wall_time_tolerance=1e-6)
    assert kept[0] and dtype_notes_of(kept[1]) and tolerant[0] != kept[0]
    assert "train/loss_hi: 50 points != 49 points (steps (0, 49) vs (0, 48))" in kept[0]
    monkeypatch.setattr(verify, "HELD", 0)
    monkeypatch.setattr(verify, "GROUP", 2)
    assert compared() == kept
    assert compared(wall_time_tolerance=1e-6) == tolerant


def dtype_notes_of(messages: list[str]) -> list[str]:
    return [m for m in messages if ": scalars are " in m]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                    reason="peak memory is read from /proc")
def test_verify_keeps_a_few_dozen_bytes_a_series(tmp_path):
    # A fingerprint of a few KB for each series of both sources: 868 MiB for 100,000 series.
    from tbconvert.api import open_writer
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    steps = np.arange(2, dtype=np.int64)

    def chunks():
        for i in range(40_000):
            tag = f"layer_{i // 100}/param_{i % 100}"
            yield ScalarSeries(run="train", tag=tag, steps=steps, wall_times=1.7e9 + steps,
                               hidden=None, values=(steps + i).astype(np.float32),
                               metadata=Metadata("scalars", b"", tag, "", DataClass.SCALAR))
    logs = tmp_path / "logs"
    with open_writer(logs, format="tfevents") as w:
        w.write_run(Run("train", 1.7e9), chunks())
    # (over what reading the source once takes: the event-file reader's own state per tag)
    over = peak_mib("verify", logs, logs) - peak_mib("info", logs)
    assert over <= 64, f"{over} MiB over reading the source"
