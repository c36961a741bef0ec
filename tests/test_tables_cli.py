"""The table commands: convert to CSV, hparams, histograms, media; and the docstring examples."""

from __future__ import annotations

import doctest
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers import FIXTURES, csv_exact

import tbconvert
import tbconvert.tables
from tbconvert.cli import main

ROOT = Path(__file__).resolve().parent.parent
TORCH = str(ROOT / "fixtures" / "torch_logdir")
TF2 = str(ROOT / "fixtures" / "tf2_logdir")


def test_convert_csv_long_equals_api(tmp_path, capsys):
    dst = tmp_path / "s.csv"
    assert main(["convert", TORCH, str(dst)]) == 0
    err = capsys.readouterr().err
    assert "not written to the table" in err          # histograms, images... are reported, not dropped
    csv = pd.read_csv(dst, keep_default_na=False, na_values={"value": ["nan"]},
                      **csv_exact())
    api = tbconvert.scalars(TORCH)
    assert len(csv) == len(api) == 317
    assert list(csv.run) == list(api.run.astype(str)) and list(csv.step) == list(api.step)
    assert csv.value.to_numpy().tobytes() == api.value.to_numpy().tobytes()
    assert csv.wall_time.to_numpy().tobytes() == api.wall_time.to_numpy().tobytes()


def test_convert_csv_restarts_keep_all_marks_hidden(tmp_path):
    dst = tmp_path / "k.csv"
    assert main(["convert", TORCH, str(dst), "--restarts", "keep-all", "--runs",
                 "^resumed_purged$", "-q"]) == 0
    df = pd.read_csv(dst, **csv_exact())
    assert list(df.columns) == ["run", "tag", "step", "wall_time", "value", "hidden"]
    assert len(df) == 50 and df.hidden.sum() == 10


def test_convert_wide(tmp_path):
    dst = tmp_path / "w.csv"
    assert main(["convert", TORCH, str(dst), "--wide", "--runs", "^train$", "-q"]) == 0
    df = pd.read_csv(dst, **csv_exact())
    assert list(df.columns) == ["run", "step", "wall_time", "accuracy", "loss", "loss_hi",
                                "loss_lo", "lr"]
    assert len(df) == 50 and df.lr.notna().sum() == 5
    assert df.set_index("step").lr.dropna().index.tolist() == [0, 10, 20, 30, 40]
    assert main(["convert", TORCH, str(tmp_path / "x.csv"), "--wide", "--restarts",
                 "keep-all", "-q"]) == 2


def test_hparams_command_csv_and_parquet(tmp_path):
    csv, par = tmp_path / "hp.csv", tmp_path / "hp.parquet"
    assert main(["hparams", TF2, "-o", str(csv), "-q"]) == 0
    assert main(["hparams", TF2, "-o", str(par), "-q"]) == 0
    a = pd.read_csv(csv, **csv_exact())
    b = pq.read_table(par).to_pandas()
    assert list(a.run) == list(b.run) == ["hparams/trial_0", "hparams/trial_1"]
    assert list(a.units) == list(b.units) == [8.0, 16.0]
    assert list(a.columns) == list(b.columns)
    assert main(["hparams", TF2, "-o", str(csv), "-q"]) == 6          # exists
    assert main(["hparams", TF2, "-o", str(csv), "--force", "-q"]) == 0
    assert main(["hparams", TF2, "-o", str(tmp_path / "hp.txt"), "-q"]) == 2


def test_histograms_command(tmp_path):
    dst = tmp_path / "h.parquet"
    assert main(["histograms", TORCH, "-o", str(dst), "--runs", "^resumed$", "-q"]) == 0
    t = pq.read_table(dst)
    assert t.column_names == ["run", "tag", "step", "wall_time", "left", "right", "count"]
    steps = t.column("step").to_pylist()
    assert sorted(set(steps)) == [0, 10, 20, 30]      # step 20 twice: TB keeps both (README)
    assert len(set(zip(steps, t.column("wall_time").to_pylist(), strict=True))) == 5
    assert set(t.column("tag").to_pylist()) == {"act"}
    csv = tmp_path / "h.csv"
    assert main(["histograms", TORCH, "-o", str(csv), "--runs", "^resumed$", "-q"]) == 0
    df = pd.read_csv(csv, **csv_exact())
    assert df["count"].to_numpy().tobytes() == t.column("count").to_numpy().tobytes()
    assert math.isclose(df["count"].sum(), t.column("count").to_numpy().sum())


def test_media_command(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["media", TORCH, "-o", str(out), "--tags", "samples"]) == 0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["train/samples/batch/0_0.png", "train/samples/image/0_0.png",
                     "train/samples/image/49_0.png"]
    assert "wrote 3 files" in capsys.readouterr().err
    assert main(["media", TORCH, "-o", str(out), "-q"]) == 6
    assert main(["media", TORCH, "-o", str(out), "--force", "-q", "--tags", "audio"]) == 0
    wav = out / "train" / "audio" / "tone" / "0_0.wav"
    assert [p.name for p in out.rglob("*") if p.is_file()] == ["0_0.wav"]
    # the file holds exactly the encoded audio TensorBoard shows for that point
    from oracle import tb_view
    (step, _, (kind, shape, blobs)), = tb_view(TORCH)["train"]["tags"]["audio/tone"]["points"]
    assert (step, kind, shape) == (0, "string", (1,))
    assert blobs[0][:4] == b"RIFF" and wav.read_bytes() == blobs[0]


def test_missing_source_is_one_line_error(tmp_path, capsys):
    assert main(["histograms", str(tmp_path / "nope"), "-o", str(tmp_path / "h.csv")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tbconvert: error:")
    assert not (tmp_path / "h.csv").exists()


def test_docstring_examples(monkeypatch, tmp_path):
    pytest.importorskip("PIL")
    monkeypatch.chdir(ROOT)
    import numpy as np
    # (only what a user has after "import tbconvert, numpy as np": examples import the rest)
    globs = {"tbconvert": tbconvert, "np": np}
    result = doctest.testmod(tbconvert.tables, globs=globs, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 10 and result.failed == 0


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_histogram_table_is_written_a_part_at_a_time(tmp_path, monkeypatch, suffix):
    """``tbconvert histograms`` writes its rows in parts (a row per bucket: millions held whole
    took gigabytes): the same table, its CSV byte for byte, as the one built whole."""
    from tbconvert.tables import _parts
    monkeypatch.setattr(_parts, "PART_ROWS", 500)
    monkeypatch.setattr(_parts, "SLICE_POINTS", 3)
    parts = []
    real = _parts.collect_into

    def counting(add, *a):
        return real(lambda t: (parts.append(t.num_rows), add(t)), *a)
    monkeypatch.setattr(_parts, "collect_into", counting)
    src = FIXTURES / "torch_logdir"
    out = tmp_path / f"h{suffix}"
    rows = tbconvert.tables.write_histograms(src, out)
    whole = tbconvert.histograms_table(src)
    assert rows == whole.num_rows == sum(parts) and len(parts) > 5
    if suffix == ".csv":
        tbconvert.tables.save_table(whole, tmp_path / "whole.csv")
        assert out.read_bytes() == (tmp_path / "whole.csv").read_bytes()
    else:
        assert pq.read_table(out).to_pandas().equals(whole.to_pandas())
