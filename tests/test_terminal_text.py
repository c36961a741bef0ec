"""Names that would forge lines or restyle the terminal are shown escaped by every command.

Run and tag names (and the paths around them) may hold ESC sequences, carriage returns,
newlines, bidirectional overrides and bytes that are not UTF-8. Every command that prints
(``info``, ``verify``, the summary of notes and warnings, errors) must show them as
visible escapes: no raw control character, no forged line, no encoding crash.
"""

from __future__ import annotations

import os
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES

from tbconvert import api
from tbconvert.cli import main
from tbconvert.cli.text import shown
from tbconvert.model import BlobSequenceSeries, DataClass, Metadata, Run, ScalarSeries, TensorSeries

SCALAR_MD = Metadata("scalars", b"", "", "", DataClass.SCALAR)
TEXT_MD = Metadata("text", b"", "", "", DataClass.TENSOR)
IMAGE_MD = Metadata("images", b"\x10\x01", "", "", DataClass.BLOB_SEQUENCE)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
FORGE = "\x1b[2K\rFORGED\ntbconvert: error: FORGED"
RUNS = ["run" + FORGE, "\u202eevil" + FORGE, "plain"]
TAGS = ["tag" + FORGE + "\x9b31m", "tag\u2028FORGED\x00"]


def _source(path: Path, shift: float = 0.0) -> Path:
    n = 3
    steps = np.arange(n)
    walls = 1.6e9 + steps.astype(np.float64)
    with api.open_writer(path) as w:
        for run in RUNS:
            series = []
            for tag in TAGS:
                series.append(ScalarSeries(run=run, tag=tag, metadata=SCALAR_MD, steps=steps,
                                           wall_times=walls, hidden=None,
                                           values=np.arange(n, dtype=np.float32) + shift))
            series.append(TensorSeries(run=run, tag=TAGS[0] + "/txt", metadata=TEXT_MD,
                                       steps=steps, wall_times=walls, hidden=None,
                                       dtypes=np.full(n, 7, np.int32),
                                       tensors=tuple(np.array([b"hi"], dtype=object)
                                                     for _ in range(n))))
            series.append(BlobSequenceSeries.from_sequences(
                run=run, tag=TAGS[1] + "/img", metadata=IMAGE_MD, steps=steps, hidden=None,
                wall_times=walls, sequences=[[b"1", b"1", PNG]] * n))
            w.write_run(Run(run, 1.6e9), iter(series))
    return path


def _assert_clean(text: str, what) -> None:
    assert "\x1b" not in text and "\r" not in text and "\x9b" not in text, (what, text)
    lines = text.splitlines()
    assert sum(line.startswith("tbconvert: error:") for line in lines) <= 1, (what, text)
    for line in lines:
        assert not line.startswith("FORGED"), (what, text)
        for ch in line:
            assert unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp"), (what, line)
    assert "Traceback" not in text, (what, text)


@pytest.fixture
def hostile(tmp_path) -> dict:
    # The directory holding everything is hostile too: paths appear in messages and errors.
    root = tmp_path / ("d" + FORGE)
    root.mkdir()
    a = _source(root / "a.parquet")
    b = _source(root / "b.parquet", shift=1.0)
    logdir = root / "logs"
    api.convert(a, logdir, to_format="tfevents")
    odd = logdir / os.fsdecode(b"bytes_\xff\x1b[2K")
    shutil.copytree(FIXTURES / "torch_logdir" / "train", odd)
    return {"a": a, "b": b, "logs": logdir, "root": root}


def _commands(h: dict) -> list[list[str]]:
    a, b, logs, root = (str(h[k]) for k in ("a", "b", "logs", "root"))
    out = lambda name: str(Path(root) / name)   # noqa: E731
    return [
        ["info", a], ["info", logs], ["info", a, "--json"],
        ["verify", a, b], ["verify", a, a],
        ["convert", a, out("c.parquet"), "-v"],
        ["convert", logs, out("c_logs"), "--to", "tfevents", "-v"],
        ["convert", logs, out("c.csv"), "-v"],
        ["convert", a, out("c.h5"), "-v"],
        ["convert", a, out("c_export"), "--to", "tbdev", "-v"],
        ["tbdev-export", out("c_export"), "-o", out("c_back"), "-v"],
        ["media", a, "-o", out("m"), "-v"],
        ["hparams", logs, "-o", out("h.csv"), "-v"],
        ["histograms", logs, "-o", out("hist.parquet"), "-v"],
        # errors naming hostile paths
        ["convert", a, a, "--force"],
        ["convert", out("missing" + FORGE), out("x.parquet")],
        ["convert", a, out("c.parquet")],
        ["info", str(Path(root) / "nothing.xyz")],
    ]


def test_every_command_shows_hostile_names_escaped(hostile, capsys):
    for argv in _commands(hostile):
        code = main(argv)
        captured = capsys.readouterr()
        assert code != 1, (argv, captured.err)
        _assert_clean(captured.out, argv)
        _assert_clean(captured.err, argv)


def test_usage_errors_quote_file_names_escaped(hostile, capsys):
    # a shell glob hands file names from data to the parser
    code = main(["info", str(hostile["a"]), str(hostile["root"] / "extra")])
    captured = capsys.readouterr()
    assert code == 2
    _assert_clean(captured.err, "usage")
    assert "\\x1b[2K\\rFORGED\\n" in captured.err


def test_info_names_are_shown_not_dropped(hostile, capsys):
    assert main(["info", str(hostile["a"])]) == 0
    out = capsys.readouterr().out
    assert "\\x1b[2K\\rFORGED\\ntbconvert: error: FORGED" in out
    assert "\\u202eevil" in out and "\\u2028FORGED\\x00" in out
    assert len(out.splitlines()) == 1 + len(RUNS) * 4 + 1     # header, rows, total


def test_non_utf8_names_print_as_escapes(hostile, capsys):
    assert main(["info", str(hostile["logs"])]) == 0
    out = capsys.readouterr().out
    assert "bytes_\\udcff\\x1b[2K" in out


def test_shown_escapes_exactly_the_hidden_characters():
    assert shown("plain ascii") == "plain ascii"
    assert shown("é ✓ 日本 😀") == "é ✓ 日本 😀"
    assert shown("a\nb\rc\td\x1b[0m") == "a\\nb\\rc\\td\\x1b[0m"
    assert shown("\x9b\x7f\x00") == "\\x9b\\x7f\\x00"
    assert shown("\u202e\u2066\u200b\u2028\u2029") == "\\u202e\\u2066\\u200b\\u2028\\u2029"
    assert shown("\udcff\ud800") == "\\udcff\\ud800"
    assert shown(Path("x")) == "x"
