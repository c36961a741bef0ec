"""tbconvert.tbparse.SummaryReader against tbparse itself, on the real fixtures.

tbparse is the oracle for every table it can build here (TensorFlow is not
installed, so its images and audio are compared with values decoded straight
from TensorBoard's own reading of the fixture files). Where tbparse is wrong,
the improvement is asserted as such.
"""

from __future__ import annotations

import io
import shutil
import struct
import sys
import wave
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import BENCH, FIXTURES, on_path

from tbconvert.tbparse import ALL_EVENT_TYPES, SummaryReader

tbparse = pytest.importorskip("tbparse")

TF_FREE = {"scalars", "tensors", "histograms", "hparams", "text"}
EXTRAS = [set(), {"dir_name", "file_name", "wall_time"}, {"file_name"},
          {"wall_time", "min", "max", "num", "sum", "sum_squares"},
          {"dir_name", "width", "height", "content_type", "length_frames", "sample_rate"}]
# tbparse fails on TF2's text written as a table of strings (a tensor of several strings).
TYPES = {"torch_logdir": TF_FREE, "tensorboardx_logdir": TF_FREE,
         "tf2_logdir": TF_FREE - {"text"}}

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")


def same(x, y) -> bool:
    """Exact equality of one cell: type, dtype, shape and value (NaN equals NaN)."""
    if isinstance(x, list) or isinstance(y, list):
        return type(x) is type(y) and len(x) == len(y) and all(map(same, x, y))
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return (type(x) is type(y) and x.shape == y.shape and x.dtype == y.dtype
                and bool((x == y).all()))
    if type(x) is not type(y):
        return False
    return bool(x == y) or bool(pd.isnull(x) and pd.isnull(y))


def assert_frames_equal(ours: pd.DataFrame, theirs: pd.DataFrame, what: str) -> None:
    assert list(ours.columns) == list(theirs.columns), what
    assert dict(ours.dtypes) == dict(theirs.dtypes), what
    assert len(ours) == len(theirs), what
    for col in ours.columns:
        for i, (x, y) in enumerate(zip(ours[col], theirs[col], strict=True)):
            assert same(x, y), f"{what}: column {col!r} row {i}: {x!r:.80} != {y!r:.80}"


def _both(path, types, **kw):
    theirs = tbparse.SummaryReader(str(path), event_types=set(types), **kw)
    ours = SummaryReader(str(path), event_types=set(types), restarts="per-file", **kw)
    return ours, theirs


@pytest.mark.parametrize("name", sorted(TYPES))
@pytest.mark.parametrize("pivot", [False, True])
def test_every_table_equals_tbparse(name, pivot):
    types = TYPES[name]
    for extra in EXTRAS:
        ours, theirs = _both(FIXTURES / name, types, pivot=pivot, extra_columns=set(extra))
        for et in sorted(types):
            assert_frames_equal(getattr(ours, et), getattr(theirs, et),
                                f"{name} {et} pivot={pivot} extra={sorted(extra)}")
        assert ours.tags == {k: v for k, v in theirs.tags.items() if k in types} | {
            k: [] for k in ALL_EVENT_TYPES - types}
        assert len(ours.scalars) > 0


@pytest.mark.parametrize("name", ["torch_logdir", "tensorboardx_logdir"])
def test_tbconverts_own_event_files_read_as_tbparse_reads_them(name, tmp_path):
    """tbconvert writes histograms as tensors (both TensorBoard loaders show them alike), which
    tbparse puts in its tensors table: so does the compatible reader, though the metadata is
    that of a histogram read from a ``histo`` value."""
    import tbconvert
    out = tmp_path / "out"
    tbconvert.convert(FIXTURES / name, out, to_format="tfevents")
    types = TF_FREE - {"hparams"}
    ours, theirs = _both(out, types)
    for et in sorted(types):
        assert_frames_equal(getattr(ours, et), getattr(theirs, et), f"{name} {et}")
    assert ours.tags == {k: v for k, v in theirs.tags.items() if k in types} | {
        k: [] for k in ALL_EVENT_TYPES - types}
    assert not ours.histograms.shape[0] and len(ours.tensors) > 0


