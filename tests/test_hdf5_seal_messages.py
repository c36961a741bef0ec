"""What a broken HDF5 seal is told as: an archive another program has open for writing (or left
marked so) is not called damaged, and a cut archive is told its real length."""

from __future__ import annotations

import signal
import subprocess
import sys

import h5py
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.cli import main
from tbconvert.errors import CorruptDataError
from tbconvert.formats.hdf5 import seal

# byte 11 of a version 2 or 3 superblock, which starts right after the user block
FLAGS_AT = seal.USERBLOCK + 11


def _archive(tmp_path):
    path = tmp_path / "x.h5"
    tbconvert.convert(FIXTURES / "tensorboardx_logdir", path)
    return path


def test_an_archive_open_for_writing_in_another_program_is_not_called_damaged(tmp_path, capsys):
    path = _archive(tmp_path)
    whole = tbconvert.read(path, restarts="keep-all")
    with h5py.File(path, "r+"):   # opened for writing, nothing changed
        assert path.read_bytes()[FLAGS_AT] & 0x01   # HDF5 marks the file as it opens it
        with pytest.raises(CorruptDataError) as caught:
            tbconvert.read(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: the archive is open for writing in another "
                                  "program, or was not closed cleanly by one")
        assert "close that program and try again" in message
        assert "ignore_checksum=True reads what can still be read" in message
        assert "damaged" not in message and "restore it from a copy" not in message
        assert main(["info", str(path)]) == 4
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "open for writing in another program" in err and "--ignore-checksum" in err
    # once that program closes it, the archive reads as it was written
    assert tbconvert.read(path, restarts="keep-all").series.keys() == whole.series.keys()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_an_archive_left_open_for_writing_by_a_killed_program(tmp_path):
    path = _archive(tmp_path)
    whole = tbconvert.read(path, restarts="keep-all")
    killed = subprocess.run(
        [sys.executable, "-c", "import h5py, os, signal, sys\n"
         "f = h5py.File(sys.argv[1], 'r+')\n"
         "os.kill(os.getpid(), signal.SIGKILL)", str(path)], check=False)
    assert killed.returncode == -signal.SIGKILL
    assert path.read_bytes()[FLAGS_AT] & 0x01   # the mark outlives the program
    with pytest.raises(CorruptDataError, match="open for writing in another program, or was "
                       "not closed cleanly by one.*close that program and try again") as caught:
        tbconvert.read(path)
    assert "damaged" not in str(caught.value)
    loaded = tbconvert.read(path, ignore_checksum=True, restarts="keep-all")
    (issue,) = loaded.report.issues
    assert issue.kind == "damaged_archive" and "not closed cleanly" in issue.message
    assert loaded.series.keys() == whole.series.keys()


def test_a_changed_byte_is_still_called_damaged_when_no_program_marked_the_file(tmp_path):
    path = _archive(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match="the archive is damaged .its checksum does not "
                       "match.*restore it from a copy"):
        tbconvert.read(path)


@pytest.mark.parametrize("length", [1000, seal.USERBLOCK - 1, seal.USERBLOCK, 5000])
def test_an_archive_cut_short_is_told_its_real_length(tmp_path, length):
    path = _archive(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:length])
    with pytest.raises(CorruptDataError, match=f"it is {length} bytes long but was written "
                       f"{len(data)} bytes long: it was truncated"):
        tbconvert.read(path)
