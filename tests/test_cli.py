"""The command line: exit codes, one-line errors, no tracebacks."""

import shutil
import subprocess
import sys

import numpy as np
from helpers import CLI_CWD, FIXTURES, cli_env
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert.api import open_writer
from tbconvert.cli import main
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries


def run_cli(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_convert_and_info(tmp_path, capsys):
    out = tmp_path / "logs"
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", out, "--to", "tfevents")
    assert code == 0, err
    assert_same_view(tb_view(out), tb_view(FIXTURES / "tf2_logdir"))
    code, text, _ = run_cli(capsys, "info", out)
    assert code == 0
    assert "hparams/trial_0" in text and "6 runs" in text


def test_missing_source_exit_3(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", tmp_path / "nope", tmp_path / "o", "--to", "tfevents")
    assert code == 3 and err.startswith("tbconvert: error:") and "nope" in err


def test_directory_destination_needs_to(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", tmp_path / "o")
    assert code == 2 and "--to" in err


def test_unknown_format_suggests(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", tmp_path / "o", "--to", "tfevent")
    assert code == 2 and "Did you mean 'tfevents'" in err


def test_existing_output_exit_6_then_force(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "x").write_text("x")
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", out, "--to", "tfevents")
    assert code == 6 and "--force" in err and (out / "x").exists()
    code, _, _ = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", out, "--to", "tfevents", "--force")
    assert code == 0 and not (out / "x").exists()


def test_bad_regex_exit_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", tmp_path / "o", "--to",
                           "tfevents", "--runs", "(")
    assert code == 2 and "--runs" in err


def test_strict_turns_skipped_data_into_exit_8(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "tensorboardx_logdir" / "run_b", src)
    f = next(p for p in src.iterdir() if "tfevents" in p.name)
    f.write_bytes(f.read_bytes()[:-5])
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "o", "--to", "tfevents")
    assert code == 0 and "truncated record" in err
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "o2", "--to", "tfevents", "--strict")
    assert code == 8 and "--strict" in err


def test_selection_by_run_and_tag(tmp_path, capsys):
    out = tmp_path / "o"
    code, _, _ = run_cli(capsys, "convert", FIXTURES / "torch_logdir", out, "--to", "tfevents",
                         "--runs", "^train$", "--tags", "^loss")
    assert code == 0
    view = tb_view(out)
    assert list(view) == ["train"]
    assert sorted(view["train"]["tags"]) == ["loss", "loss_hi", "loss_lo"]


def test_garbage_source_is_a_clear_error(tmp_path, capsys):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01garbage" * 100)
    code, _, err = run_cli(capsys, "info", junk)
    assert code == 3 and "cannot tell the format" in err


def test_a_source_with_nothing_to_read_says_what_was_looked_for(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, "info", tmp_path / "empty")
    assert code == 3 and "it is empty; check the path" in err and "--from" not in err
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    code, _, err = run_cli(capsys, "convert", tmp_path / "notes", tmp_path / "o.parquet")
    assert code == 3 and "no event files at any depth" in err and "check the path" in err


def test_an_export_file_named_instead_of_its_directory_is_told_so(tmp_path, capsys):
    experiment = FIXTURES / "tbdev_export" / "experiment_9bFlIkpYt5HfavHYMD5hzQ"
    code, _, err = run_cli(capsys, "tbdev-export", experiment / "metadata.json", "-o",
                           tmp_path / "logs")
    assert code == 3 and f"name the directory that holds it ({experiment})" in err


def test_a_mistyped_option_is_told_with_its_command_and_nearest_spelling(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", FIXTURES / "torch_logdir", tmp_path / "o.parquet",
                           "--froce")
    assert code == 2 and "usage: tbconvert convert" in err
    assert "unrecognized arguments: --froce (did you mean --force?)" in err
    assert not (tmp_path / "o.parquet").exists()


def test_formats_lists_tfevents(capsys):
    code, out, _ = run_cli(capsys, "formats")
    assert code == 0 and "tfevents" in out
    html = next(line for line in out.splitlines() if line.startswith("html "))
    assert "--to html" in html and "contents" not in html


def test_formats_tells_what_this_installation_lacks(monkeypatch, capsys):
    """Without plotly the web view cannot be written, without pyarrow no Parquet: the table
    says so, and names what to install (nothing is imported to find out)."""
    import importlib.util
    real = importlib.util.find_spec
    gone = {"plotly", "pyarrow"}
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in gone else real(name, *a))
    code, out, _ = run_cli(capsys, "formats")
    rows = {line.split()[0]: line.split("  ") for line in out.splitlines()[1:-1]}
    assert code == 0
    assert "needs pyarrow" in rows["parquet"][1] and "needs pyarrow" in rows["parquet"][2]
    assert "needs pyarrow, plotly" in " ".join(rows["html"])
    assert "needs pyarrow" in " ".join(rows["csv"])
    assert "needs" not in " ".join(rows["tfevents"] + rows["hdf5"] + rows["tbdev"])
    assert out.splitlines()[-1].endswith("-m pip install plotly pyarrow)"), out


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tbconvert", "info", str(FIXTURES / "tf2_logdir")],
                          cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "legacy_raw_pb" in proc.stdout