def test_children_files_and_single_file_equal_tbparse():
    root = FIXTURES / "torch_logdir"
    ours, theirs = _both(root, TF_FREE, extra_columns={"dir_name", "file_name"})
    assert list(ours.children) == list(theirs.children)
    assert repr(ours) == repr(theirs) and ours.log_path == theirs.log_path
    train_o, train_t = ours["train"], theirs["train"]
    assert list(train_o.children) == list(train_t.children)
    event_file = next(p for p in (root / "train").iterdir() if "tfevents" in p.name)
    for et in ("scalars", "histograms", "tensors", "text"):
        assert_frames_equal(getattr(train_o, et), getattr(train_t, et), f"train {et}")
        file_o, file_t = _both(event_file, TF_FREE, pivot=True)
        assert_frames_equal(getattr(file_o, et), getattr(file_t, et), f"file {et}")
    assert train_o.get_tags("scalars") == train_t.get_tags("scalars")


def test_argument_errors_are_tbparses():
    path = str(FIXTURES / "torch_logdir")
    for kw, exc in [({"extra_columns": ["wall_time"]}, ValueError),
                    ({"extra_columns": {"colour"}}, KeyError),
                    ({"event_types": ["scalars"]}, ValueError),
                    ({"event_types": {"graphs"}}, KeyError)]:
        with pytest.raises(exc):
            tbparse.SummaryReader(path, **kw)
        with pytest.raises(exc):
            SummaryReader(path, **kw)
    with pytest.raises(ValueError, match="File or directory not found"):
        SummaryReader(path + "-missing")
    reader = SummaryReader(path, event_types={"scalars"})
    with pytest.raises(ValueError, match="ignored"):
        _ = reader.histograms
    with pytest.raises(ValueError, match="Unknown event_type"):
        reader.get_events("graphs")


# ------------------------------------------------------------------ documented improvements

def test_restart_in_a_new_file_is_purged_as_tensorboard_does():
    """tbparse reads each file on its own, so a restart that starts a new file keeps the
    points TensorBoard hides; ``restarts="per-file"`` gives tbparse's rows."""
    from oracle import tb_view
    root = FIXTURES / "torch_logdir"
    theirs = tbparse.SummaryReader(str(root), extra_columns={"dir_name"},
                                   event_types={"scalars"}).scalars
    ours = SummaryReader(str(root), extra_columns={"dir_name"}).scalars
    tb = tb_view(root)
    for run in ("resumed", "resumed_purged"):
        tb_steps = [p[0] for p in tb[run]["tags"]["loss"]["points"]]
        ours_steps = ours[(ours.dir_name == run) & (ours.tag == "loss")].step.tolist()
        assert ours_steps == sorted(tb_steps), run
    # the purged run: TensorBoard shows 40 points, tbparse 50 (steps 20-29 twice)
    theirs_purged = theirs[(theirs.dir_name == "resumed_purged") & (theirs.tag == "loss")]
    assert len(theirs_purged) == 50 and len(ours_steps) == 40
    # everything else is the same
    rest_o = ours[ours.dir_name != "resumed_purged"].reset_index(drop=True)
    rest_t = theirs[theirs.dir_name != "resumed_purged"].reset_index(drop=True)
    assert_frames_equal(rest_o, rest_t, "runs without a restart")
    kept = SummaryReader(str(root / "resumed_purged"), restarts="keep-all").scalars
    assert (kept.tag == "loss").sum() == 50
    told = SummaryReader(str(root / "resumed_purged")).report.issues
    assert [(i.kind, i.tag, i.count, i.lost) for i in told if i.tag == "loss"] == [
        ("hidden_points_left_out", "loss", 10, False)]


def _corrupt_copy(tmp_path) -> tuple[Path, int]:
    """A copy of tensorboardX's run_a whose 10th record has one payload byte flipped."""
    src = FIXTURES / "tensorboardx_logdir" / "run_a"
    dst = tmp_path / "run_a"
    dst.mkdir()
    event_file = next(p for p in src.iterdir() if "tfevents" in p.name)
    data = bytearray(event_file.read_bytes())
    pos = 0
    for _ in range(9):
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 12 + length + 4
    data[pos + 12 + 2] ^= 0xFF
    (dst / event_file.name).write_bytes(bytes(data))
    return dst, pos


