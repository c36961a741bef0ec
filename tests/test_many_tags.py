"""Runs of many tags (per-layer metrics of a large model): the event-file reader keeps the
numbers of many tags of a block together (``assemble``'s batches, spilled as raw columns),
and what it reads is what TensorBoard reads, restarts included."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import blocks_of
from oracle import assert_same_view, tb_view

import tbconvert
from tbconvert.describe import SeriesStats
from tbconvert.formats.tfevents import records, spill

TAGS = 3000


def _events(path: Path, events) -> None:
    from tensorboard.compat.proto import event_pb2
    with open(path, "wb") as f:
        for ev in events:
            f.write(records.frame(event_pb2.Event(**ev).SerializeToString()))


def _scalar(tag, step, value, wall):
    from tensorboard.compat.proto import summary_pb2
    return dict(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, simple_value=value)]))


def _tensor(tag, step, value, wall):
    """A TF2 scalar: a rank-0 float tensor with the scalars metadata."""
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    md = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR)
    t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT,
                               tensor_shape=tensor_shape_pb2.TensorShapeProto(),
                               tensor_content=np.float32(value).tobytes())
    return dict(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, metadata=md, tensor=t)]))


def _many_tags_logdir(tmp_path: Path) -> Path:
    """Three runs of 3,000 tags x 3 steps: one restarted by a session START (file version 2),
    one whose tags go back in step (the legacy rule), one of TF2 tensors and simple values."""
    from tensorboard.compat.proto import event_pb2
    logdir = tmp_path / "logs"
    for run in ("modern", "legacy", "mixed"):
        (logdir / run).mkdir(parents=True)
    tags = [f"layer{i // 4}/{('grad', 'weight', 'update', 'act')[i % 4]}" for i in range(TAGS)]
    rng = np.random.default_rng(3)
    values = rng.standard_normal(TAGS * 6).astype(np.float32).tolist()
    start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)

    modern = [dict(wall_time=999.0, file_version="brain.Event:2"),
              dict(wall_time=999.5, step=0, session_log=start)]
    modern += [_scalar(t, s, values[k * 3 + s], 1000.0 + s)
               for s in range(3) for k, t in enumerate(tags)]
    # restarted at step 1: the points at steps 1 and 2 read so far are hidden
    modern += [dict(wall_time=2000.0, step=1, session_log=start)]
    modern += [_scalar(t, s, -values[k * 3 + s], 2000.0 + s)
               for s in (1, 2) for k, t in enumerate(tags[::7])]
    _events(logdir / "modern" / "events.out.tfevents.1.x", modern)

    legacy = [_scalar(t, s, values[k * 3 + s], 1000.0 + s) for s in range(3)
              for k, t in enumerate(tags)]
    # some tags go back to step 1: each hides its own later points (no file version)
    legacy += [_scalar(t, 1, 5.0, 3000.0) for t in tags[::11]]
    legacy += [_scalar(t, 2, 6.0, 3001.0) for t in tags[::13]]
    _events(logdir / "legacy" / "events.out.tfevents.2.x", legacy)

    mixed = [dict(wall_time=999.0, file_version="brain.Event:2")]
    mixed += [(_tensor if k % 3 else _scalar)(t, s, values[TAGS * 3 + k * 3 + s], 1000.0 + s)
              for s in range(3) for k, t in enumerate(tags)]
    _events(logdir / "mixed" / "events.out.tfevents.3.x", mixed)
    return logdir


def _snapshot(data) -> dict:
    out = {}
    for run, series in data.series.items():
        out[run] = {tag: (type(s).__name__, s.metadata, s.steps.tolist(), s.wall_times.tolist(),
                          None if s.hidden is None else s.hidden.tolist(),
                          s.values.dtype.str, s.values.tobytes())
                    for tag, s in series.items()}
        out[run]["(order)"] = list(series)
    return out


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return _many_tags_logdir(tmp_path_factory.mktemp("many"))


def test_many_tags_read_as_tensorboard_reads_them(logdir, tmp_path):
    out = tmp_path / "out"
    report = tbconvert.convert(logdir, out, to_format="tfevents")
    assert report.series == 3 * TAGS
    expected = tb_view(logdir)
    assert sum(len(r["tags"]) for r in expected.values()) == 3 * TAGS
    assert_same_view(tb_view(out), expected)
    data = tbconvert.read(logdir, restarts="keep-all")
    assert data.series["modern"]["layer0/grad"].hidden.tolist() == [False, True, True,
                                                                      False, False]
    # back to step 1: its own points at 1 and 2 hidden; then 1 is the step the next is
    # compared with, and its point at 2 stays
    assert data.series["legacy"]["layer0/grad"].hidden.tolist() == [False, True, True,
                                                                      False, False]


@pytest.mark.parametrize("ahead", [(256 << 10, 8 << 20), (40, 8 << 20), (1, 1)],
                         ids=["default", "a-few-rows", "none"])
@pytest.mark.parametrize("block", [997, 5000])
def test_many_tags_across_blocks_and_spilled(logdir, monkeypatch, block, ahead):
    """Tags spread over many blocks, every piece spilled to disk as soon as it is stored:
    the same series, in the same order, as one block held in memory, whatever a spilled
    batch reads ahead of the series that asked."""
    whole = _snapshot(tbconvert.read(logdir, restarts="keep-all"))

    monkeypatch.setattr(records, "scan_file", blocks_of(block))
    monkeypatch.setattr(spill.PieceStore.__init__, "__defaults__", (0, None))
    monkeypatch.setattr(spill, "READ_AHEAD", ahead[0])
    monkeypatch.setattr(spill, "AHEAD_BUDGET", ahead[1])
    assert _snapshot(tbconvert.read(logdir, restarts="keep-all")) == whole


def test_a_spilled_batch_is_read_back_a_stretch_at_a_time(tmp_path, monkeypatch):
    """Series taking their rows of a spilled batch in order read the file a stretch of
    rows at a time, not once each (50,000 tags read back in 3 million reads took 55 s);
    out of order, each still gets its own rows."""
    store = spill.PieceStore(limit=0, directory=str(tmp_path))
    tids = np.arange(0, 3000, 3, dtype=np.int64)
    counts = np.arange(len(tids)) % 4
    bounds = np.concatenate(([0], np.cumsum(counts)))
    values = np.arange(bounds[-1], dtype=np.float64)
    keys = [store.put_batch(spill.Batch(tids, bounds, (values + k, values * 2), 1, ("v",)), 1)
            for k in range(3)]
    reads = []
    real = spill.PieceStore._read_rows
    monkeypatch.setattr(spill.PieceStore, "_read_rows",
                        lambda self, *a: reads.append(a[1:]) or real(self, *a))
    order = list(range(len(tids)))
    for i in order[:500] + order[500:][::-1]:
        for k in keys:
            first, tail, second = store.take(k, int(tids[i]))
            a, b = bounds[i], bounds[i + 1]
            assert tail == "v" and first.tolist() == (values[a:b] + k).tolist()
            assert second.tolist() == (values[a:b] * 2).tolist()
    in_order = [r for r in reads if r[0] < bounds[500]]
    assert len(in_order) <= 3 * 2 and len(reads) < 3 * 520
    store.close()


def test_many_tags_archive_and_tables(logdir, tmp_path):
    data = tbconvert.read(logdir, restarts="keep-all")
    tbconvert.convert(logdir, tmp_path / "a.parquet")
    assert _snapshot(tbconvert.read(tmp_path / "a.parquet", restarts="keep-all")) == \
        _snapshot(data)
    tbconvert.convert(logdir, tmp_path / "a.csv")
    rows = (tmp_path / "a.csv").read_text().splitlines()
    visible = sum(int((~s.hidden).sum()) if s.hidden is not None else len(s)
                  for series in data.series.values() for s in series.values())
    assert len(rows) == visible + 1


def test_info_gives_every_field_of_a_series(logdir):
    found = tbconvert.info(logdir, runs="^legacy$")
    st = found.runs[0].tags["layer0/grad"]
    assert st.to_dict() == dataclasses.asdict(st)
    assert list(st.to_dict()) == [f.name for f in dataclasses.fields(SeriesStats)]
    assert (st.points, st.hidden, st.step_range) == (5, 2, (0, 2))


def _histo(tag, step, k, wall):
    """A legacy histogram as PyTorch writes it (``HistogramProto``), of ``k`` buckets."""
    from tensorboard.compat.proto import summary_pb2
    edges = np.linspace(-1, 1, k).tolist()
    h = summary_pb2.HistogramProto(min=-1.0, max=1.0, num=float(step + 1), sum=0.5,
                                   sum_squares=2.0, bucket_limit=edges,
                                   bucket=[float((step + i) % 5) for i in range(k)])
    return dict(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, histo=h)]))


def _tf2_histo(tag, step, k, wall):
    """A histogram as TensorFlow 2 writes it: a ``[k, 3]`` float64 tensor (left and right
    edges, count), the plugin named on every value."""
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    left = np.linspace(-1, 1, k + 1)
    content = np.stack([left[:-1], left[1:], np.arange(k, dtype=np.float64) + step], axis=1)
    t = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_DOUBLE, tensor_content=content.astype("<f8").tobytes(),
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[
            tensor_shape_pb2.TensorShapeProto.Dim(size=k),
            tensor_shape_pb2.TensorShapeProto.Dim(size=3)]))
    md = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="histograms"))
    return dict(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, tensor=t, metadata=md)]))


@pytest.fixture(scope="module")
def histo_logdir(tmp_path_factory):
    """A histogram per parameter, one or two points per tag in a block: 40 legacy tags and
    20 TF2 tags (decoded in bulk, a stack of tensors each; one of them changes its number of
    buckets) x 12 steps in two files (the second restarts the run at step 5 with a session
    START), and an image tag and a scalar tag among them."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    logdir = tmp_path_factory.mktemp("histos") / "logs"
    (logdir / "run").mkdir(parents=True)
    start = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    tags = [f"params/layer{i}.weight" for i in range(40)]
    image = summary_pb2.Summary.Image(height=1, width=1, colorspace=1,
                                      encoded_image_string=b"\x89PNG-not-really")

    def events(steps, wall0):
        out = []
        for s in steps:
            out += [_histo(t, s, 3 + (k + s) % 9, wall0 + s) for k, t in enumerate(tags)]
            out += [_tf2_histo(f"tf2/layer{k}.weight", s, 4, wall0 + s) for k in range(19)]
            out.append(_tf2_histo("tf2/varying", s, 2 + s % 3, wall0 + s))
            out.append(dict(wall_time=wall0 + s, step=s, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="sample", image=image)])))
            out.append(_scalar("loss", s, float(s), wall0 + s))
        return out
    _events(logdir / "run" / "events.out.tfevents.1.a",
            [dict(wall_time=99.0, file_version="brain.Event:2"),
             dict(wall_time=99.5, step=0, session_log=start)] + events(range(12), 100.0))
    _events(logdir / "run" / "events.out.tfevents.2.a",
            [dict(wall_time=499.0, file_version="brain.Event:2"),
             dict(wall_time=499.5, step=5, session_log=start)] + events(range(5, 9), 500.0))
    return logdir


