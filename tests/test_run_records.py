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