def test_interrupt_while_starting_up_is_one_line(monkeypatch, capsys):
    """Ctrl-C or SIGTERM while the commands are still being imported: one line, the right code."""
    import tbconvert.cli as cli

    for raised, code, word in ((KeyboardInterrupt, 130, "interrupted"), (cli.Terminated, 143, "terminated")):
        def slow_start(exc=raised):
            raise exc()
        monkeypatch.setattr(cli, "build_parser", slow_start)
        assert main(["formats"]) == code
        err = capsys.readouterr().err
        assert err.startswith(f"tbconvert: error: {word}") and err.count("\n") == 1, err


def test_signal_swallowed_where_it_landed_still_stops_the_command(monkeypatch, capsys):
    """A signal handled inside a finaliser (or another place Python cannot unwind from) is
    not printed as "Exception ignored" and lost: it comes again and stops the command with
    one line."""
    import signal
    import time

    import tbconvert.cli as cli

    class Finalised:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)

    def busy_start():
        Finalised()               # the handler's exception is swallowed in __del__
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            pass
        raise AssertionError("the signal was lost")
    monkeypatch.setattr(cli, "build_parser", busy_start)
    assert main(["formats"]) == 143
    err = capsys.readouterr().err
    # (before the command is known, nothing can have been written)
    assert err == "tbconvert: error: terminated\n", err