def _tensor_snapshot(data) -> dict:
    out = {}
    for run, series in data.series.items():
        for tag, s in series.items():
            points = [s.sequence(i) for i in range(len(s))] if hasattr(s, "sequence") else \
                [(int(c), t.shape, t.tobytes()) for c, t in zip(s.dtypes, s.tensors, strict=True)] \
                if hasattr(s, "tensors") else s.values.tobytes()
            out[run, tag] = (type(s).__name__, s.metadata, s.steps.tolist(),
                             s.wall_times.tolist(),
                             None if s.hidden is None else s.hidden.tolist(), points)
        out[run, "(order)"] = list(series)
    return out


@pytest.mark.parametrize("block, hold", [(7, None), (7, 0), (3, 2000), (50, None)])
def test_few_points_per_tag_and_block_held_over(histo_logdir, monkeypatch, block, hold):
    """A tag's few points of a block are held over to the next block's (up to a byte
    budget) and stored at the end of each file: whatever the blocks, the budget and the
    spilling, the same series as one block per file."""
    from tbconvert.formats.tfevents import assemble
    whole = _tensor_snapshot(tbconvert.read(histo_logdir, restarts="keep-all"))
    assert whole["run", "params/layer0.weight"][4].count(True) == 7   # steps 5-11, restarted
    monkeypatch.setattr(records, "scan_file", blocks_of(block))
    monkeypatch.setattr(spill.PieceStore.__init__, "__defaults__", (0, None))
    if hold is not None:
        monkeypatch.setattr(assemble, "HOLD_BYTES", hold)
    assert _tensor_snapshot(tbconvert.read(histo_logdir, restarts="keep-all")) == whole


