"""What the event-file writer produces: readable by common readers, compact, written in bounded memory."""

import math

import numpy as np
import pytest
from helpers import FIXTURES, LOGDIRS
from oracle import assert_same_view, canonical, tb_view

import tbconvert
from tbconvert import dtypes as dt
from tbconvert.api import open_writer
from tbconvert.formats.tfevents import event_files, events, legacy, records
from tbconvert.formats.tfevents.entries import VALUE, Entries
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Metadata,
    Run,
    RunRecord,
    ScalarSeries,
    TensorSeries,
)
from tbconvert.report import Report

TBDEV = FIXTURES / "tbdev_export"


def _pb():
    from tensorboard.compat.proto import event_pb2, summary_pb2
    return event_pb2, summary_pb2


def _events(logdir):
    event_pb2, _ = _pb()
    for path in sorted(p for p in logdir.rglob("*") if event_files.is_event_file(p.name)):
        buf = path.read_bytes()
        starts, lengths, damage = records.scan(buf)
        assert not damage, path
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True):
            yield path, event_pb2.Event.FromString(buf[s:s + n])


def _value_kinds(logdir) -> dict:
    """{(run dir, tag): set of Summary.Value kinds written}."""
    kinds = {}
    for path, ev in _events(logdir):
        run = path.parent.relative_to(logdir).as_posix()
        for v in ev.summary.value:
            kinds.setdefault((run, v.tag), set()).add(v.WhichOneof("value"))
    return kinds


def _size(logdir) -> int:
    return sum(p.stat().st_size for p in logdir.rglob("*") if event_files.is_event_file(p.name))


