"""How ``tbconvert.tbparse`` reads: through the event-file reader's public seam only,
loading only what a table needs, and in little memory (the figures against tbparse are
in bench/RESULTS.md, ``python bench/bench_tbparse.py``)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import CLI_CWD, FIXTURES, cli_env

from tbconvert.formats.tfevents.records import frame
from tbconvert.tbparse import SummaryReader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import writers

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")


def _child(code: str, *argv) -> str:
    """The last line ``code`` prints, run with ``argv`` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=CLI_CWD,
                         env=cli_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


# ------------------------------------------------------------------ what is loaded

NOT_FOR_SCALARS = ("h5py", "PIL", "tensorflow", "tbparse", "tensorboard.backend",
                   "tensorboard.plugins", "tbconvert.formats.parquet", "tbconvert.formats.hdf5",
                   "tbconvert.tables")


def test_a_scalars_table_loads_no_library_it_does_not_use():
    code = (f"import json, sys\nfrom tbconvert.tbparse import SummaryReader\n"
            f"df = SummaryReader({str(FIXTURES / 'torch_logdir')!r}, "
            "event_types={'scalars'}).scalars\nassert len(df)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith({NOT_FOR_SCALARS!r}))))")
    assert json.loads(_child(code)) == []


# ------------------------------------------------------------------ only public seams below

def _tbparse_sources() -> dict[str, ast.Module]:
    import tbconvert.tbparse
    folder = Path(tbconvert.tbparse.__file__).parent
    return {p.name: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.py"))}


# pandas' own internals the wide merge uses (pandas is not a tbconvert layer)
_PANDAS_PRIVATE = {"_values", "_pa_array", "_cast_pointwise_result"}


def test_tbparse_uses_only_the_public_names_of_the_layers_below():
    """No subclass of a reader's or assembler's class, no private name imported or reached
    into: the event-file reader's seam is ``read_positioned`` and ``value_hook``."""
    trees = _tbparse_sources()
    own = {name[:-3] for name in trees}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
    lower = set()
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tbconvert") \
                    and not node.module.startswith("tbconvert.tbparse"):
                for alias in node.names:
                    assert not alias.name.startswith("_"), f"{name}: imports {alias.name}"
                    lower.add(alias.asname or alias.name)
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                assert node.attr in own | _PANDAS_PRIVATE, \
                    f"{name}:{node.lineno}: reaches into {node.attr}"
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                assert not bases & lower, f"{name}: {node.name} subclasses {bases & lower}"


# ------------------------------------------------------------------ the reader's seam

def _event(step, **kw):
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event(step=step, wall_time=1.7e9 + step, **kw).SerializeToString()


def _scalar(step, value, tag="loss"):
    from tensorboard.compat.proto import summary_pb2
    return _event(step, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]))


def _start(step):
    from tensorboard.compat.proto import event_pb2
    return _event(step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))


def _version():
    from tensorboard.compat.proto import event_pb2
    return event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString()


def _reader(path):
    from tbconvert import api
    from tbconvert.formats.tfevents.reader import TfeventsReader
    from tbconvert.report import Report
    return TfeventsReader(path, api.make_options(restarts="keep-all"), Report())


