"""Wide CSV rows made in bounded memory (sorted segments merged a window at a time) are
byte for byte the rows ``ScalarColumns.wide_table`` makes of every point at once, with the
same report, whatever the segments, windows and batches."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tbconvert.columns import ScalarColumns
from tbconvert.columns import wide as W
from tbconvert.formats.csv import encode
from tbconvert.model import DataClass, Metadata, ScalarSeries
from tbconvert.report import Report

MD = Metadata("scalars", b"", "", "", DataClass.SCALAR)


def _chunks(seed: int) -> list[ScalarSeries]:
    rng = np.random.default_rng(seed)
    tags = ["loss", "acc", "run", "step", "lr,odd", "a/b", "é"]
    chunks = []
    for r in range(rng.integers(1, 4)):
        for _ in range(rng.integers(1, 9)):
            n = int(rng.integers(0, 400))
            tag = tags[rng.integers(len(tags))]
            # steps mostly rising, with repeats, restarts and jumps back (duplicates in wide)
            steps = np.cumsum(rng.integers(-3, 4, n)) + int(rng.integers(0, 50))
            dtype = [np.float32, np.float64, np.int64, np.int32][rng.integers(4)]
            values = (rng.normal(size=n) * 1000).astype(dtype)
            if dtype is np.float64 and n:
                values[rng.integers(n)] = np.nan
            if dtype is np.int64 and n:
                values[0] = 2**60 + 1       # inexact as a float64: reported by both
            walls = 1.7e9 + rng.random(n) * 100
            chunks.append(ScalarSeries(run=f"run{r}", tag=tag, metadata=MD,
                                       steps=steps.astype(np.int64), wall_times=walls,
                                       hidden=None, values=values))
    return chunks


def _in_memory(chunks) -> tuple[bytes, list]:
    report = Report()
    cols = ScalarColumns(False, report)
    for c in chunks:
        cols.add_chunk(c)
    out = io.BytesIO()
    encode.write(cols.wide_table(), out)
    return out.getvalue(), [(i.kind, i.message) for i in report.issues]


def _streamed(chunks) -> tuple[bytes, list]:
    report = Report()
    rows = W.WideRows(report)
    for c in chunks:
        rows.add(c)
    names = rows.column_names()
    out = io.BytesIO()
    out.write(encode.header(names))
    for table in rows.tables(names):
        encode.write(table, out, with_header=False)
    rows.close()
    return out.getvalue(), [(i.kind, i.message) for i in report.issues]


@pytest.mark.parametrize("sizes", [(1 << 19, 1 << 20, 1 << 16), (64, 48, 7), (5, 3, 2),
                                   (1, 1, 1)], ids=["default", "small", "tiny", "one"])
@pytest.mark.parametrize("seed", range(12))
def test_streamed_wide_rows_are_the_in_memory_ones(seed, sizes, monkeypatch):
    for name, size in zip(("SEGMENT_POINTS", "WINDOW_POINTS", "ROW_BATCH"), sizes, strict=True):
        monkeypatch.setattr(W, name, size)
    chunks = _chunks(seed)
    assert _streamed(chunks) == _in_memory(chunks)


def test_one_step_longer_than_a_window(monkeypatch):
    """Many tags at one step, spread over segments whose windows that step overfills."""
    monkeypatch.setattr(W, "SEGMENT_POINTS", 10)
    monkeypatch.setattr(W, "WINDOW_POINTS", 4)
    chunks = [ScalarSeries(run="r", tag=f"t{k:03d}", metadata=MD,
                           steps=np.array([0, 0, 1, 7], np.int64),
                           wall_times=np.array([5.0, 4.0, 3.0, 2.0]) + k, hidden=None,
                           values=np.arange(4, dtype=np.float32) + k) for k in range(40)]
    assert _streamed(chunks) == _in_memory(chunks)


def test_nothing_but_a_header_without_scalars():
    assert _streamed([]) == _in_memory([])


def test_a_point_without_a_wall_time_leaves_its_row_the_earliest_of_the_others():
    """A NaN wall time is no time: the row's wall_time is the earliest real one (NaN only
    when no point of the row has one), in memory and streamed alike."""
    def series(tag, walls):
        return ScalarSeries(run="r", tag=tag, metadata=MD, steps=np.array([1, 2, 3], np.int64),
                            wall_times=np.array(walls), hidden=None,
                            values=np.ones(3, np.float32))
    chunks = [series("a", [1001.0, 1002.0, np.nan]), series("b", [np.nan, 1003.0, np.nan])]
    streamed, _ = _streamed(chunks)
    assert streamed == _in_memory(chunks)[0]
    rows = streamed.decode().splitlines()
    assert rows[1].startswith("r,1,1001.0,") and rows[2].startswith("r,2,1002.0,")
    assert rows[3].startswith("r,3,nan,")


def test_a_rows_wall_time_is_that_of_the_points_it_keeps():
    """A resumed run logs step 1 again later: the row keeps the later value, and its time."""
    first = ScalarSeries(run="r", tag="loss", metadata=MD, steps=np.array([0, 1, 2], np.int64),
                         wall_times=np.array([1000.0, 1001.0, 1002.0]), hidden=None,
                         values=np.array([0.0, 1.0, 2.0], np.float32))
    again = ScalarSeries(run="r", tag="loss", metadata=MD, steps=np.array([1, 2, 3], np.int64),
                         wall_times=np.array([1101.0, 1102.0, 1103.0]), hidden=None,
                         values=np.array([1.5, 2.5, 3.5], np.float32))
    streamed, told = _streamed([first, again])
    assert (streamed, told) == _in_memory([first, again])
    assert streamed.decode().splitlines()[1:] == [
        "r,0,1000.0,0.0", "r,1,1101.0,1.5", "r,2,1102.0,2.5", "r,3,1103.0,3.5"]