def legacy_view(logdir) -> dict:
    """What the legacy ``EventAccumulator`` (no migration, size guidance 0) shows per run."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    guidance = {k: 0 for k in (ea.SCALARS, ea.HISTOGRAMS, ea.COMPRESSED_HISTOGRAMS, ea.IMAGES,
                               ea.AUDIO, ea.TENSORS, ea.GRAPH, ea.META_GRAPH, ea.RUN_METADATA)}
    view = {}
    for run, _ in event_files.discover(logdir, lambda *a: None):
        acc = ea.EventAccumulator(str(logdir / run), size_guidance=guidance)
        acc.Reload()
        tags = acc.Tags()
        histo = {}
        for tag in tags["histograms"]:
            pts = []
            for h in acc.Histograms(tag):
                _, summary_pb2 = _pb()
                hv = h.histogram_value
                proto = summary_pb2.HistogramProto(min=hv.min, max=hv.max, bucket_limit=hv.bucket_limit,
                                                   bucket=hv.bucket)
                pts.append((h.step, h.wall_time, canonical(legacy.migrate_histogram(proto))))
            histo[tag] = pts
        from tensorboard.util import tensor_util
        view[run] = {
            "scalars": {t: [(s.step, s.wall_time, s.value) for s in acc.Scalars(t)]
                        for t in tags["scalars"]},
            "histograms": histo,
            "tensors": {t: [(e.step, e.wall_time, canonical(tensor_util.make_ndarray(e.tensor_proto)))
                            for e in acc.Tensors(t)] for t in tags["tensors"]},
            "images": {t: [(i.step, i.wall_time, i.width, i.height, i.encoded_image_string)
                           for i in acc.Images(t)] for t in tags["images"]},
            "audio": {t: [(a.step, a.wall_time, a.encoded_audio_string) for a in acc.Audio(t)]
                      for t in tags["audio"]},
        }
    return view


def _same_values(a, b):
    assert len(a) == len(b)
    for pa, pb in zip(a, b, strict=True):
        assert pa[:2] == pb[:2]
        for x, y in zip(pa[2:], pb[2:], strict=True):
            assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))


def _convert(src, tmp_path, name="out", **kw):
    out = tmp_path / name
    report = tbconvert.convert(src, out, to_format="tfevents", **kw)
    return out, report


def _as_legacy(kind, point):
    """A point of TensorBoard's view in the legacy accumulator's terms."""
    step, wall, (dtype, shape, data) = point
    if kind == "scalars":
        return (step, wall, float(np.frombuffer(data, dtype)[0]))
    if kind == "histograms":
        return (step, wall, (dtype, shape, data))
    if kind == "images":
        return (step, wall, int(data[0]), int(data[1]), data[2])
    return (step, wall, data[0])


@pytest.mark.parametrize("name", LOGDIRS)
def test_legacy_accumulator_reads_every_point(name, tmp_path):
    """Every tag the legacy accumulator lists in the source is there, with TensorBoard's points:
    scalars, images and audio where they were, histograms among its tensors (the form both of
    TensorBoard's loaders read alike).

    (Where the two loaders disagree about restarts, TensorBoard's reading is the one kept.)
    """
    src = FIXTURES / name
    out, _ = _convert(src, tmp_path)
    listed, got, shown = legacy_view(src), legacy_view(out), tb_view(src)
    assert sorted(got) == sorted(listed)
    for run in listed:
        assert got[run]["histograms"] == {}
        for kind in ("scalars", "images", "audio"):
            assert sorted(got[run][kind]) == sorted(listed[run][kind]), (run, kind)
            for tag in listed[run][kind]:
                want = [_as_legacy(kind, p) for p in shown[run]["tags"][tag]["points"]]
                _same_values(got[run][kind][tag], want)
        for tag in listed[run]["histograms"]:
            assert got[run]["tensors"][tag] == shown[run]["tags"][tag]["points"], (run, tag)


@pytest.mark.parametrize("name", LOGDIRS)
def test_legacy_forms_are_kept(name, tmp_path):
    """simple_value stays simple_value, image and audio stay so; histo becomes a tensor, since
    TensorBoard's data server turns a histo into other rows than its Python loader does."""
    src = FIXTURES / name
    out, _ = _convert(src, tmp_path)
    before, after = _value_kinds(src), _value_kinds(out)
    legacy_kinds = {"simple_value", "histo", "image", "audio"}
    for key, kinds in before.items():
        if kinds & legacy_kinds and key in after:
            assert after[key] == {"tensor" if k == "histo" else k for k in kinds}, key


def _legacy_media(logdir) -> dict:
    """{(run dir, tag, step): the Summary.Image or Summary.Audio, as text}."""
    media = {}
    for path, ev in _events(logdir):
        run = path.parent.relative_to(logdir).as_posix()
        for v in ev.summary.value:
            if v.WhichOneof("value") in ("image", "audio"):
                media[(run, v.tag, ev.step)] = str(getattr(v, v.WhichOneof("value")))
    return media


@pytest.mark.parametrize("name", LOGDIRS)
def test_legacy_media_keep_every_field(name, tmp_path):
    """An image's colour space, a clip's rate, channels and length (which the legacy
    ``EventAccumulator.Audio()`` shows, and TensorBoard's migration drops) are read back from
    the PNG and WAV headers, where the writers took them from."""
    src = FIXTURES / name
    out, _ = _convert(src, tmp_path)
    before = _legacy_media(src)
    assert _legacy_media(out) == before
    if name == "torch_logdir":
        assert any("sample_rate: 8000" in m for m in before.values())
        assert any("colorspace: 3" in m for m in before.values())


def test_an_empty_tag_logged_as_simple_value_stays_a_scalar(tmp_path):
    # add_scalar("", v): TensorBoard's migration gives it the tag as display name, empty here
    event_pb2, summary_pb2 = _pb()
    src = tmp_path / "src" / "run"
    src.mkdir(parents=True)
    out = [event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")]
    for step, tag in ((0, ""), (0, "loss"), (1, ""), (1, "loss")):
        out.append(event_pb2.Event(wall_time=1.7e9 + step, step=step, summary=summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=step + 0.5)])))
    (src / "events.out.tfevents.1700000000.h.1").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in out))
    dst, _ = _convert(src.parent, tmp_path)
    assert _value_kinds(dst)[("run", "")] == {"simple_value"}
    assert legacy_view(dst) == legacy_view(src.parent)
    assert legacy_view(dst)["run"]["scalars"][""] == [(0, 1.7e9, 0.5), (1, 1.7e9 + 1, 1.5)]
    assert_same_view(tb_view(dst), tb_view(src.parent))
    from tbconvert.tbparse import SummaryReader
    for logdir in (src.parent, dst):
        reader = SummaryReader(str(logdir))
        assert sorted(set(reader.scalars["tag"])) == ["", "loss"] and reader.tensors.empty


def _first_values(logdir) -> dict:
    """{(run dir, tag): the tag's first Summary.Value}."""
    first = {}
    for path, ev in _events(logdir):
        run = path.parent.relative_to(logdir).as_posix()
        for v in ev.summary.value:
            first.setdefault((run, v.tag), v)
    return first


@pytest.mark.parametrize("src", [FIXTURES / n for n in LOGDIRS] + [TBDEV])
def test_each_tags_first_value_names_its_data_class(src, tmp_path):
    """TensorBoard's data server takes metadata that names its data class as it is, legacy
    value or not; without one it makes its own, with an empty display name."""
    out, _ = _convert(src, tmp_path)
    data = tbconvert.read(out, restarts="keep-all")
    first = _first_values(out)
    assert first
    for (run, tag), v in first.items():
        md = v.metadata
        series = data.series[run][tag]
        assert md.data_class == int(series.metadata.data_class) != 0, (run, tag)
        assert md.display_name == series.metadata.display_name, (run, tag)
        assert md.summary_description == series.metadata.description, (run, tag)
        assert bytes(md.plugin_data.content) == series.metadata.plugin_content, (run, tag)


