"""TensorBoard's own reading of a logdir, as plain comparable data.

The oracle is TensorBoard's plugin event multiplexer with every size guidance
0 (keep every point) and purging on, exactly as the dashboards load data.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np


def canonical(arr: np.ndarray):
    """A tensor as (dtype, shape, bytes) so equality is exact (NaN and -0.0 included)."""
    arr = np.asarray(arr)
    if arr.dtype == object or arr.dtype.kind == "S":
        return ("string", arr.shape, tuple(bytes(x) for x in arr.reshape(-1)))
    return (arr.dtype.str, arr.shape, np.ascontiguousarray(arr).tobytes())


def tb_view(logdir) -> dict:
    """``{run: {"graph", "meta_graph", "first_event", "tags": {tag: {...}}}}``."""
    from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
    from tensorboard.util import tensor_util

    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    mux = pem.EventMultiplexer(size_guidance={"tensors": 0}, tensor_size_guidance={},
                               purge_orphaned_data=True)
    mux.AddRunsFromDirectory(str(Path(logdir)))
    mux.Reload()
    view = {}
    for run, info in mux.Runs().items():
        tags = {}
        for tag in info["tensors"]:
            try:
                md = mux.SummaryMetadata(run, tag)
            except KeyError:
                # a tag whose values came without metadata: as one with empty metadata, no
                # plugin (and no data provider's listing) ever shows it
                from tensorboard.compat.proto import summary_pb2
                md = summary_pb2.SummaryMetadata()
            points = [(int(e.step), float(e.wall_time),
                       canonical(tensor_util.make_ndarray(e.tensor_proto)))
                      for e in mux.Tensors(run, tag)]
            tags[tag] = {
                "plugin_name": md.plugin_data.plugin_name,
                "plugin_content": bytes(md.plugin_data.content),
                "display_name": md.display_name,
                "description": md.summary_description,
                "data_class": int(md.data_class),
                "points": points,
            }
        acc = mux.GetAccumulator(run)
        try:
            first = acc.FirstEventTimestamp()
        except ValueError:
            first = None
        view[run] = {"graph": bool(info["graph"]), "meta_graph": bool(info["meta_graph"]),
                     "serialized_graph": acc._graph if info["graph"] else None,
                     # TensorBoard shows a meta graph's graph when the run has no graph of its own
                     "graph_from_meta_graph": bool(info["graph"] and acc._graph_from_metagraph),
                     "first_event": first, "tags": tags}
    return view


def assert_same_view(actual: dict, expected: dict, *, ignore_first_event: bool = False) -> None:
    """Point-for-point equality of two :func:`tb_view` results, with a readable diff."""
    assert sorted(actual) == sorted(expected), f"runs differ: {sorted(actual)} != {sorted(expected)}"
    for run in expected:
        a, e = actual[run], expected[run]
        assert sorted(a["tags"]) == sorted(e["tags"]), f"{run}: tags differ"
        for key in ("graph", "meta_graph", "serialized_graph"):
            assert a[key] == e[key], f"{run}: {key} differs"
        if not ignore_first_event:
            # TensorBoard's start of a run (by which it orders and colours runs) is its first
            # event's wall time, even where points were logged with earlier ones
            assert a["first_event"] == e["first_event"], \
                f"{run}: start time {a['first_event']!r} != {e['first_event']!r}"
        for tag in e["tags"]:
            at, et = a["tags"][tag], e["tags"][tag]
            for key in ("plugin_name", "plugin_content", "display_name", "description",
                        "data_class"):
                assert at[key] == et[key], f"{run}/{tag}: {key} {at[key]!r} != {et[key]!r}"
            assert len(at["points"]) == len(et["points"]), \
                f"{run}/{tag}: {len(at['points'])} points != {len(et['points'])}"
            for i, (pa, pe) in enumerate(zip(at["points"], et["points"], strict=True)):
                assert pa == pe, f"{run}/{tag}: point {i} differs: {pa[:2]} vs {pe[:2]}"