def test_signal_that_a_c_import_turns_into_another_error_is_still_an_interrupt(monkeypatch, capsys):
    """A signal inside an extension module's import can surface as that module's ImportError
    (numpy's, when its own imports are cut short): still one line and 130 / 143, not an
    internal error with a traceback."""
    import signal

    import tbconvert.cli as cli

    for signum, code, word in ((signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")):
        def cut_short_import(signum=signum):
            try:
                signal.raise_signal(signum)
            except KeyboardInterrupt:
                raise ImportError("PyCapsule_Import could not import module") from None
        monkeypatch.setattr(cli, "build_parser", cut_short_import)
        assert main(["formats"]) == code
        err = capsys.readouterr().err
        assert err.startswith(f"tbconvert: error: {word}") and err.count("\n") == 1, err
        assert "Traceback" not in err


# --------------------------------------------------------------------------------------------
# Results that hold nothing are said out loud; --strict makes them an error
# --------------------------------------------------------------------------------------------

def test_unmatched_runs_or_tags_say_so_in_one_line(tmp_path, capsys):
    src = FIXTURES / "torch_logdir"
    cases = [
        (["info", src, "--runs", "nomatch"], "--runs 'nomatch' matched none of the 7 run(s)"),
        (["convert", src, tmp_path / "a.csv", "--tags", "zzz"], "--tags 'zzz' matched none"),
        (["convert", src, tmp_path / "b", "--to", "tfevents", "--runs", "zzz"], "--runs 'zzz'"),
        (["histograms", src, "-o", tmp_path / "h.csv", "--runs", "zzz"], "--runs 'zzz'"),
        (["hparams", src, "-o", tmp_path / "p.csv", "--tags", "zzz"], "--tags 'zzz'"),
        (["media", src, "-o", tmp_path / "m", "--runs", "zzz"], "--runs 'zzz'"),
        (["verify", src, src, "--runs", "zzz"], "--runs 'zzz'"),
        (["tbdev-export", FIXTURES / "tbdev_export", "-o", tmp_path / "t", "--runs", "zzz"],
         "--runs 'zzz' matched none of the 6 run(s)"),
    ]
    for argv, needle in cases:
        code, _, err = run_cli(capsys, *argv)
        assert code == 0, (argv, err)
        lines = [line for line in err.splitlines() if needle in line]
        assert len(lines) == 1 and lines[0].startswith("tbconvert: warning: "), (argv, err)
        force = [] if argv[0] in ("info", "verify") else ["--force"]
        code, _, err = run_cli(capsys, *argv, "--strict", *force)
        last = err.splitlines()[-1]
        assert code == 8 and last.startswith("tbconvert: error: --strict: ") and needle in last, (argv, err)


def test_converting_a_source_without_runs_says_so(tmp_path, capsys):
    """An archive may hold no run (a selection that matched nothing made it, or a sync of a
    logdir not yet written to): its conversion is an empty output, said in one line."""
    empty = tmp_path / "empty.parquet"
    run_cli(capsys, "convert", FIXTURES / "torch_logdir", empty, "--runs", "zzz")
    for dst in (tmp_path / "logs", "-"):
        to = ["--to", "tfevents"] if dst != "-" else []
        code, out, err = run_cli(capsys, "convert", empty, dst, *to)
        shown = "standard output" if dst == "-" else dst
        assert code == 0 and err == f"tbconvert: warning: {empty} holds no runs; {shown} holds no " \
            "data\n", err
        code, out, err = run_cli(capsys, "convert", empty, dst, *to, "--strict", "--force")
        assert code == 8 and err.endswith(f"--strict: {empty} holds no runs; {shown} holds no "
                                          "data\n"), err
    code, _, err = run_cli(capsys, "convert", FIXTURES / "torch_logdir", tmp_path / "c.parquet",
                           "--runs", "zzz")
    assert "holds no runs" not in err, err     # the selection's own line says it


def test_a_selection_that_matches_is_not_reported(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", FIXTURES / "torch_logdir", tmp_path / "a.csv",
                           "--runs", "^train$", "--tags", "^loss$", "--strict")
    assert code == 0 and "matched none" not in err, err


def test_extraction_of_a_source_without_that_data_says_so(tmp_path, capsys):
    src = FIXTURES / "tf2_logdir" / "hparams"   # only the hparams experiment: no histograms, media
    nohp = FIXTURES / "torch_logdir" / "multi"
    cases = [(["histograms", src, "-o", tmp_path / "h.csv"], "holds no histograms"),
             (["media", src, "-o", tmp_path / "m"], "holds no images, audio or text"),
             (["hparams", nohp, "-o", tmp_path / "p.csv"], "holds no hparams trials")]
    for argv, needle in cases:
        code, _, err = run_cli(capsys, *argv)
        assert code == 0 and "tbconvert: warning: " in err and needle in err, err
        code, _, err = run_cli(capsys, *argv, "--strict", "--force")
        last = err.splitlines()[-1]
        assert code == 8 and last.startswith("tbconvert: error: --strict: ") and needle in last, err


def test_extraction_narrowed_to_nothing_names_the_selection(tmp_path, capsys):
    src = FIXTURES / "torch_logdir"      # holds histograms, images, audio and text
    for argv, needle in ((["histograms", src, "-o", tmp_path / "h.csv"], "holds no histograms"),
                         (["media", src, "-o", tmp_path / "m"], "holds no images, audio or text")):
        code, _, err = run_cli(capsys, *argv, "--tags", "^loss$")
        assert code == 0 and f"(the runs and tags --tags '^loss$' select) {needle}" in err, err
    assert not (tmp_path / "m").exists()    # "no files were written": nor a directory
    # --runs of hparams chooses among the trial runs, and says so
    code, _, err = run_cli(capsys, "hparams", src, "-o", tmp_path / "p.csv", "--runs", "^train$")
    assert code == 0 and "matched none of the 1 trial run(s) in the source" in err, err


def test_media_to_standard_output_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "media", FIXTURES / "torch_logdir", "-o", "-")
    assert code == 2 and "standard output (-) cannot hold" in err, err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# Messages and help
# --------------------------------------------------------------------------------------------

def test_to_format_and_suffix_must_agree(tmp_path, capsys):
    for to, name in (("csv", "x.parquet"), ("parquet", "x.csv"), ("tfevents", "x.h5")):
        code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", tmp_path / name,
                               "--to", to)
        assert code == 2 and err.startswith(f"tbconvert: error: {tmp_path / name}: the name says")
        assert not (tmp_path / name).exists()
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", tmp_path / "x.pq",
                           "--to", "parquet")
    assert code == 0, err


def test_tables_to_stdout(capsys):
    code, out, err = run_cli(capsys, "hparams", FIXTURES / "tf2_logdir", "-o", "-")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("run,") and len(lines) == 3 and lines[1].startswith("hparams/trial_0,")
    code, out, err = run_cli(capsys, "histograms", FIXTURES / "tf2_logdir", "-o", "-")
    assert code == 0 and out.startswith("run,tag,step,wall_time,left,right,count\n"), err


