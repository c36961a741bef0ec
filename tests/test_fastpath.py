"""The vectorised event decoders (summary_templates, blob_templates) decode exactly as protobuf does.

Every layout the bulk path accepts is checked against the same files read with
the bulk path switched off (every record through protobuf and the legacy
migration: ``helpers.protobuf_only``), on real writers' files, the benchmark generators' forms and
hypothesis-generated events.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from helpers import BENCH, FIXTURES, LOGDIRS, on_path, protobuf_only, series_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import canonical, tb_view

import tbconvert
from tbconvert.formats.tfevents import blob_templates, records, summary_templates

on_path(BENCH)
import writers  # noqa: E402


def _snapshot(logdir: Path) -> dict:
    data = tbconvert.read(logdir, restarts="keep-all")
    return {"report": sorted((i.kind, i.message) for i in data.report.issues),
            **series_snapshot(data)}


def _protobuf_only(logdir: Path) -> dict:
    with protobuf_only():
        return _snapshot(logdir)


def _bulk_share(logdir: Path) -> float:
    """Share of all records that the bulk path decoded."""
    done = total = 0
    for path in logdir.rglob("events.out.tfevents.*"):
        buf = path.read_bytes()
        starts, lengths, _ = records.scan(buf)
        _, rest = summary_templates.decode(buf, starts, lengths)
        _, rest = blob_templates.decode(buf, starts, lengths, rest)
        done += len(starts) - len(rest)
        total += len(starts)
    return done / total


# Records read both ways: short ones copied whole (the default for records under
# summary_templates.GATHER_BYTES), and every one gathered a range of its bytes at a time.
GATHERING = pytest.mark.parametrize("gather", [None, 0], ids=["default", "gathered"])


@contextlib.contextmanager
def _gathering(gather):
    """Records decoded with ``summary_templates.GATHER_BYTES`` at ``gather`` (None: as it is)."""
    with pytest.MonkeyPatch.context() as mp:
        if gather is not None:
            mp.setattr(summary_templates, "GATHER_BYTES", gather)
        yield


def _points(form: str, points: int) -> int:
    """``points``, or a few steps of a form whose every event holds hundreds of values."""
    return 258 * 5 if form == "histo_tf1_merge_all" else points


@pytest.mark.parametrize("form", ["pytorch", "tensorboardx", "tf2", "keras", "tf1_merge_all",
                                  "histo_tf2", "histo_legacy", "histo_tf1_merge_all",
                                  "images_legacy", "images_tf2", "mixed", "sweep"])
@GATHERING
def test_generated_forms_bulk_equals_protobuf(form, gather, tmp_path, monkeypatch):
    writers.write_form(form, tmp_path / form, _points(form, 400))
    with _gathering(gather):
        assert _snapshot(tmp_path / form) == _protobuf_only(tmp_path / form)
    if not form.startswith("histo_") or form == "histo_tf2":
        assert _bulk_share(tmp_path / form) > 0.9


@pytest.mark.parametrize("form", ["tf2", "keras", "tf1_merge_all", "histo_tf2",
                                  "histo_tf1_merge_all"])
def test_generated_forms_match_tensorboard(form, tmp_path):
    """The new layouts (metadata on every value, several values, [k, 3] tensors) as TensorBoard sees them."""
    writers.write_form(form, tmp_path, _points(form, 200))
    _assert_tensorboard_view(tmp_path)


def _assert_tensorboard_view(logdir: Path) -> None:
    """Tags, metadata, steps, wall times and values of ``logdir`` as TensorBoard reads them."""
    view = tb_view(logdir)
    ours = tbconvert.read(logdir, restarts="keep-all").series
    assert sorted(view) == sorted(ours)
    for run, tags in view.items():
        assert sorted(tags["tags"]) == sorted(ours[run])
        for tag, tv in tags["tags"].items():
            s = ours[run][tag]
            assert (s.metadata.plugin_name, s.metadata.plugin_content, s.metadata.display_name,
                    s.metadata.description, int(s.metadata.data_class)) == \
                (tv["plugin_name"], tv["plugin_content"], tv["display_name"], tv["description"],
                 tv["data_class"])
            assert [p[0] for p in tv["points"]] == s.steps.tolist()
            assert [p[1] for p in tv["points"]] == s.wall_times.tolist()
            points = s.values if hasattr(s, "values") else s.tensors
            assert [p[2] for p in tv["points"]] == [canonical(np.asarray(v)) for v in points]


def _repeat_records(src: Path, dst: Path, times: int) -> None:
    """Each record of each event file written ``times`` times in a row (same bytes)."""
    for path in src.rglob("events.out.tfevents.*"):
        buf = path.read_bytes()
        starts, lengths, _ = records.scan(buf)
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"".join(records.frame(buf[s:s + n]) * times
                                 for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)))


@pytest.mark.parametrize("name", LOGDIRS)
def test_real_writers_records_bulk_equals_protobuf(name, tmp_path, monkeypatch):
    """Real writers' exact records, each repeated so that the bulk path takes them."""
    _repeat_records(FIXTURES / name, tmp_path, summary_templates.MIN_GROUP + 1)
    assert _snapshot(tmp_path) == _protobuf_only(tmp_path)