@pytest.mark.parametrize("name", LOGDIRS)
def test_tbparse_reads_every_scalar_tensorboard_shows(name, tmp_path):
    from tbparse import SummaryReader
    src = FIXTURES / name
    out, _ = _convert(src, tmp_path)
    df = SummaryReader(str(out), extra_columns={"dir_name", "wall_time"}, event_types={"scalars"}).scalars
    got = sorted((d or ".", t, int(s), float(w), float(v)) for d, t, s, w, v in
                 df[["dir_name", "tag", "step", "wall_time", "value"]].values.tolist())
    had = legacy_view(src)   # tags the source wrote as simple_value
    want = sorted((run, tag, step, wall, float(np.frombuffer(c[2], c[0])[0]))
                  for run, rv in tb_view(src).items() for tag, tv in rv["tags"].items()
                  if tag in had[run]["scalars"] for step, wall, c in tv["points"])
    assert want
    assert [g[:4] for g in got] == [w[:4] for w in want]
    assert all(a[4] == b[4] or (math.isnan(a[4]) and math.isnan(b[4]))
               for a, b in zip(got, want, strict=True))


def test_exported_scalars_are_visible_to_common_readers(tmp_path):
    from tbparse import SummaryReader
    out, _ = _convert(TBDEV, tmp_path)
    data = tbconvert.read(TBDEV, restarts="keep-all")
    want = sum(len(s) for tags in data.series.values() for s in tags.values()
               if isinstance(s, ScalarSeries) and s.values.dtype == np.float32)
    assert want > 0
    view = legacy_view(out)
    assert sum(len(p) for r in view.values() for p in r["scalars"].values()) == want
    assert len(SummaryReader(str(out), event_types={"scalars"}).scalars) == want


@pytest.mark.parametrize("src", [FIXTURES / n for n in LOGDIRS] + [TBDEV])
def test_size_at_most_1_3_times_the_source(src, tmp_path):
    out, _ = _convert(src, tmp_path)
    if src == TBDEV:
        base = _size(_convert(out, tmp_path, "again")[0])   # against our own rewrite
    else:
        base = _size(src)
    assert _size(out) <= 1.3 * base


def _merge_all_logdir(path, n_steps=300, tags=("a", "b", "c", "d", "e")):
    """TF1 ``merge_all`` style: several simple_values per event, same step and wall time."""
    event_pb2, _ = _pb()
    path.mkdir(parents=True)
    out = [records.frame(event_pb2.Event(wall_time=1.6e9, file_version="brain.Event:2")
                         .SerializeToString())]
    rng = np.random.default_rng(3)
    for step in range(n_steps):
        ev = event_pb2.Event(wall_time=1.6e9 + step * 0.25, step=step)
        for tag in tags:
            ev.summary.value.add(tag=tag, simple_value=float(rng.standard_normal()))
        out.append(records.frame(ev.SerializeToString()))
    (path / "events.out.tfevents.1600000000.host.1.0").write_bytes(b"".join(out))
    return path


def test_multi_value_events_stay_multi_value(tmp_path):
    src = _merge_all_logdir(tmp_path / "src")
    out, _ = _convert(src, tmp_path)
    assert_same_view(tb_view(out), tb_view(src))
    assert _size(out) <= 1.3 * _size(src)
    per_event = [len(ev.summary.value) for _, ev in _events(out) if ev.HasField("summary")]
    assert per_event == [5] * 300


def test_a_step_of_very_many_values_is_written_as_events_of_a_bounded_number(tmp_path,
                                                                              monkeypatch):
    """A step of 100,000 tags in one event is read back by protobuf one value at a time
    (slow, and a piece per tag): events of a step hold at most EVENT_VALUES values, which
    TensorBoard reads alike (one step and wall time), framed the same in any pieces."""
    from tbconvert.formats.tfevents import summary_templates
    # (the bound is within what the reader's templates take)
    assert events.EVENT_VALUES <= summary_templates.MAX_VALUES
    monkeypatch.setattr(events, "EVENT_VALUES", 2)
    src = _merge_all_logdir(tmp_path / "src", n_steps=40)
    out, _ = _convert(src, tmp_path)
    assert_same_view(tb_view(out), tb_view(src))
    per_event = [len(ev.summary.value) for _, ev in _events(out) if ev.HasField("summary")]
    assert per_event == [2, 2, 1] * 40
    a, b = tbconvert.read(src).series, tbconvert.read(out).series
    assert [sorted(tags) for tags in a.values()] == [sorted(tags) for tags in b.values()]
    for tags, rb in zip(a.values(), b.values(), strict=True):
        for tag, sa in tags.items():
            assert sa.steps.tolist() == rb[tag].steps.tolist()
            assert sa.values.tobytes() == rb[tag].values.tobytes()


