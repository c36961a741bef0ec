"""Files that TensorBoard's plugins read beside the event files (a run's ``plugins/NAME/``,
the projector's config and the files it names) are not event data: only event files carry
them (tests/test_plugin_copy.py), and every command that reads such a logdir into anything
else says so instead of leaving them out in silence."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import FIXTURES, run_tbconvert

import tbconvert


def _logdir(tmp_path: Path) -> Path:
    """The PyTorch fixture (whose ``add_embedding`` wrote a projector config naming two TSV
    files) with a profiler session of two traces in its run."""
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir", logs)
    session = logs / "train" / "plugins" / "profile" / "2026_11_29_12_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(b"\x00" * 16)
    (session / "host.trace.json.gz").write_bytes(b"\x1f\x8b")
    return logs


def _notes(report) -> list[str]:
    return sorted(i.message for i in report.issues if i.kind == "plugin_files_not_read")


def test_a_conversion_names_the_plugin_files_it_leaves_out(tmp_path):
    logs = _logdir(tmp_path)
    report = tbconvert.convert(logs, tmp_path / "a.parquet")
    notes = _notes(report)
    assert len(notes) == 2, notes
    assert notes[0].startswith(f"{logs / 'train' / 'plugins' / 'profile'}: 2 file(s) of "
                               "TensorBoard's profile plugin (not event data) were not read")
    assert notes[1].startswith(f"{logs / 'train' / 'projector_config.pbtxt'}: the projector's "
                               "configuration and the 2 file(s) it names (not event data) were "
                               "not read")
    # each names its run, where it is one
    assert {i.run for i in report.issues if i.kind == "plugin_files_not_read"} == {"train"}
    # a note: nothing the output could hold was lost
    assert not [i for i in report.issues if i.kind == "plugin_files_not_read" and i.lost]
    assert _notes(tbconvert.info(logs).report) == notes


def test_a_logdir_without_plugin_files_gets_no_note(tmp_path):
    report = tbconvert.convert(FIXTURES / "tf2_logdir", tmp_path / "a.parquet")
    assert not _notes(report)


def test_the_projector_config_is_noted_even_when_what_it_names_is_gone(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir", logs)
    shutil.rmtree(logs / "train" / "00000")
    notes = _notes(tbconvert.info(logs).report)
    assert len(notes) == 1
    assert ": the projector's configuration (not event data) was not read" in notes[0]


def test_the_command_tells_it_and_strict_is_not_failed_by_it(tmp_path):
    logs = _logdir(tmp_path)
    proc = run_tbconvert("convert", logs, tmp_path / "a.parquet", "--strict")
    assert proc.returncode == 0, proc.stderr
    assert "note: files that TensorBoard's plugins read beside event files were not read" \
        in proc.stderr
    assert "plugins/profile: 2 file(s) of TensorBoard's profile plugin" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sync_notes_them_when_it_reads_the_logdir_whole_not_every_time(tmp_path):
    logs = _logdir(tmp_path)
    first = tbconvert.sync(logs, tmp_path / "dataset")
    assert len(_notes(first)) == 2
    again = tbconvert.sync(logs, tmp_path / "dataset")
    assert not _notes(again)


def test_tables_take_what_they_take_without_the_note(tmp_path):
    from tbconvert.report import Report
    logs = _logdir(tmp_path)
    for build in (tbconvert.scalars, tbconvert.histograms_table, tbconvert.hparams_table):
        report = Report()
        build(logs, report=report)
        assert not _notes(report), build


def test_only_the_runs_asked_for_are_told_of(tmp_path):
    logs = _logdir(tmp_path)
    assert not _notes(tbconvert.info(logs, runs="^multi$").report)
    assert len(_notes(tbconvert.info(logs, runs="^train$").report)) == 2


def test_a_fifo_named_as_the_projector_config_is_not_waited_on(tmp_path):
    import os

    import pytest
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "multi", logs / "multi")
    os.mkfifo(logs / "multi" / "projector_config.pbtxt")
    notes = _notes(tbconvert.info(logs).report)
    assert notes == [f"{logs / 'multi' / 'projector_config.pbtxt'}: the projector's "
                     "configuration and the files it names (not event data) were not read; only "
                     "an event-file output carries them (copy them beside any other output to "
                     "keep them)"]


def test_the_pytorch_profilers_traces_beside_the_event_files_are_noted(tmp_path):
    """``torch.profiler.tensorboard_trace_handler`` writes ``<worker>.<time>.pt.trace.json``
    (or ``.json.gz``) into the run's directory, beside its event files."""
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "torch_logdir" / "multi", logs / "multi")
    (logs / "multi" / "host_1.1700000000000.pt.trace.json").write_text("{}")
    (logs / "multi" / "host_1.1700000001000.pt.trace.json.gz").write_bytes(b"\x1f\x8b")
    (logs / "multi" / "notes.json").write_text("{}")      # no plugin's: not told of
    assert _notes(tbconvert.info(logs).report) == [
        f"{logs / 'multi' / '*.pt.trace.json'}: 2 trace(s) of the PyTorch profiler (which its "
        "TensorBoard plugin shows; not event data) were not read; only an event-file output "
        "carries them (copy them beside any other output to keep them)"]
    assert not _notes(tbconvert.info(logs, runs="^train$").report)


def test_pointing_at_a_plugins_files_says_what_they_are(tmp_path):
    logs = _logdir(tmp_path)
    for where in (logs / "train" / "plugins" / "profile",
                  logs / "train" / "projector_config.pbtxt"):
        proc = run_tbconvert("info", where)
        assert proc.returncode == 3, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"tbconvert: error: {where}: a "), lines
        assert "TensorBoard's" in lines[0] and "name the logdir that holds the runs" in lines[0]


def test_a_table_keeps_the_notes_a_shared_report_held_before(tmp_path):
    from tbconvert.report import Report
    logs = _logdir(tmp_path)
    report = Report()
    tbconvert.convert(logs, tmp_path / "a.parquet", report=report)
    tbconvert.scalars(logs, report=report)
    assert len(_notes(report)) == 2