@pytest.mark.parametrize("name", LOGDIRS)
def test_real_writers_files_as_they_are_equal_protobuf(name):
    """The fixtures as written, a few records a tag: what the bulk decoders leave goes to
    templates of one record, the version records and metadata to ``small_messages``, every
    plugin's records among them (text, hparams, images, audio, graphs)."""
    assert _snapshot(FIXTURES / name) == _protobuf_only(FIXTURES / name)


def test_real_tf2_scalar_and_histogram_records_take_the_bulk_path(tmp_path):
    """TF2 writes metadata on every value: those records must not fall back to protobuf."""
    _repeat_records(FIXTURES / "tf2_logdir" / "eager", tmp_path, summary_templates.MIN_GROUP + 1)
    path = next(p for p in tmp_path.rglob("*.0.v2"))
    buf = path.read_bytes()
    starts, lengths, _ = records.scan(buf)
    cols, _ = summary_templates.decode(buf, starts, lengths)
    cols = [one for c in cols for one in c.split()]
    kinds = {(c.tag, c.values.shape[1:]) for c in cols}
    assert ("loss", ()) in kinds and ("learning_rate", ()) in kinds
    assert ("weights", (20, 3)) in kinds
    md = {c.tag: summary_templates.column_metadata(c) for c in cols}
    assert md["learning_rate"].plugin_name == "scalars"
    assert md["learning_rate"].description == "learning rate (exponential decay)"


def test_first_metadata_wins_between_layouts(tmp_path, monkeypatch):
    """A tag whose metadata changes part way: TensorBoard keeps the first, so must we.

    Long steps come first, so the first metadata sits in the later length group."""
    from tensorboard.compat.proto import event_pb2
    with writers.EventFile(tmp_path / "r", "tf2") as f:
        for i in range(100):
            step = 1000 + i if i < 40 else i
            ev = event_pb2.Event.FromString(writers.tf2_scalar_event(step, 10.0 + i, "x", i / 7))
            ev.summary.value[0].metadata.display_name = "first" if i < 40 else "later"
            f.add(ev.SerializeToString())
    assert _snapshot(tmp_path) == _protobuf_only(tmp_path)
    assert tbconvert.read(tmp_path, restarts="keep-all").series["r"]["x"].metadata.display_name == "first"


# -- hypothesis: random events through both paths ---------------------------------------------

_DTYPES = [(1, "<f4"), (2, "<f8"), (3, "<i4"), (9, "<i8"), (4, "u1"), (10, "?"), (19, "<f2"),
           (14, "<u2"), (8, "<c8"), (23, "<u8")]

tags = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1,
               max_size=12)
meta = st.one_of(st.none(), st.fixed_dictionaries({
    "plugin": st.sampled_from(["scalars", "histograms", "text", "custom", ""]),
    "content": st.binary(max_size=6),
    "display": st.text(max_size=6),
    "desc": st.text(max_size=6),
    "data_class": st.integers(0, 5),
}))
value_spec = st.fixed_dictionaries({
    "tag": tags,
    "kind": st.sampled_from(["simple", "tensor_content", "float_val", "double_val"]),
    "dtype": st.sampled_from(_DTYPES),
    "shape": st.lists(st.integers(0, 3), max_size=3),
    "meta": meta,
})
event_spec = st.fixed_dictionaries({
    "values": st.lists(value_spec, min_size=1, max_size=4),
    "steps": st.sampled_from(["small", "large", "negative", "mixed", "absent"]),
    "wall": st.booleans(),
    "count": st.integers(1, 40),
})