def _all_hidden_logdir(path):
    """Tag "b" only has points at steps the restart at step 2 purges; TensorBoard still lists it."""
    event_pb2, _ = _pb()
    path.mkdir(parents=True)
    evs = [event_pb2.Event(wall_time=100.0, file_version="brain.Event:2")]
    start = event_pb2.Event(wall_time=100.0, step=0)
    start.session_log.status = event_pb2.SessionLog.START
    evs.append(start)
    for step in range(5):
        ev = event_pb2.Event(wall_time=100.0 + step, step=step)
        ev.summary.value.add(tag="a", simple_value=step)
        if step >= 3:
            ev.summary.value.add(tag="b", simple_value=-step)
            h = ev.summary.value.add(tag="h")
            h.histo.min, h.histo.max = 0.0, 1.0
            h.histo.bucket_limit.extend([0.5, 1.0])
            h.histo.bucket.extend([1.0, 2.0])
        evs.append(ev)
    restart = event_pb2.Event(wall_time=200.0, step=2)
    restart.session_log.status = event_pb2.SessionLog.START
    evs.append(restart)
    for step in range(2, 4):
        ev = event_pb2.Event(wall_time=200.0 + step, step=step)
        ev.summary.value.add(tag="a", simple_value=10 * step)
        evs.append(ev)
    (path / "events.out.tfevents.100.host.1.0").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in evs))
    return path


def test_tag_with_all_points_hidden_is_still_listed(tmp_path):
    src = _all_hidden_logdir(tmp_path / "src")
    want = tb_view(src)
    assert want["."]["tags"]["b"]["points"] == [] and want["."]["tags"]["h"]["points"] == []
    out, report = _convert(src, tmp_path)
    assert_same_view(tb_view(out), want)
    assert any(i.kind == "tags_without_points_kept" for i in report.issues)
    # what keeps the tag listed is its first hidden point, real data (a loader that ignores
    # restart markers shows it, as it shows the source's), never an invented value
    written = {v.tag: (ev.step, v.simple_value) for _, ev in _events(out) if ev.HasField("summary")
               for v in ev.summary.value if v.tag == "b"}
    assert written == {"b": (3, -3.0)}
    # and through an archive and back
    pq = tmp_path / "x.parquet"
    tbconvert.convert(src, pq)
    again, _ = _convert(pq, tmp_path, "again")
    assert_same_view(tb_view(again), want)
    assert sorted(legacy_view(again)["."]["scalars"]) == sorted(legacy_view(src)["."]["scalars"])


def _md(plugin, tag, dc, content=b""):
    return Metadata(plugin, content, tag, "", dc)


def test_inexact_legacy_candidates_keep_the_tensor_form(tmp_path):
    """Only points TensorBoard's migration rebuilds bit for bit go to the legacy fields."""
    steps = np.arange(3)
    walls = 10.0 + steps
    snan = np.array([0x3F800000, 0x7F800001, 0x7FC00001], np.uint32).view(np.float32)
    scal = ScalarSeries(run="r", tag="s", metadata=_md("scalars", "s", DataClass.SCALAR), steps=steps,
                        wall_times=walls, hidden=None, values=snan)
    ok = np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 0.0], [2.0, 3.0, 1.0]], np.float32)
    trimmed = np.array([[0.0, 1.0, 0.0], [1.0, 2.0, 1.0]], np.float32)  # empty first bucket
    gap = np.array([[0.0, 1.0, 1.0], [1.5, 2.0, 1.0]], np.float32)      # edges not shared
    hist = TensorSeries(run="r", tag="h", metadata=_md("histograms", "h", DataClass.TENSOR),
                        steps=steps, wall_times=walls, hidden=None,
                        dtypes=[dt.DT_FLOAT] * 3, tensors=[ok, trimmed, gap])
    img = BlobSequenceSeries.from_sequences(
        run="r", tag="i", metadata=_md("images", "Pics", DataClass.BLOB_SEQUENCE, b"\x10\x01"),
        steps=steps, wall_times=walls, hidden=None,
        sequences=[[b"4", b"3", b"png"], [b"04", b"3", b"png"], [b"4", b"3", b"p1", b"p2"]])
    out, _ = _write(tmp_path, [(Run("r", 10.0), [scal, hist, img])])
    kinds = {}
    for _, ev in _events(out):
        for v in ev.summary.value:
            kinds.setdefault(v.tag, []).append(v.WhichOneof("value"))
    assert kinds["s"] == ["simple_value", "tensor", "simple_value"]
    assert kinds["h"] == ["tensor", "tensor", "tensor"]    # histograms never take the legacy form
    assert kinds["i"] == ["image", "tensor", "tensor"]
    view = tb_view(out)["r"]["tags"]
    back = tbconvert.read(out, restarts="keep-all").series["r"]
    assert back["s"].values.tobytes() == snan.tobytes()
    assert [p[2] for p in view["h"]["points"]] == [canonical(a) for a in (ok, trimmed, gap)]
    assert view["i"]["display_name"] == "Pics"
    assert [list(p[2][2]) for p in view["i"]["points"]] == [list(s) for s in img.sequences()]


