"""Every reader x every writer, enumerated from the format registry: a format joins the matrix
by registering.

Each cell starts from a fixture logdir converted into the reader's format and converts it to
the writer's format. A destination tbconvert can read back is converted once more to event
files and TensorBoard's view of them is compared, point for point, with TensorBoard's view of
the original logdir minus exactly what the reader's and the writer's formats cannot hold
(``format_matrix.LOSSES``, the README's table). For a destination that cannot be read back
(a table, a web page) the report must count exactly the points the table says it leaves out.
"""

from __future__ import annotations

import collections
import functools
import shutil
from pathlib import Path

import pytest
from format_matrix import (
    LOSSES,
    README_DESTINATIONS,
    expected_view,
    left_out,
    readme_rows,
    write_every_loss,
)
from helpers import FIXTURES, LOGDIRS, REPO, run_tbconvert, session_dir
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert import registry
from tbconvert.formats.base import has_reader, has_writer

READERS = [n for n in registry.names() if has_reader(registry.get(n))]
WRITERS = [n for n in registry.names() if has_writer(registry.get(n))]
# Destinations tbconvert reads back: checked through TensorBoard's view of them.
READ_BACK = [n for n in WRITERS if n in READERS]
SOURCES = LOGDIRS + ["tbdev_export"]
# The largest fixture's cells take the longest; the others cover every pair in the fast run.
SLOW_SOURCES = {"torch_logdir"}

_WORK = session_dir("tbconvert-matrix-", "TBCONVERT_TESTS_MATRIX")


@pytest.fixture(scope="module", autouse=True)
def _cleanup():
    yield
    shutil.rmtree(_WORK, ignore_errors=True)


def destination(where: Path, fmt: str) -> Path:
    """A destination named so that its format is told from the name where it can be."""
    suffixes = registry.suffixes(fmt)
    return where / f"out{suffixes[0] if suffixes else ''}"


def original(name: str) -> Path:
    if name == "tbdev_export":
        return next((FIXTURES / name).glob("experiment_*"))
    return FIXTURES / name


def _native(name: str) -> str:
    return "tbdev" if name == "tbdev_export" else "tfevents"


@functools.cache
def source(name: str, fmt: str) -> Path:
    """Fixture ``name`` in format ``fmt`` (its own files when it is in that format)."""
    if fmt == _native(name):
        return original(name)
    where = _WORK / "sources" / f"{name}-{fmt}"
    where.mkdir(parents=True)
    dst = destination(where, fmt)
    tbconvert.convert(original(name), dst, to_format=fmt)
    return dst


@functools.cache
def original_view(name: str) -> dict:
    """TensorBoard's view of fixture ``name`` (an export: of its event-file conversion, the
    form TensorBoard reads; ``test_tbdev`` checks that conversion against the export)."""
    if _native(name) == "tfevents":
        return tb_view(original(name))
    return tb_view(source(name, "tfevents"))


def source_view(name: str, fmt: str) -> dict:
    """What TensorBoard would show of the fixture once in format ``fmt``."""
    return expected_view(original_view(name), fmt)


def back_to_event_files(path: Path, fmt: str, where: Path) -> Path:
    if fmt == "tfevents":
        return path
    back = where / "back"
    tbconvert.convert(path, back, from_format=fmt, to_format="tfevents")
    return back


def _kinds(issues) -> collections.Counter:
    return collections.Counter(i.kind for i in issues)


def _cells():
    for name in SOURCES:
        for reader in READERS:
            if name == "tbdev_export" and reader != "tbdev":
                continue      # exported data reaches the other readers through the logdirs
            for writer in WRITERS:
                marks = [pytest.mark.slow] if name in SLOW_SOURCES else []
                yield pytest.param(reader, writer, name, id=f"{reader}-{writer}-{name}",
                                   marks=marks)


def test_every_registered_format_is_in_the_matrix():
    assert set(READERS) >= {"tfevents", "tbdev", "parquet", "hdf5"}
    assert set(WRITERS) >= set(READERS) | {"csv", "html"}
    assert set(LOSSES) == set(WRITERS), "every destination needs its row in the loss table"


@pytest.mark.parametrize("reader,writer,name", list(_cells()))
def test_conversion(reader, writer, name, tmp_path):
    if writer == "html":
        pytest.importorskip("plotly")
    src = source(name, reader)
    dst = destination(tmp_path, writer)
    report = tbconvert.convert(src, dst, from_format=reader, to_format=writer)
    read = tbconvert.read(src, format=reader, restarts="keep-all")
    read_kinds = _kinds(read.report.issues)
    written = _kinds(i for i in report.issues if i.lost) - read_kinds
    declared = {k for loss in LOSSES[writer] for k in loss.kinds}
    assert set(written) <= declared | set(read_kinds), \
        f"{reader} -> {writer}: reported kinds the loss table does not name: {written}"
    if writer in READ_BACK:
        back = back_to_event_files(dst, writer, tmp_path)
        want = expected_view(source_view(name, reader), writer)
        assert_same_view(tb_view(back), want)
    else:
        _check_left_out(report, read, writer)