def _value(ev, spec, rng):
    from tbconvert import dtypes as dt
    v = ev.summary.value.add(tag=spec["tag"])
    if spec["meta"] is not None:
        m = spec["meta"]
        v.metadata.plugin_data.plugin_name = m["plugin"]
        v.metadata.plugin_data.content = m["content"]
        v.metadata.display_name = m["display"]
        v.metadata.summary_description = m["desc"]
        v.metadata.data_class = min(m["data_class"], 3)
    kind = spec["kind"]
    if kind == "simple":
        v.simple_value = float(rng.standard_normal())
        return
    code, np_dtype = spec["dtype"]
    if kind == "float_val":
        v.tensor.dtype = dt.DT_FLOAT
        v.tensor.tensor_shape.SetInParent()
        v.tensor.float_val.append(float(rng.standard_normal()))
        return
    if kind == "double_val":
        v.tensor.dtype = dt.DT_DOUBLE
        v.tensor.tensor_shape.SetInParent()
        v.tensor.double_val.append(float(rng.standard_normal()))
        return
    v.tensor.dtype = code
    shape = spec["shape"]
    v.tensor.tensor_shape.SetInParent()
    for size in shape:
        v.tensor.tensor_shape.dim.add(size=size)
    n = int(np.prod(shape)) if shape else 1
    v.tensor.tensor_content = rng.integers(0, 256, n * np.dtype(np_dtype).itemsize,
                                           dtype=np.uint8).tobytes()


def _step(mode, i, rng):
    if mode == "absent":
        return 0
    if mode == "small":
        return i
    if mode == "large":
        return int(rng.integers(1 << 20, 1 << 50))
    if mode == "negative":
        return -int(rng.integers(1, 1 << 40))
    return int(rng.choice([i, 1 << 30, -5]))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(event_spec, min_size=1, max_size=4), seed=st.integers(0, 1000),
       version=st.sampled_from(["brain.Event:2", "brain.Event:1"]))
@GATHERING
def test_random_events_bulk_equals_protobuf(events, seed, version, gather, tmp_path_factory):
    """Version 1 files turn on TensorBoard's out-of-order purge, which reads steps of whole events."""
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(seed)
    logdir = tmp_path_factory.mktemp("h")
    i = 0
    with writers.EventFile(logdir / "r", "pytorch", file_version=version) as f:
        for spec in events:
            for _ in range(spec["count"] * 2):
                i += 1
                ev = event_pb2.Event(step=_step(spec["steps"], i, rng))
                if spec["wall"]:
                    ev.wall_time = 1e9 + i
                for v in spec["values"]:
                    _value(ev, v, rng)
                f.add(ev.SerializeToString())
    with _gathering(gather):
        assert _snapshot(logdir) == _protobuf_only(logdir)


@pytest.mark.parametrize("code,np_dtype", _DTYPES)
@pytest.mark.parametrize("shape", [[], [3], [2, 3], [0, 2]])
def test_every_dtype_and_shape_bulk_equals_protobuf(code, np_dtype, shape, tmp_path, monkeypatch):
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(code)
    spec = {"tag": "t", "kind": "tensor_content", "dtype": (code, np_dtype), "shape": shape,
            "meta": {"plugin": "custom", "content": b"\x01", "display": "", "desc": "",
                     "data_class": 2}}
    with writers.EventFile(tmp_path / "r", "tf2") as f:
        for i in range(40):
            ev = event_pb2.Event(step=i, wall_time=1.0 + i)
            _value(ev, spec, rng)
            f.add(ev.SerializeToString())
    assert _snapshot(tmp_path) == _protobuf_only(tmp_path)
    if 0 not in shape and code != 10:  # bool stays with protobuf (see summary_templates)
        assert _bulk_share(tmp_path) > 0.9


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tag=tags, form=st.sampled_from(["legacy", "tf2"]), head=st.integers(0, 3),
       sizes=st.lists(st.sampled_from([0, 1, 100, 127, 128, 129, 16383, 16384, 20000]), min_size=1,
                      max_size=4),
       meta=meta, steps=st.sampled_from(["small", "large", "negative", "absent"]), seed=st.integers(0, 99))