def _write(tmp_path, runs, name="out", **limits):
    out = tmp_path / name
    report = Report()
    with open_writer(out, format="tfevents", report=report) as w:
        w.limits = limits
        for run, series in runs:
            w.write_run(run, series)
    return out, report


def _big_run(n=15_000, tags=4, chunk=5_000):
    """Scalar tags in chunks, tags not interleaved, plus tensors, images and run records."""
    rng = np.random.default_rng(7)
    chunks = []
    for t in range(tags):
        tag = f"t{t}"
        for a in range(0, n, chunk):
            steps = np.arange(a, a + chunk, dtype=np.int64) // (1 + t % 2)
            walls = 1.7e9 + steps * 0.5 + (t % 3) * 0.25
            dtype = np.float32 if t % 2 else np.float64
            chunks.append(ScalarSeries(run="big", tag=tag, metadata=_md("scalars", tag, DataClass.SCALAR),
                                       steps=steps, wall_times=walls, hidden=None,
                                       values=rng.standard_normal(chunk).astype(dtype)))
    steps = np.arange(200, dtype=np.int64) * 10
    chunks.append(TensorSeries(run="big", tag="text", metadata=_md("text", "text", DataClass.TENSOR),
                               steps=steps, wall_times=1.7e9 + steps * 0.5, hidden=None,
                               dtypes=[dt.DT_STRING] * 200,
                               tensors=[dt.string_array([b"x" * int(k % 50)]) for k in steps]))
    chunks.append(BlobSequenceSeries.from_sequences(
        run="big", tag="img", metadata=_md("images", "img", DataClass.BLOB_SEQUENCE, b"\x10\x01"),
        steps=steps, wall_times=1.7e9 + steps * 0.5, hidden=None,
        sequences=[[b"2", b"2", bytes(int(k) % 300)] for k in steps]))
    recs = tuple(RunRecord("log_message", int(s), 1.7e9 + s * 0.5, b"\x08\x01\x12\x02hi")
                 for s in range(0, 2000, 100))
    return Run("big", 1.7e9, recs), chunks


def test_spilled_write_is_byte_identical_and_memory_is_capped(tmp_path):
    run, chunks = _big_run()
    full, _ = _write(tmp_path, [(run, chunks)], "full")
    cap = 128 << 10
    small, _ = _write(tmp_path, [(run, chunks)], "small", buffer_bytes=cap, fan_in=3)
    a, b = list(full.rglob("*tfevents*")), list(small.rglob("*tfevents*"))
    assert [p.name for p in a] == [p.name for p in b]
    assert a[0].read_bytes() == b[0].read_bytes()
    back = tbconvert.read(small, restarts="keep-all").series["big"]
    assert {t: len(s) for t, s in back.items()} == \
        {"t0": 15_000, "t1": 15_000, "t2": 15_000, "t3": 15_000, "text": 200, "img": 200}


def test_sorter_holds_a_bounded_number_of_bytes(tmp_path):
    from tbconvert.formats.tfevents.runfile import RunFile
    run, chunks = _big_run()
    cap = 128 << 10
    body = RunFile(run, Report(), tmp_path, buffer_bytes=cap, fan_in=3)
    for c in chunks:
        body.add(c)
    with open(tmp_path / "f", "wb") as f:
        body.write(f)
    assert body.sorter.spills > 3          # more sorted runs than the fan-in: merged in levels
    assert body.sorter.total_bytes > 20 * cap
    assert body.sorter.peak_bytes <= 4 * cap


def test_column_fast_path_equals_general_framing():
    n = 500
    steps = np.arange(n, dtype=np.int64) * 97 - 3
    walls = 1.5e9 + np.arange(n) * 0.1
    from tbconvert.formats.tfevents import encode
    mat = encode.scalar_values(b"loss", np.linspace(-1, 1, n).astype(np.float32), simple=True)
    e = Entries.from_rows(walls, 0, np.arange(n), steps, walls, VALUE, mat)
    fast = events.frame_entries(e)
    general = events._frame_general(e, events.group_starts(e))
    assert fast == general
    event_pb2, _ = _pb()
    starts, lengths, damage = records.scan(fast)
    assert not damage and len(starts) == n
    ev = event_pb2.Event.FromString(fast[starts[-1]:starts[-1] + lengths[-1]])
    assert ev.step == steps[-1] and ev.summary.value[0].simple_value == 1.0