def test_help_says_what_each_command_does(capsys):
    for command in ("info", "verify"):
        assert main([command, "--help"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "--strict" in out and "output is still written" not in out
    for command in ("convert", "hparams", "media"):
        assert main([command, "--help"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "output is still written" in out
        assert "130" not in out and "exit codes: see tbconvert --help" in out
    assert main(["--help"]) == 0
    assert "130  interrupted" in capsys.readouterr().out


def test_api_errors_name_the_keyword_and_the_cli_the_option(tmp_path, capsys):
    import pytest

    import tbconvert
    from tbconvert.errors import OutputExistsError
    dst = tmp_path / "o.parquet"
    dst.write_bytes(b"x")
    with pytest.raises(OutputExistsError) as info:
        tbconvert.convert(FIXTURES / "tf2_logdir", dst)
    assert "force=True" in str(info.value) and "--force" not in str(info.value)
    code, _, err = run_cli(capsys, "convert", FIXTURES / "tf2_logdir", dst)
    assert code == 6 and "--force" in err and "force=True" not in err


def test_summary_reads_as_sentences():
    from tbconvert.report import Report
    report = Report()
    for tag, n in (("a", 3), ("b", 4)):
        report.add("not_in_table", f"run/{tag}: {n} histograms points are not scalars",
                   run="run", tag=tag, count=n)
    report.add("experiment_facts_sidecar", "kept in tbconvert-experiment.json", lost=False)
    report.add("bad_line", "x")
    report.add("unsafe_path", "y")
    report.add("unsafe_path", "z")
    lines = report.summary_lines()
    assert lines[0] == ("warning: 7 points of 2 series were not written to the table (not "
                        "scalars; the hparams, histograms and media commands write those)")
    assert "note: the experiment's name, description and times were kept in a file beside the runs" in lines
    assert "warning: bad line" in lines and "warning: unsafe path: 2 times" in lines
    assert not any("in all" in line or "1 time" in line for line in lines)


def test_info_columns_line_up_with_wide_characters(tmp_path, capsys):
    from test_sync import Events, scalar

    from tbconvert.cli.info import _columns
    Events(tmp_path / "训练" / "events.out.tfevents.1.host").write_many(
        scalar(s, tags=("损失", "loss", "🎉acc")) for s in range(5))
    code, out, err = run_cli(capsys, "info", tmp_path)
    assert code == 0, err
    rows = [line for line in out.splitlines() if "scalars" in line]
    assert len(rows) == 3
    assert len({_columns(line[:line.index("scalars")]) for line in rows}) == 1, rows


def test_messages_name_standard_output_and_quiet_strict_points_nowhere_hidden(tmp_path, capsys):
    code, _, err = run_cli(capsys, "hparams", FIXTURES / "torch_logdir" / "multi", "-o", "-")
    assert code == 0 and "; standard output has no rows" in err, err
    code, _, err = run_cli(capsys, "convert", FIXTURES / "torch_logdir", tmp_path / "s.csv",
                           "--strict", "-q")
    assert code == 8 and "run without -q to see which" in err and "above" not in err, err


def test_info_tells_runs_whose_tags_were_left_out_from_runs_without_data(capsys):
    code, out, _ = run_cli(capsys, "info", FIXTURES / "tensorboardx_logdir", "--tags", "^loss$")
    rows = {line.split()[0]: line for line in out.splitlines()[1:-1]}
    assert code == 0
    assert "loss" in rows["run_a"] and "(1 tag left out by --tags)" in rows["run_b/compare/x"]
    assert "(4 tags left out by --tags)" in rows["run_a/1795299215.1055038"]
    found = tbconvert.info(FIXTURES / "tensorboardx_logdir", tags="^loss$")
    assert [r.tags_left_out for r in found.runs] == [10, 4, 0, 1, 1]
    assert tbconvert.info(FIXTURES / "tensorboardx_logdir").to_dict()["runs"][0][
        "tags_left_out"] == 0


def test_paths_that_name_nothing_are_usage_errors(tmp_path, capsys):
    """An empty path would be the current directory, and ``-`` a file named so: neither is
    what was meant."""
    logdir = FIXTURES / "torch_logdir"
    for argv, said in ((["info", ""], "SRC is an empty path"),
                       (["convert", logdir, ""], "DST is an empty path"),
                       (["verify", logdir, ""], "B is an empty path"),
                       (["convert", "-", tmp_path / "x.csv"], "reading standard input (-) is "
                                                          "not supported")):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and said in err, (argv, err)
    assert not (tmp_path / "x.csv").exists()


def test_no_command_lists_the_commands(capsys):
    code, out, err = run_cli(capsys)
    assert code == 2 and out == ""
    assert "convert SRC to DST" in err and "sync" in err and "arguments are required" not in err


def test_verify_says_how_steps_differ_in_the_same_range(tmp_path, capsys):
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import records
    for name, steps in (("a", (0, 1, 5)), ("b", (0, 2, 5))):
        events = [event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")]
        for s in steps:
            ev = event_pb2.Event(wall_time=2.0, step=s)
            ev.summary.value.add(tag="loss", simple_value=1.0)
            events.append(ev)
        path = tmp_path / name / "run" / "events.out.tfevents.1.h"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"".join(records.frame(e.SerializeToString()) for e in events))
    code, out, err = run_cli(capsys, "verify", tmp_path / "a", tmp_path / "b")
    assert code == 10
    assert "run/loss: steps differ within the same range, 0 to 5 (3 points each)" in out
    assert "(1 difference listed above)" in err


def test_verify_lists_every_difference_with_v(tmp_path, capsys, monkeypatch):
    from tbconvert.cli import verify as verify_cli
    monkeypatch.setattr(verify_cli, "LISTED", 2)
    md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
    for name, value in (("a", 1.0), ("b", 2.0)):
        with open_writer(tmp_path / name, format="tfevents") as w:
            w.write_run(Run("run", 1.6e9), iter([ScalarSeries(
                run="run", tag=f"t{k}", metadata=md, steps=np.arange(3, dtype=np.int64),
                wall_times=np.full(3, 1.6e9), hidden=None,
                values=np.full(3, value, np.float32)) for k in range(5)]))
    code, out, err = run_cli(capsys, "verify", tmp_path / "a", tmp_path / "b")
    assert code == 10 and len(out.splitlines()) == 3 and "... and 3 more differences" in out
    assert "(5 differences; the first 2 are listed above, -v lists them all)" in err, err
    code, out, err = run_cli(capsys, "verify", tmp_path / "a", tmp_path / "b", "-v")
    assert code == 10 and len(out.splitlines()) == 5 and "more differences" not in out
    assert "(5 differences listed above)" in err, err


def test_format_names_are_taken_in_any_case(tmp_path, capsys):
    """--to PARQUET as OUT.PARQUET is: the suffix is told in any case already."""
    code, _, err = run_cli(capsys, "convert", FIXTURES / "torch_logdir", tmp_path / "out",
                           "--to", "PARQUET")
    assert code == 0, err
    assert tbconvert.info(tmp_path / "out", format="Parquet").series > 0
    assert tbconvert.Options(jobs=1).jobs == 1      # (the options open_reader takes)


def test_info_json_is_strict_json_whatever_the_wall_times(tmp_path, capsys):
    import json

    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tbconvert.formats.tfevents import records
    events = [event_pb2.Event(step=s, wall_time=w, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0)]))
        for s, w in ((0, 100.0), (1, float("inf")))]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "events.out.tfevents.1.h").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in events))
    code, out, err = run_cli(capsys, "info", tmp_path, "--json")
    assert code == 0, err

    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")
    found = json.loads(out, parse_constant=refuse)
    stats = found["runs"][0]["tags"]["loss"]
    assert (stats["points"], stats["wall_min"], stats["wall_max"]) == (2, 100.0, None)


def test_the_directory_a_command_runs_in_is_refused_as_destination_in_words(tmp_path, capsys,
                                                                             monkeypatch):
    # (an output is put in place whole, beside its destination: not into the directory the
    # command stands in; it said the destination "appeared", or "Device or resource busy")
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    src = FIXTURES / "torch_logdir"
    for argv in (["convert", src, ".", "--to", "tfevents"], ["media", src, "-o", "."],
                 ["convert", src, ".", "--to", "tfevents", "--force"],
                 ["convert", src, "..", "--to", "tfevents", "--force"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, (argv, err)
        assert "is the current directory" in err and err.count("\n") == 1, err
    assert list(here.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    code, _, err = run_cli(capsys, "convert", src, "logs", "--to", "tfevents")
    assert code == 0, err


def test_commands_that_write_directories_refuse_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["tbdev-export", FIXTURES / "tbdev_export", "-o", "-"],
                 ["sync", FIXTURES / "torch_logdir", "-"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "standard output (-) cannot hold; name a directory" in err, err
    assert list(tmp_path.iterdir()) == []