def test_random_blob_events_bulk_equals_protobuf(tag, form, head, sizes, meta, steps, seed,
                                                 tmp_path_factory):
    """Images of every size around the varint boundaries of their enclosing length prefixes."""
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(seed)
    logdir = tmp_path_factory.mktemp("b")
    with writers.EventFile(logdir / "r", "pytorch") as f:
        for i in range(60):
            blob = rng.integers(0, 256, sizes[i % len(sizes)], dtype=np.uint8).tobytes()
            if form == "legacy":
                raw = writers.image_legacy_event(_step(steps, i, rng), 1e9 + i, tag, blob, 3 + head, 4)
            else:
                ev = event_pb2.Event(step=_step(steps, i, rng), wall_time=1e9 + i)
                v = ev.summary.value.add(tag=tag)
                v.tensor.dtype = 7
                v.tensor.tensor_shape.dim.add(size=head + 1)
                v.tensor.string_val.extend([b"%d" % j for j in range(head)] + [blob])
                if meta is not None:
                    v.metadata.plugin_data.plugin_name = meta["plugin"]
                    v.metadata.display_name = meta["display"]
                raw = ev.SerializeToString()
            f.add(raw)
    fast = _snapshot(logdir)
    assert fast == _protobuf_only(logdir)


# -- many tags: one field map takes every tag of its length -----------------------------------

def _with_tag_bytes(payload: bytes, placeholder: str, raw: bytes) -> bytes:
    """``payload`` with the tag ``placeholder`` replaced by ``raw`` bytes of the same length
    (protobuf itself writes no tag that is not UTF-8)."""
    assert len(raw) == len(placeholder.encode()) and payload.count(placeholder.encode()) == 1
    return payload.replace(placeholder.encode(), raw)


@pytest.mark.parametrize("form", ["pytorch", "tf2"])
def test_many_tags_take_the_bulk_path(form, tmp_path):
    """A metric per layer: thousands of tags of a few points each, which a field map per tag
    would leave to protobuf one record at a time."""
    rng = np.random.default_rng(0)
    names = [f"layer{i:03d}/{m}" for i in range(300) for m in ("grad_norm", "w", "act_mean")]
    with writers.EventFile(tmp_path / "r", form) as f:
        for step in (0, 1, 200, 70000):
            for tag in names:
                v = float(rng.standard_normal())
                f.add(writers.simple_value_event(step, 1e9 + step, {tag: v}) if form == "pytorch"
                      else writers.tf2_scalar_event(step, 1e9 + step, tag, v))
    assert _bulk_share(tmp_path) > 0.99
    fast = _snapshot(tmp_path)
    assert fast == _protobuf_only(tmp_path)
    assert len(fast) - 3 == len(names)   # besides the report, the start time and the order


def test_merge_all_of_a_thousand_tags_takes_the_bulk_path(tmp_path):
    """TF1's merge_all of a metric per layer: a thousand values in every event."""
    names = tuple(f"layer{i:03d}/{m}" for i in range(250) for m in ("grad", "w", "act", "lr"))
    writers.merge_all_run(tmp_path / "r", 40 * len(names), tags=names)
    assert _bulk_share(tmp_path) > 0.95
    fast = _snapshot(tmp_path)
    assert fast == _protobuf_only(tmp_path)
    assert len(fast) - 3 == len(names)   # besides the report, the start time and the order


@GATHERING
def test_a_tag_that_is_no_utf8_among_many_is_left_to_protobuf(gather, tmp_path):
    """Protobuf refuses an event whose tag is not UTF-8: the records of that tag alone go to
    it (and are reported as it reports them), the others of their field map stay in bulk."""
    rng = np.random.default_rng(1)
    with writers.EventFile(tmp_path / "r", "pytorch") as f:
        for step in range(30):
            for k in range(20):
                raw = writers.simple_value_event(step, 1e9 + step, {f"t{k:02d}": rng.random()})
                if k == 7:
                    raw = _with_tag_bytes(raw, "t07", b"t\xff\xfe")
                f.add(raw)
    with _gathering(gather):
        fast = _snapshot(tmp_path)
        assert fast == _protobuf_only(tmp_path)
    assert ("r", "t06") in fast and ("r", "t07") not in fast
    assert sum(k == "corrupt_record" for k, _ in fast["report"]) == 30