def test_a_corrupt_record_costs_only_itself(tmp_path):
    dst, pos = _corrupt_copy(tmp_path)
    intact_file = FIXTURES / "tensorboardx_logdir" / "run_a" / next(dst.iterdir()).name
    intact = SummaryReader(str(intact_file)).scalars
    ours_reader = SummaryReader(str(dst))
    ours = ours_reader.scalars
    theirs = tbparse.SummaryReader(str(dst), event_types={"scalars"}).scalars
    # one event (one scalar value here) is lost, and said so; tbparse loses the rest of the file
    assert len(ours) == len(intact) - 1
    assert len(theirs) < len(ours) - 10
    assert any(i.kind == "corrupt_record" and str(pos) in i.message
               for i in ours_reader.report.issues)


def test_nothing_is_sampled():
    """tbparse samples text down to one point when ``tensors`` is not also asked for."""
    path = str(FIXTURES / "torch_logdir" / "train")
    theirs = tbparse.SummaryReader(path, event_types={"text"}).text
    ours = SummaryReader(path, event_types={"text"}).text
    assert len(theirs) == 1
    full = tbparse.SummaryReader(path, event_types={"text", "tensors"}).text
    assert_frames_equal(ours, full, "text")


def test_text_tables_read_where_tbparse_fails():
    path = str(FIXTURES / "tf2_logdir" / "eager")
    with pytest.raises(ValueError):
        _ = tbparse.SummaryReader(path, event_types={"text"}).text
    text = SummaryReader(path).text
    table = text[text.tag == "config_table"].value.iloc[0]
    assert isinstance(table, np.ndarray) and table.shape == (2, 2)
    assert table.tolist() == [["k", "v"], ["lr", "0.01"]]


# ------------------------------------------------------------------ images and audio, no TensorFlow

def _legacy_events(path, kind):
    """TensorBoard's legacy accumulator's own events, every point kept (per file, as tbparse)."""
    from tensorboard.backend.event_processing.event_accumulator import (
        STORE_EVERYTHING_SIZE_GUIDANCE,
        EventAccumulator,
    )
    acc = EventAccumulator(str(path), STORE_EVERYTHING_SIZE_GUIDANCE)
    acc.Reload()
    get = acc.Images if kind == "images" else acc.Audio
    return [(tag, e) for tag in acc.Tags()[kind] for e in get(tag)]


def _png(data: bytes) -> np.ndarray:
    from PIL import Image
    arr = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return arr


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(data)) as w:
        assert w.getsampwidth() == 2
        ints = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return (ints / 32768.0).astype(np.float32).reshape(-1, w.getnchannels()), w.getframerate()


