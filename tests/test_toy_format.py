"""A toy format added by following docs/architecture.md ("Adding a format") alone.

``jsonl``: scalars as JSON lines. A first line names the format, then for each run a
``{"run": ...}`` line, for each series a ``{"series": ...}`` line with its metadata, and one
``[step, wall_time, value]`` line per point (a fourth element 1 marks a hidden point).
Everything here goes through the public contract: a :class:`FormatRecord` registered with
:func:`registry.register`, a :class:`Format` with deferred reader and writer, and the
checks the checklist lists.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES

import tbconvert
from tbconvert import kinds, registry, verify
from tbconvert.cli import main
from tbconvert.errors import FormatError, OutputExistsError, UsageError
from tbconvert.formats.base import (
    Format,
    Options,
    Reader,
    Writer,
    classes_on_demand,
    deferred,
    has_reader,
    has_writer,
)
from tbconvert.model import DataClass, Metadata, Run, RunData, ScalarSeries, Series
from tbconvert.output import AtomicOutput

MAGIC = {"format": "toy-jsonl", "version": 1}
SOURCE = FIXTURES / "torch_logdir"


# ------------------------------------------------------------------ the format (checklist 1-4)

class JsonlFormat(Format):
    name = "jsonl"
    description = "toy: scalars as JSON lines"
    reader = deferred(f"{__name__}:JsonlReader")
    writer = deferred(f"{__name__}:JsonlWriter")

    @classmethod
    def sniff(cls, path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                return json.loads(fh.readline()) == MAGIC
        except Exception:  # noqa: BLE001 - sniffing never raises
            return False


__getattr__ = classes_on_demand(JsonlFormat, __name__)

RECORD = registry.FormatRecord("jsonl", __name__, "JsonlFormat", suffixes=(".jsonl",))


class JsonlReader(Reader):
    def iter_runs(self) -> Iterator[RunData]:
        lines = self._lines()
        run, series = None, []
        for item in lines:
            if "run" in item:
                if run is not None:
                    yield RunData(run, series)
                run, series = Run(item["run"], item.get("start_time")), []
            elif "series" in item and run is not None:
                series.append(item["series"])
            elif "points" in item and series:
                series[-1] = self._series(run.name, series[-1], item["points"])
        if run is not None:
            yield RunData(run, series)

    def _lines(self) -> Iterator[dict]:
        with open(self.path, "rb") as fh:
            first = fh.readline()
            try:
                if json.loads(first) != MAGIC:
                    raise ValueError
            except ValueError:  # also bytes that are not UTF-8
                raise FormatError(f"{self.path}:1: not a toy JSON-lines file (the first line "
                                  "does not name the format); pass --from to choose another "
                                  "format") from None
            points: list | None = None
            for lineno, line in enumerate(fh, start=2):
                try:
                    item = json.loads(line)
                except ValueError as exc:
                    self.report.add("corrupt_record", f"{self.path}:{lineno}: not JSON "
                                    f"({exc}); line skipped", path=self.path)
                    continue
                if isinstance(item, list):
                    if points is not None and len(item) in (3, 4):
                        points.append(item)
                    continue
                if points is not None:
                    yield {"points": points}
                    points = None
                if "series" in item:
                    points = []
                yield item
            if points is not None:
                yield {"points": points}

    def _series(self, run: str, header: dict, points: list) -> ScalarSeries:
        hidden = np.array([len(p) == 4 and p[3] == 1 for p in points], np.bool_)
        return ScalarSeries(
            run=run, tag=header["tag"],
            metadata=Metadata(header["plugin"], base64.b64decode(header["content"]),
                              header["display_name"], header["description"],
                              DataClass.SCALAR),
            steps=np.array([p[0] for p in points], np.int64),
            wall_times=np.array([p[1] for p in points], np.float64),
            hidden=hidden if hidden.any() else None,
            values=np.array([p[2] for p in points], np.float64))


class JsonlWriter(Writer):
    keeps_hidden = False   # hidden points arrive only with restarts="keep-all", then marked

    def __init__(self, path, options, report) -> None:
        super().__init__(path, options, report)
        self._out = AtomicOutput(self.path, force=options.force, directory=False)
        self._fh = open(self._out.tmp, "w", encoding="utf-8")
        self._line(MAGIC)

    def _line(self, item) -> None:
        self._fh.write(json.dumps(item) + "\n")

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        self._line({"run": run.name, "start_time": run.start_time})
        for chunk in series:
            if not isinstance(chunk, ScalarSeries):
                self.report.add("not_in_jsonl", f"{run.name}/{chunk.tag}: {len(chunk)} points "
                                "are not scalars", run=run.name, tag=chunk.tag, count=len(chunk))
                continue
            md = chunk.metadata
            self._line({"series": {"tag": chunk.tag, "plugin": md.plugin_name,
                                   "content": base64.b64encode(md.plugin_content).decode(),
                                   "display_name": md.display_name,
                                   "description": md.description}})
            hidden = chunk.hidden if chunk.hidden is not None else np.zeros(len(chunk), bool)
            for step, wall, value, hide in zip(chunk.steps.tolist(), chunk.wall_times.tolist(),
                                               chunk.values.astype(np.float64).tolist(),
                                               hidden.tolist(), strict=True):
                self._line([step, wall, value] + ([1] if hide else []))

    def close(self) -> None:
        self._fh.close()
        self._out.commit()

    def abort(self) -> None:
        self._fh.close()
        self._out.abort()


@pytest.fixture
def toy():
    """The toy format registered through its record for one test, removed afterwards, with
    the report kind its writer adds."""
    registry.register(RECORD)
    kinds.register("not_in_jsonl", "series that are not scalars are left out of a JSON-lines "
                   "file", lost=True)
    try:
        yield JsonlFormat
    finally:
        registry.unregister("jsonl")
        kinds.unregister("not_in_jsonl")


@pytest.fixture
def written(toy, tmp_path):
    out = tmp_path / "logs.jsonl"
    report = tbconvert.convert(SOURCE, out)
    return out, report


# ------------------------------------------------------------------ the checks (checklist 5-9)

def test_the_record_is_the_one_place_for_its_facts(toy):
    assert "jsonl" in registry.names()
    assert registry.get("jsonl") is JsonlFormat
    assert registry.suffix_format(Path("x/y.JSONL")) == "jsonl"
    assert registry.suffixes("jsonl") == (".jsonl",)
    assert JsonlFormat.suffixes == (".jsonl",) and JsonlFormat.directory_output is False
    assert has_reader(JsonlFormat) and has_writer(JsonlFormat)
    assert JsonlFormat in registry.all_formats()
    import sys
    assert sys.modules[__name__].JsonlWriter is JsonlWriter  # classes_on_demand


def test_names_and_suffixes_must_be_new(toy):
    with pytest.raises(UsageError):
        registry.register(RECORD)
    with pytest.raises(UsageError, match="parquet"):
        registry.register(registry.FormatRecord("other", __name__, "JsonlFormat",
                                                suffixes=(".pq",)))
    with pytest.raises(UsageError):
        registry.unregister("parquet")


def test_unregistered_after_the_test():
    assert "jsonl" not in registry.names()
    assert registry.suffix_format(Path("x.jsonl")) is None


def test_told_by_suffix_both_ways(toy, written):
    out, _ = written
    assert registry.detect_source(out) is JsonlFormat
    assert registry.detect_destination(Path("new.jsonl")) is JsonlFormat


def test_round_trip_through_the_api_keeps_every_scalar(written, tmp_path):
    out, report = written
    back = tmp_path / "back.parquet"
    tbconvert.convert(out, back)
    dropped = {(i.run, i.tag) for i in report.issues if i.kind == "not_in_jsonl"}
    assert dropped, "the fixture holds non-scalar series: they must be reported"
    # exactly the reported series are missing; every scalar point matches
    diffs = verify.compare(SOURCE, back)
    assert diffs and all("only in A" in d for d in diffs), diffs
    runs_all_dropped = {d.split("'")[1] for d in diffs if d.startswith("run ")}
    missing = {d.split(": only in A")[0] for d in diffs if not d.startswith("run ")}
    assert missing == {f"{r}/{t}" for r, t in dropped if r not in runs_all_dropped}
    assert runs_all_dropped <= {r for r, _ in dropped}


def test_round_trip_through_the_command_line(toy, tmp_path, capsys):
    out = tmp_path / "cli.jsonl"
    assert main(["convert", str(SOURCE), str(out), "-j", "1", "-q"]) == 0
    back = tmp_path / "back.jsonl"
    assert main(["convert", str(out), str(back), "-q"]) == 0
    assert main(["verify", str(out), str(back)]) == 0
    assert "same data" in capsys.readouterr().out
    assert main(["formats"]) == 0
    assert "jsonl     yes   yes    .jsonl" in capsys.readouterr().out


def test_existing_output_is_refused_without_force(written):
    out, _ = written
    before = out.read_bytes()
    with pytest.raises(OutputExistsError):
        tbconvert.convert(SOURCE, out)
    tbconvert.convert(SOURCE, out, force=True, tags="loss")
    assert out.read_bytes() != before


def test_a_failure_leaves_no_partial_output(toy, tmp_path):
    class Broken(Reader):
        def iter_runs(self):
            yield RunData(Run("a"), iter([ScalarSeries(
                run="a", tag="t", metadata=Metadata("scalars", data_class=DataClass.SCALAR),
                steps=[1], wall_times=[1.0], hidden=None, values=[1.0])]))
            raise FormatError("broken on purpose")

    out = tmp_path / "out" / "o.jsonl"
    report = tbconvert.Report()
    reader = Broken(SOURCE, Options(), report)
    with pytest.raises(FormatError):
        with tbconvert.open_writer(out, report=report) as writer:
            tbconvert.api.copy(reader, writer, report)
    assert list(tmp_path.iterdir()) == []


def test_hidden_points_are_left_out_and_counted_unless_kept(toy, tmp_path):
    visible = tbconvert.convert(SOURCE, tmp_path / "v.jsonl", runs="^resumed")
    left_out = sum(i.count for i in visible.issues if i.kind == "hidden_points_left_out")
    assert left_out > 0
    tbconvert.convert(SOURCE, tmp_path / "k.jsonl", runs="^resumed", restarts="keep-all")
    kept = tbconvert.read(tmp_path / "k.jsonl", restarts="keep-all")
    marked = sum(s.hidden_count for tags in kept.series.values() for s in tags.values())
    assert 0 < marked <= left_out


def test_bad_input_is_one_clear_error_or_a_reported_skip(toy, tmp_path, capsys):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xffnot json\n")
    assert not JsonlFormat.sniff(garbage) and not JsonlFormat.sniff(tmp_path / "missing")
    assert not JsonlFormat.sniff(tmp_path)
    assert main(["info", str(garbage)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "garbage.jsonl:1" in err and len(err.splitlines()) == 1

    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(json.dumps(MAGIC) + '\n{"run": "a"}\n{"series": {"tag": "t", '
                       '"plugin": "scalars", "content": "", "display_name": "", '
                       '"description": ""}}\n[1, 1.5, 2.0]\n{oops\n[2, 2.5, 3.0]\n')
    loaded = tbconvert.read(damaged)
    assert [i.kind for i in loaded.report.issues] == ["corrupt_record"]
    assert "damaged.jsonl:5" in loaded.report.issues[0].message
    assert loaded.series["a"]["t"].values.tolist() == [2.0, 3.0]


def test_values_round_trip_bit_exact(toy, tmp_path):
    values = np.array([0.1, -0.0, 1e308, 5e-324, math.inf, -math.inf], np.float64)
    src = ScalarSeries(run="r", tag="t", metadata=Metadata("scalars",
                                                           data_class=DataClass.SCALAR),
                       steps=np.arange(len(values)), wall_times=np.full(len(values), 1.25),
                       hidden=None, values=values)
    report = tbconvert.Report()
    path = tmp_path / "v.jsonl"
    with tbconvert.open_writer(path, report=report) as writer:
        writer.write_run(Run("r"), [src])
    got = tbconvert.read(path).series["r"]["t"].values
    assert got.tobytes() == values.tobytes()


def test_a_format_that_fails_to_import_is_an_error():
    """Nothing leaves a broken format out quietly: the import error surfaces."""
    broken = registry.FormatRecord("broken", "tbconvert.formats.no_such_module", "X",
                                   suffixes=(".broken",))
    registry.register(broken)
    try:
        with pytest.raises(ImportError):
            registry.all_formats()
        with pytest.raises(ImportError):
            registry.detect_destination(Path("x.broken"))
    finally:
        registry.unregister("broken")