# tags of one length share a field map; some bytes are no UTF-8
tag_pool = st.one_of(
    st.integers(1, 6).flatmap(lambda n: st.lists(st.binary(min_size=n, max_size=n), min_size=1,
                                                 max_size=6)),
    st.lists(st.one_of(tags, st.binary(min_size=1, max_size=6)), min_size=1, max_size=6))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool=tag_pool, picks=st.lists(st.integers(0, 5), min_size=20, max_size=120),
       value=value_spec, second=st.one_of(st.none(), value_spec),
       steps=st.sampled_from(["small", "large", "negative", "mixed", "absent"]),
       seed=st.integers(0, 1000))
@GATHERING
def test_random_tags_bulk_equals_protobuf(pool, picks, value, second, steps, seed, gather,
                                          tmp_path_factory):
    """Events of one layout whose tags vary from event to event (any bytes, some not UTF-8,
    often of one length), one or two values an event: both paths read the same."""
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(seed)
    logdir = tmp_path_factory.mktemp("t")
    with writers.EventFile(logdir / "r", "pytorch") as f:
        for i, pick in enumerate(picks):
            tag = pool[pick % len(pool)]
            raw = tag if isinstance(tag, bytes) else tag.encode()
            try:
                text, placeholder = raw.decode("utf-8"), None
            except UnicodeDecodeError:
                text = placeholder = "\x7f" * len(raw)
            ev = event_pb2.Event(step=_step(steps, i, rng), wall_time=1e9 + i)
            _value(ev, {**value, "tag": text}, rng)
            if second is not None:
                _value(ev, second, rng)
            payload = ev.SerializeToString()
            if placeholder is not None:
                if payload.count(placeholder.encode()) != 1:
                    continue
                payload = _with_tag_bytes(payload, placeholder, raw)
            f.add(payload)
    with _gathering(gather):
        assert _snapshot(logdir) == _protobuf_only(logdir)


# -- record framing and legacy histograms -------------------------------------------------------

@pytest.mark.parametrize("form", ["mixed", "keras", "histo_tf2", "images_legacy", "pytorch_layers",
                                  "histo_tf2_layers"])
def test_bulk_framing_equals_record_by_record_walk(form, tmp_path):
    """record_chain predicts record positions from repeating lengths; it must find exactly the
    records a one-by-one walk finds, from any offset, for any limit, damaged bytes included."""
    from tbconvert.formats.tfevents import record_chain
    # a metric per layer: a cycle of 1,024 lengths made of shorter repeats
    writers.write_form(form, tmp_path, 3000 if form == "pytorch_layers" else 600)
    rng = np.random.default_rng(5)
    paths = sorted(tmp_path.rglob("events.out.tfevents.*"))
    assert paths
    for path in paths:
        buf = path.read_bytes()
        variants = [buf, buf[:len(buf) * 2 // 3]]
        for _ in range(3):
            damaged = bytearray(buf)
            damaged[int(rng.integers(0, len(buf)))] ^= 0x5A
            variants.append(bytes(damaged))
        for data in variants:
            for off in (0, 1, len(data) // 2):
                for limit in (1, 47, 48, 49, 1000, 1 << 20):
                    a = records._frame_quickly(data, off, limit)
                    b = record_chain.walk(data, off, limit)
                    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(cycle=st.lists(st.integers(0, 300), min_size=1, max_size=12), steps=st.integers(100, 300),
       breaks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 70000)), max_size=3),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
       cut=st.integers(0, 40), first=st.integers(0, 5), shift=st.sampled_from([0, 0, 0, 1, 7]),
       limit=st.sampled_from([49, 200, 5000, 1 << 20]))
