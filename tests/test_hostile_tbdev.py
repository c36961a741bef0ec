"""Hostile TensorBoard.dev exports: each case ends in a reported skip or a one-line error.

Every case is built here from scratch or from the real export in
fixtures/tbdev_export: values that would wrap, JSON that fools a shortcut,
FIFOs that would block, nesting and archives that would exhaust the stack or
memory, names no output format can encode. The rest of the export must always
come through.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES
from limits import deadline

import tbconvert
from tbconvert import budget
from tbconvert.cli import main
from tbconvert.errors import TbconvertError
from tbconvert.formats.base import Options
from tbconvert.formats.tbdev import export_dir, payloads
from tbconvert.formats.tbdev.writer import TbdevWriter
from tbconvert.model import DataClass, Experiment, Metadata, Run, TensorSeries
from tbconvert.report import Report

EXPORT = next((FIXTURES / "tbdev_export").glob("experiment_*"))
SCALAR_MD = "CgkKB3NjYWxhcnMSBGxvc3MgAQ=="
TEXT_MD = base64.b64encode(b"\x0a\x06\x0a\x04text\x20\x02").decode()
IMAGE_MD = "CggKBmltYWdlcxIDaW1nIAM="


def copy_export(tmp_path: Path) -> Path:
    dst = tmp_path / "in" / EXPORT.name
    shutil.copytree(EXPORT, dst)
    return dst


def small_export(tmp_path: Path, scalars=(), tensors=(), blobs=(), metadata=None) -> Path:
    """An experiment directory with the given lines (dicts, or raw text lines)."""
    exp = tmp_path / "in" / "experiment_AAAAAAAAAAAAAAAAAAAAAA"
    (exp / "tensors").mkdir(parents=True)
    (exp / "blobs").mkdir()
    meta = metadata if metadata is not None else export_dir.dumps_line(
        {"create_time": "", "description": "", "name": "n", "update_time": ""})
    (exp / "metadata.json").write_text(meta)
    for name, lines in (("scalars.json", scalars), ("tensors.json", tensors),
                        ("blob_sequences.json", blobs)):
        (exp / name).write_text("".join(
            line if isinstance(line, str) else export_dir.dumps_line(line) for line in lines))
    return exp


def scalar_line(run, tag="loss", steps=(0, 1), values=(1.0, 2.0), walls=(10.0, 11.0)):
    return {"points": {"steps": list(steps), "values": list(values), "wall_times": list(walls)},
            "run": run, "summary_metadata": SCALAR_MD, "tag": tag}


def tensor_line(run, path, steps=(0,), tag="notes"):
    return {"points": {"steps": list(steps), "tensors_file_path": path,
                       "wall_times": [10.0 + s for s in steps]},
            "run": run, "summary_metadata": TEXT_MD, "tag": tag}


def blob_line(run, paths, tag="img"):
    return {"points": {"blob_file_paths": [list(paths)], "steps": [0], "wall_times": [10.0]},
            "run": run, "summary_metadata": IMAGE_MD, "tag": tag}


def load(path):
    return tbconvert.read(path, restarts="keep-all")


def load_traced(path):
    """:func:`load`, and the peak of the memory Python allocated meanwhile."""
    tracemalloc.start()
    try:
        loaded = load(path)
        return loaded, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def runs(loaded) -> set[str]:
    """Runs that kept data (a run whose every line was skipped is still listed, empty)."""
    return {run for run, tags in loaded.series.items() if tags}


def kinds(report) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in report.issues:
        out[i.kind] = out.get(i.kind, 0) + 1
    return out


def messages(report) -> str:
    return "\n".join(i.message for i in report.issues)


# -- 1. silent changes ------------------------------------------------------------------------

@pytest.mark.parametrize("step", [2**64 - 1, 2**63, -2**63 - 1, 2**70])
def test_steps_outside_int64_are_refused_not_wrapped(tmp_path, step):
    exp = small_export(tmp_path, scalars=[scalar_line("bad", steps=(0, step)),
                                          scalar_line("good")],
                       tensors=[tensor_line("bad_t", None, steps=(step,))])
    loaded = load(exp)
    assert runs(loaded) == {"good"}
    assert kinds(loaded.report) == {"bad_line": 2}
    assert f"holds {step}, outside the 64-bit range" in messages(loaded.report)



@pytest.mark.parametrize("field,points", [("steps", {"steps": (True, 2)}),
                                          ("values", {"values": (False, 2.0)}),
                                          ("wall_times", {"walls": (10.0, True)})])
def test_json_booleans_are_no_numbers(tmp_path, field, points):
    exp = small_export(tmp_path, scalars=[scalar_line("bad", **points), scalar_line("good")],
                       tensors=[tensor_line("bad_t", None, steps=(True,))])
    loaded = load(exp)
    assert runs(loaded) == {"good"}
    assert kinds(loaded.report) == {"bad_line": 2}
    assert f"points.{field} holds true or false" in messages(loaded.report)

def test_int64_extremes_are_kept_exactly(tmp_path):
    steps = (-2**63, 2**63 - 1)
    exp = small_export(tmp_path, scalars=[scalar_line("edge", steps=steps)])
    loaded = load(exp)
    assert loaded.series["edge"]["loss"].steps.tolist() == list(steps)
    assert not loaded.report.issues


def test_nested_run_key_never_wins(tmp_path):
    line = scalar_line("top")
    line["zzz"] = {"run": "nested"}                          # after the top-level key
    early = dict(scalar_line("top2"), aaa={"run": "nested"})  # before it
    exp = small_export(tmp_path, scalars=[line, early])
    text = (exp / "scalars.json").read_text()
    assert '"run": "nested"' in text
    loaded = load(exp)
    assert set(loaded.series) == {"top", "top2"}
    assert not loaded.report.lost


def test_compact_json_is_read_like_the_exporter_spelling(tmp_path):
    src = copy_export(tmp_path)
    expected = load(src)
    compact = tmp_path / "compact" / EXPORT.name
    shutil.copytree(src, compact)
    for name in ("scalars.json", "tensors.json", "blob_sequences.json", "metadata.json"):
        lines = [json.loads(x) for x in (src / name).read_text().splitlines()]
        (compact / name).write_text("".join(json.dumps(x, separators=(",", ":")) + "\n"
                                            for x in lines))
    got = load(compact)
    assert not got.report.issues, messages(got.report)
    assert got.experiment == expected.experiment
    assert set(got.series) == set(expected.series)
    for run, tags in expected.series.items():
        assert set(got.series[run]) == set(tags)
        for tag, s in tags.items():
            g = got.series[run][tag]
            assert np.array_equal(g.steps, s.steps) and np.array_equal(g.wall_times, s.wall_times)


@pytest.mark.parametrize("bad", ["inf", "nan", "infinity", "-nan", "1.2.3", "1e", "0x10",
                                 "1 2", "Infinityx"])
def test_fast_scalar_parser_never_reads_what_json_refuses(tmp_path, bad):
    line = export_dir.dumps_line(scalar_line("r", steps=(0,), values=(1.0,), walls=(5.0,)))
    exp = small_export(tmp_path, scalars=[line.replace("[1.0]", f"[{bad}]"),
                                          scalar_line("good")])
    loaded = load(exp)
    assert runs(loaded) == {"good"}
    assert kinds(loaded.report) == {"bad_line": 1}


def test_fifo_json_file_is_reported_not_ignored(tmp_path):
    exp = small_export(tmp_path, tensors=[tensor_line("t", None, steps=())])
    (exp / "scalars.json").unlink()
    os.mkfifo(exp / "scalars.json")
    with deadline(10, "FIFO scalars.json"):
        loaded = load(exp)
    assert kinds(loaded.report) == {"unreadable_file": 1}
    assert "scalars.json: cannot read (is a FIFO (named pipe), not a regular file)" \
        in messages(loaded.report)


def test_fifo_alone_still_marks_an_export(tmp_path):
    exp = tmp_path / "experiment_AAAAAAAAAAAAAAAAAAAAAA"
    exp.mkdir()
    os.mkfifo(exp / "scalars.json")
    with deadline(10, "lone FIFO"):
        loaded = load(exp)
    assert kinds(loaded.report) == {"unreadable_file": 1}


# -- 2./3. tracebacks and hangs --------------------------------------------------------------

def test_fifos_and_devices_anywhere_never_block(tmp_path):
    """A FIFO as metadata.json, npz and blob file: each reported, the rest converted."""
    exp = copy_export(tmp_path)
    victims = [exp / "metadata.json", sorted((exp / "tensors").iterdir())[0],
               sorted((exp / "blobs").iterdir())[0]]
    for v in victims:
        v.unlink()
        os.mkfifo(v)
    with deadline(20, "FIFOs in an export"):
        report = tbconvert.convert(exp, tmp_path / "out", to_format="tfevents")
    text = messages(report)
    for v in victims:
        assert v.name in text, v
    assert "is a FIFO" in text
    assert kinds(report).get("bad_metadata") == 1


def test_fifo_blob_via_cli_does_not_hang(tmp_path, capsys):
    exp = small_export(tmp_path, blobs=[blob_line("r", ["blobs/blob_a.bin", "blobs/blob_b.bin"])])
    os.mkfifo(exp / "blobs" / "blob_a.bin")
    (exp / "blobs" / "blob_b.bin").write_bytes(b"png")
    with deadline(20, "info on a FIFO blob"):
        code = main(["info", str(exp)])
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize("where", ["metadata", "scalars", "tensors_run", "blob_tag"])
def test_deep_json_is_one_clear_skip(tmp_path, where):
    deep = "[" * 100_000 + "]" * 100_000
    good = scalar_line("good")
    if where == "metadata":
        exp = small_export(tmp_path, scalars=[good], metadata='{"name": ' + deep + '}\n')
    elif where == "scalars":
        exp = small_export(tmp_path, scalars=[good, '{"points": ' + deep + ', "run": "x"}\n'])
    elif where == "tensors_run":
        exp = small_export(tmp_path, scalars=[good],
                           tensors=['{"points": {}, "run": ' + deep + '}\n'])
    else:
        exp = small_export(tmp_path, scalars=[good], blobs=[
            '{"points": {"blob_file_paths": [], "steps": [], "wall_times": []}, "run": "r", '
            '"summary_metadata": "", "tag": ' + deep + '}\n'])
    loaded = load(exp)
    assert "good" in loaded.series
    assert len(loaded.report.lost) == 1
    assert "nested" in messages(loaded.report)


def _npz_with_header(path: Path, header: str, payload: bytes = bytes(8)) -> None:
    head = header.encode().ljust(118) + b"\n"
    member = b"\x93NUMPY\x01\x00" + len(head).to_bytes(2, "little") + head + payload
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("arr_0.npy", member)
        buf = io.BytesIO()
        np.save(buf, np.float32(1.5))
        z.writestr("arr_1.npy", buf.getvalue())


@pytest.mark.parametrize("header", [
    "{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), '",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), \"\"\" }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (" + "1," * 40 + "), }",
    "{'descr': 7, 'fortran_order': False, 'shape': (1,), }",
])
def test_bad_npy_headers_cost_their_point(tmp_path, header):
    exp = small_export(tmp_path, tensors=[tensor_line("r", "tensors/1.npz", steps=(0, 1))],
                       scalars=[scalar_line("good")])
    _npz_with_header(exp / "tensors" / "1.npz", header)
    loaded = load(exp)
    assert "good" in loaded.series
    kept = loaded.series["r"]["notes"]
    assert kept.steps.tolist() == [1]                     # the intact point survives
    assert kinds(loaded.report) == {"corrupt_tensor": 1}
    assert "1.npz: arr_0: unreadable" in messages(loaded.report)


def test_long_path_and_symlink_loop_are_reported(tmp_path):
    exp = small_export(tmp_path, scalars=[scalar_line("good")],
                       tensors=[tensor_line("t", "tensors/" + "x" * 5000 + ".npz"),
                                tensor_line("t2", "tensors/" + "/".join(["y" * 200] * 20)),
                                tensor_line("t3", "tensors/" + "z" * 3000 + ".npz")],
                       blobs=[blob_line("b", ["blobs/loop.bin", "blobs/ok.bin",
                                              "blobs/" + "w" * 3000])])
    os.symlink("loop.bin", exp / "blobs" / "loop.bin")
    (exp / "blobs" / "ok.bin").write_bytes(b"data")
    loaded = load(exp)
    assert "good" in loaded.series
    text = messages(loaded.report)
    assert "a path of 5012 characters" in text
    assert "is a symlink loop" in text
    assert "is a name too long for the file system" in text                 # t3
    assert "cannot be read: a name too long for the file system" in text    # the third blob
    seq = next(loaded.series["b"]["img"].sequences())
    assert list(seq) == [None, b"data", None]                           # the hole keeps its position


def test_lone_surrogates_are_escaped_and_every_format_writes(tmp_path):
    meta = '{"create_time": "", "description": "d\\udc80", "name": "n\\ud800", ' \
           '"update_time": "", "x\\udfff": ["\\ud800"]}\n'
    exp = small_export(tmp_path, scalars=[scalar_line("run\ud800"),
                                          scalar_line("r2", tag="tag\udc00")],
                       metadata=meta)
    raw = (exp / "scalars.json").read_text()
    assert "\\ud800" in raw and "\\udc00" in raw
    loaded = load(exp)
    # names keep their surrogates in the model; the copy loop escapes them for every writer
    assert set(loaded.series) == {"run\ud800", "r2"}
    assert set(loaded.series["r2"]) == {"tag\udc00"}
    assert loaded.experiment.name == "n%ED%A0%80"
    assert "text_escaped" in kinds(loaded.report)
    assert not loaded.report.lost
    for fmt, dst in (("tfevents", "o_tfevents"), ("parquet", "o.parquet"), ("hdf5", "o.h5"),
                     ("csv", "o_csv"), ("tbdev", "experiment_BBBBBBBBBBBBBBBBBBBBBB")):
        report = tbconvert.convert(exp, tmp_path / dst, to_format=fmt)
        assert "name_escaped" in kinds(report) or "run_renamed" in kinds(report), fmt
        if fmt == "csv":
            continue
        back = load(tmp_path / dst)
        assert runs(back) == {"run%ED%A0%80", "r2"}, fmt
        assert set(back.series["r2"]) == {"tag%ED%B0%80"}, fmt



def test_a_run_name_that_reads_as_a_byte_becomes_a_directory_tensorboard_loads(tmp_path):
    """JSON's "\\udcff" is the lone surrogate Python gives a file system's byte 0xFF: written
    as that byte, the directory name would not be UTF-8, and TensorBoard's loader would fail
    on the whole logdir (the other run included)."""
    from oracle import tb_view
    exp = small_export(tmp_path, scalars=[scalar_line("bad\udcffname"), scalar_line("good")])
    report = tbconvert.tbdev_export(exp, tmp_path / "logs")
    out = tmp_path / "logs"        # (one experiment: its runs at the top)
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"bad%FFname", "good"}
    assert set(tb_view(out)) == {"bad%FFname", "good"}
    assert "run_renamed" in kinds(report)

def _deflated_npz(path: Path, members: int, member_bytes: int) -> None:
    """Each member is a float64 array of zeros: about 1000:1, under the per-member check."""
    arr = np.zeros(member_bytes // 8)
    buf = io.BytesIO()
    np.save(buf, arr)
    data = buf.getvalue()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for i in range(members):
            z.writestr(f"arr_{i}.npy", data)


def test_npz_bomb_total_is_bounded_by_file_size_and_memory(tmp_path, monkeypatch):
    """Members each under the ratio check, too much together: refused before inflating."""
    exp = small_export(tmp_path, scalars=[scalar_line("good")],
                       tensors=[tensor_line("t", "tensors/1.npz", steps=tuple(range(40)))])
    _deflated_npz(exp / "tensors" / "1.npz", 40, 8 << 20)    # 320 MiB from ~320 KiB
    size = (exp / "tensors" / "1.npz").stat().st_size
    monkeypatch.setattr(budget, "memory_allowance", lambda: 64 << 20)
    loaded, peak = load_traced(exp)
    assert peak < 40 << 20, f"peak {peak >> 20} MiB"
    assert runs(loaded) == {"good"}
    assert kinds(loaded.report) == {"corrupt_tensor_file": 1}
    assert f"in all from a file of {size} bytes" in messages(loaded.report)


def test_large_npz_is_streamed_in_pieces(tmp_path, monkeypatch):
    exp = small_export(tmp_path, tensors=[tensor_line("t", "tensors/1.npz", steps=tuple(range(6)))])
    arrays = [np.full(1000, i, np.float64) for i in range(6)]
    np.savez(exp / "tensors" / "1.npz", *arrays)
    monkeypatch.setattr(payloads, "TENSOR_CHUNK_BYTES", 16_000)
    report = Report()
    from tbconvert.formats.tbdev import TbdevReader
    reader = TbdevReader(exp, Options(), report)
    chunks = [s for rd in reader.iter_runs() for s in rd.series]
    assert [c.steps.tolist() for c in chunks] == [[0, 1], [2, 3], [4, 5]]
    assert [float(t[0]) for c in chunks for t in c.tensors] == [0, 1, 2, 3, 4, 5]


def test_huge_blob_is_a_hole_not_an_allocation(tmp_path, monkeypatch):
    exp = small_export(tmp_path, blobs=[blob_line("b", ["blobs/big.bin", "blobs/ok.bin"])])
    with open(exp / "blobs" / "big.bin", "wb") as f:
        f.truncate(2 << 20)
    (exp / "blobs" / "ok.bin").write_bytes(b"ok")
    monkeypatch.setattr(budget, "MAX_BLOB_BYTES", 1 << 20)
    loaded = load(exp)
    assert list(next(loaded.series["b"]["img"].sequences())) == [None, b"ok"]
    assert "holds 2097152 bytes (at most 1048576 are read)" in messages(loaded.report)


# -- 4. writing -------------------------------------------------------------------------------

def test_writer_renames_a_tensor_file_whose_wall_time_is_huge(tmp_path):
    md = Metadata("text", b"", "", "", DataClass.TENSOR)
    def series(tag, wall):
        return TensorSeries(run="r", tag=tag, metadata=md, steps=np.array([0]),
                            wall_times=np.array([wall]), hidden=None,
                            dtypes=np.array([1], np.int32), tensors=(np.float32(1.0),))
    report = Report()
    dst = tmp_path / "experiment_CCCCCCCCCCCCCCCCCCCCCC"
    w = TbdevWriter(dst, Options(), report)
    w.write_experiment(Experiment())
    w.write_run(Run("r"), [series("huge", 1e300), series("neg", -1e300), series("ok", 5.0)])
    w.close()
    names = sorted(p.name for p in (dst / "tensors").iterdir())
    assert names == ["-1e+300.npz", "1e+300.npz", "5.000000.npz"]
    assert kinds(report) == {"tensor_file_renamed": 2}
    back = load(dst)
    assert set(back.series["r"]) == {"huge", "neg", "ok"}
    assert back.series["r"]["huge"].wall_times.tolist() == [1e300]


def test_errors_are_one_line_for_a_non_export(tmp_path):
    with pytest.raises(TbconvertError) as info:
        load(tmp_path)
    assert "\n" not in str(info.value)


def test_writer_escapes_surrogates_in_summary_metadata(tmp_path):
    from tbconvert.model import ScalarSeries
    md = Metadata("scalars", b"", "shown\ud800", "about\udfff", DataClass.SCALAR)
    report = Report()
    dst = tmp_path / "experiment_DDDDDDDDDDDDDDDDDDDDDD"
    w = TbdevWriter(dst, Options(), report)
    w.write_run(Run("r\udc00"), [ScalarSeries(run="r\udc00", tag="t\ud800", metadata=md,
                                              steps=np.array([1]), wall_times=np.array([2.0]),
                                              hidden=None, values=np.array([3.0]))])
    w.close()
    assert kinds(report) == {"text_escaped": 1}
    back = load(dst)
    s = back.series["r\udc00"]["t\ud800"]   # JSON spells lone surrogates; names keep them
    assert s.metadata.display_name == "shown%ED%A0%80"
    assert s.metadata.description == "about%ED%BF%BF"


def test_hostile_experiment_does_not_cost_its_siblings(tmp_path, capsys):
    """tbdev-export over a root: one experiment full of traps, one intact; both converted."""
    root = tmp_path / "root"
    shutil.copytree(EXPORT, root / EXPORT.name)
    bad = root / "experiment_ZZZZZZZZZZZZZZZZZZZZZZ"
    shutil.copytree(EXPORT, bad)
    (bad / "metadata.json").write_text('{"name": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (bad / "blob_sequences.json").unlink()
    os.mkfifo(bad / "blob_sequences.json")
    with open(bad / "scalars.json", "a") as f:
        f.write(json.dumps(scalar_line("big", steps=(2**64 - 1,)), separators=(",", ":")) + "\n")
        f.write(json.dumps(scalar_line("compact"), separators=(",", ":")) + "\n")
    os.mkfifo(root / "scalars_fifo.json")                     # an old-layout file that is a FIFO
    with deadline(60, "tbdev-export of a hostile root"):
        code = main(["tbdev-export", str(root), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code == 0, err
    assert (tmp_path / "out" / "ZZZZZZZZZZZZZZZZZZZZZZ" / "compact").is_dir()
    assert (tmp_path / "out" / EXPORT.name[len("experiment_"):]).is_dir()
    good = load(tmp_path / "out" / EXPORT.name[len("experiment_"):])
    assert not good.report.lost


def test_summary_metadata_strings_that_are_not_utf8_keep_the_series(tmp_path):
    # display_name "a" + the CESU-8 bytes of a lone surrogate: protobuf refuses the message
    raw = b"\x0a\x09\x0a\x07scalars\x12\x04a\xed\xa0\x80\x1a\x01d\x20\x01"
    line = scalar_line("r")
    line["summary_metadata"] = base64.b64encode(raw).decode()
    exp = small_export(tmp_path, scalars=[line, scalar_line("good")])
    loaded = load(exp)
    md = loaded.series["r"]["loss"].metadata
    assert (md.plugin_name, md.display_name, md.description) == ("scalars", "a%ED%A0%80", "d")
    assert kinds(loaded.report) == {"text_escaped": 1}
    tbconvert.convert(exp, tmp_path / "out", to_format="tfevents")
    assert load(tmp_path / "out").series["r"]["loss"].metadata.display_name == md.display_name


def _empty_series_export(tmp_path: Path) -> Path:
    """Series without points, as the exporter writes them, beside ones with points in two
    runs (two, so that ``--jobs 2`` hands a run to a worker)."""
    empty_tensor = {"points": {"steps": [], "tensors_file_path": None, "wall_times": []},
                    "run": "train", "summary_metadata": TEXT_MD, "tag": "no_notes"}
    empty_blobs = {"points": {"blob_file_paths": [], "steps": [], "wall_times": []},
                   "run": "eval", "summary_metadata": IMAGE_MD, "tag": "no_images"}
    return small_export(tmp_path, scalars=[
        scalar_line("train"), scalar_line("eval"),
        scalar_line("train", tag="no_points", steps=(), values=(), walls=())],
        tensors=[empty_tensor], blobs=[empty_blobs])


def _lines(path: Path) -> set[str]:
    return set((path / "scalars.json").read_text().splitlines()
               + (path / "tensors.json").read_text().splitlines()
               + (path / "blob_sequences.json").read_text().splitlines())


@pytest.mark.parametrize("dst, extra", [("a.h5", []), ("a.parquet", []), ("a.parquet", ["-j", "2"]),
                                        ("dataset", ["--to", "parquet"]), ("b.h5", ["-j", "2"])])
def test_series_without_points_are_kept_by_archives(tmp_path, capsys, dst, extra):
    exp = _empty_series_export(tmp_path)
    archive = tmp_path / dst
    assert main(["convert", str(exp), str(archive), "-q", *extra]) == 0, capsys.readouterr().err
    assert main(["verify", str(exp), str(archive)]) == 0, capsys.readouterr()
    assert main(["convert", str(exp), str(tmp_path / "direct"), "--to", "tbdev", "-q"]) == 0
    assert main(["convert", str(archive), str(tmp_path / "back"), "--to", "tbdev", "-q"]) == 0
    assert _lines(tmp_path / "back") == _lines(tmp_path / "direct")
    assert sum(line.count('"steps": []') for line in _lines(tmp_path / "back")) == 3
    assert not capsys.readouterr().err


def test_series_without_points_survive_sync_and_merging(tmp_path, capsys, monkeypatch):
    from tbconvert.incremental import compact
    monkeypatch.setattr(compact, "FANOUT", 2)
    exp = _empty_series_export(tmp_path)
    dataset = tmp_path / "synced"
    for _ in range(3):
        tbconvert.sync(exp.parent, dataset)
        with open(exp / "scalars.json", "a") as fh:
            fh.write(export_dir.dumps_line(scalar_line("train", tag="more")))
    tbconvert.sync(exp.parent, dataset)
    full = tmp_path / "full"
    tbconvert.convert(exp, full, to_format="parquet")
    assert main(["verify", str(dataset / exp.name.removeprefix("experiment_")), str(full)]) == 0, \
        capsys.readouterr()


def test_integer_values_beyond_2_53_are_rounded_and_said(tmp_path):
    # the exporter writes decimals; a hand-made export may hold integers float64 cannot
    exp = small_export(tmp_path, scalars=[
        scalar_line("train", values=(9007199254740993, 2.0)),
        scalar_line("eval", values=(9007199254740992, 0.12345678901234567))])
    loaded = load(exp)
    assert loaded.series["train"]["loss"].values.tolist() == [9007199254740992.0, 2.0]
    (issue,) = [i for i in loaded.report.issues if i.kind == "inexact_value"]
    assert issue.run == "train" and issue.count == 1 and "2**53" in issue.message
    assert loaded.series["eval"]["loss"].values.tolist() == [9007199254740992.0,
                                                             0.12345678901234567]


def test_long_decimals_keep_the_fast_path():
    from tbconvert.formats.tbdev import scalar_lines
    line = export_dir.dumps_line(scalar_line("r", values=(0.12345678901234567, -1234567890123456.5)))
    assert scalar_lines.scalar_line(line.encode()) is not None
    line = export_dir.dumps_line(scalar_line("r", values=(1.5, -12345678901234567)))
    assert scalar_lines.scalar_line(line.encode()) is None     # json reads it exactly


@pytest.mark.parametrize("items", ["1, , 3", "1, 2, 3, ", " , 2, 3", "1,\t,3", "1, 2,\r "])
def test_a_blank_list_item_is_no_number(tmp_path, items):
    # numpy reads a blank item as -1 (0 for integers) with the count of items right: the
    # line must go to json, which refuses it
    from tbconvert.formats.tbdev import scalar_lines
    line = ('{"points": {"steps": [0, 1, 2], "values": [' + items + '], "wall_times": '
            f'[1, 2, 3]}}, "run": "r", "summary_metadata": "{SCALAR_MD}", "tag": "t"}}\n')
    swapped = line.replace(items, "1, 2, 3", 1).replace("[1, 2, 3]}", f"[{items}]}}")
    for text in (line, swapped, line.replace("[0, 1, 2]", f"[{items}]")):
        assert scalar_lines.scalar_line(text.encode()) is None
    exp = small_export(tmp_path, scalars=[line, export_dir.dumps_line(scalar_line("ok"))])
    loaded = load(exp)
    assert list(loaded.series) == ["ok"]
    (issue,) = [i for i in loaded.report.issues if i.kind == "bad_line"]
    assert "not valid JSON" in issue.message


def test_an_integer_minus_zero_is_json_zero(tmp_path):
    # json reads -0 as the integer 0; numpy would read -0.0
    exp = small_export(tmp_path, scalars=[
        '{"points": {"steps": [0, 1, 2], "values": [-0, -0.0, 1], "wall_times": [-0, 1, 2]}, '
        f'"run": "r", "summary_metadata": "{SCALAR_MD}", "tag": "t"}}\n'])
    got = load(exp).series["r"]["t"]
    assert np.signbit(got.values).tolist() == [False, True, False]
    assert not np.signbit(got.wall_times).any()


@pytest.mark.parametrize("name", ["a.h5", "a.parquet"])
def test_a_series_without_points_next_to_points_of_its_tag_is_that_series(tmp_path, name):
    """An empty chunk of another dtype before the tag's points: one float32 series comes
    back, not a float64 one (two series merged)."""
    from tbconvert.api import open_writer
    from tbconvert.model import ScalarSeries
    md = Metadata("scalars", b"", "loss", "", DataClass.SCALAR)

    def chunk(n, dtype):
        return ScalarSeries(run="r", tag="loss", metadata=md, steps=np.arange(n),
                            wall_times=np.arange(n) + 1.7e9, hidden=None,
                            values=np.arange(n).astype(dtype))
    with open_writer(tmp_path / name) as writer:
        writer.write_run(Run("r", 1.7e9), iter([chunk(0, np.float64), chunk(3, np.float32)]))
    got = load(tmp_path / name).series["r"]["loss"]
    assert got.values.dtype == np.float32 and got.values.tolist() == [0.0, 1.0, 2.0]


def test_a_run_name_of_millions_of_characters_costs_its_line_in_bounded_memory(tmp_path):
    """The exporter's line shape is matched by a pattern whose memory grows with the run
    name matched; a line whose tail is longer than any name read goes to the JSON parser,
    and its run name is refused for its length."""
    exp = copy_export(tmp_path)
    good = runs(load(exp))
    name = "a" * 3_000_000
    line = ('{"points": {"steps": [1], "values": [1.0], "wall_times": [1.0]}, "run": "'
            f'{name}", "summary_metadata": "{SCALAR_MD}", "tag": "t"}}\n')
    path = exp / "scalars.json"
    path.write_text(line + path.read_text())
    loaded, peak = load_traced(exp)
    assert peak < 60 << 20, f"peak {peak >> 20} MiB"
    assert runs(loaded) == good
    assert "a run name of 3000000 characters" in messages(loaded.report)