def test_read_positioned_says_which_file_each_point_came_from(tmp_path):
    first = tmp_path / "events.out.tfevents.1.a"
    second = tmp_path / "events.out.tfevents.2.a"
    first.write_bytes(b"".join(frame(e) for e in [_version(), _start(0)]
                               + [_scalar(s, s) for s in range(6)]))
    # a restart: the second file starts again at step 3, hiding steps 3-5 of the first
    second.write_bytes(b"".join(frame(e) for e in [_version(), _start(3)]
                                + [_scalar(s, 10 + s) for s in range(3, 8)]))
    read = _reader(tmp_path).read_positioned("run", [first, second])
    (chunk, positions), = list(read.chunks)
    files = np.searchsorted(read.starts, positions, side="right") - 1
    assert files.tolist() == [0] * 6 + [1] * 5
    assert chunk.steps.tolist() == [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    assert (positions < read.end).all() and (np.diff(positions) > 0).all()
    assert chunk.hidden.tolist() == [False] * 3 + [True] * 3 + [False] * 5   # TensorBoard's view


def test_every_start_purges_as_the_legacy_accumulator(tmp_path):
    path = tmp_path / "events.out.tfevents.1.a"
    # a first START after points: TensorBoard's dashboards keep them, its legacy
    # accumulator (tbparse's) purges those at or after the START's step
    path.write_bytes(b"".join(frame(e) for e in [_version()] + [_scalar(s, s) for s in range(6)]
                              + [_start(3)] + [_scalar(s, 10 + s) for s in range(3, 5)]))
    (shown, _), = list(_reader(tmp_path).read_positioned("r", [path]).chunks)
    (legacy, _), = list(_reader(tmp_path).read_positioned(
        "r", [path], every_start_purges=True).chunks)
    assert shown.hidden is None
    assert legacy.hidden.tolist() == [False] * 3 + [True] * 3 + [False] * 2


def test_the_value_hook_sees_each_value_with_its_position(tmp_path):
    from tensorboard.compat.proto import summary_pb2
    path = tmp_path / "events.out.tfevents.1.a"
    histo = summary_pb2.HistogramProto(min=0, max=2, num=3, sum=3, sum_squares=5,
                                       bucket_limit=[1, 2], bucket=[1, 2])
    events = [_version(), _scalar(0, 1.0),
              _event(1, summary=summary_pb2.Summary(
                  value=[summary_pb2.Summary.Value(tag="h", histo=histo)]))]
    path.write_bytes(b"".join(frame(e) for e in events))
    seen = []
    reader = _reader(tmp_path)
    reader.value_hook = lambda position, value: seen.append((position, value.tag,
                                                             value.WhichOneof("value")))
    read = reader.read_positioned("r", [path], first_position=100)
    chunks = {c.tag: p for c, p in read.chunks}
    assert ("h", "histo") in [s[1:] for s in seen]
    position = next(p for p, tag, _ in seen if tag == "h")
    assert chunks["h"].tolist() == [position] and position >= 100 and read.starts.tolist() == [100]


# ------------------------------------------------------------------ shared cells

def test_array_cells_are_read_only_and_every_table_the_same():
    reader = SummaryReader(str(FIXTURES / "tf2_logdir"), event_types={"tensors"})
    first = reader.tensors
    arrays = [v for v in first.value if isinstance(v, np.ndarray)]
    assert arrays and not any(a.flags.writeable for a in arrays)
    with pytest.raises(ValueError):
        arrays[0][...] = 0
    again = reader.tensors
    assert all(np.array_equal(a, b) for a, b in zip(first.value, again.value, strict=True)
               if isinstance(a, np.ndarray))


# ------------------------------------------------------------------ memory

_PEAK = """
import sys
import pandas
from tbconvert.tbparse import SummaryReader
def status(key):
    return int([l.split()[1] for l in open('/proc/self/status') if l.startswith(key)][0]) / 1024
before = status('VmRSS:')
table = sys.argv[2]
df = getattr(SummaryReader(sys.argv[1], event_types={table}), table)
print(len(df), status('VmHWM') - before)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="peak memory is read from /proc")
@pytest.mark.parametrize("form, points, table, limit", [
    # 200,000 PyTorch scalars: the table alone is 5.7 MiB (tbparse: about 100 MiB here);
    # the reading kept 18 bytes a point and built the table through Arrow's kernels (37 MiB)
    ("pytorch", 200_000, "scalars", 27),
    # 20,000 TF2 histograms of 30 buckets: 14 MiB of tensors; an object per point in the
    # reading and the table's own copy made it 57 MiB
    ("histo_tf2", 20_000, "tensors", 42),
])
def test_peak_memory_above_the_imports(form, points, table, limit, tmp_path):
    writers.write_form(form, tmp_path / "logs", points)
    rows, mib = _child(_PEAK, tmp_path / "logs", table).split()
    assert int(rows) == points
    assert float(mib) < limit, f"{form}: {float(mib):.1f} MiB above the imports"



def test_packed_integer_columns_give_back_every_value():
    from tbconvert.tbparse._points import Progression, pack, unpack
    cases = [np.arange(5, 50, 3, dtype=np.int64), np.arange(10, 0, -2, dtype=np.int64),
             np.array([0, 1, 2, 4], np.int64), np.array([3, 3, 3], np.int64),
             np.array([0, 1 << 40, 5], np.int64), np.array([7], np.int64),
             np.array([], np.int64), np.array([-(1 << 40), 0, 1 << 40], np.int64)]
    for a in cases:
        packed = pack(a)
        assert len(packed) == len(a)
        assert unpack(packed).tolist() == a.tolist()
        assert isinstance(packed, Progression) == (len(a) > 2 and len(set(np.diff(a))) == 1)


@pytest.mark.parametrize("restarts", ["visible", "per-file"])
def test_a_tag_written_as_scalars_then_as_tensors_reads_without_error(restarts, tmp_path):
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2
    tensor = tensor_pb2.TensorProto(dtype=1, float_val=[1.0, 2.0], tensor_shape=
                                    tensor_shape_pb2.TensorShapeProto(dim=[{"size": 2}]))
    as_tensor = _event(5, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="loss", tensor=tensor)]))
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1.a").write_bytes(
        b"".join(frame(e) for e in [_version(), _scalar(0, 0.5), _scalar(1, 0.25)]))
    (run / "events.out.tfevents.2.a").write_bytes(b"".join(frame(e) for e in [_version(), as_tensor]))
    # as tbparse files each point: by the field it was written in
    reader = SummaryReader(str(tmp_path), restarts=restarts)
    assert reader.scalars.step.tolist() == [0, 1] and reader.scalars.value[0] == 0.5
    assert reader.tensors.step.tolist() == [5]
    assert reader.tensors.value[0].tolist() == [1.0, 2.0]