@pytest.mark.parametrize("name", ["torch_logdir", "tensorboardx_logdir"])
@pytest.mark.parametrize("pivot", [False, True])
def test_images_and_audio_without_tensorflow(name, pivot, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)   # importing it fails
    root = FIXTURES / name
    extra = {"file_name", "width", "height", "content_type", "length_frames", "sample_rate"}
    reader = SummaryReader(str(root), pivot=pivot, extra_columns=extra)
    images, audio = reader.images, reader.audio
    expected_images, expected_audio = [], []
    for f in sorted(root.rglob("*tfevents*")):
        for tag, e in _legacy_events(f, "images"):
            expected_images.append((f.name, tag, e.step, e.width, e.height,
                                    _png(e.encoded_image_string)))
        for tag, e in _legacy_events(f, "audio"):
            samples, rate = _wav(e.encoded_audio_string)
            expected_audio.append((f.name, tag, e.step, e.content_type, e.length_frames,
                                   e.sample_rate, samples, rate))
    assert expected_images and expected_audio
    if pivot:
        for fname, tag, step, width, height, pixels in expected_images:
            row = images[(images.file_name == fname) & (images.step == step)].iloc[0]
            got = row[tag]
            got = got if isinstance(got, np.ndarray) else got[0]
            assert got.dtype == np.uint8 and np.array_equal(got, pixels)
            assert row[tag + "/width"] == width and row[tag + "/height"] == height
        return
    assert list(images.columns) == ["step", "tag", "value", "height", "width", "file_name"]
    assert list(audio.columns) == ["step", "tag", "value", "content_type", "length_frames",
                                   "sample_rate", "file_name"]
    key = sorted(expected_images, key=lambda r: (r[0], r[1], r[2]))
    assert len(images) == len(key)
    for (fname, tag, step, width, height, pixels), row in zip(key, images.itertuples(), strict=True):
        assert (row.file_name, row.tag, row.step, row.width, row.height) == \
            (fname, tag, step, width, height)
        assert row.value.dtype == np.uint8 and np.array_equal(row.value, pixels)
    assert images.width.dtype == np.int64 and images.height.dtype == np.int64
    key = sorted(expected_audio, key=lambda r: (r[0], r[1], r[2]))
    assert len(audio) == len(key)
    for (fname, tag, step, ctype, frames, rate, samples, wav_rate), row in \
            zip(key, audio.itertuples(), strict=True):
        assert (row.file_name, row.tag, row.step, row.content_type) == (fname, tag, step, ctype)
        assert row.length_frames == frames == len(samples) and row.sample_rate == rate == wav_rate
        assert row.value.dtype == np.float32 and np.array_equal(row.value, samples)
    assert audio.sample_rate.dtype == np.float64 and audio.length_frames.dtype == np.int64


