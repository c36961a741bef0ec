"""Text summaries whose tensor is not a string: numbers logged under the text plugin are their
text in ``text()``, ``media`` and the web view alike, a tensor with no text is reported and
skipped, a few bytes never become gigabytes, and archives keep every such point as it is."""

from __future__ import annotations

import csv
import json
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from helpers import run_tbconvert

import tbconvert
from tbconvert.formats.tfevents import records
from tbconvert.report import Report

WALL0 = 1_700_000_000.0
# (step, dtype, shape, typed values) of the tag "note": strings and numbers mixed in one tag
NOTE = [
    (0, "DT_STRING", [], {"string_val": [b"hello"]}),
    (1, "DT_INT64", [], {"int64_val": [5]}),
    (2, "DT_INT64", [], {"int64_val": [-1]}),
    (3, "DT_FLOAT", [2], {"float_val": [0.1, 2.5]}),
    (4, "DT_INT64", [], {"int64_val": [2 ** 40]}),
    (5, "DT_BOOL", [], {"bool_val": [True]}),
    (6, "DT_INT64", [], {"int64_val": [300_000_000]}),
    (7, "DT_DOUBLE", [2, 2], {"double_val": [1e-05, -0.0, float("inf"), 1e16]}),
    (8, "DT_UINT64", [], {"uint64_val": [2 ** 64 - 1]}),
    (9, "DT_HALF", [], {"half_val": [0x2E66]}),             # float16 0.1
    (10, "DT_STRING", [2], {"string_val": [b"a", b"b"]}),
]
# (step, index, dims, text) of every row "note" gives
NOTE_ROWS = [
    (0, 0, "", "hello"), (1, 0, "", "5"), (2, 0, "", "-1"), (3, 0, "2", "0.1"),
    (3, 1, "2", "2.5"), (4, 0, "", "1099511627776"), (5, 0, "", "True"), (6, 0, "", "300000000"),
    (7, 0, "2x2", "1e-05"), (7, 1, "2x2", "-0.0"), (7, 2, "2x2", "inf"), (7, 3, "2x2", "1e+16"),
    (8, 0, "", "18446744073709551615"), (9, 0, "", "0.1"), (10, 0, "2", "a"), (10, 1, "2", "b"),
]
# Points with no text, in the tag "odd": a variant tensor (kept as raw bytes) and one bool
# filling a million cells from a few bytes; step 2 is text, so the tag is still listed.
FILLED = 1 << 20
ODD = [
    (0, "DT_VARIANT", [], {}),
    (1, "DT_BOOL", [FILLED], {"bool_val": [True]}),
    (2, "DT_INT32", [], {"int_val": [7]}),
]


def _event(step: int, tag: str, dtype: str, shape: list, values: dict):
    from tensorboard.compat.proto import (
        event_pb2,
        summary_pb2,
        tensor_pb2,
        tensor_shape_pb2,
        types_pb2,
    )
    tensor = tensor_pb2.TensorProto(
        dtype=getattr(types_pb2, dtype),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=n) for n in shape]),
        **values)
    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    return event_pb2.Event(wall_time=WALL0 + step, step=step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, metadata=metadata, tensor=tensor)]))


def write_run(logdir: Path, tags: dict[str, list]) -> Path:
    from tensorboard.compat.proto import event_pb2
    run = logdir / "run1"
    run.mkdir(parents=True)
    events = [event_pb2.Event(wall_time=WALL0, file_version="brain.Event:2")]
    for tag, points in tags.items():
        events += [_event(step, tag, *rest) for step, *rest in points]
    (run / "events.out.tfevents.1700000000.host").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in events))
    return logdir


@pytest.fixture
def logdir(tmp_path) -> Path:
    return write_run(tmp_path / "logs", {"note": NOTE, "odd": ODD})


def _rows(table, tag: str) -> list[tuple]:
    t = table[table.tag == tag]
    return list(zip(t.step.tolist(), t["index"].tolist(), t.dims.tolist(), t.text.tolist(),
                    strict=True))


def _no_text_issues(report: Report, kind: str) -> list:
    return [i for i in report.issues if i.kind == kind]


# ------------------------------------------------------------------ tbconvert.text()

def test_numbers_logged_as_text_are_their_text(logdir):
    report = Report()
    table = tbconvert.text(logdir, report=report)
    assert _rows(table, "note") == NOTE_ROWS
    assert _rows(table, "odd") == [(2, 0, "", "7")]
    assert not _no_text_issues(report, "text_not_utf8")
    # the numbers are text, so nothing about "note" is reported
    assert not [i for i in report.issues if i.tag == "note"]


def test_points_without_text_are_reported_and_skipped(logdir):
    report = Report()
    tbconvert.text_table(logdir, report=report)
    (issue,) = _no_text_issues(report, "unsupported_series")
    assert (issue.run, issue.tag, issue.count, issue.lost) == ("run1", "odd", 2, True)
    assert "1 point is a tensor kept as raw bytes" in issue.message
    assert f"1 point is one value filling {FILLED} cells" in issue.message
    assert issue.message.endswith("they are not in the text table")
    assert issue in report.lost


