"""What the Python entry points refuse, and how they say it: the same values the command
line refuses, in messages that name the keyword a Python caller passes."""

from __future__ import annotations

import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert.cli import main
from tbconvert.errors import FormatError, UsageError

LOGDIR = FIXTURES / "torch_logdir"


def test_a_format_that_disagrees_with_the_name_is_refused_before_writing(tmp_path):
    dst = tmp_path / "logs.parquet"
    with pytest.raises(UsageError) as exc:
        tbconvert.convert(LOGDIR, dst, to_format="hdf5")
    assert str(exc.value) == (f"{dst}: the name says parquet but to_format is hdf5; "
                              "name it .h5 or .hdf5, or leave out to_format")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError):
        tbconvert.open_writer(dst, format="csv")
    # agreeing, or a name without a format's suffix, is fine
    tbconvert.convert(LOGDIR, tmp_path / "a.h5", to_format="hdf5")
    tbconvert.convert(LOGDIR, tmp_path / "dataset", to_format="parquet")
    assert tbconvert.scalars(tmp_path / "a.h5").equals(tbconvert.scalars(tmp_path / "dataset"))


@pytest.mark.parametrize("call", [
    lambda dst: tbconvert.convert(LOGDIR, dst / "s.csv", restarts="keep_all"),
    lambda dst: tbconvert.info(LOGDIR, restarts="all"),
])
def test_a_misspelt_restarts_choice_is_refused(tmp_path, call):
    # It used to act as "visible" in convert(): the hidden points it was asked to keep
    # were left out.
    with pytest.raises(UsageError, match="restarts must be one of visible, keep-all, not "):
        call(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_runs_and_tags_must_be_one_regular_expression(tmp_path):
    with pytest.raises(UsageError) as exc:
        tbconvert.convert(LOGDIR, tmp_path / "s.csv", tags=["loss", "accuracy"])
    assert str(exc.value) == ("tags takes one regular expression (a str such as "
                              "'loss|accuracy'), not list")
    with pytest.raises(UsageError, match="^runs takes one regular expression .* not int$"):
        tbconvert.scalars(LOGDIR, runs=3)
    with pytest.raises(UsageError, match=r"^runs '\(' is not a valid regular expression"):
        tbconvert.info(LOGDIR, runs="(")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call", [
    lambda tmp: tbconvert.read(None),
    lambda tmp: tbconvert.info(None),
    lambda tmp: tbconvert.convert(LOGDIR, None),
    lambda tmp: tbconvert.convert(42, tmp / "x.csv"),
    lambda tmp: tbconvert.sync(LOGDIR, None),
])
def test_a_value_that_is_no_path_is_refused_in_words(tmp_path, call):
    with pytest.raises(UsageError, match=r"^expected a path \(str or os.PathLike\) or a URL, "
                                         r"not (NoneType|int)$"):
        call(tmp_path)


def test_a_misspelt_keyword_is_a_type_error_that_suggests_the_right_one(tmp_path):
    with pytest.raises(TypeError) as exc:
        tbconvert.convert(LOGDIR, tmp_path / "x.csv", to="csv")
    assert str(exc.value).startswith("unexpected keyword argument 'to' (did you mean "
                                     "to_format?); the options are allow_pickle, force, ")
    with pytest.raises(TypeError, match=r"'tag' \(did you mean tags\?\)"):
        tbconvert.info(LOGDIR, tag="loss")
    assert list(tmp_path.iterdir()) == []


def test_wide_is_refused_where_there_is_no_wide_form(tmp_path, capsys):
    with pytest.raises(UsageError) as exc:
        tbconvert.convert(LOGDIR, tmp_path / "a.parquet", wide=True)
    assert "wide=True is a form of CSV tables only" in str(exc.value)
    assert main(["convert", str(LOGDIR), str(tmp_path / "b.h5"), "--wide"]) == 2
    assert "--wide is a form of CSV tables only; this format keeps one row per point " \
           "(leave out --wide)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    tbconvert.convert(LOGDIR, tmp_path / "w.csv", wide=True)
    assert (tmp_path / "w.csv").read_text().startswith("run,step,wall_time,")


def test_messages_name_keywords_for_python_and_options_for_the_command_line(tmp_path, capsys):
    with pytest.raises(UsageError) as exc:
        tbconvert.convert(LOGDIR, tmp_path / "x.csv", jobs=-1)
    assert str(exc.value).startswith("jobs must be a whole number of processes")
    assert exc.value.cli_message().startswith("--jobs must be a whole number of processes")
    with pytest.raises(UsageError) as exc:
        tbconvert.convert(LOGDIR, tmp_path / "out")
    assert "; pass to_format with one of: csv, " in str(exc.value)
    assert main(["convert", str(LOGDIR), str(tmp_path / "out")]) == 2
    assert "; pass --to with one of: csv, " in capsys.readouterr().err
    # an option that only looks like one is left alone
    from tbconvert.errors import python_wording
    assert python_wording("--tomorrow --to --restarts keep-all") == \
        "--tomorrow to_format restarts='keep-all'"


