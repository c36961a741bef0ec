"""What a user meets first, each command as its own process of the installed ``tbconvert``:
every subcommand on a bundled fixture, output through a pipe that closes early, and (under
``tests/run-installed.sh``) the proof that the installed package is what is being tested."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CLI_CWD, FIXTURES, cli_argv, cli_env, run_tbconvert

import tbconvert

pytestmark = pytest.mark.e2e


def ok(*args, **kw) -> subprocess.CompletedProcess:
    p = run_tbconvert(*args, **kw)
    assert p.returncode == 0, (args, p.stderr[-3000:])
    assert "Traceback" not in p.stderr
    return p


@pytest.mark.skipif(not os.environ.get("TBCONVERT_TEST_INSTALLED"),
                    reason="only under tests/run-installed.sh")
def test_the_installed_package_is_under_test():
    here = Path(tbconvert.__file__).resolve()
    assert "site-packages" in here.parts, here
    assert Path(cli_argv()[0]).name == "tbconvert", cli_argv()
    p = subprocess.run([sys.executable, "-c", "import tbconvert; print(tbconvert.__file__)"],
                       cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert "site-packages" in p.stdout, p.stdout


def test_help_and_version():
    p = ok("--help")
    assert "exit codes:" in p.stdout and "convert" in p.stdout
    assert ok("--version").stdout.startswith("tbconvert ")
    for command in ("convert", "tbdev-export", "info", "formats", "hparams", "histograms",
                    "media", "verify"):
        assert "usage: tbconvert " + command in ok(command, "--help").stdout


def test_info_on_every_kind_of_directory_source():
    """Directory sources go through the format registry (which once failed on a regular
    install because ``importlib.util`` was never imported)."""
    for name, needle in (("torch_logdir", "resumed_purged"), ("tensorboardx_logdir", "run_b"),
                         ("tf2_logdir", "legacy_raw_pb"), ("tbdev_export", "torch demo run"),
                         # one run's own directory: every format is sniffed before event files
                         ("tf2_logdir/hparams/trial_0", "session_start_info")):
        assert needle in ok("info", FIXTURES / name).stdout
    rows = json.loads(ok("info", FIXTURES / "tf2_logdir", "--json").stdout)
    assert rows


def test_info_on_one_run_by_relative_path_from_the_project_root():
    """As a user types it in a checkout: a relative path, with the project's own source tree
    in the working directory (the installed package must still be the one that runs)."""
    p = subprocess.run([*cli_argv(), "info", "fixtures/tf2_logdir/hparams/trial_0"],
                       cwd=FIXTURES.parent, env=cli_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert "session_start_info" in p.stdout and "1 run, 3 series, 7 points" in p.stdout


def test_console_script_entry_on_a_directory_source():
    """Exactly what the installed ``tbconvert`` script runs (no ``runpy``, which would import
    ``importlib.util`` on the way and hide a missing import)."""
    code = "import sys; from tbconvert.cli import console_main; sys.exit(console_main())"
    p = subprocess.run([sys.executable, "-c", code, "info", str(FIXTURES / "tensorboardx_logdir")],
                       cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "run_b" in p.stdout, p.stderr[-3000:]


def test_formats():
    from tbconvert import registry
    from tbconvert.formats.base import has_reader, has_writer
    rows = {line.split()[0]: line.split()[1:3] for line in ok("formats").stdout.splitlines()[1:]}
    assert {"tfevents", "tbdev", "parquet", "hdf5", "csv", "html"} <= set(rows)
    yes = {True: "yes", False: "-"}
    assert rows == {name: [yes[has_reader(registry.get(name))], yes[has_writer(registry.get(name))]]
                    for name in registry.names()}


def test_convert_archive_rebuild_and_verify(tmp_path):
    ok("convert", FIXTURES / "torch_logdir", tmp_path / "logs.parquet")
    ok("convert", tmp_path / "logs.parquet", tmp_path / "logs.h5")
    ok("convert", tmp_path / "logs.h5", tmp_path / "rebuilt", "--to", "tfevents")
    # the archives hold the event data, not the projector's files beside it
    p = run_tbconvert("verify", FIXTURES / "torch_logdir", tmp_path / "rebuilt")
    assert p.returncode == 10 and p.stdout.splitlines() == [
        "plugin file train/00000/features/metadata.tsv: only in A",
        "plugin file train/00000/features/tensors.tsv: only in A",
        "plugin file train/projector_config.pbtxt: only in A"], p.stdout + p.stderr
    assert "same data" in ok("verify", FIXTURES / "torch_logdir", tmp_path / "rebuilt",
                             "--no-plugin-files").stdout
    ok("convert", FIXTURES / "torch_logdir", tmp_path / "scalars.csv", "--runs", "^train$")
    with open(tmp_path / "scalars.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["tag"] for r in rows} >= {"loss", "accuracy"} and len(rows) == 205


def test_tbdev_export(tmp_path):
    ok("tbdev-export", FIXTURES / "tbdev_export", "-o", tmp_path / "logs")
    out = ok("info", tmp_path / "logs").stdout
    assert "resumed_purged" in out and "samples/image" in out


def test_hparams_histograms_media(tmp_path):
    ok("hparams", FIXTURES / "tf2_logdir", "-o", tmp_path / "trials.csv")
    with open(tmp_path / "trials.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 2
    ok("histograms", FIXTURES / "torch_logdir", "-o", tmp_path / "hist.parquet")
    assert (tmp_path / "hist.parquet").stat().st_size > 0
    ok("media", FIXTURES / "tensorboardx_logdir", "-o", tmp_path / "media")
    assert any(p.suffix == ".png" for p in (tmp_path / "media").rglob("*"))


def test_verify_differing_sources_exit_10():
    p = run_tbconvert("verify", FIXTURES / "tf2_logdir", FIXTURES / "torch_logdir")
    assert p.returncode == 10 and "only in A" in p.stdout and "Traceback" not in p.stderr


def _through_closed_pipe(*args) -> tuple[int, bytes]:
    """Run the command with stdout and stderr on a pipe whose reader is gone before the
    first write, as with ``tbconvert ... 2>&1 | head`` once head has read its lines."""
    proc = subprocess.Popen([*cli_argv(), *map(str, args)], cwd=CLI_CWD, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.stdout.close()
    return proc.wait(timeout=300), b""


@pytest.mark.parametrize("args,code", [
    (("verify", FIXTURES / "tf2_logdir", FIXTURES / "torch_logdir"), 10),
    (("verify", FIXTURES / "tf2_logdir", FIXTURES / "tf2_logdir"), 0),
    (("info", FIXTURES / "torch_logdir"), 0),
    (("formats",), 0),
    (("--help",), 0),
    (("convert", FIXTURES / "nope", "x.parquet"), 3),
])
def test_closed_pipe_keeps_the_exit_code(args, code):
    assert _through_closed_pipe(*args)[0] == code


def test_pipe_into_head():
    """The shell pipeline users write: the command's own code, nothing on stderr."""
    argv = " ".join(f"'{a}'" for a in [*cli_argv(), "verify", FIXTURES / "tf2_logdir",
                                         FIXTURES / "torch_logdir"])
    p = subprocess.run(["bash", "-c", f"{argv} 2>&1 | head -n 1; exit ${{PIPESTATUS[0]}}"],
                       cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 10, p.stdout + p.stderr
    assert p.stdout.count("\n") == 1 and p.stderr == ""


def test_python_api_quick_start(tmp_path):
    """The README's Python example, on a copy of a bundled logdir, in a fresh process."""
    import shutil
    shutil.copytree(FIXTURES / "torch_logdir", tmp_path / "logs")
    code = (
        "import numpy as np, tbconvert\n"
        "df = tbconvert.scalars('logs/', runs='^train', tags='loss')\n"
        "assert len(df) > 0, df\n"
        "data = tbconvert.read('logs/')\n"
        "loss = data.scalars('train', 'loss')\n"
        "assert np.column_stack((loss.steps, loss.values)).shape == (50, 2)\n"
        "report = tbconvert.convert('logs/', 'logs.parquet')\n"
        "print(report.summary_lines())\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert (tmp_path / "logs.parquet").is_file()
