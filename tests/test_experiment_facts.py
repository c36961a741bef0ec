"""Experiment facts beside the data (a logdir's ``tbconvert-experiment.json``, an export's
``metadata.json``) that are odd, damaged or hostile: whatever is read can be written to every
archive and read back, and nothing odd in them costs the runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES, run_tbconvert

import tbconvert
from tbconvert.incremental.lock import LOCK_FILE
from tbconvert.report import Report
from tbconvert.verify import compare

EXPORT = FIXTURES / "tbdev_export" / "experiment_9bFlIkpYt5HfavHYMD5hzQ"
SIDECAR = "tbconvert-experiment.json"


def _nested(depth: int):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


def _logdir(tmp_path: Path, facts: str) -> Path:
    logdir = tmp_path / "logs"
    shutil.copytree(FIXTURES / "tensorboardx_logdir", logdir)
    (logdir / SIDECAR).write_text(facts, encoding="utf-8")
    return logdir


@pytest.mark.parametrize("suffix", [".parquet", ".h5"])
def test_deep_extras_are_left_out_so_the_archive_reads_back(tmp_path, suffix):
    export = tmp_path / "exp"
    shutil.copytree(EXPORT, export)
    meta = json.loads((export / "metadata.json").read_text())
    meta["deep"], meta["shallow"] = _nested(62), _nested(3)
    (export / "metadata.json").write_text(json.dumps(meta))
    out = tmp_path / f"out{suffix}"
    report = tbconvert.convert(export, out)
    assert [i.kind for i in report.lost] == ["bad_metadata"]
    assert "'deep' is nested more than 56 levels deep" in report.lost[0].message
    back = tbconvert.read(out).experiment
    assert back.name == meta["name"] and back.extra == {"shallow": _nested(3)}
    assert compare(export, out) == []


def test_a_sidecar_nested_too_deeply_is_ignored_with_a_warning(tmp_path):
    logdir = _logdir(tmp_path, "[" * 100_000 + "]" * 100_000)
    proc = run_tbconvert("convert", logdir, tmp_path / "o.parquet")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "nested too deeply" in proc.stderr
    assert tbconvert.read(tmp_path / "o.parquet").experiment.is_empty()


def test_odd_sidecar_text_is_kept_as_text_every_archive_can_hold(tmp_path):
    logdir = _logdir(tmp_path, '{"name": "exp \\ud800", "description": {"a": 1}, '
                               '"create_time": null, "note": "\\udcff"}')
    for out in (tmp_path / "o.parquet", tmp_path / "o.h5", tmp_path / "site"):
        proc = run_tbconvert("convert", logdir, out, *(["--to", "html"] if out.name == "site"
                                                        else []))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    exp = tbconvert.read(tmp_path / "o.parquet").experiment
    assert (exp.name, exp.description, exp.create_time) == ("exp %ED%A0%80", '{"a": 1}', "")
    assert exp.extra == {"note": "%FF"}
    report = tbconvert.convert(logdir, tmp_path / "again.h5")
    assert {i.kind for i in report.issues} >= {"text_escaped", "bad_sidecar"}
    assert not report.lost


def test_a_run_named_like_the_facts_file_gets_a_directory_of_its_own(tmp_path):
    export = tmp_path / "exp"
    shutil.copytree(EXPORT, export)
    for name in ("scalars.json", "tensors.json", "blob_sequences.json"):
        lines = (export / name).read_text().splitlines()
        (export / name).write_text("\n".join(
            line.replace('"run": "train"', f'"run": "{SIDECAR}"') for line in lines) + "\n")
    out = tmp_path / "logs"
    proc = run_tbconvert("tbdev-export", export, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / SIDECAR).is_file() and (out / f"{SIDECAR}~2").is_dir()
    assert f"run '{SIDECAR}' written as directory '{SIDECAR}~2'" in proc.stderr
    assert json.loads((out / SIDECAR).read_text())["name"] == "torch demo run"
    before, after = tbconvert.read(export), tbconvert.read(out)
    assert sorted(after.series) == sorted(n if n != SIDECAR else f"{SIDECAR}~2"
                                          for n in before.series)
    assert sorted(after.series[f"{SIDECAR}~2"]) == sorted(before.series[SIDECAR])


@pytest.mark.parametrize("name", ["_tbconvert.json", LOCK_FILE])
def test_a_dataset_file_nested_too_deeply_is_one_line(tmp_path, name):
    logdir, ds = FIXTURES / "tensorboardx_logdir", tmp_path / "ds"
    assert run_tbconvert("sync", logdir, ds).returncode == 0
    (ds / name).write_text("[" * 100_000 + "]" * 100_000)
    proc = run_tbconvert("sync", logdir, ds)
    assert "Traceback" not in proc.stderr, proc.stderr
    if name == LOCK_FILE:       # a lock being written, as far as anyone can tell
        assert proc.returncode == 2 and "another sync is running" in proc.stderr
    else:
        assert proc.returncode == 4 and "nested too deeply" in proc.stderr


def test_hparams_names_that_meet_the_renamed_columns_keep_their_values(tmp_path):
    from tensorboard.plugins.hparams import summary_v2 as hp
    from test_sync import Events
    ev = Events(tmp_path / "logs" / "trial" / "events.out.tfevents.1.host")
    ev.write(_event(hp.hparams_pb({"status": "mine", "status (hparam)": 42.0, "lr": 0.1,
                                   "end_time": 7.0}, start_time_secs=1795299212)))
    out = tmp_path / "t.csv"
    proc = run_tbconvert("hparams", tmp_path / "logs", "-o", out, "--strict")
    assert proc.returncode == 0, proc.stderr
    header, row = out.read_text().splitlines()
    cells = dict(zip(header.split(","), row.split(","), strict=True))
    # the documented columns keep their names and meaning; the hparams are renamed
    assert cells["status"] == "unknown" and cells["start_time"] == "1795299212.0"
    assert cells["status (hparam 2)"] == "mine" and cells["status (hparam)"] == "42.0"
    assert cells["end_time (hparam)"] == "7.0" and cells["end_time"] == ""
    assert "column_renamed" in proc.stderr or "clashes with another column" in proc.stderr


def test_hparams_tags_choose_metric_columns_and_say_so(tmp_path):
    src = FIXTURES / "tf2_logdir"
    proc = run_tbconvert("hparams", src, "-o", "-", "--tags", "zzz")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3, proc
    assert "--tags 'zzz' matched none of the 2 metric tag(s) of the trials; the table has no " \
           "metric columns" in proc.stderr
    assert "holds no data" not in proc.stderr


@pytest.mark.parametrize("restarts", ["visible", "keep-all"])
def test_hparams_metrics_are_the_last_point_tensorboard_shows(tmp_path, restarts):
    from tensorboard.plugins.hparams import summary_v2 as hp
    from test_sync import Events, scalar, session_start
    ev = Events(tmp_path / "logs" / "trial" / "events.out.tfevents.1.host")
    ev.write(_event(hp.hparams_pb({"lr": 0.1}, start_time_secs=1795299212)))
    ev.write(session_start(0))
    ev.write_many(scalar(s, tags=("acc",)) for s in range(10))
    ev.write(session_start(5))      # hides steps 5..9; acc is not logged again
    report = Report()
    table = tbconvert.hparams(tmp_path / "logs", restarts=restarts, report=report)
    notes = [i for i in report.issues if i.kind == "metric_from_hidden_point"]
    if restarts == "visible":
        assert table["acc"].tolist() == [2.0] and not notes   # step 4's, as TensorBoard shows
    else:   # the last point read, hidden: said
        assert table["acc"].tolist() == [4.5] and [(i.run, i.tag) for i in notes] == \
            [("trial", "acc")]


def _event(summary):
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event(wall_time=1795299212.0, step=0, summary=summary)


def test_a_renamed_metric_never_takes_a_later_metrics_name(tmp_path):
    from tensorboard.plugins.hparams import summary_v2 as hp
    from test_sync import Events, scalar
    ev = Events(tmp_path / "logs" / "trial" / "events.out.tfevents.1.host")
    ev.write(_event(hp.hparams_pb({"loss": 0.5}, start_time_secs=1795299212)))
    ev.write(scalar(0, tags=("loss", "loss (metric)")))     # 0.0 and 1.0
    table = tbconvert.hparams(tmp_path / "logs")
    row = table.to_dict("records")[0]
    assert row["loss"] == 0.5 and row["loss (metric)"] == 1.0 and row["loss (metric 2)"] == 0.0


def test_a_sync_forgets_the_facts_of_a_removed_sidecar(tmp_path):
    # Nothing else changed: the sync that finds no new byte must still see the facts go.
    logdir = _logdir(tmp_path, json.dumps({"name": "B", "description": "old facts"}))
    ds = tmp_path / "ds"
    tbconvert.sync(logdir, ds)
    assert tbconvert.read(ds).experiment.name == "B"
    (logdir / SIDECAR).unlink()
    tbconvert.sync(logdir, ds)
    assert tbconvert.read(ds).experiment.is_empty()
    tbconvert.convert(logdir, tmp_path / "full", to_format="parquet")
    marker = json.loads((ds / "_tbconvert.json").read_text())
    assert marker["experiment"] == json.loads((tmp_path / "full" / "_tbconvert.json")
                                              .read_text())["experiment"]


def test_the_facts_of_an_exported_experiment_are_kept_from_the_logdir_above_it(tmp_path):
    """``tbdev-export -o logs/`` puts them in ``logs/<id>/``: reading ``logs/`` keeps them,
    as reading ``logs/<id>/`` does."""
    logs = tmp_path / "logs"
    tbconvert.tbdev_export(FIXTURES / "tbdev_export", logs)
    report = tbconvert.convert(logs, tmp_path / "a.parquet")
    assert not [i for i in report.issues if i.kind == "experiment_facts_not_kept"]
    exp = tbconvert.read(tmp_path / "a.parquet").experiment
    assert exp.name == "torch demo run" and exp.experiment_id == "9bFlIkpYt5HfavHYMD5hzQ"
    assert compare(logs, tmp_path / "a.parquet", plugin_files=False) == []


def test_the_facts_of_several_experiments_read_as_one_are_reported_not_kept(tmp_path):
    logs = tmp_path / "logs"
    tbconvert.tbdev_export(FIXTURES / "tbdev_export", logs)
    shutil.copytree(logs / "9bFlIkpYt5HfavHYMD5hzQ", logs / "another")
    report = tbconvert.convert(logs, tmp_path / "a.parquet")
    lost = [i for i in report.issues if i.kind == "experiment_facts_not_kept"]
    assert len(lost) == 1 and "9bFlIkpYt5HfavHYMD5hzQ, another" in lost[0].message
    assert lost[0].lost
    assert tbconvert.read(tmp_path / "a.parquet").experiment.name == ""