def test_random_record_lengths_bulk_framing_equals_walk(cycle, steps, breaks, flips, cut, first,
                                                        shift, limit):
    """Records whose lengths repeat with any period (tags logged per step), broken by odd
    records, damaged bytes and a cut-off end: the predicted framing is the one-by-one walk."""
    from tbconvert.formats.tfevents import record_chain
    lengths = [cycle[i % len(cycle)] for i in range(len(cycle) * steps)]
    for where, length in breaks:
        lengths.insert(where % (len(lengths) + 1), length)
    data = bytearray(b"".join(records.frame(bytes([i % 251]) * n) for i, n in enumerate(lengths)))
    for where, bits in flips:
        data[where % len(data)] ^= bits
    data = bytes(data[:len(data) - cut])
    # from a record's start (or a few bytes off it, as after a damaged stretch)
    off = min(sum(16 + n for n in lengths[:first]) + shift, len(data))
    want = records._frame_quickly(data, off, limit)
    got = record_chain.walk(data, off, limit)
    assert want[0].tolist() == got[0].tolist() and want[1].tolist() == got[1].tolist()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(inner=st.lists(st.integers(0, 120), min_size=1, max_size=6), layers=st.integers(2, 150),
       odd=st.lists(st.tuples(st.integers(0, 10**4), st.integers(0, 120)), max_size=4),
       steps=st.integers(2, 12), breaks=st.lists(st.integers(0, 10**6), max_size=2),
       limit=st.sampled_from([300, 5000, 1 << 20]))
def test_long_cycles_bulk_framing_equals_walk(inner, layers, odd, steps, breaks, limit):
    """A step of many tags: one layer's lengths repeated, a few odd ones among them (a name
    one digit longer), the whole cycle of up to hundreds of records repeated each step,
    broken now and then (a new step-varint width). The long cycle is found from the
    lengths seen; the framing is still the one-by-one walk's."""
    from tbconvert.formats.tfevents import record_chain
    cycle = inner * layers
    for where, length in odd:
        cycle[where % len(cycle)] = length
    lengths = cycle * steps
    for where in breaks:
        at = where % (len(lengths) + 1)
        lengths[at:] = [n + 1 for n in lengths[at:]]
    data = b"".join(records.frame(bytes([i % 251]) * n) for i, n in enumerate(lengths))
    want = records._frame_quickly(data, 0, limit)
    got = record_chain.walk(data, 0, limit)
    assert want[0].tolist() == got[0].tolist() and want[1].tolist() == got[1].tolist()


def test_a_step_of_many_tags_is_one_cycle_of_lengths():
    """One layer's lengths repeat within a step, but only the whole step repeats from step
    to step: that is the cycle the walk predicts with."""
    from tbconvert.formats.tfevents import record_chain
    step = [70, 68, 68, 63] * 40 + [71, 69, 69, 64] * 60
    assert record_chain._long_period(step * 3) == len(step)
    assert record_chain._long_period([5] * 100) == 1
    assert record_chain._long_period(list(range(100))) == 0


def _histogram_elementwise(histo):
    counts = list(histo.bucket)
    nonzero = [i for i, c in enumerate(counts) if c > 0]
    if not nonzero:
        return np.zeros((0, 3), np.float32)
    start, end = nonzero[0], nonzero[-1]
    limits = list(histo.bucket_limit)
    inner = limits[start:end]
    with np.errstate(over="ignore"):
        return np.array([[histo.min] + inner, inner + [histo.max], counts[start:end + 1]],
                        dtype=np.float32).T


@settings(max_examples=40, deadline=None, derandomize=True)
@given(counts=st.lists(st.sampled_from([0.0, 0.0, 1.0, 3.0, 1e9, float("nan"), -1.0]), max_size=12),
       lo=st.floats(allow_nan=False, width=64), hi=st.floats(allow_nan=False, width=64),
       unpacked=st.booleans())
def test_legacy_histogram_from_packed_bytes_equals_elementwise(counts, lo, hi, unpacked):
    """Reading bucket arrays from the packed bytes gives TensorBoard's element-wise migration,
    also for histograms written with unpacked repeated fields."""
    from tensorboard.compat.proto import summary_pb2

    from tbconvert.formats.tfevents import legacy
    limits = [float(i) / 3 for i in range(len(counts))]
    histo = summary_pb2.HistogramProto(min=lo, max=hi, num=5.0, bucket_limit=limits, bucket=counts)
    if unpacked:
        raw = b"".join(b"\x31" + np.float64(v).tobytes() for v in limits) + \
            b"".join(b"\x39" + np.float64(v).tobytes() for v in counts)
        histo = summary_pb2.HistogramProto.FromString(raw)
        histo.min, histo.max = lo, hi
    got = legacy.migrate_histogram(histo)
    want = _histogram_elementwise(histo)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