def test_tf2_image_tensors_decode_as_tbparse_would(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    tensors = SummaryReader(str(FIXTURES / "tf2_logdir" / "eager")).tensors
    row = tensors[tensors.tag == "digits_rgb"].iloc[0]
    image = SummaryReader.tensor_to_image(row.value)
    assert image["width"] == 6 and image["height"] == 6
    assert image["image"].dtype == np.uint8 and image["image"].shape[-3:] == (6, 6, 3)
    tone = tensors[tensors.tag == "tone"].iloc[0].value
    clip = SummaryReader.tensor_to_audio(tone)
    samples, rate = _wav(tone[0, 0])
    assert np.array_equal(clip["audio"], samples) and clip["sample_rate"] == rate


def test_tensor_to_histogram_equals_tbparses():
    tensors = SummaryReader(str(FIXTURES / "tf2_logdir" / "eager")).tensors
    value = tensors[tensors.tag == "weights"].iloc[0].value
    ours = SummaryReader.tensor_to_histogram(value)
    theirs = tbparse.SummaryReader.tensor_to_histogram(value)
    assert ours.keys() == theirs.keys()
    for k in ours:
        np.testing.assert_array_equal(ours[k], theirs[k])


def test_a_directory_without_event_files(tmp_path):
    (tmp_path / "notes.txt").write_text("not events")
    (tmp_path / "empty").mkdir()
    ours = SummaryReader(str(tmp_path), extra_columns={"dir_name"})
    theirs = tbparse.SummaryReader(str(tmp_path), extra_columns={"dir_name"},
                                   event_types=TF_FREE)
    for et in sorted(TF_FREE):
        assert_frames_equal(getattr(ours, et), getattr(theirs, et), et)
    shutil.rmtree(tmp_path / "empty")


def test_wide_merge_equals_pandas_groupby():
    """The vectorised wide-format merge gives what tbparse's per-group aggregation gives."""
    from tbconvert.tbparse import _pivot
    rng = np.random.default_rng(0)
    n = 400
    steps = np.sort(rng.integers(0, 60, n))
    floats = np.where(rng.random(n) < 0.6, np.nan, rng.standard_normal(n))
    objects = np.empty(n, dtype=object)
    for i in range(n):
        r = rng.random()
        objects[i] = (np.nan if r < 0.5 else [float(i), 1.0] if r < 0.6 else
                      np.arange(3.0) + i if r < 0.8 else f"s{i}")
    texts = [np.nan if rng.random() < 0.7 else f"t{i}" for i in range(n)]
    frames = [
        pd.DataFrame({"step": steps, "a": floats, "b": objects, "c": texts,
                      "wall_time": rng.random(n)}),
        pd.DataFrame({"step": np.arange(n) // 2, "a": np.arange(n), "wall_time": rng.random(n)}),
        pd.DataFrame({"step": np.arange(n), "a": floats}),
        pd.DataFrame({"step": steps, "dir_name": np.where(steps % 3, "x", "y").astype(object),
                      "a": floats}).sort_values(["dir_name", "step"], ignore_index=True),
    ]
    for df in frames:
        keys = [k for k in ("dir_name", "step") if k in df.columns]
        fast = _pivot._merge_groups(df, keys)
        slow = df.groupby(keys, sort=False).aggregate(_pivot.merge_values).reset_index()
        assert_frames_equal(fast, slow[list(fast.columns)], "merge")


def test_histogram_cdf_and_pdf_equal_tbparses():
    hist = SummaryReader(str(FIXTURES / "tensorboardx_logdir" / "run_a")).histograms
    assert len(hist) > 0
    for counts, limits in zip(hist.counts, hist.limits, strict=True):
        counts = np.concatenate(([0.0], counts[1:]))
        x = np.linspace(limits[0] - 1, limits[-1] + 1, 57)
        np.testing.assert_allclose(SummaryReader.histogram_to_cdf(counts, limits, x),
                                   tbparse.SummaryReader.histogram_to_cdf(counts, limits, x),
                                   rtol=1e-12, atol=1e-12)
        for ours, theirs in zip(SummaryReader.histogram_to_pdf(counts, limits, x),
                                tbparse.SummaryReader.histogram_to_pdf(counts, limits, x), strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def test_raw_events_are_refused_in_one_line():
    from tbconvert.errors import UnsupportedError
    reader = SummaryReader(str(FIXTURES / "torch_logdir" / "train"))
    with pytest.raises(UnsupportedError, match="not kept"):
        _ = reader.raw_tags
    with pytest.raises(UnsupportedError):
        reader.get_raw_events("scalars")


# ------------------------------------------------------------------ the tensors table

def test_tensors_table_holds_every_numeric_tensor_as_tensorboard_reads_it():
    from oracle import tb_view

    import tbconvert
    root = FIXTURES / "torch_logdir"
    report = tbconvert.Report()
    table = tbconvert.tensors(str(root), report=report)
    assert list(table.columns) == ["run", "tag", "step", "wall_time", "plugin", "dtype",
                                   "shape", "values"]
    tb = tb_view(root)
    expected = []
    for run, info in tb.items():
        for tag, t in info["tags"].items():
            if t["plugin_name"] in ("scalars", "text", "hparams"):
                continue
            for step, wall, (dtype, shape, raw) in t["points"]:
                if dtype == "string":
                    continue
                arr = np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape)
                expected.append((run, tag, step, wall, "x".join(map(str, shape)), arr))
    assert len(table) == len(expected) > 0
    got = {(r.run, r.tag, r.step, r.wall_time): r for r in table.itertuples()}
    for run, tag, step, wall, shape, arr in expected:
        row = got[(run, tag, step, wall)]
        assert row.shape == shape and row.dtype == "float32"
        assert np.array_equal(row.values.reshape(arr.shape), arr.astype(np.float64))
    # the string tensor (custom scalars layout) is counted, not dropped silently
    assert any(i.kind == "not_numeric_tensor" for i in report.issues)
    with_scalars = tbconvert.tensors(str(root), scalars=True, tags="^loss$")
    assert set(with_scalars["shape"]) == {""} and len(with_scalars) > 0


def test_a_link_back_up_the_tree_is_not_followed(tmp_path):
    shutil.copytree(FIXTURES / "tensorboardx_logdir" / "run_b", tmp_path / "run_b")
    (tmp_path / "run_b" / "up").symlink_to(tmp_path, target_is_directory=True)
    reader = SummaryReader(str(tmp_path), extra_columns={"dir_name"})
    plain = SummaryReader(str(FIXTURES / "tensorboardx_logdir" / "run_b")).scalars
    assert set(reader.scalars.dir_name) == {"run_b", "run_b/compare/x", "run_b/compare/y"}
    assert len(reader.scalars) == len(plain) > 0
    assert any(i.kind == "symlink_loop" for i in reader.report.issues)


# ------------------------------------------------------------------ restarts inside one file

def _event(step, **kw):
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event(step=step, wall_time=1.7e9 + step, **kw).SerializeToString()


def _restart_cases():
    from tensorboard.compat.proto import event_pb2, summary_pb2

    def scalar(step, v, tag="loss"):
        return _event(step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=v)]))

    def start(step):
        return _event(step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))

    def version(v):
        return event_pb2.Event(wall_time=1.7e9, file_version=v).SerializeToString()

    before = [scalar(s, s) for s in range(10)]
    after = [scalar(s, 100 + s) for s in range(5, 15)]
    return {
        "legacy_out_of_order": [version("brain.Event:1")] + before + after,
        "no_version_out_of_order": before + after,
        "second_start": [version("brain.Event:2"), start(0)] + before + [start(5)] + after,
        "first_start_after_points": [version("brain.Event:2")] + before + [start(5)] + after,
        # tbparse's accumulator keeps as the last step only what did not purge, and takes any
        # event's step (a session log's too); TensorBoard's dashboards take every summary's
        "other_tag_out_of_order": before + [scalar(1, 7.0, "zzz"), scalar(3, 30.0)],
        "session_log_in_a_legacy_file": before + [start(2), scalar(5, 50.0)],
    }


