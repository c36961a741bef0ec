"""Row groups written in a thread of their own (tbconvert/formats/parquet/background.py): the
bytes are those written inline, and a write that fails is the conversion's clear error, with
nothing left behind."""

import errno
import shutil

import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.errors import OutputError
from tbconvert.formats.parquet import background, halves
from tbconvert.formats.parquet import schema as S
from tbconvert.formats.parquet import writer as parquet_writer


def test_a_failed_write_is_raised_once_by_the_next_wait():
    writing = background.Writing()

    def fail():
        raise OSError(errno.EIO, "Input/output error")
    writing.start(fail)
    with pytest.raises(OSError, match="Input/output"):
        writing.wait()
    writing.wait()                      # told once
    done = []
    writing.start(done.append, 1)
    writing.start(done.append, 2)       # waits for the one before
    writing.wait()
    assert done == [1, 2]


@pytest.mark.parametrize("split", [1, 1 << 40])
def test_row_groups_written_in_the_background_are_the_bytes_written_inline(
        tmp_path, monkeypatch, split):
    src = tmp_path / "src"
    for name in ("tf2_logdir", "torch_logdir"):
        shutil.copytree(FIXTURES / name, src / name)
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 25)      # runs of several row groups
    monkeypatch.setattr(halves, "SPLIT_BYTES", split)
    behind, inline = tmp_path / "behind.parquet", tmp_path / "inline.parquet"
    tbconvert.convert(src, behind, jobs=1)

    def at_once(self, write, *args):
        self.wait()
        write(*args)
    monkeypatch.setattr(background.Writing, "start", at_once)
    tbconvert.convert(src, inline, jobs=1)
    assert behind.read_bytes() == inline.read_bytes()


def test_a_write_that_fails_in_the_background_fails_the_conversion_cleanly(tmp_path,
                                                                          monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "tf2_logdir", src)
    monkeypatch.setattr(S, "ROW_GROUP_ROWS", 25)
    real = parquet_writer._FileSink._write
    written = []

    def write(self, table, group, halved=True):
        written.append(group)
        if len(written) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, table, group, halved)
    monkeypatch.setattr(parquet_writer._FileSink, "_write", write)
    out = tmp_path / "out" / "a.parquet"
    out.parent.mkdir()
    with pytest.raises(OutputError, match="(?i)disk is full|no space"):
        tbconvert.convert(src, out, jobs=1)
    assert list(out.parent.iterdir()) == []
