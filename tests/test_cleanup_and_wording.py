"""What a failed first sync and a forced ``tbdev-export`` leave behind, and what the summary
says: a first ``sync`` that does not complete takes its dataset directory away again, ``--force``
replaces a ``tbdev-export`` output whole whatever was there, headlines count what they name,
and a table or extraction reports hidden points only of the data it writes."""

from __future__ import annotations

import ast
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_CWD, FIXTURES, LOGDIRS, can_mount_tmpfs, cli_argv, cli_env, run_tbconvert

import tbconvert
from tbconvert import kinds
from tbconvert.formats.parquet import MARKER_FILE
from tbconvert.incremental.lock import LOCK_FILE
from tbconvert.output import TMP_MARK
from tbconvert.report import Report, headline, plural

TORCH = FIXTURES / "torch_logdir"
EXPORT_ROOT = FIXTURES / "tbdev_export"
EXP_ID = "9bFlIkpYt5HfavHYMD5hzQ"
EXPERIMENT = EXPORT_ROOT / f"experiment_{EXP_ID}"
SYNC_SOURCES = [TORCH, EXPORT_ROOT, EXPERIMENT]

needs_tmpfs = pytest.mark.skipif(not can_mount_tmpfs(),
                                 reason="needs a private tmpfs (unshare -Urm)")


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: a file's bytes, None for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _file_size_limit(limit: int):
    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limited


def _tbconvert_limited(*args, limit: int = 16) -> subprocess.CompletedProcess:
    """``tbconvert ARGS`` with a file-size limit below any file it writes (the lock too):
    whatever the command tries to write fails, as on a full disk."""
    return subprocess.run([*cli_argv(), *map(str, args)], cwd=CLI_CWD, env=cli_env(),
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=_file_size_limit(limit))


def _one_error_line(err: str, words: str) -> None:
    assert "Traceback" not in err, err[-2000:]
    assert err.count("\n") == 1 and err.startswith("tbconvert: error: ") and words in err, err


# -- a first sync that does not complete leaves no dataset directory -------------------------

@pytest.mark.parametrize("src", SYNC_SOURCES, ids=["logdir", "export_root", "experiment"])
def test_a_first_sync_that_cannot_write_removes_the_directories_it_made(tmp_path, src):
    p = _tbconvert_limited("sync", src, tmp_path / "new" / "ds")
    assert p.returncode == 9, p.stderr
    _one_error_line(p.stderr, "file-size limit reached; partial output was removed")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("src", SYNC_SOURCES, ids=["logdir", "export_root", "experiment"])
def test_a_failed_sync_leaves_a_directory_that_was_there(tmp_path, src):
    """An empty directory given as DST stays; so does a dataset that an earlier sync
    committed, as it was."""
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _tbconvert_limited("sync", src, empty)
    assert p.returncode == 9, p.stderr
    assert empty.is_dir() and list(empty.iterdir()) == []
    dataset = tmp_path / "dataset"
    tbconvert.sync(src, dataset)
    before = _tree(dataset)
    p = _tbconvert_limited("sync", src, dataset)
    assert p.returncode == 9, p.stderr
    _one_error_line(p.stderr, "file-size limit reached")
    assert _tree(dataset) == before


