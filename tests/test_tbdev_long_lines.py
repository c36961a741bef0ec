"""A series of millions of points is one ``scalars.json`` line: read and written in pieces.

The reader streams a long line through small blocks into a temporary file and the writer
spills the columns of a long series and writes its line a block of numbers at a time.
Both must give exactly what one ``json.loads`` / ``json.dumps`` of the whole line gives.
Here the sizes are made tiny, so that small lines cross every boundary.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from helpers import peak_mib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tbconvert.formats.base import Options
from tbconvert.formats.tbdev import export_dir, lines, pending_scalars, reader, scalar_lines
from tbconvert.formats.tbdev import writer as tbdev_writer
from tbconvert.formats.tbdev.reader import TbdevReader
from tbconvert.formats.tbdev.spill import series_file
from tbconvert.formats.tbdev.writer import TbdevWriter
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
from tbconvert.report import Report

SCALAR_MD = "CgkKB3NjYWxhcnMSBGxvc3MgAQ=="


def _tiny_reading():
    """Every line longer than 16 bytes is long, read 5 bytes at a time, handed on 3 points
    at a time."""
    return [mock.patch.object(lines, "LONG_LINE_BYTES", 16),
            mock.patch.object(lines, "_SKIP_BYTES", 5),
            mock.patch.object(scalar_lines, "STREAM_BLOCK_BYTES", 5),
            mock.patch.object(reader, "SPILLED_CHUNK_POINTS", 3)]


# -- the streamed parser against json --------------------------------------------------------

_FLOAT_SPELLINGS = ("repr", "e17", "E", "g", "int")


def _spell(x: float, how: str) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if how == "e17":
        return f"{x:.17e}"
    if how == "E":
        return f"{x:.3E}"
    if how == "g":
        return f"{x:.6g}"
    if how == "int" and x == int(x) and abs(x) < 1e30:
        return str(int(x))       # (json reads it as an int, the reader as a float)
    return repr(x)


_floats = st.one_of(st.floats(), st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53 + 2,
     1e16, 1e22, 1e23, 0.1, 1 / 3, 9007199254740993.0]))
_spelled = st.tuples(_floats, st.sampled_from(_FLOAT_SPELLINGS)).map(lambda t: _spell(*t))
_ints = st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-10**20, 10**20),
                  st.integers(-5, 5)).map(str)
_seps = st.sampled_from([", ", ",", " , ", ",\t"])


def _as_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).view(np.uint64)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_ints, max_size=12), values=st.lists(_spelled, max_size=12),
       walls=st.lists(_spelled, max_size=12), sep=_seps, block=st.integers(1, 40),
       raw_extra=st.sampled_from(["", " ", "1, ", ", 1", ",,"]))
def test_streamed_line_reads_as_json(steps, values, walls, sep, block, raw_extra):
    n = min(len(steps), len(values), len(walls))
    line = ('{"points": {"steps": [' + sep.join(steps[:n]) + '], "values": ['
            + sep.join(values[:n]) + raw_extra + '], "wall_times": [' + sep.join(walls[:n])
            + f']}}, "run": "r", "summary_metadata": "{SCALAR_MD}", "tag": "t"}}\n').encode()
    whole = scalar_lines.scalar_line(line)
    spill = series_file()
    try:
        spill.put(np.arange(3))       # (what another line left there)
        with mock.patch.object(scalar_lines, "STREAM_BLOCK_BYTES", block):
            streamed = scalar_lines.streamed_scalar_line(io.BytesIO(b"xx" + line + b"yy"), 2,
                                                         len(line), spill)
        # It declines (and the line is read whole) exactly where the short-line shortcut does,
        # leaving nothing behind in the temporary file.
        assert (streamed is None) == (whole is None)
        if streamed is None:
            assert spill.size() == 24
        else:
            _same_as_json(line, streamed, whole)
    finally:
        spill.close()


def _same_as_json(line: bytes, streamed, whole) -> None:
    expected = json.loads(line)
    obj, s_steps, s_values, s_walls = streamed
    assert obj == whole[0]
    points = expected["points"]
    got_steps = s_steps.read(0, len(s_steps))
    assert got_steps.tolist() == points["steps"]
    assert np.array_equal(got_steps, whole[1])
    for column, key, fast in ((s_values, "values", whole[2]), (s_walls, "wall_times", whole[3])):
        got = column.read(0, len(column))
        assert np.array_equal(got.view(np.uint64), _as_bits(points[key])), key
        assert np.array_equal(got.view(np.uint64), fast.view(np.uint64)), key
        finite = [v for v in points[key] if math.isfinite(v)]
        assert column.finite_min == (float(min(finite)) if finite else None)


# -- the reader: a long line gives what it gives read whole --------------------------------

def _line(steps, values, walls, run="r", tag="t", end="\n") -> str:
    return (f'{{"points": {{"steps": [{steps}], "values": [{values}], "wall_times": [{walls}]}}, '
            f'"run": "{run}", "summary_metadata": "{SCALAR_MD}", "tag": "{tag}"}}{end}')


_LINES = [
    _line("0, 1, 2, 3, 4, 5, 6", "0.5, NaN, -Infinity, Infinity, -0.0, 1e-7, 3",
          "1.5e9, 1.6e9, NaN, 1.7e9, 1e9, 1.1e9, 2e9"),
    _line("", "", "", tag="empty"),
    _line(" ", " ", " ", tag="blank"),
    _line("7, 8", "0.1, 0.2", "1.0, 2.0", tag="t"),                         # the same series
    _line("0, 1, 2", "1, , 3", "1, 2, 3", tag="hole"),
    _line("0, 1, 2", "1, 2, 3, ", "1, 2, 3", tag="trailing"),
    _line("0, 1, 2", "1, 2", "1, 2, 3", tag="short"),
    _line("0, 1.0, 2", "1, 2, 3", "1, 2, 3", tag="float_step"),
    _line("0, 1, 2", "1, 12345678901234567891, 3", "1, 2, 3", tag="long_int"),
    _line("0, 1, 2", "1, nan, 3", "1, 2, 3", tag="lower_nan"),
    _line("0, 1, 9223372036854775807", "1, 2, 3", "1, 2, 3", tag="max_step"),
    _line("0, 1, 9223372036854775808", "1, 2, 3", "1, 2, 3", tag="past_max"),
    _line("0, 1, 2", "1e400, -1e400, 1e-400", "1, 2, 3", tag="overflow"),
    _line("0, 1", "0.1, 0.2", "3, 4", run="other", tag="f64"),
    _line("0, 1, 2", "-0, -0.0, 0", "-0, 1, 2", tag="minus_zero"),
    '{"points": {"values": [1.5], "steps": [3], "wall_times": [2.5]}, "run": "r", '
    f'"summary_metadata": "{SCALAR_MD}", "tag": "key_order"}}\n',
    '          \n',
    _line("0, 1", "1, 2", "1, 2", tag="run_differs").replace(', "tag"', ', "run": "x", "tag"'),
    _line("0, 1, 2", "1, 2, 3", "1, 2, 3", tag="cut", end="").replace("2, 3]}", "2, 3"),
]


def _read_all(exp: Path):
    report = Report()
    out = []
    with TbdevReader(exp, Options(), report) as r:
        for rd in r.iter_runs():
            cols: dict = {}
            for s in rd.series:
                for key in ("steps", "wall_times", "values"):
                    cols.setdefault((s.tag, key), []).append(getattr(s, key))
            out.append((rd.run.name, rd.run.start_time,
                        {k: (np.concatenate(v).dtype.str, np.concatenate(v).tobytes())
                         for k, v in cols.items()}))
    return out, [(i.kind, i.message, i.count) for i in report.issues]


def _short_lines_spilled():
    """Lines read whole, their columns moved to the run's temporary file at once."""
    return [mock.patch.object(reader, "RUN_HELD_BYTES", 1),
            mock.patch.object(reader, "SPILLED_CHUNK_POINTS", 2)]