def test_histograms_per_parameter_as_tensorboard_reads_them(histo_logdir, tmp_path):
    out = tmp_path / "out"
    tbconvert.convert(histo_logdir, out, to_format="tfevents")
    assert_same_view(tb_view(out), tb_view(histo_logdir))
    for jobs in (1, 2):
        tbconvert.convert(histo_logdir, tmp_path / f"j{jobs}.parquet", jobs=jobs)
    assert (tmp_path / "j1.parquet").read_bytes() == (tmp_path / "j2.parquet").read_bytes()


@pytest.mark.parametrize("held", [1, 2, 7])
def test_first_points_joined_as_they_come_write_the_same_bytes(logdir, tmp_path, monkeypatch,
                                                               held):
    """The first points of scalar tags (each with its metadata) wait apart until the end of
    the run; joined into one set of arrays every few tags, they are written the same."""
    from tbconvert.formats.tfevents import runfile

    def written(out):
        return sorted((p.parent.name, p.read_bytes()) for p in out.rglob("*tfevents*"))
    tbconvert.convert(logdir, tmp_path / "apart", to_format="tfevents")
    monkeypatch.setattr(runfile, "_FIRSTS_HELD", held)
    tbconvert.convert(logdir, tmp_path / "joined", to_format="tfevents")
    assert written(tmp_path / "joined") == written(tmp_path / "apart")


