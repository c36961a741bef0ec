"""The command's standard output as a destination: CSV from ``convert SRC -``, and what
happens when standard output cannot be written (a full disk, a closed descriptor). Each
command runs as its own process, as a user's shell starts it."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers import FIXTURES, run_tbconvert

from tbconvert.cli import main

TORCH = FIXTURES / "torch_logdir"
TF2 = FIXTURES / "tf2_logdir"


def test_convert_to_dash_writes_the_csv_on_stdout(tmp_path):
    assert run_tbconvert("convert", TORCH, tmp_path / "s.csv", "-q").returncode == 0
    proc = run_tbconvert("convert", TORCH, "-", capture_output=True, text=False)
    assert proc.returncode == 0
    assert proc.stdout == (tmp_path / "s.csv").read_bytes()
    assert b"warning: 33 points of 15 series were not written to the table" in proc.stderr
    assert not (FIXTURES.parent / "-").exists()



def test_messages_of_a_table_on_stdout_name_standard_output():
    """Not the temporary file the table passes through (gone once the command ends)."""
    proc = run_tbconvert("convert", FIXTURES / "tbdev_export", "-", capture_output=True,
                         text=True)
    assert proc.returncode == 0, proc.stderr
    assert "  standard output: this format cannot hold the experiment's name" in proc.stderr
    assert "tbconvert-stdout" not in proc.stderr

def test_convert_to_dash_through_a_pipe_that_closes_early():
    proc = subprocess.run(f"{' '.join(_argv())} convert '{TORCH}' - -q | head -1",
                          shell=True, capture_output=True, text=True, env=_env())
    assert proc.stdout == "run,tag,step,wall_time,value\n" and proc.stderr == ""


def test_only_csv_goes_to_stdout(tmp_path, capsys):
    assert main(["convert", str(TORCH), "-", "--to", "parquet"]) == 2
    assert capsys.readouterr().err == ("tbconvert: error: only CSV can go to standard output "
                                       "(-), not parquet; name a file or directory instead\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ["hparams", TF2, "-o", "-"], ["info", TF2], ["info", "--json", TF2], ["formats"],
    ["verify", TORCH, TORCH], ["convert", TORCH, "-"],
])
def test_a_full_disk_on_stdout_is_one_line_and_exit_9(args):
    with open("/dev/full", "w") as full:
        proc = run_tbconvert(*args, "-q", stdout=full, capture_output=False, stderr=subprocess.PIPE)
    assert proc.returncode == 9, proc.stderr
    assert proc.stderr == ("tbconvert: error: writing to standard output failed: no space "
                           "left on device\n")


@pytest.mark.parametrize("args,code", [(["info", TF2], 9), (["convert", TORCH, "c.csv"], 0)])
def test_a_closed_stdout(tmp_path, args, code):
    # (a command that prints nothing to stdout does not care)
    proc = subprocess.run(f"{' '.join(_argv())} {' '.join(map(str, args))} -q >&-",
                          shell=True, capture_output=False, stderr=subprocess.PIPE, text=True,
                          env=_env(), cwd=tmp_path)
    assert proc.returncode == code
    assert proc.stderr == ("" if code == 0 else
                           "tbconvert: error: writing to standard output failed: it is closed\n")


def test_a_closed_or_full_stderr_only_silences_diagnostics(tmp_path):
    for redirect in ("2>&-", "2>/dev/full"):
        proc = subprocess.run(f"{' '.join(_argv())} convert '{TORCH}' - {redirect} | wc -l",
                              shell=True, capture_output=True, text=True, env=_env())
        assert proc.stdout.strip() == "318", redirect


@pytest.mark.parametrize("args,words", [
    (["convert", TORCH, "y.zzz"], "y.zzz: cannot tell which format to write from the name"),
    (["convert", TORCH, "out", "--to", "bogus"], "unknown format 'bogus'."),
    (["info", TORCH, "--from", "parqet"], "unknown format 'parqet'. Did you mean 'parquet'?"),
])
def test_naming_no_format_is_a_usage_error(tmp_path, capsys, args, words):
    assert main([*map(str, args)]) == 2
    assert words in capsys.readouterr().err


def test_a_csv_given_as_source_is_told_to_be_write_only(tmp_path, capsys):
    assert main(["convert", str(TORCH), str(tmp_path / "s.csv"), "-q"]) == 0
    assert main(["convert", str(tmp_path / "s.csv"), str(tmp_path / "s.parquet")]) == 3
    assert "s.csv: csv is a format tbconvert writes but does not read back" in \
        capsys.readouterr().err


@pytest.mark.parametrize("pause", ["0", "0.01", "-1", "nan"])
def test_watch_needs_a_real_pause(tmp_path, capsys, pause):
    assert main(["sync", str(TORCH), str(tmp_path / "ds"), "--watch", pause]) == 2
    assert "give the pause in seconds, 0.1 or more" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def _argv() -> list[str]:
    from helpers import cli_argv
    return [f"'{a}'" for a in cli_argv()]


def _env() -> dict:
    from helpers import cli_env
    return cli_env()


class _StoppedWhilePrinting:
    """Standard output that Ctrl-C interrupts as the first bytes go out."""
    encoding = "utf-8"

    def write(self, text):
        raise KeyboardInterrupt

    def flush(self):
        pass


@pytest.mark.parametrize("args", [["convert", TORCH, "-"], ["hparams", TF2, "-o", "-"]])
def test_a_stop_while_the_table_is_printed_says_it_was_cut_short(capsys, monkeypatch, args):
    monkeypatch.setattr("sys.stdout", _StoppedWhilePrinting())
    assert main([*map(str, args), "-q"]) == 130
    err = capsys.readouterr().err
    assert err == ("tbconvert: error: interrupted; the table on standard output was cut short "
                   "(what was printed is incomplete)\n"), err