def test_a_few_bytes_never_become_gigabytes(tmp_path):
    logdir = write_run(tmp_path / "logs", {
        "big": [(0, "DT_INT64", [], {"int64_val": [300_000_000]}),
                (1, "DT_INT64", [], {"int64_val": [2 ** 62]})],
        "filled": [(0, "DT_INT8", [FILLED], {"int_val": [1]})]})
    assert sum(f.stat().st_size for f in logdir.rglob("*tfevents*")) < 400
    tracemalloc.start()
    try:
        table = tbconvert.text(logdir)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert table.text.tolist() == ["300000000", str(2 ** 62)]
    # the reader's own million-cell fill is a few MB; its rows would be a hundred times that
    assert peak < 32 << 20, peak


# ------------------------------------------------------------------ tbconvert media

def test_media_writes_each_number_as_its_text(logdir, tmp_path):
    out = tmp_path / "media"
    report = tbconvert.extract_media(logdir, out)
    note = {p.name: p.read_bytes() for p in (out / "run1" / "note").iterdir()}
    assert note == {f"{step}_{index}.txt": text.encode() for step, index, _dims, text in NOTE_ROWS}
    assert sorted(p.name for p in (out / "run1" / "odd").iterdir()) == ["2_0.txt"]
    (issue,) = _no_text_issues(report, "unsupported_series")
    assert (issue.tag, issue.count) == ("odd", 2)
    assert issue.message.endswith("no file was written for them")


# ------------------------------------------------------------------ convert --to html

def _site_text(site: Path) -> dict[str, tuple[list, list]]:
    """tag -> (the CSV's rows, the rendered HTML of each point) of the site's text series."""
    text = (site / "data" / "manifest.js").read_text("ascii")
    manifest = json.loads(re.fullmatch(r"tbData\.manifest\((.*)\);\n", text, re.S).group(1))
    out = {}
    for entry in manifest["text"]:
        (series,) = entry["series"]
        with open(site / series["csv"], newline="", encoding="utf-8") as fh:
            rows = [(int(r["step"]), int(r["index"]), r["dims"], r["text"])
                    for r in csv.DictReader(fh)]
        data = (site / "data" / f"{series['key']}.js").read_text("ascii")
        meta = json.loads(re.fullmatch(r'tbData\.add\("\w+",(.*),null\);\n', data, re.S).group(1))
        out[entry["tag"]] = rows, meta["html"]
    return out


def test_web_view_shows_numbers_as_text_and_reports_the_rest(logdir, tmp_path):
    pytest.importorskip("plotly")
    site = tmp_path / "site"
    done = run_tbconvert("convert", logdir, site, "--to", "html", "-v")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    text = _site_text(site)
    rows, html = text["note"]
    assert rows == NOTE_ROWS
    assert html[1:3] == ["<p>5</p>\n", "<p>-1</p>\n"]
    assert "<td><p>0.1</p>\n</td>" in html[3] and "<td><p>2.5</p>\n</td>" in html[3]
    assert html[4:7] == ["<p>1099511627776</p>\n", "<p>True</p>\n", "<p>300000000</p>\n"]
    assert text["odd"] == ([(2, 0, "", "7")], ["<p>7</p>\n"])
    assert ("run1/odd: 1 point is a tensor kept as raw bytes" in done.stderr
            and "not shown by the web view; kept in experiment.parquet" in done.stderr)
    assert sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) < 16 << 20
    # every point, the ones the page cannot show too, is in the site's archive
    assert _points(site / "experiment.parquet") == _points(logdir)


# ------------------------------------------------------------------ archives keep them

def _points(path) -> dict:
    """(run, tag) -> each point's step, dtype code and exact content."""
    out = {}
    for run, tag, series in tbconvert.read(path):
        out[(run, tag)] = [
            (int(step), int(code), np.asarray(t).dtype.str, np.shape(t),
             tuple(np.asarray(t).reshape(-1).tolist()) if np.asarray(t).dtype == object
             else np.asarray(t).tobytes())
            for step, code, t in zip(series.steps, series.dtypes, series.tensors, strict=True)]
    return out


@pytest.mark.parametrize("name", ["a.parquet", "a.h5", "events"])
def test_archives_keep_text_points_that_are_not_strings_exactly(logdir, tmp_path, name):
    if name == "a.h5":
        pytest.importorskip("h5py")
    out = tmp_path / name
    tbconvert.convert(logdir, out, **({"to_format": "tfevents"} if name == "events" else {}))
    source = _points(logdir)
    assert len(source[("run1", "note")]) == len(NOTE) and len(source[("run1", "odd")]) == 3
    assert _points(out) == source


def test_media_of_nothing_but_points_without_text_says_so(tmp_path):
    src = write_run(tmp_path / "logs", {"odd": ODD[:2]})
    proc = run_tbconvert("media", src, "-o", tmp_path / "m")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "holds no images, audio or text that can be written; no files were written" in \
        proc.stderr, proc.stderr