# cases where tbparse's rows differ from what TensorBoard's dashboards show
TBPARSE_DIFFERS = {"first_start_after_points", "other_tag_out_of_order",
                   "session_log_in_a_legacy_file"}


@pytest.mark.parametrize("case", sorted(_restart_cases()))
def test_restarts_inside_one_file(case, tmp_path):
    """``per-file`` purges as tbparse's accumulator does (at every START, the first one too);
    the default as TensorBoard's dashboards do (from the second START of a run on)."""
    from oracle import tb_view

    from tbconvert.formats.tfevents.records import frame
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1.host").write_bytes(
        b"".join(frame(e) for e in _restart_cases()[case]))
    theirs = tbparse.SummaryReader(str(tmp_path), event_types={"scalars"}).scalars
    ours = SummaryReader(str(tmp_path), restarts="per-file").scalars
    assert_frames_equal(ours, theirs, case)
    shown = SummaryReader(str(tmp_path)).scalars
    shown = shown[shown.tag == "loss"]
    tb_steps = sorted(p[0] for p in tb_view(tmp_path)["run"]["tags"]["loss"]["points"])
    assert shown.step.tolist() == tb_steps
    assert (len(shown) != len(theirs[theirs.tag == "loss"])) == (case in TBPARSE_DIFFERS)


def test_damaged_and_odd_files_cost_only_themselves(tmp_path):
    """A truncated file, one of garbage and an empty one, beside an intact run: no traceback,
    the intact run whole, each problem reported."""
    src = FIXTURES / "tensorboardx_logdir" / "run_b"
    event_file = next(p for p in src.iterdir() if "tfevents" in p.name)
    shutil.copytree(src, tmp_path / "intact")
    (tmp_path / "bad").mkdir()
    data = event_file.read_bytes()
    (tmp_path / "bad" / "events.out.tfevents.1.truncated").write_bytes(data[:len(data) - 7])
    (tmp_path / "bad" / "events.out.tfevents.2.garbage").write_bytes(b"\x00\xff" * 500)
    (tmp_path / "bad" / "events.out.tfevents.3.empty").write_bytes(b"")
    reader = SummaryReader(str(tmp_path), extra_columns={"dir_name", "file_name"})
    scalars = reader.scalars
    intact = SummaryReader(str(src)).scalars
    assert (scalars.dir_name.str.startswith("intact")).sum() == len(intact)
    truncated = scalars[scalars.file_name == "events.out.tfevents.1.truncated"]
    whole = SummaryReader(str(event_file)).scalars
    assert len(whole) - 1 <= len(truncated) <= len(whole) and len(truncated) > 0
    kinds = {i.kind for i in reader.report.issues}
    assert {"truncated_record", "not_an_event_file"} <= kinds
    for et in ("histograms", "tensors", "text", "hparams", "images", "audio"):
        getattr(reader, et)