# -- events of thousands of values: merge_all over a model of a summary per layer -------------

_WIDE_KINDS = {
    "simple": {"kind": "simple"},
    "tensor": {"kind": "tensor_content", "dtype": (1, "<f4"), "shape": []},
    "float_val": {"kind": "float_val"},
    "double_val": {"kind": "double_val"},
    "histogram": {"kind": "tensor_content", "dtype": (2, "<f8"), "shape": [4, 3]},
}
_SCALARS_MD = {"plugin": "scalars", "content": b"", "display": "", "desc": "", "data_class": 1}


def _wide_run(run_dir: Path, n_values: int, steps, kinds=("simple",), meta_every: int = 0,
              twice: bool = False, seed: int = 0) -> None:
    """Events of ``n_values`` values each, a tag per layer, kinds in turn by runs of three;
    metadata on every ``meta_every``-th value only; ``twice``: the last value's tag is the
    first's again."""
    from tensorboard.compat.proto import event_pb2
    rng = np.random.default_rng(seed)
    with writers.EventFile(run_dir, "tf1") as f:
        for step in steps:
            ev = event_pb2.Event(step=step, wall_time=1e9 + step / 3)
            for k in range(n_values):
                kind = kinds[k // 3 % len(kinds)]
                tag = f"layer{0 if twice and k == n_values - 1 else k:05d}/{kind}"
                md = _SCALARS_MD if meta_every and k % meta_every == 0 else None
                _value(ev, {"tag": tag, "meta": md, "dtype": (1, "<f4"), "shape": [],
                            **_WIDE_KINDS[kind]}, rng)
            f.add(ev.SerializeToString())


def test_an_event_of_5000_values_takes_the_bulk_path(tmp_path):
    """More values than the writer puts in one event: a dozen such records fill a block,
    fewer than a length group needs, and each decoded by protobuf cost ~25 us a value."""
    _wide_run(tmp_path / "r", 5000, range(12))
    assert _bulk_share(tmp_path) > 0.9
    fast = _snapshot(tmp_path)
    assert fast == _protobuf_only(tmp_path)
    assert len(fast) - 3 == 5000


@pytest.mark.parametrize("layout", ["mixed", "metadata on some", "a tag twice", "steps",
                                    "one a block"])
def test_wide_events_bulk_equals_protobuf(layout, tmp_path, monkeypatch):
    """Events of thousands of values of mixed kinds, metadata on some values only, a tag twice
    in one event, steps whose varints change the record's length (and none at step 0), and
    a record a block, whose field map is carried from block to block."""
    from tbconvert.formats.tfevents import reader
    kinds, steps = ("simple",), range(5)
    options = {}
    if layout == "mixed":
        kinds = tuple(_WIDE_KINDS)
    elif layout == "metadata on some":
        kinds, options["meta_every"] = ("simple", "tensor"), 7
    elif layout == "a tag twice":
        options["twice"] = True
    elif layout == "steps":
        steps = [0, 1, 126, 127, 128, 129, 16383, 16384, 16385, 1 << 40]
    else:
        kinds, steps = ("simple", "histogram"), range(8)
        monkeypatch.setattr(reader.TfeventsReader, "block_size", 1 << 16)
    _wide_run(tmp_path / "r", 4500, steps, kinds, **options)
    fast = _snapshot(tmp_path)
    assert fast == _protobuf_only(tmp_path)
    if layout != "a tag twice":
        assert _bulk_share(tmp_path) > 0.8


@pytest.mark.parametrize("layout", ["metadata on every value", "metadata every other step"])
@GATHERING
def test_histograms_of_many_tags_held_over_blocks_bulk_equals_protobuf(layout, gather, tmp_path,
                                                                       monkeypatch):
    """TF2 histograms of many tags (one per parameter), read in small blocks: each tag's points
    are held over several blocks and stored at once, the tags' arrays sharing one. With the
    metadata on every other step only, each tag's records take two templates, so its points
    of a block come out of read order and are put back in order within the shared array."""
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import assemble, reader
    monkeypatch.setattr(reader.TfeventsReader, "block_size", 1 << 16)
    rng = np.random.default_rng(3)
    with writers.EventFile(tmp_path / "r", "tf2") as f:
        for step in range(12):
            for k in range(40):
                raw = writers.histo_tf2_event(step, 1e9 + step + k / 100, f"layer{k:02d}/w",
                                              rng.random((30, 3)))
                if layout != "metadata on every value" and step % 2:
                    ev = event_pb2.Event.FromString(raw)
                    ev.summary.value[0].ClearField("metadata")
                    raw = ev.SerializeToString()
                f.add(raw)
    stored = []
    real = assemble.RunAssembler._store_stack

    def spy(self, info, cols, stack=None):
        seqs = np.concatenate([c[0] for c in cols])
        stored.append((stack is not None, len(cols), bool((np.diff(seqs) < 0).any())))
        return real(self, info, cols, stack)

    monkeypatch.setattr(assemble.RunAssembler, "_store_stack", spy)
    with _gathering(gather):
        fast = _snapshot(tmp_path)
    assert any(shared and n > 1 for shared, n, _ in stored)     # the case this test is for
    if layout != "metadata on every value":
        assert any(shared and unordered for shared, _, unordered in stored)
    assert fast == _protobuf_only(tmp_path)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(value_spec, min_size=1, max_size=8), pool=st.integers(1, 8),
       events=st.lists(st.tuples(st.sampled_from(["small", "large", "negative", "absent"]),
                                 st.booleans()), min_size=1, max_size=12),
       seed=st.integers(0, 1000))