def _steps_logdir(tmp_path: Path, tags: int, steps: int) -> Path:
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    _events(run / "events.out.tfevents.1.host",
            [dict(wall_time=999.0, file_version="brain.Event:2")]
            + [_scalar(f"t{k}", s, s + k / 1000, 1000.0 + s)
               for s in range(steps) for k in range(tags)])
    return tmp_path / "logs"


def _read_whole(run_dir: Path):
    from tbconvert.formats.base import Options
    from tbconvert.formats.tfevents.reader import TfeventsReader
    from tbconvert.report import Report
    reader = TfeventsReader(run_dir, Options(), Report())
    return reader.read_run("run", sorted(run_dir.glob("events*")))


def test_a_tag_gets_a_piece_per_held_batch_not_per_block(tmp_path, monkeypatch):
    """A run of many tags has a point or two of each tag in a block: a piece per tag and
    block (its key listed per tag, a row index per batch) cost more than the points (100,000
    tags x 80 steps held 150 MiB of them). Numbers wait in held batches across blocks."""
    logdir = _steps_logdir(tmp_path, 300, 20)
    monkeypatch.setattr(records, "scan_file", blocks_of(50))
    asm = _read_whole(logdir / "run")
    try:
        assert sum(len(info.pieces) for info in asm.info.values()) == 300
    finally:
        asm.store.close()