def test_values_of_one_tag_never_share_an_event(tmp_path):
    steps = np.array([1, 1, 1])
    s = ScalarSeries(run="r", tag="dup", metadata=_md("scalars", "dup", DataClass.SCALAR), steps=steps,
                     wall_times=np.full(3, 5.0), hidden=None, values=np.array([1, 2, 3], np.float32))
    out, _ = _write(tmp_path, [(Run("r"), [s])])
    assert [len(ev.summary.value) for _, ev in _events(out) if ev.HasField("summary")] == [1, 1, 1]
    assert [p[2][2] for p in tb_view(out)["r"]["tags"]["dup"]["points"]] == \
        [np.float32(v).tobytes() for v in (1, 2, 3)]


def test_events_split_across_pieces_frame_as_in_one_piece():
    """Multi-value events cut by piece boundaries come out as if framed in one piece."""
    from tbconvert.formats.tfevents import encode
    rng = np.random.default_rng(5)
    parts = []
    for t in range(5):
        n = 400
        steps = np.sort(rng.integers(0, 150, n))
        walls = 100.0 + steps * 0.5
        mat = encode.scalar_values(f"t{t}".encode(), rng.standard_normal(n).astype(np.float32),
                                   simple=bool(t % 2))
        parts.append(Entries.from_rows(walls, t, np.arange(n), steps, walls, VALUE, mat))
    e = Entries.concat(parts).sorted()
    whole = events.frame_entries(e)
    assert len(records.scan(whole)[0]) < len(e)   # some events do hold several values
    for cuts in ([1], [7, 8, 9], sorted(rng.choice(len(e), 40, replace=False).tolist())):
        assert _streamed(e, cuts) == whole


def test_bounded_events_split_across_pieces_frame_as_in_one_piece(monkeypatch):
    """Events of a step cut at EVENT_VALUES values, and by piece boundaries anywhere, come
    out as if framed in one piece."""
    from tbconvert.formats.tfevents import encode
    monkeypatch.setattr(events, "EVENT_VALUES", 3)
    rng = np.random.default_rng(6)
    parts = []
    for t in range(8):
        steps = np.arange(30)
        mat = encode.scalar_values(f"t{t}".encode(), rng.standard_normal(30).astype(np.float32),
                                   simple=True)
        parts.append(Entries.from_rows(steps * 1.0, t, np.arange(30), steps, steps * 1.0,
                                       VALUE, mat))
    e = Entries.concat(parts).sorted()
    whole = events.frame_entries(e)
    assert len(records.scan(whole)[0]) == 30 * 3     # 8 values a step: 3 + 3 + 2
    for cuts in ([1], [2, 3, 4], [3, 6, 9], sorted(rng.choice(len(e), 60, replace=False).tolist())):
        assert _streamed(e, cuts) == whole


def test_integer_and_double_scalars_are_written_as_float32(tmp_path):
    """TensorBoard's data server drops DT_DOUBLE and integer scalars, and the tag with them; a
    value float32 rounds is counted (lost), an exact one is not."""
    steps = np.arange(4)
    ints = ScalarSeries(run="r", tag="i", metadata=_md("scalars", "", DataClass.SCALAR),
                        steps=steps, wall_times=10.0 + steps, hidden=None,
                        values=np.array([3, 2**24 + 1, -2**63, 2**63 - 1], np.int64))
    doubles = ScalarSeries(run="r", tag="d", metadata=_md("scalars", "d", DataClass.SCALAR),
                           steps=steps, wall_times=10.0 + steps, hidden=None,
                           values=np.array([0.5, 0.1, np.nan, 1e300]))
    out, report = _write(tmp_path, [(Run("r", 10.0), [ints, doubles])])
    for _, ev in _events(out):
        for v in ev.summary.value:
            assert v.WhichOneof("value") == ("tensor" if v.tag == "i" else "simple_value")
            if v.tag == "i":
                assert v.tensor.dtype == dt.DT_FLOAT and not v.tensor.tensor_shape.dim
    view = tb_view(out)["r"]["tags"]
    assert [p[2][0] for p in view["i"]["points"] + view["d"]["points"]] == ["<f4"] * 8
    assert [np.frombuffer(p[2][2], np.float32)[0] for p in view["i"]["points"]] == \
        [3.0, 2.0**24, -2.0**63, 2.0**63]
    rounded = {i.tag: i.count for i in report.issues if i.kind == "scalar_rounded_to_float32"}
    assert rounded == {"i": 2, "d": 2}
    assert all(i.lost for i in report.issues if i.kind == "scalar_rounded_to_float32")
    # a finite value beyond float32's range is no mere rounding: it is said what it became
    told = {i.tag: i.message for i in report.issues if i.kind == "scalar_rounded_to_float32"}
    assert told["d"].endswith("; 1 of them, beyond float32's range, became infinite or 0 (the "
                              "first at step 3)"), told["d"]
    assert "beyond" not in told["i"]