@needs_tmpfs
@pytest.mark.parametrize("src", SYNC_SOURCES, ids=["logdir", "export_root", "experiment"])
def test_a_first_sync_on_a_full_disk_leaves_the_disk_empty(tmp_path, src):
    """A 64 KiB file system of the test's own: the parts fit, the manifest does not (the
    export's parts already do not)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    script = ('mount -t tmpfs -o size=64k tmpfs "$1" || exit 99; shift; "$@"; rc=$?; '
              'echo "left: $(ls -A "$MNT")" >&2; exit $rc')
    p = subprocess.run(["unshare", "-Urm", "sh", "-c", script, "sh", str(mnt), *cli_argv(),
                        "sync", str(src), str(mnt / "ds")],
                       cwd=CLI_CWD, capture_output=True, text=True, timeout=120,
                       env=cli_env(MNT=str(mnt)))
    lines = p.stderr.splitlines()
    assert p.returncode == 9, p.stderr
    assert lines[0].startswith("tbconvert: error: ") and lines[0].endswith(
        "the disk is full; partial output was removed"), p.stderr
    assert "Traceback" not in p.stderr
    assert lines[-1] == "left: ", p.stderr


@pytest.fixture(scope="module")
def long_logdir(tmp_path_factory) -> Path:
    """A logdir whose first sync takes a good second after its lock is taken."""
    from test_jobs import scalar_logdir
    return scalar_logdir(tmp_path_factory.mktemp("long") / "logs", runs=4, points=300_000)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_first_sync_stopped_midway_leaves_no_directory(tmp_path, long_logdir, sig, code):
    """Ctrl-C or SIGTERM once the sync holds its new dataset's lock: the one line says the
    dataset was left as it was, and it was: there is none, the directory included."""
    for attempt in range(5):
        dst = tmp_path / f"ds{attempt}"
        p = subprocess.Popen([*cli_argv(), "sync", str(long_logdir), str(dst)], cwd=CLI_CWD,
                             env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        deadline = time.monotonic() + 60
        while not (dst / LOCK_FILE).exists() and p.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.002)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:       # finished before the signal came: a complete dataset
            assert (dst / MARKER_FILE).exists()
            continue
        assert p.returncode == code, err
        _one_error_line(err, "; the dataset was left as it was")
        assert not dst.exists(), sorted(p.name for p in dst.iterdir())
        return
    pytest.fail("every sync finished before the signal came")


# -- tbdev-export --force replaces the whole output -------------------------------------------

def _runs(logdir: Path) -> list[str]:
    return sorted(tbconvert.read(logdir).runs)


def _pickled_experiment(root: Path, exp_id: str) -> Path:
    """A copy of the fixture's experiment whose string tensors are pickled (TensorBoard 2.3):
    refused without --allow-pickle."""
    bad = root / f"experiment_{exp_id}"
    shutil.copytree(EXPERIMENT, bad)
    np.savez(bad / "tensors" / "1795299211.678016.npz",
             np.array(["a"], dtype=object), np.array(["b"], dtype=object))
    return bad


def _no_temporaries(where: Path) -> None:
    assert not [p for p in where.rglob("*") if TMP_MARK in p.name]


def test_forced_export_of_a_root_replaces_a_single_experiments_logdir(tmp_path):
    out = tmp_path / "LX"
    assert run_tbconvert("tbdev-export", EXPERIMENT, "-o", out, "-q").returncode == 0
    single = _runs(out)
    p = run_tbconvert("tbdev-export", EXPORT_ROOT, "-o", out, "--force", "-q")
    assert p.returncode == 0, p.stderr
    assert [p.name for p in out.iterdir()] == [EXP_ID]
    assert _runs(out) == [f"{EXP_ID}/{run}" for run in single]     # each run once
    _no_temporaries(tmp_path)


def test_forced_export_of_one_experiment_replaces_a_roots_logdir(tmp_path):
    out = tmp_path / "LX"
    assert run_tbconvert("tbdev-export", EXPORT_ROOT, "-o", out, "-q").returncode == 0
    p = run_tbconvert("tbdev-export", EXPERIMENT, "-o", out, "--force", "-q")
    assert p.returncode == 0, p.stderr
    assert EXP_ID not in [p.name for p in out.iterdir()]
    assert not any(run.startswith(f"{EXP_ID}/") for run in _runs(out))
    _no_temporaries(tmp_path)


def test_forced_export_of_a_root_holds_the_experiments_converted_and_nothing_else(tmp_path):
    root = tmp_path / "export"
    shutil.copytree(EXPERIMENT, root / EXPERIMENT.name)
    bad_id = "B" * 22
    _pickled_experiment(root, bad_id)
    out = tmp_path / "logs"
    tbconvert.convert(EXPERIMENT, out, from_format="tbdev", to_format="tfevents")
    failed = []
    report = tbconvert.tbdev_export(root, out, force=True,
                                    on_failure=lambda name, exc: failed.append(name))
    assert report.outputs == [str(out / EXP_ID)]
    assert [name for name, _ in report.failures] == [bad_id] and len(failed) == 1
    assert "allow_pickle=True" in str(report.failures[0][1])
    assert [p.name for p in out.iterdir()] == [EXP_ID]
    assert not any(TMP_MARK in i.message for i in report.issues)
    _no_temporaries(tmp_path)


def test_forced_export_of_a_root_none_of_which_converts_leaves_the_old_output(tmp_path):
    root = tmp_path / "export"
    bad_id = "B" * 22
    _pickled_experiment(root, bad_id)
    out = tmp_path / "logs"
    assert run_tbconvert("tbdev-export", EXPORT_ROOT, "-o", out, "-q").returncode == 0
    before = _tree(out)
    p = run_tbconvert("tbdev-export", root, "-o", out, "--force")
    assert p.returncode == 5, p.stderr
    # one line: the one experiment's error says that nothing was written
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("tbconvert: error: experiment "), \
        p.stderr
    assert _tree(out) == before
    _no_temporaries(tmp_path)
    p = run_tbconvert("tbdev-export", root, "-o", out, "--force", "--allow-pickle", "-q")
    assert p.returncode == 0, p.stderr
    assert [p.name for p in out.iterdir()] == [bad_id]


def test_the_tbdev_docs_python_examples_in_order_leave_one_copy_of_each_run(tmp_path,
                                                                           monkeypatch):
    """docs/tbdev.md: ``convert`` of one experiment into ``logs/``, then ``tbdev_export`` of
    the export root into ``logs/`` with ``force=True``."""
    text = (FIXTURES.parent / "docs" / "tbdev.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) == 2 and "force=True" in blocks[1]
    shutil.copytree(EXPERIMENT, tmp_path / EXPERIMENT.name)
    shutil.copytree(EXPORT_ROOT, tmp_path / "export")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for code in blocks:
        exec(compile(code, "docs/tbdev.md", "exec"), namespace)
    logs = tmp_path / "logs"
    assert [p.name for p in logs.iterdir()] == [EXP_ID]
    runs = _runs(logs)
    assert runs and all(run.startswith(f"{EXP_ID}/") for run in runs)


# -- headlines count what they name ------------------------------------------------------------

def _conversion_reports(tmp_path: Path):
    for name in [*LOGDIRS, "tbdev_export"]:
        src = FIXTURES / name
        if name == "tbdev_export":
            src = EXPERIMENT
        for to in ("tfevents", "tbdev", "csv", "html"):
            dst = tmp_path / f"{name}-{to}" if to != "csv" else tmp_path / f"{name}.csv"
            yield f"{name} to {to}", tbconvert.convert(src, dst, to_format=to)
    yield "media", tbconvert.extract_media(TORCH, tmp_path / "media")
    for table in ("histograms_table", "tensors_table", "hparams_table"):
        report = Report()
        getattr(tbconvert, table)(TORCH, report=report)
        yield table, report


def test_every_headline_of_a_kind_that_counts_items_gives_their_number(tmp_path):
    seen = set()
    for what, report in _conversion_reports(tmp_path):
        by_kind: dict[str, list] = {}
        for issue in report.issues:
            by_kind.setdefault(issue.kind, []).append(issue)
        for kind, issues in by_kind.items():
            unit = kinds.KINDS[kind].counts
            if unit is None:
                continue
            seen.add(kind)
            line = headline(kind, issues)
            n = sum(i.count for i in issues)
            assert re.search(rf"(^|\D){n}\D", line) and " times" not in line, (what, line)
    # the fixtures hold kinds that count points, markers and run-level events
    assert {"restart_markers_not_written", "run_records_dropped", "not_in_web_view",
            "hidden_points_left_out", "not_in_table"} <= seen


def test_restart_markers_are_counted_not_the_runs_they_are_in(tmp_path):
    report = tbconvert.convert(TORCH, tmp_path / "logs", to_format="tfevents")
    markers = [i for i in report.issues if i.kind == "restart_markers_not_written"]
    assert sum(i.count for i in markers) == 3 and len({i.run for i in markers}) == 2
    assert "note: 3 restart markers of 2 runs not written (their effect is in which points " \
           "were)" in report.summary_lines()
    # an export holds what TensorBoard shows, too: the markers are no loss there either
    report = tbconvert.convert(TORCH, tmp_path / "export", to_format="tbdev")
    assert "note: 3 restart markers of 2 runs not written (their effect is in which points " \
           "were)" in report.summary_lines()
    assert not [i for i in report.lost if i.kind == "run_records_dropped"]


def test_one_of_a_thing_is_said_in_the_singular(tmp_path):
    report = Report()
    tbconvert.histograms_table(TORCH, report=report)      # resumed_purged/act: 1 hidden point
    assert report.summary_lines()[0] == \
        "note: 1 point that TensorBoard's restart rule hides was left out"
    from tbconvert.tbparse import SummaryReader
    reader = SummaryReader(str(TORCH / "resumed_purged"))
    reader.histograms      # noqa: B018 - reading is what reports
    assert any(i.message.endswith("act: 1 point TensorBoard's restart rule hides was left out "
                                  "(restarts='keep-all' keeps them)")
               for i in reader.report.issues)
    assert plural(1, "series") == "1 series" and plural(2, "run-level event") == \
        "2 run-level events"


@pytest.mark.parametrize("name", [*LOGDIRS, "tbdev_export"])
def test_no_command_says_one_of_something_in_the_plural(tmp_path, name):
    """"1 points", "1 graphs points", "1 files", "1 runs": nowhere on stderr, nor in the last
    line of ``info``."""
    src = FIXTURES / name
    one_plural = re.compile(r"(^|[^\w.])1 (?!series\b)[a-z_]+s\b")
    commands = [["convert", src, tmp_path / "a", "--to", to, "-v"]
                for to in ("tfevents", "tbdev", "csv", "html")]
    commands += [["media", src, "-o", tmp_path / "m", "-v"],
                 ["hparams", src, "-o", tmp_path / "h.csv", "-v"],
                 ["histograms", src, "-o", tmp_path / "hi.csv", "-v"],
                 ["info", src, "-v"]]
    for args in commands:
        p = run_tbconvert(*args)
        assert p.returncode == 0, (args, p.stderr)
        said = p.stderr + (p.stdout.splitlines()[-1] if args[0] == "info" else "")
        bad = [line for line in said.splitlines() if one_plural.search(line)]
        assert not bad, (args[0], bad)
        shutil.rmtree(tmp_path)
        tmp_path.mkdir()
    assert run_tbconvert("info", TORCH / "train" / "1795299212.1548328").stdout.splitlines()[-1] \
        == "1 run, 5 series, 5 points"


def test_every_kind_reported_with_a_count_says_what_it_counts():
    """A kind whose issues carry a count of items names what it counts in the catalogue:
    its headline then says how many, not how many issues."""
    found = {}
    for path in sorted(Path(tbconvert.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            literals = []
            if name == "add" and node.args and any(
                    k.arg == "count" and not (isinstance(k.value, ast.Constant)
                                              and k.value.value == 1) for k in node.keywords):
                literals = node.args[:1]
            elif name == "_lose_tensors":       # reports its kind with the points lost
                literals = node.args
            for arg in literals:
                if isinstance(arg, ast.Constant) and arg.value in kinds.KINDS:
                    found.setdefault(arg.value, f"{path.name}:{node.lineno}")
    assert len(found) > 20
    unnamed = {k: where for k, where in found.items() if kinds.KINDS[k].counts is None}
    assert not unnamed, f"kinds reported with a count but no 'counts' in kinds.py: {unnamed}"


# -- hidden points are reported only of the data a table or extraction writes ------------------

def _hidden(report: Report) -> list[tuple[str, str, int]]:
    return sorted((i.run, i.tag, i.count) for i in report.issues
                  if i.kind == "hidden_points_left_out")


def test_tables_report_the_hidden_points_of_their_own_data(tmp_path):
    """torch_logdir's restart hides 10 points of the scalar ``resumed_purged/loss`` and 1 of
    the histogram ``resumed_purged/act``."""
    expected = {"scalars_table": [("resumed_purged", "loss", 10)],
                "histograms_table": [("resumed_purged", "act", 1)],
                "tensors_table": [("resumed_purged", "act", 1)],
                "text_table": [], "images_table": [], "audio_table": [], "hparams_table": []}
    for table, hidden in expected.items():
        report = Report()
        getattr(tbconvert, table)(TORCH, report=report)
        assert _hidden(report) == hidden, table
        report = Report()
        getattr(tbconvert, table)(TORCH, report=report, restarts="keep-all")
        assert _hidden(report) == [], table
    report = Report()
    tbconvert.tensors_table(TORCH, scalars=True, report=report)
    assert _hidden(report) == [("resumed_purged", "act", 1), ("resumed_purged", "loss", 10)]
    assert _hidden(tbconvert.extract_media(TORCH, tmp_path / "media")) == []


def test_media_and_hparams_say_nothing_of_hidden_scalars(tmp_path):
    for args in (["media", TORCH, "-o", tmp_path / "media"],
                 ["hparams", TORCH, "-o", tmp_path / "trials.csv"]):
        p = run_tbconvert(*args)
        assert p.returncode == 0 and "restart rule" not in p.stderr, (args[0], p.stderr)
    p = run_tbconvert("histograms", TORCH, "-o", tmp_path / "h.csv")
    assert p.returncode == 0
    assert "note: 1 point that TensorBoard's restart rule hides was left out" in p.stderr


def test_hparams_reports_the_hidden_points_of_a_metric(tmp_path):
    """A trial resumed after its metric was logged: the restart hides the metric's last point,
    so the table's value is an earlier one, and the note says why. A run that is no metric
    says nothing, whatever its restarts hide."""
    from test_sync import Events, scalar, session_start
    trial = TORCH / "train" / "1795299212.1548328"
    logs = tmp_path / "logs"
    shutil.copytree(trial, logs / "train" / trial.name)
    Events(logs / "train" / trial.name / "events.out.tfevents.1999999999.resumed").write_many(
        [session_start(0), scalar(5, tags=("hparam/accuracy",)),
         scalar(6, tags=("hparam/accuracy",)), session_start(6)])
    Events(logs / "other" / "events.out.tfevents.1999999999.resumed").write_many(
        [session_start(0), *(scalar(s, tags=("loss",)) for s in range(4)), session_start(2)])
    report = Report()
    table = tbconvert.hparams_table(logs, report=report)
    assert table.column("hparam/accuracy").to_pylist() == [2.5]
    assert _hidden(report) == [(f"train/{trial.name}", "hparam/accuracy", 1)]
    report = Report()
    table = tbconvert.hparams_table(logs, report=report, restarts="keep-all")
    assert table.column("hparam/accuracy").to_pylist() == [3.0] and _hidden(report) == []
    report = Report()
    tbconvert.scalars_table(logs, report=report)
    assert _hidden(report) == [("other", "loss", 2), (f"train/{trial.name}", "hparam/accuracy", 1)]


def test_write_failures_name_the_destination_and_the_cause(tmp_path, capsys):
    import errno as errno_

    from tbconvert import output
    from tbconvert.errors import OutputError
    assert "read-only file system" in output.describe_os_error(
        OSError(errno_.EROFS, "Read-only file system"), "out")
    # a temporary name in a message is told as the destination it stands for
    hidden = tmp_path / f".out{TMP_MARK}{output._owner()}-0123456789ab" / "run"
    told = output._final_names(f"{hidden}: the disk is full")
    assert told == f"{tmp_path / 'out' / 'run'}: the disk is full"
    # a file where a parent directory should be
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputError, match="a file is in the way"):
        output.AtomicOutput(tmp_path / "afile" / "sub" / "out", force=False, directory=True)


def test_temporary_names_are_told_without_mangling_the_words_before_them():
    from tbconvert import output
    hidden = f".out.parquet{TMP_MARK}{output._owner()}-0123456789ab"
    assert output._final_names(f"x: .a file {hidden}: full") == "x: .a file out.parquet: full"


def test_a_sync_of_an_export_root_stopped_says_what_it_left(tmp_path, monkeypatch, capsys):
    # (a plain logdir's sync says the dataset was left as it was; a root's, that each
    # experiment's dataset not yet synced was)
    from tbconvert import incremental
    from tbconvert.cli import main

    def stopped(*_args, **_kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(incremental, "_sync_experiments", stopped)
    assert main(["sync", str(FIXTURES / "tbdev_export"), str(tmp_path / "ds")]) == 130
    assert capsys.readouterr().err == ("tbconvert: error: interrupted; the dataset of each "
                                       "experiment not yet synced was left as it was\n")
    assert main(["sync", str(FIXTURES / "torch_logdir"), str(tmp_path / "ds2")]) == 0