def _check_left_out(report, read, writer):
    """The report counts, per run and tag, exactly what the loss table says is left out."""
    want: collections.Counter = collections.Counter()
    for run, tags in read.series.items():
        for tag, series in tags.items():
            for kind, n in left_out(series.visible(), writer).items():
                want[kind, run, tag] += n
    kinds = {k for loss in LOSSES[writer] if loss.points for k in loss.kinds}
    got: collections.Counter = collections.Counter()
    for issue in report.issues:
        if issue.kind in kinds:
            got[issue.kind, issue.run, issue.tag] += issue.count
    assert got == want


@pytest.mark.parametrize("reader,writer", [("hdf5", "parquet"), ("parquet", "csv"),
                                          ("tbdev", "hdf5"), ("parquet", "tfevents")])
def test_conversion_by_the_command(reader, writer, tmp_path):
    """A few cells as a user runs them, formats told from the names where they can be."""
    name = "tensorboardx_logdir"
    src = source(name, reader)
    dst = destination(tmp_path, writer)
    args = ["convert", src, dst, "-q"] + (["--to", writer] if not registry.suffixes(writer) else [])
    p = run_tbconvert(*args)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    if writer in READ_BACK:
        back = back_to_event_files(dst, writer, tmp_path)
        assert_same_view(tb_view(back), expected_view(source_view(name, reader), writer))
    else:
        api = tmp_path / f"api{registry.suffixes(writer)[0]}"
        tbconvert.convert(src, api)
        assert dst.read_bytes() == api.read_bytes()


def _readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def _label(fmt: str) -> str:
    return next(label for label, fmts in README_DESTINATIONS.items() if fmt in fmts)


def test_readme_table_names_the_writers_and_only_known_losses():
    """The README's table has a row for every destination, a destination that loses nothing
    says so, and each of its rows names a loss LOSSES holds."""
    rows = readme_rows(_readme())
    assert set(rows) == set(README_DESTINATIONS), sorted(rows)
    assert {fmt for fmts in README_DESTINATIONS.values() for fmt in fmts} == set(WRITERS)
    for fmt in WRITERS:
        text = rows[_label(fmt)]
        losses = [loss for loss in LOSSES[fmt] if loss.documented]
        if not losses:
            assert len(text) == 1 and text[0].startswith("nothing"), (fmt, text)
        for row in text:
            assert not losses or any(loss.readme in row for loss in losses), \
                f"README's {_label(fmt)} row names a loss LOSSES does not hold: {row}"


def _readme_cases():
    for fmt in WRITERS:
        for loss in LOSSES[fmt]:
            marks = [] if loss.documented else [pytest.mark.xfail(
                strict=True, reason="the README's table does not state this loss")]
            yield pytest.param(fmt, loss, id=f"{fmt}-{loss.readme[:40]}", marks=marks)


@pytest.mark.parametrize("fmt,loss", list(_readme_cases()))
def test_readme_states_each_loss(fmt, loss):
    if loss.elsewhere:
        assert loss.readme in " ".join(_readme().split())
    else:
        assert any(loss.readme in row for row in readme_rows(_readme())[_label(fmt)]), \
            f"README's {_label(fmt)} rows do not name {loss.readme!r}"


@pytest.mark.parametrize("writer", WRITERS)
def test_every_loss_in_the_table_is_reported_as_it_happens(writer, tmp_path):
    """A source with one of everything some destination cannot hold: converting it reports
    exactly the kinds the loss table names for the destination (what cost data, at least),
    and a destination read back shows TensorBoard the source minus exactly those losses."""
    if writer == "html":
        pytest.importorskip("plotly")
    src = tmp_path / "every.parquet"
    write_every_loss(src)
    (tmp_path / "out").mkdir()
    dst = destination(tmp_path / "out", writer)
    report = tbconvert.convert(src, dst, to_format=writer)
    declared = {k for loss in LOSSES[writer] for k in loss.kinds}
    got = set(_kinds(report.issues))
    assert declared <= got, f"{writer}: losses that happened were not reported: {declared - got}"
    assert set(_kinds(i for i in report.issues if i.lost)) <= declared
    if writer in READ_BACK:
        reference = tb_view(back_to_event_files(src, "parquet", tmp_path / "ref"))
        back = back_to_event_files(dst, writer, tmp_path)
        assert_same_view(tb_view(back), expected_view(reference, writer))
    else:
        _check_left_out(report, tbconvert.read(src, restarts="keep-all"), writer)
