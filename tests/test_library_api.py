"""tbconvert.info and tbconvert.tbdev_export: the library functions behind `info` and
`tbdev-export`, which the commands only print."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert import verify
from tbconvert.cli import main
from tbconvert.errors import FormatError, UnsupportedError

EXPORT_ID = "9bFlIkpYt5HfavHYMD5hzQ"
EXPORT = FIXTURES / "tbdev_export" / f"experiment_{EXPORT_ID}"


def test_info_is_what_the_command_prints(capsys):
    found = tbconvert.info(FIXTURES / "torch_logdir", runs="^(train|resumed)$")
    assert main(["info", str(FIXTURES / "torch_logdir"), "--runs", "^(train|resumed)$",
                 "--json", "-j", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == found.to_dict()
    assert sorted(r.run for r in found.runs) == ["resumed", "train"]
    loss = found.runs[[r.run for r in found.runs].index("train")].tags["loss"]
    assert (loss.plugin, loss.data_class, loss.points, loss.step_range) == \
        ("scalars", "SCALAR", 50, (0, 49))
    assert found.series == sum(len(r.tags) for r in found.runs) > 1
    assert found.points == sum(s.points for r in found.runs for s in r.tags.values())


def test_info_counts_hidden_points_without_dropping_them():
    found = tbconvert.info(FIXTURES / "torch_logdir", runs="^resumed_purged$", tags="^loss$")
    loss = found.runs[0].tags["loss"]
    assert loss.hidden > 0 and loss.points > loss.hidden


def test_info_of_an_export_names_the_experiment():
    found = tbconvert.info(EXPORT)
    assert found.experiment["id"] == EXPORT_ID


def _root_with_a_pickled_experiment(tmp_path):
    root = tmp_path / "export"
    shutil.copytree(EXPORT, root / EXPORT.name)
    bad = root / f"experiment_{'B' * 22}"
    shutil.copytree(EXPORT, bad)
    npz = next((bad / "tensors").glob("*.npz"))
    np.savez(npz, np.array(["a"], dtype=object), np.array(["b"], dtype=object))
    return root


def test_tbdev_export_isolates_a_failing_experiment(tmp_path):
    root = _root_with_a_pickled_experiment(tmp_path)
    seen = []
    report = tbconvert.tbdev_export(root, tmp_path / "logs",
                                    on_failure=lambda name, exc: seen.append(name))
    assert report.root and report.experiments == 2
    assert report.outputs == [str(tmp_path / "logs" / EXPORT_ID)]
    assert [name for name, _ in report.failures] == ["B" * 22]
    assert isinstance(report.failures[0][1], UnsupportedError)
    assert seen == [f"experiment_{'B' * 22}"]
    assert verify.compare(EXPORT, tmp_path / "logs" / EXPORT_ID,
                                    wall_time_tolerance=1e-6) == []


def test_tbdev_export_that_writes_nothing_leaves_no_directory(tmp_path):
    root = _root_with_a_pickled_experiment(tmp_path)
    shutil.rmtree(root / EXPORT.name)
    report = tbconvert.tbdev_export(root, tmp_path / "logs")
    assert report.outputs == [] and len(report.failures) == 1
    assert not (tmp_path / "logs").exists()


def test_tbdev_export_of_one_experiment_raises(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError):
        tbconvert.tbdev_export(tmp_path / "empty", tmp_path / "logs")
    report = tbconvert.tbdev_export(EXPORT, tmp_path / "logs", tags="loss")
    assert not report.root and report.outputs == [str(tmp_path / "logs")]


def test_options_and_the_keywords_it_holds_are_not_both_taken(tmp_path):
    """A ready ``options`` with keywords that set what it sets: refused by name, not dropped
    without a word (``runs=`` would have converted every run)."""
    from tbconvert.errors import UsageError
    from tbconvert.formats.base import Options
    src = FIXTURES / "torch_logdir"
    calls = [
        lambda: tbconvert.convert(src, tmp_path / "a.csv", options=Options(), runs="^train$"),
        lambda: tbconvert.convert(src, tmp_path / "b.csv", options=Options(), force=True),
        lambda: tbconvert.info(src, options=Options(), tags="^loss$"),
        lambda: tbconvert.scalars_table(src, options=Options(), runs="^train$"),
        lambda: tbconvert.hparams_table(src, options=Options(), restarts="keep-all"),
        lambda: tbconvert.extract_media(src, tmp_path / "m", options=Options(), tags="x"),
    ]
    for call in calls:
        with pytest.raises(UsageError, match="pass either options= or the keyword arguments"):
            call()
    assert not list(tmp_path.iterdir())
    # either way alone is taken
    one = tbconvert.scalars_table(src, runs="^train$")
    import re
    assert tbconvert.scalars_table(src, options=Options(runs=re.compile("^train$"))).equals(one)
    assert set(one.column("run").to_pylist()) == {"train"}


def test_arguments_of_the_wrong_type_are_usage_errors(tmp_path):
    from tbconvert.errors import UsageError
    src = FIXTURES / "torch_logdir"
    with pytest.raises(UsageError, match="a format is named by a string"):
        tbconvert.read(src, format=5)
    with pytest.raises(UsageError, match="storage_options takes a dict"):
        tbconvert.convert(src, tmp_path / "a.csv", storage_options="anon=true")
    for every in ("5", None, True, -1):
        with pytest.raises(UsageError, match="the pause between sync rounds"):
            tbconvert.sync_watch(src, tmp_path / "d", every, rounds=1)
    with pytest.raises(UsageError, match="the rounds to run must be 1 or more"):
        tbconvert.sync_watch(src, tmp_path / "d", 0, rounds=-1)
    assert not list(tmp_path.iterdir())


def test_table_functions_take_the_source_format(tmp_path):
    from tbconvert.errors import FormatError
    one = next((FIXTURES / "torch_logdir" / "train").glob("*tfevents*"))
    shutil.copy(one, tmp_path / "run.bin")      # a name that tells no format
    with pytest.raises(FormatError, match="cannot tell the format"):
        tbconvert.scalars(tmp_path / "run.bin")
    (tmp_path / "named" / "train").mkdir(parents=True)
    shutil.copy(one, tmp_path / "named" / "train" / one.name)
    want = tbconvert.scalars_table(tmp_path / "named")
    got = tbconvert.scalars_table(tmp_path / "run.bin", format="tfevents")
    assert got.drop_columns(["run"]).to_pylist() == want.drop_columns(["run"]).to_pylist()
    assert len(tbconvert.scalars(tmp_path / "run.bin", from_format="tfevents")) == want.num_rows
    assert tbconvert.hparams_table(tmp_path / "run.bin", format="tfevents").num_rows == 0


def test_extract_media_takes_the_reading_keywords(tmp_path):
    src = FIXTURES / "torch_logdir"
    one = tbconvert.extract_media(src, tmp_path / "a", tags="samples/image", jobs=1,
                                  ignore_checksum=False, allow_pickle=False)
    assert one.files > 0
    with pytest.raises(TypeError, match="ignore_checksums"):
        tbconvert.extract_media(src, tmp_path / "b", ignore_checksums=True)
    parquet = tmp_path / "a.parquet"
    tbconvert.convert(src, parquet)
    shutil.copy(parquet, tmp_path / "archive.bin")
    again = tbconvert.extract_media(tmp_path / "archive.bin", tmp_path / "c",
                                    tags="samples/image", format="parquet")
    assert again.files == one.files