@GATHERING
def test_random_wide_events_bulk_equals_protobuf(values, pool, events, seed, gather,
                                                 tmp_path_factory):
    """Any layout read the way wide records are (a template for a lone record, its map kept
    for the next blocks, a record a block): as protobuf reads it. Tags from a small pool, so
    that one may come twice in an event; a value's metadata may change between events."""
    from tensorboard.compat.proto import event_pb2

    from tbconvert.formats.tfevents import reader
    rng = np.random.default_rng(seed)
    logdir = tmp_path_factory.mktemp("w")
    with writers.EventFile(logdir / "r", "tf1") as f:
        for i, (steps, other_md) in enumerate(events):
            ev = event_pb2.Event(step=_step(steps, i, rng), wall_time=1e9 + i)
            for k, spec in enumerate(values):
                meta = spec["meta"]
                if other_md and meta is not None:
                    meta = {**meta, "display": meta["display"][::-1] + "x"[:len(meta["display"])]}
                _value(ev, {**spec, "tag": f"t{k % pool}", "meta": meta}, rng)
            f.add(ev.SerializeToString())
    with pytest.MonkeyPatch.context() as mp, _gathering(gather):
        mp.setattr(summary_templates, "WIDE_BYTES", 1)
        mp.setattr(reader.TfeventsReader, "block_size", 64)
        fast = _snapshot(logdir)
        assert fast == _protobuf_only(logdir)


def test_wide_events_match_tensorboard(tmp_path):
    """Values of mixed kinds with metadata on some only, in events of thousands of values, as
    TensorBoard sees them."""
    _wide_run(tmp_path / "r", 4200, range(4), tuple(_WIDE_KINDS), meta_every=5)
    assert _bulk_share(tmp_path) > 0.7
    _assert_tensorboard_view(tmp_path)


@pytest.mark.parametrize("width", [1, 5, 120, 121, 122, 127, 128, 200])
def test_simple_value_slots_are_where_protobuf_put_them(width):
    """The short way through a {tag, simple_value} value finds its fields where the walk
    through the fields does, on both sides of a one-byte length."""
    from tensorboard.compat.proto import event_pb2
    ev = event_pb2.Event(step=3, wall_time=2.5)
    for k in range(3):
        ev.summary.value.add(tag=f"{k}" + "t" * (width - 1), simple_value=k / 3)
    raw = ev.SerializeToString()
    field_map = summary_templates.learn_field_map(raw)
    assert [s.tag.decode() for s in field_map.slots] == [v.tag for v in ev.summary.value]
    for slot, value in zip(field_map.slots, ev.summary.value, strict=True):
        assert raw[slot.tag_off:slot.tag_off + len(slot.tag)] == slot.tag
        assert np.frombuffer(raw, "<f4", 1, slot.value_off)[0] == np.float32(value.simple_value)
        assert (slot.value_size, slot.shape, slot.code, slot.simple, slot.metadata, slot.quiet) \
            == (4, (), 1, True, None, True)
