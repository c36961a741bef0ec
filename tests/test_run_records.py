"""Run-level events (session logs, log messages) an archive holds in a form no event file
can: damaged payloads, unknown kinds. Each costs itself, reported, never the conversion."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from helpers import FIXTURES
from oracle import tb_view

import tbconvert
from tbconvert import api
from tbconvert.model import Run, RunRecord


def _unsealed_copy(src, dst, edit) -> None:
    """``src`` as a program other than tbconvert would write it (no seal), ``edit`` applied."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for k, v in f.attrs.items():
            g.attrs[k] = v
        for k in f:
            f.copy(k, g)
        edit(g)


def _resumed_archive(tmp_path):
    src = tmp_path / "src.h5"
    tbconvert.convert(FIXTURES / "torch_logdir", src, runs="^resumed$")
    with h5py.File(src, "r") as f:
        kinds = list(f["runs/0/records/kind"].asstr()[()])
    assert kinds, "the fixture's run holds run-level events"
    return src, kinds


def _garbled_payload(g):
    g["runs/0/records/payload"][0] = np.frombuffer(b"\xff" * 5, np.uint8)


def _unknown_kind(g):
    g["runs/0/records/kind"][0] = "bogus_kind"


@pytest.mark.parametrize("edit,why", [(_garbled_payload, "does not decode as a"),
                                      (_unknown_kind, "its kind 'bogus_kind' is none of")])
def test_a_damaged_run_record_of_an_archive_costs_itself(tmp_path, edit, why):
    src, kinds = _resumed_archive(tmp_path)
    bad = tmp_path / "bad.h5"
    _unsealed_copy(src, bad, edit)
    report = tbconvert.convert(bad, tmp_path / "back", to_format="tfevents")
    told = [i for i in report.issues if i.kind == "damaged_record"]
    assert len(told) == 1 and why in told[0].message and told[0].lost, report.summary()
    assert "resumed" in tb_view(tmp_path / "back")
    # nor does it reach another archive, to fail there later
    report = tbconvert.convert(bad, tmp_path / "again.parquet")
    assert [i.kind for i in report.issues if i.kind == "damaged_record"] == ["damaged_record"]
    loaded = tbconvert.read(tmp_path / "again.parquet")
    assert len(loaded.runs["resumed"].records) == len(kinds) - 1


def test_a_program_made_run_with_a_damaged_record_is_written_without_it(tmp_path):
    from tbconvert.report import Report
    report = Report()
    run = Run("r", 1.6e9, (RunRecord("log_message", 1, 1.6e9, b"\xff\xff"),
                           RunRecord("session_log", 2, 1.6e9 + 1, b"")))
    with api.open_writer(tmp_path / "out", format="tfevents", report=report) as w:
        w.write_run(run, iter(()))
    assert [i.kind for i in report.issues if i.kind == "damaged_record"] == ["damaged_record"]
    loaded = tbconvert.read(tmp_path / "out")
    assert [r.kind for r in loaded.runs["r"].records] == ["session_log"]


def test_a_series_under_the_tag_of_another_data_class_is_not_merged_into_it(tmp_path):
    """An edited archive whose image series took a scalar series' tag: TensorBoard's one
    series per tag would mix scalars and images; the later series is told, not merged."""
    src = tmp_path / "src.h5"
    tbconvert.convert(FIXTURES / "torch_logdir", src, runs="^train$",
                      tags="^(loss|samples/image)$")

    def same_tag(g):
        tags = list(g["runs/0/tags"].asstr()[()])
        image = tags.index("samples/image")
        del g["runs/0/tags"]
        g.create_dataset("runs/0/tags", data=np.array(["loss", "loss"], dtype=h5py.string_dtype()))
        g[f"runs/0/series/{image}"].attrs["tag"] = "loss"
    bad = tmp_path / "dup.h5"
    _unsealed_copy(src, bad, same_tag)
    report = tbconvert.convert(bad, tmp_path / "back", to_format="tfevents")
    [told] = [i for i in report.issues if i.kind == "damaged_series"]
    assert "blob_sequence points are under the tag of an earlier scalar series" in told.message
    assert told.count == 2 and told.tag == "loss"
    view = tb_view(tmp_path / "back")
    assert view["train"]["tags"]["loss"]["plugin_name"] == "scalars"
    assert len(view["train"]["tags"]["loss"]["points"]) == 50