@pytest.mark.parametrize("patched", [_tiny_reading, _short_lines_spilled])
def test_long_lines_read_as_short_ones(tmp_path, patched):
    exp = tmp_path / "experiment_AAAAAAAAAAAAAAAAAAAAAA"
    exp.mkdir()
    (exp / "scalars.json").write_text("".join(_LINES))
    expected = _read_all(exp)
    patches = patched()
    for p in patches:
        p.start()
    try:
        got = _read_all(exp)
    finally:
        for p in patches:
            p.stop()
    assert got == expected
    kinds = {kind for kind, _, _ in expected[1]}
    assert {"bad_line", "truncated_line", "inexact_value"} <= kinds
    bad = [message for kind, message, _ in expected[1] if kind == "bad_line"]
    assert [m for m in bad if "json:5:" in m or "json:6:" in m] and \
        not {"hole", "trailing"} & {tag for tag, _ in expected[0][0][2]}
    assert len(expected[0][0][2]) >= 3 * 5     # most series came through


# -- the writer: a spilled series is written as json.dumps writes it whole -----------------------

def _chunks(rng, sizes, tag, md):
    start = 0
    for n in sizes:
        steps = np.arange(start, start + n, dtype=np.int64) * 1_000_003
        values = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
        values[:4] = [np.nan, np.inf, -np.inf, -0.0][:min(n, 4)]
        yield ScalarSeries(run="r", tag=tag, metadata=md, steps=steps,
                           wall_times=1.7e9 + rng.random(n) * 1e5, hidden=None,
                           values=values if tag != "f32" else values.astype(np.float32))
        start += n


