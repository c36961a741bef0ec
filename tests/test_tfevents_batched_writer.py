"""Small scalar chunks of many tags are encoded a batch at a time (``RunFile._flush``): the
file and the report are byte for byte those of the one-chunk-at-a-time path."""

from __future__ import annotations

import numpy as np
import pytest

from tbconvert.formats.tfevents import runfile
from tbconvert.formats.tfevents.runfile import RunFile
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
from tbconvert.report import Report


def _chunks(seed: int) -> list:
    rng = np.random.default_rng(seed)
    plain = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    out = []
    for i in range(300):
        tag = f"t{i % 120}/é{i % 7}"
        md = plain if i % 3 else Metadata("scalars", b"", tag, "about", DataClass.SCALAR)
        if i % 5 == 0:
            md = Metadata()                                # metadata without any field
        n = int(rng.integers(0, 9)) if i % 11 else 100     # some chunks too big to batch
        steps = np.sort(rng.integers(-3, 40, n)) if i % 4 else rng.integers(0, 1 << 40, n)
        if i % 9 == 0:
            steps = np.arange(n) * 7 + 5                    # one constant stride
        walls = 1000.0 + rng.random(n) * 10
        if i % 6 == 0:
            walls = np.sort(walls)
        if i % 13 == 0 and n:
            walls[0] = np.nan
        if i % 17 == 0 and n > 1:
            walls[1] = np.inf
        if i % 2:
            values = rng.normal(size=n)                   # float64: rounded to float32
        else:
            values = rng.normal(size=n).astype(np.float32)
            if n:
                values.view(np.uint32)[0] = 0x7F800001     # a signaling NaN
            if n > 1:
                values.view(np.uint32)[1] = 0xFFC00123     # a quiet NaN with payload
        hidden = None
        if i % 19 == 0 and n:
            hidden = np.zeros(n, bool)
            hidden[0] = True
        out.append(ScalarSeries(run="r", tag=tag, metadata=md, steps=steps, wall_times=walls,
                                hidden=hidden, values=values))
    return out


def _write(tmp_path, chunks, name, keep_all):
    report = Report()
    body = RunFile(Run("r", start_time=None), report, tmp_path, keep_all=keep_all)
    for c in chunks:
        body.add(c)
    path = tmp_path / name
    with open(path, "wb") as f:
        body.write(f)
    return path.read_bytes(), report


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("keep_all", [False, True])
def test_batched_small_chunks_write_the_same_bytes(tmp_path, monkeypatch, seed, keep_all):
    chunks = _chunks(seed)
    batched, rep_b = _write(tmp_path, chunks, "batched", keep_all)
    monkeypatch.setattr(runfile, "BATCH_POINTS", 7)      # flushes inside the run
    small_batches, rep_s = _write(tmp_path, chunks, "small", keep_all)
    monkeypatch.setattr(runfile, "SMALL_CHUNK", -1)      # nothing batched
    one_by_one, rep_o = _write(tmp_path, chunks, "one", keep_all)
    assert batched == one_by_one
    assert small_batches == one_by_one
    assert _issues(rep_b) == _issues(rep_o) == _issues(rep_s)


def _issues(report) -> list:
    return [repr(i) for i in report.issues]