@pytest.mark.parametrize("name", ["torch_logdir", "tensorboardx_logdir"])
def test_media_tables_details_match_the_writers_fields(name):
    """The optional audio and image columns tbparse users look for, in tbconvert's tables:
    equal to the fields the writer put in ``Summary.Audio`` / ``Summary.Image``."""
    import tbconvert
    root = FIXTURES / name
    audio = tbconvert.audio(str(root), details=True)
    images = tbconvert.images(str(root), details=True)
    assert list(audio.columns) == ["run", "tag", "step", "wall_time", "index", "format",
                                   "content_type", "sample_rate", "channels", "length_frames",
                                   "data"]
    assert "content_type" in images.columns and set(images.content_type) == {"image/png"}
    expected = []
    for f in sorted(root.rglob("*tfevents*")):
        expected += [(tag, e.step, e.content_type, int(e.sample_rate), e.length_frames,
                      e.encoded_audio_string) for tag, e in _legacy_events(f, "audio")]
    got = [(r.tag, r.step, r.content_type, r.sample_rate, r.length_frames, r.data)
           for r in audio.itertuples()]
    assert sorted(got) == sorted(expected) and expected
    assert list(tbconvert.audio(str(root)).columns) == ["run", "tag", "step", "wall_time",
                                                        "index", "format", "data"]


# ------------------------------------------------------------------ every writer form of the bench

WRITER_FORMS = {"pytorch": "scalars", "tensorboardx": "scalars", "tf2": "tensors",
                "keras": "tensors", "tf1_merge_all": "scalars", "histo_legacy": "histograms",
                "histo_tf2": "tensors", "images_tf2": "tensors"}


@pytest.mark.parametrize("form", sorted(WRITER_FORMS))
def test_every_writer_form_equals_tbparse(form, tmp_path):
    """The bench's logdirs (the byte layouts of PyTorch, tensorboardX, TF2, Keras and TF1's
    merge_all), small: every table and pivot equal to tbparse's."""
    on_path(BENCH)
    import writers
    writers.write_form(form, tmp_path / "logs", 40)
    table = WRITER_FORMS[form]
    for pivot in (False, True):
        extra = {"dir_name", "file_name", "wall_time"} | (
            {"min", "max", "num", "sum", "sum_squares"} if table == "histograms" else set())
        ours, theirs = _both(tmp_path / "logs", TF_FREE, pivot=pivot, extra_columns=extra)
        for et in sorted(TF_FREE):
            assert_frames_equal(getattr(ours, et), getattr(theirs, et), f"{form} {et} {pivot}")
        assert len(getattr(ours, table)) > 0


def test_histogram_to_bins_equals_tbparses():
    hist = pd.concat([SummaryReader(str(FIXTURES / name)).histograms for name in TYPES])
    assert len(hist) > 0
    made = [(np.array([0.0, 3.0, 0.0, 2.0]), np.array([-1.0, 0.0, 0.0, 2.0])),   # zero width
            (np.array([0.0, 5.0]), np.array([1.0, 1.0]))]
    for counts, limits in list(zip(hist.counts, hist.limits, strict=True)) + made:
        counts = np.concatenate(([0.0], counts[1:]))
        lo, hi = float(limits[0]), float(limits[-1])
        for bounds in [(lo, hi), (None, None), (lo / 2, hi / 2), (lo - 1, lo - 0.5),
                       (hi + 1, hi + 2), (0.5, 0.5)]:
            for n in (1, 7, 30):
                ours = SummaryReader.histogram_to_bins(counts, limits, *bounds, n_bins=n)
                theirs = tbparse.SummaryReader.histogram_to_bins(counts, limits, *bounds,
                                                                 n_bins=n)
                assert all(np.array_equal(a, b, equal_nan=True)
                           for a, b in zip(ours, theirs, strict=True)), (bounds, n)


# ------------------------------------------------------------------ patterns of real projects

def _summary_event(step, *values):
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return event_pb2.Event(step=step, wall_time=1.7e9 + step,
                           summary=summary_pb2.Summary(value=list(values))).SerializeToString()