def test_spilled_series_written_byte_for_byte(tmp_path):
    rng = np.random.default_rng(7)
    md = {tag: Metadata("scalars", b"", tag, "", DataClass.SCALAR) for tag in ("a", "f32")}
    chunks = []
    for pair in zip(_chunks(rng, [5, 17, 0, 40, 3, 29], "a", md["a"]),
                    _chunks(rng, [9, 1, 33, 0, 12, 8], "f32", md["f32"]), strict=True):
        chunks.extend(pair)
    with np.errstate(over="ignore"):
        expected = []
        for tag in ("a", "f32"):
            mine = [c for c in chunks if c.tag == tag]
            points = {"steps": np.concatenate([c.steps for c in mine]).tolist(),
                      "values": np.concatenate([c.values.astype(np.float64)
                                                for c in mine]).tolist(),
                      "wall_times": np.concatenate([c.wall_times for c in mine]).tolist()}
            expected.append(export_dir.dumps_line(
                {"points": points, "run": "r",
                 "summary_metadata": tbdev_writer.encode_metadata(md[tag]), "tag": tag}))
    with mock.patch.object(tbdev_writer, "SCALARS_HELD_BYTES", 500), \
            mock.patch.object(pending_scalars, "WRITE_BLOCK_POINTS", 7):
        w = TbdevWriter(tmp_path / "out", Options(), Report())
        w.write_run(Run("r"), iter(chunks))
        w.close()
    assert (tmp_path / "out" / "scalars.json").read_text() == "".join(expected)


# -- memory ---------------------------------------------------------------------------------

POINTS = 4_000_000
LIMIT_MIB = 240   # (the project's bound is 256; the series' line alone is ~170 MiB)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="VmHWM is read from /proc")
def test_one_long_series_both_ways_in_bounded_memory(tmp_path):
    from tbconvert.api import open_writer
    md = Metadata("scalars", b"", "loss", "", DataClass.SCALAR)

    def chunks():
        rng = np.random.default_rng(0)
        for start in range(0, POINTS, 1 << 18):
            steps = np.arange(start, min(POINTS, start + (1 << 18)), dtype=np.int64)
            yield ScalarSeries(run="train", tag="loss", metadata=md, steps=steps,
                               wall_times=1.7e9 + steps * 0.0123, hidden=None,
                               values=rng.random(len(steps)).astype(np.float32))
    with open_writer(tmp_path / "logs", format="tfevents") as w:
        w.write_run(Run("train", 1.7e9), chunks())
    export = tmp_path / "experiment_AAAAAAAAAAAAAAAAAAAAAA"
    written = peak_mib("convert", tmp_path / "logs", export, "--to", "tbdev")
    assert (export / "scalars.json").stat().st_size > 150 << 20   # one line
    read = peak_mib("convert", export, tmp_path / "back.parquet")
    assert max(written, read) <= LIMIT_MIB, (written, read)