def test_repeated_steps_are_written_and_counted_as_the_data_server_drops_them(tmp_path):
    """Every point is written (the Python loader shows them all); the report counts, per tag,
    the points TensorBoard's default loader does not show."""
    def scal(tag, steps):
        steps = np.asarray(steps)
        return ScalarSeries(run="r", tag=tag, metadata=_md("scalars", tag, DataClass.SCALAR),
                            steps=steps, wall_times=10.0 + np.arange(len(steps)), hidden=None,
                            values=np.arange(len(steps), dtype=np.float32))
    resumed = scal("resumed", list(range(30)) + list(range(20, 40)))
    crashed = scal("crashed", list(range(10)) + [5, 6])     # 5..9 go, then 5 and 6 stay
    fine = scal("fine", [0, 3, 7, 100])
    out, report = _write(tmp_path, [(Run("r", 10.0), [resumed, crashed, fine])])
    view = tb_view(out)["r"]["tags"]
    assert [len(view[t]["points"]) for t in ("resumed", "crashed", "fine")] == [50, 12, 4]
    notes = {i.tag: i for i in report.issues if i.kind == "steps_not_increasing"}
    assert {t: i.count for t, i in notes.items()} == {"resumed": 10, "crashed": 5}
    assert not any(i.lost for i in notes.values())
    assert "shows 40" in notes["resumed"].message and "--load_fast=false" in notes["resumed"].message


def _kept_by_the_data_server(steps) -> int:
    kept: list = []
    for s in steps:
        while kept and kept[-1] >= s:
            kept.pop()
        kept.append(s)
    return len(kept)


def test_data_server_steps_follow_its_rule_in_bounded_memory():
    from tbconvert.formats.tfevents.runfile import DataServerSteps
    rng = np.random.default_rng(11)
    for _ in range(400):
        budget = [int(rng.choice([0, 6, 10_000]))]
        shown = DataServerSteps(budget)
        every = []
        for _ in range(int(rng.integers(1, 7))):
            n = int(rng.integers(1, 15))
            form = rng.integers(4)
            if form == 0:      # anything
                chunk = rng.integers(0, 30, n)
            elif form == 1:    # a constant stride
                chunk = int(rng.integers(0, 40)) + int(rng.integers(1, 4)) * np.arange(n)
            elif form == 2:    # increasing, irregular
                chunk = np.unique(rng.integers(0, 60, n))
            else:              # the int64 extremes
                chunk = np.array([2**63 - 1, -2**63, 0][:n])
            chunk = np.asarray(chunk, np.int64)
            shown.feed(chunk)
            every += chunk.tolist()
        dropped = len(every) - _kept_by_the_data_server(every)
        if shown.exact:
            assert shown.dropped == dropped, every
        else:
            assert shown.dropped <= dropped, every
        held = sum(len(b[0]) for b in shown.blocks if isinstance(b, list))
        assert budget[0] >= 0 and held <= 10_000
    # a constant stride costs nothing however long
    shown = DataServerSteps([0])
    for a in range(0, 10**6, 10**4):
        shown.feed(np.arange(a, a + 10**4, dtype=np.int64) * 5)
        assert len(shown.blocks) == 1
    shown.feed(np.arange(3, 103, dtype=np.int64))     # resumed at step 3
    assert shown.exact and shown.dropped == 10**6 - 1 and len(shown.blocks) == 2


def test_legacy_histograms_written_as_tensors_are_told(tmp_path):
    """PyTorch writes histograms as legacy ``histo`` values, which TensorBoard's default loader
    shows with every bucket; the tensor form written instead shows as --load_fast=false
    showed them: a note per tag, counting its points."""
    src = FIXTURES / "torch_logdir"
    report = tbconvert.convert(src, tmp_path / "out", to_format="tfevents")
    told = {(i.run, i.tag): i.count for i in report.issues if i.kind == "histograms_as_tensors"}
    view = tb_view(src)
    histos = {(run, tag): len(info["points"]) for run, r in view.items()
              for tag, info in r["tags"].items() if info["plugin_name"] == "histograms"}
    assert told == histos and histos
    assert not any(i.lost for i in report.issues if i.kind == "histograms_as_tensors")


