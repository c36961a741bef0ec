"""hparams tables of logdirs holding several experiments side by side."""

from __future__ import annotations

import csv
import math
import shutil

import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.cli import main

TORCH_TRIAL = FIXTURES / "torch_logdir" / "train" / "1795299212.1548328"
TBX_TRIAL = FIXTURES / "tensorboardx_logdir" / "run_a" / "1795299215.1055038"


@pytest.fixture
def two_experiments(tmp_path):
    """A PyTorch ``add_hparams`` trial and a tensorboardX one in one logdir (each sub-run
    writes its own ``_hparams_/experiment``)."""
    logs = tmp_path / "logs"
    shutil.copytree(TORCH_TRIAL, logs / "exp_torch" / TORCH_TRIAL.name)
    shutil.copytree(TBX_TRIAL, logs / "hp_tbx" / TBX_TRIAL.name)
    return logs


def _metric_columns(table):
    return [c for c in table.column_names if c.startswith(("hparam/", "hp/"))]


def test_each_trial_gets_its_own_experiments_metrics(two_experiments):
    table = tbconvert.hparams_table(two_experiments).to_pylist()
    rows = {r["run"].split("/")[0]: r for r in table}
    assert set(rows) == {"exp_torch", "hp_tbx"}
    assert math.isfinite(rows["hp_tbx"]["hp/final_loss"])
    assert math.isfinite(rows["exp_torch"]["hparam/accuracy"])
    assert math.isfinite(rows["exp_torch"]["hparam/loss"])


def test_selected_trials_get_their_experiments_metrics(two_experiments):
    table = tbconvert.hparams_table(two_experiments, runs="hp_tbx")
    assert table.num_rows == 1
    assert _metric_columns(table) == ["hp/final_loss"]
    assert math.isfinite(table.column("hp/final_loss")[0].as_py())
    table = tbconvert.hparams_table(two_experiments, runs="exp_torch")
    assert _metric_columns(table) == ["hparam/accuracy", "hparam/loss"]


def test_cli_hparams_runs_selects_the_tbx_experiment(two_experiments, tmp_path, capsys):
    out = tmp_path / "trials.csv"
    assert main(["hparams", str(two_experiments), "--runs", "hp_tbx", "-o", str(out)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and float(rows[0]["hp/final_loss"]) == float(rows[0]["hp/final_loss"])
    assert "hparam/accuracy" not in rows[0]


def test_one_experiment_for_all_trials_still_governs_them():
    """TensorFlow: the experiment sits in a parent run above the trials."""
    table = tbconvert.hparams_table(FIXTURES / "tf2_logdir", runs="trial_1")
    assert table.column_names[0] == "run" and table.num_rows == 1
    assert {"accuracy", "validation/loss"} <= set(table.column_names)


@pytest.mark.parametrize("tags, kept", [("^validation/loss$", ["validation/loss"]),
                                        ("^loss$", ["validation/loss"]),
                                        ("^accuracy$", ["accuracy"])])
def test_tags_choose_metric_columns_by_tag_or_by_the_columns_name(tags, kept):
    everything = tbconvert.hparams_table(FIXTURES / "tf2_logdir")
    report = tbconvert.Report()
    table = tbconvert.hparams_table(FIXTURES / "tf2_logdir", tags=tags, report=report)
    metrics = {"accuracy", "validation/loss"}
    assert [c for c in table.column_names if c in metrics] == kept
    assert table.num_rows == everything.num_rows
    assert "selection_matched_nothing" not in {i.kind for i in report.issues}