@pytest.mark.parametrize("pivot", [False, True])
def test_a_tag_logged_as_a_scalar_and_a_histogram_goes_to_both_tables(tmp_path, pivot):
    """``add_scalar("w")`` and ``add_histogram("w")``: tbparse files each point by the field
    it was written in, and the other tags of the directory are read as usual."""
    from tensorboard.compat.proto import summary_pb2

    from tbconvert.formats.tfevents.records import frame
    events = []
    for step in range(3):
        histo = summary_pb2.HistogramProto(min=0, max=2, num=3, sum=3.0 + step, sum_squares=5,
                                           bucket_limit=[1, 2], bucket=[1, 2 + step])
        events.append(_summary_event(step, summary_pb2.Summary.Value(tag="w",
                                                                     simple_value=step)))
        events.append(_summary_event(step, summary_pb2.Summary.Value(tag="w", histo=histo)))
    events.append(_summary_event(0, summary_pb2.Summary.Value(tag="other", simple_value=1.0)))
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1.host").write_bytes(b"".join(frame(e) for e in events))
    extra = {"wall_time", "min", "max", "num", "sum", "sum_squares"}
    ours, theirs = _both(run, ["scalars", "histograms", "tensors"], pivot=pivot,
                         extra_columns=extra)
    for etype in ("scalars", "histograms", "tensors"):
        assert_frames_equal(getattr(ours, etype), getattr(theirs, etype), etype)
    assert len(ours.scalars) == (3 if pivot else 4) and len(ours.histograms) == 3
    assert not ours.report.issues


def test_each_files_hyperparameters_as_tbparse_reads_them(tmp_path):
    """A training that resumed into a new event file logged its hyperparameters again."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import plugin_data_pb2

    from tbconvert.formats.tfevents.records import frame
    run = tmp_path / "run"
    run.mkdir()
    for i, lr in enumerate((0.1, 0.2)):
        data = plugin_data_pb2.HParamsPluginData(version=0)   # as tensorboardX writes it
        data.session_start_info.hparams["lr"].number_value = lr
        data.session_start_info.hparams["name"].string_value = f"t{i}"
        md = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name="hparams", content=data.SerializeToString()))
        value = summary_pb2.Summary.Value(tag="_hparams_/session_start_info", metadata=md)
        (run / f"events.out.tfevents.{i + 1}.host").write_bytes(frame(_summary_event(0, value)))
    for pivot in (False, True):
        ours, theirs = _both(run, ["hparams"], pivot=pivot, extra_columns={"file_name"})
        assert_frames_equal(ours.hparams, theirs.hparams, f"hparams, pivot={pivot}")
    assert ours.hparams["lr"].tolist() == [0.1, 0.2]     # one row per file


def test_empty_event_types_and_columns_are_the_defaults_as_in_tbparse():
    path = FIXTURES / "tensorboardx_logdir"
    for empty in (set(), None):
        ours = SummaryReader(str(path), event_types=empty, extra_columns=empty)
        theirs = tbparse.SummaryReader(str(path), event_types=empty, extra_columns=empty)
        assert_frames_equal(ours.scalars, theirs.scalars, f"scalars, {empty!r}")


def test_a_16_bit_greyscale_png_decodes_as_tensorflow_decodes_it():
    """TensorFlow's decode_image (uint8) keeps one channel and each sample's high byte."""
    from PIL import Image

    from tbconvert.tbparse._media import decode_image
    raw = io.BytesIO()
    Image.fromarray(np.array([[0, 200, 256, 1000, 40000, 65535]], np.uint16)).save(raw, "PNG")
    arr = decode_image(raw.getvalue())
    assert arr.dtype == np.uint8 and arr.shape == (1, 6, 1)
    assert arr.reshape(-1).tolist() == [0, 0, 1, 3, 156, 255]


@pytest.mark.parametrize("pivot", [False, True])
def test_tables_raise_no_warning(pivot):
    """The README's tbparse example under ``-W error``: no pandas deprecation on the way
    (the test configuration ignores one that upstream tbparse itself raises)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader = SummaryReader(str(FIXTURES / "torch_logdir"), pivot=pivot,
                               extra_columns={"dir_name"})
        for event_type in ALL_EVENT_TYPES:
            getattr(reader, event_type)