def test_metadata_of_no_plugin_is_written_without_plugin_data(tmp_path):
    """A SummaryMetadata that named no plugin is written back without ``plugin_data``, as it
    was read (an empty one set would be bytes the source did not hold); in an export too."""
    import base64

    from tensorboard.compat.proto import summary_pb2

    from tbconvert.formats.tbdev.writer import encode_metadata
    md = Metadata("", b"", "shown", "", DataClass.TENSOR)
    steps = np.arange(3, dtype=np.int64)
    with open_writer(tmp_path / "logs", format="tfevents") as w:
        w.write_run(Run("r", 1.6e9), iter([TensorSeries(
            run="r", tag="t", metadata=md, steps=steps, wall_times=1.6e9 + steps,
            hidden=None, dtypes=np.full(3, dt.DT_FLOAT, np.int32),
            tensors=[np.ones(2, np.float32)] * 3)]))
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    written = []
    for path in (tmp_path / "logs" / "r").glob("*tfevents*"):
        for ev in EventFileLoader(str(path)).Load():
            written += [v.metadata for v in ev.summary.value if v.HasField("metadata")]
    assert len(written) == 1 and not written[0].HasField("plugin_data")
    assert written[0].display_name == "shown"
    raw = summary_pb2.SummaryMetadata.FromString(base64.b64decode(encode_metadata(md)))
    assert not raw.HasField("plugin_data") and raw.display_name == "shown"


_LARGE_CASES = [
    (dt.DT_FLOAT, np.arange(6, dtype=np.float32).reshape(2, 3)),
    (dt.DT_DOUBLE, np.arange(3.0)),
    (dt.DT_FLOAT, np.arange(4, dtype=">f4")),                 # stored little-endian
    (dt.DT_INT64, np.arange(200)),
    (dt.DT_UINT8, np.zeros((5, 5, 3), np.uint8)),
    (dt.DT_FLOAT, np.zeros((0, 3), np.float32)),                # no content: protobuf's way
    (dt.DT_STRING, dt.string_array([b"", b"a" * 300, b"xy"])),
    (dt.DT_STRING, dt.string_array([b"abc"]).reshape(())),
    (dt.DT_STRING, dt.string_array([])),
]


@pytest.mark.parametrize("code,arr", _LARGE_CASES)
@pytest.mark.parametrize("tag", ["", "t", "x" * 200])
@pytest.mark.parametrize("with_metadata", [False, True])
def test_large_value_bytes_are_those_protobuf_gives(monkeypatch, code, arr, tag, with_metadata):
    from tbconvert.formats.tfevents import large_values
    monkeypatch.setattr(large_values, "LARGE_PAYLOAD_BYTES", 0)
    _, summary_pb2 = _pb()
    from tensorboard.compat.proto import tensor_pb2
    value = summary_pb2.Summary.Value(tag=tag)
    if with_metadata:
        value.metadata.display_name = "d"
        value.metadata.plugin_data.plugin_name = "images"
        value.metadata.plugin_data.content = b"q"
    got = large_values.value_bytes(value, code, arr, tensor_pb2.TensorProto)
    value.tensor.CopyFrom(dt.array_to_proto(code, arr, tensor_pb2.TensorProto))
    assert got is None or got == value.SerializeToString()
    assert (got is None) == (code != dt.DT_STRING and arr.size <= 1)


def test_large_values_are_framed_in_pieces_as_in_one(monkeypatch):
    """A large value alone in its event is written apart, in the bytes framing it whole
    gives; one sharing its event stays in it."""
    from tbconvert.formats.tfevents import encode
    rng = np.random.default_rng(7)
    steps = np.array([1, 1, 2, 3, 3, 4, -5])
    walls = np.array([10.0, 10.0, 11.0, 12.0, 12.5, 13.0, 14.0])
    tags = np.array([0, 1, 0, 0, 0, 1, 0])
    blobs = [rng.bytes(int(n)) for n in (3, 200, 300, 5, 250, 400, 260)]
    values = [b"\x0a" + encode.varint(len(b)) + b for b in blobs]
    e = Entries.from_list(walls, tags, np.arange(7), steps, walls, VALUE, values)
    whole = events.frame_entries(e)
    monkeypatch.setattr(events, "LARGE_VALUE_BYTES", 100)
    assert events._large_alone(e).tolist() == [2, 4, 5, 6]   # (1 shares its event with 0)
    for cuts in ([], [1], [3], [2, 5]):
        assert _streamed(e, cuts) == whole


def _streamed(e, cuts: list) -> bytes:
    """The bytes of ``e`` framed by an EventStream fed the pieces cut at ``cuts``."""
    out = []
    stream = events.EventStream(out.append)
    bounds = [0] + cuts + [len(e)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        stream.feed(e.slice(a, b))
    stream.finish()
    return b"".join(out)