def _merged_steps_logdir(tmp_path: Path, tags: int, steps: int) -> Path:
    """Every tag's value of a step in one event, as ``tf.summary.merge_all`` writes them
    (and tbconvert writes event files); a step goes back once, in a file without the
    file_version record, where TensorBoard's restart rule purges at a step that goes back."""
    from tensorboard.compat.proto import summary_pb2
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    order = list(range(steps)) + [steps // 2] + list(range(steps // 2 + 1, steps + 3))
    _events(run / "events.out.tfevents.1.host",
            [dict(wall_time=1000.0 + k, step=s, summary=summary_pb2.Summary(value=[
                summary_pb2.Summary.Value(tag=f"t{t}", simple_value=s + t / 1000)
                for t in range(tags)])) for k, s in enumerate(order)])
    return tmp_path / "logs"


def test_merged_events_of_many_tags_hold_their_numbers_in_batches(tmp_path, monkeypatch):
    """An event of every tag's value (``merge_all``) is decoded one value at a time; each
    tag's numbers of a block were then a piece of their own, a piece per tag and event when
    events are large (100,000 tags: 1.4 GiB of pieces for 2 million points). They wait in
    held batches as the bulk decoders' numbers do, and are read as TensorBoard reads them."""
    from tbconvert.formats.tfevents import assemble, reader
    logdir = _merged_steps_logdir(tmp_path, 300, 20)
    monkeypatch.setattr(records, "scan_file", blocks_of(3))
    # (a block's tags held over to the next as points: as many as a budget lets)
    monkeypatch.setattr(assemble, "HOLD_BYTES", 0)
    # each event decoded alone, as an event of 100,000 values is (too large for templates)
    monkeypatch.setattr(reader, "FEW_LEFT_BYTES", 0)
    asm = _read_whole(logdir / "run")
    try:
        assert sum(len(info.pieces) for info in asm.info.values()) == 300
    finally:
        asm.store.close()
    tbconvert.convert(logdir, tmp_path / "out", to_format="tfevents")
    assert_same_view(tb_view(tmp_path / "out"), tb_view(logdir))
    data = tbconvert.read(logdir, restarts="keep-all")
    assert data.series["run"]["t7"].hidden.tolist() == [False] * 10 + [True] * 10 + \
        [False] * 13


def test_a_block_of_bulk_and_one_by_one_numbers_ends_once(tmp_path, monkeypatch):
    """Numbers decoded in bulk and numbers decoded an event at a time share a block's held
    batches, which are cut where the block ends: once, at its last row of either, so that a
    tag's rows of one block stay one piece whichever way they were decoded."""
    from tensorboard.compat.proto import summary_pb2

    from tbconvert.formats.tfevents import reader
    run = tmp_path / "logs" / "run"
    run.mkdir(parents=True)
    merged = [dict(wall_time=2000.0 + s, step=s, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=t, simple_value=s + k) for k, t in enumerate("xy")]))
        for s in range(2)]
    # the merged events around the single-value ones that the templates decode in bulk
    _events(run / "events.out.tfevents.1.host",
            [dict(wall_time=999.0, file_version="brain.Event:2"), merged[0]]
            + [_scalar("a", s, s / 2, 1000.0 + s) for s in range(20)] + [merged[1]])
    monkeypatch.setattr(records, "scan_file", blocks_of(100))
    monkeypatch.setattr(reader, "FEW_LEFT_BYTES", 0)
    asm = _read_whole(run)
    try:
        assert len(asm.block_ends) == 1
        assert [len(list(asm._pieces(asm.info[t]))) for t in "axy"] == [1, 1, 1]
    finally:
        asm.store.close()


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_held_batches_come_in_the_chunks_of_a_batch_per_block(tmp_path, monkeypatch, chunk):
    """Built, a held batch is cut where its blocks ended: chunks (so Parquet row groups) and
    so the bytes written are those of a batch per block, spilled or not."""
    from tbconvert.formats.tfevents import assemble, held_batches
    logdir = _steps_logdir(tmp_path, 40, 30)
    monkeypatch.setattr(records, "scan_file", blocks_of(50))
    monkeypatch.setattr(assemble, "CHUNK_POINTS", chunk)
    monkeypatch.setattr(held_batches, "HOLD_BYTES", 0)    # stored at once: a batch per block
    tbconvert.convert(logdir, tmp_path / "per_block.parquet")
    for hold in (3000, 1 << 20):
        monkeypatch.setattr(held_batches, "HOLD_BYTES", hold)
        monkeypatch.setattr(spill.PieceStore.__init__, "__defaults__", (hold // 2, None))
        tbconvert.convert(logdir, tmp_path / "held.parquet", force=True)
        assert (tmp_path / "held.parquet").read_bytes() == \
            (tmp_path / "per_block.parquet").read_bytes()


def test_purges_of_steps_going_back_cost_a_few_bytes_each(tmp_path):
    """Old files (no file_version) where an epoch tag is logged below the batch tag's step
    purge at every epoch point: kept as a tuple with a set each, 1.8 million purges took
    1 GiB. (Counted by tracemalloc, which also counts freed tuples Python keeps for reuse,
    a few thousand.)"""
    import tracemalloc
    run = tmp_path / "run"
    run.mkdir()
    events = []
    for s in range(1, 100001):
        events.append(_scalar("batch_loss", s, 0.5, 1000.0 + s))
        if s % 10 == 0:
            events.append(_scalar("epoch_loss", s // 10, 0.25, 1000.0 + s))
    _events(run / "events.out.tfevents.1.host", events)
    tracemalloc.start()
    try:
        asm = _read_whole(run)
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    try:
        assert len(asm.purges) == 10000
        held = sum(s.size for s in snapshot.statistics("filename")
                   if s.traceback[0].filename.endswith(("purges.py", "purge_log.py")))
        assert held / len(asm.purges) < 64
        assert all(tags == frozenset({"epoch_loss"}) for _, _, tags in asm.purges)
    finally:
        asm.store.close()