def test_a_path_starting_with_a_tilde_is_in_the_home_directory_for_every_format(
        tmp_path, monkeypatch):
    # (pyarrow takes ~ as the home directory: so must every other writer, and the clean-up)
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    import shutil
    shutil.copytree(LOGDIR, home / "logs")
    expected = tbconvert.scalars(LOGDIR)
    for name, kw in [("out.parquet", {}), ("out.csv", {}), ("out.h5", {}),
                     ("dataset", {"to_format": "parquet"}), ("events", {"to_format": "tfevents"})]:
        report = tbconvert.convert("~/logs", f"~/{name}", **kw)
        assert report.outputs == [str(home / name)]
    tbconvert.sync("~/logs", "~/synced")
    assert tbconvert.scalars("~/synced").equals(expected)
    assert tbconvert.scalars("~/out.h5").equals(expected)
    assert sorted(p.name for p in home.iterdir()) == sorted(
        ["logs", "out.parquet", "out.csv", "out.h5", "dataset", "events", "synced"])
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("build, message", [
    (lambda: tbconvert.Options(restarts="keep_all"),
     "restarts must be one of visible, keep-all, not 'keep_all'"),
    (lambda: tbconvert.Options(runs="("), "runs '(' is not a valid regular expression"),
    (lambda: tbconvert.Options(tags=3), "tags takes one regular expression"),
    (lambda: tbconvert.Options(force="yes"), "force takes True or False, not 'yes'"),
    (lambda: tbconvert.Options(jobs=-1), "jobs must be a whole number of processes"),
    (lambda: tbconvert.Options(progress=True), "progress takes a tbconvert Progress"),
    (lambda: tbconvert.Options(storage_options="anon"), "storage_options takes a dict"),
])
def test_options_built_by_hand_are_checked_as_the_keywords_are(build, message):
    # (a misspelt restarts taken as "visible" would drop the points asked to be kept)
    with pytest.raises(UsageError) as exc:
        build()
    assert str(exc.value).startswith(message)


def test_options_take_a_regex_as_text_too(tmp_path):
    options = tbconvert.Options(runs="^run_b$", restarts="keep-all")
    assert options.runs.pattern == "^run_b$"
    report = tbconvert.convert(FIXTURES / "tensorboardx_logdir", tmp_path / "b.parquet",
                               options=options)
    assert report.runs == 1 and options.runs.pattern == "^run_b$"


@pytest.mark.parametrize("call, message", [
    (lambda d: tbconvert.convert(LOGDIR, d / "a.parquet", report={}),
     "report takes a tbconvert.Report (or None), not dict"),
    (lambda d: tbconvert.sync(LOGDIR, d / "s", report=tbconvert.Report()),
     "report takes a tbconvert.SyncReport (or None), not Report"),
    (lambda d: tbconvert.scalars(LOGDIR, report=[]), "report takes a tbconvert.Report"),
    (lambda d: tbconvert.convert(LOGDIR, d / "b", to_format="parquet", scheduler=5),
     "scheduler takes the address of a Dask scheduler such as 'tcp://host:8786', not 5"),
    (lambda d: tbconvert.sync(LOGDIR, d / "s", scheduler=""),
     "scheduler takes the address of a Dask scheduler"),
    (lambda d: tbconvert.to_dask(5), "expected a path (str or os.PathLike) or a URL, not int"),
])
def test_arguments_of_the_wrong_kind_are_refused_before_any_work(tmp_path, call, message):
    with pytest.raises(UsageError) as exc:
        call(tmp_path)
    assert str(exc.value).startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_a_selection_that_matches_nothing_is_a_note_in_the_report(tmp_path):
    report = tbconvert.convert(LOGDIR, tmp_path / "a.parquet", runs="^trian$")
    assert [(i.kind, i.lost) for i in report.issues] == [("selection_matched_nothing", False)]
    assert report.issues[0].message.startswith("--runs '^trian$' matched none of the")
    report = tbconvert.Report()
    assert tbconvert.scalars(LOGDIR, tags="^los$", report=report).empty
    assert [i.kind for i in report.issues] == ["selection_matched_nothing"]
    report = tbconvert.Report()
    assert len(tbconvert.scalars(LOGDIR, tags="loss", report=report))
    assert "selection_matched_nothing" not in {i.kind for i in report.issues}
    # the command says it once, in its own words
    code = main(["convert", str(LOGDIR), str(tmp_path / "b.parquet"), "--runs", "^trian$",
                 "--strict"])
    assert code == 8


def test_the_source_format_is_named_as_the_advice_says_in_every_reading_function(tmp_path):
    # an event file under a name that tells nothing: the error says "pass from_format"
    event_file = next((LOGDIR / "train").glob("*tfevents*"))
    blind = tmp_path / "run.bin"
    blind.write_bytes(event_file.read_bytes())
    with pytest.raises(FormatError, match="pass from_format with one of"):
        tbconvert.read(blind)
    expected = tbconvert.scalars(event_file)
    assert tbconvert.scalars(blind, from_format="tfevents").equals(expected)
    for fmt in ({"from_format": "tfevents"}, {"format": "tfevents"}):
        assert len(tbconvert.read(blind, **fmt).runs) == 1
        assert len(tbconvert.info(blind, **fmt).runs) == 1
    with pytest.raises(UsageError, match="disagree"):
        tbconvert.read(blind, format="parquet", from_format="tfevents")
