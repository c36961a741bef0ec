"""What each destination cannot hold, as data: the README's table "What each destination
cannot hold, and how you are told", one :class:`Loss` per thing a destination leaves out.

The conversion matrix (``test_format_matrix.py``) checks every reader x writer pair against
this table, and ``test_loss_table_matches_readme`` checks that the README says the same.
A destination with no entry here loses nothing.

Each loss says it three ways:
  ``readme``: the words of the README's row that name it (``elsewhere``: of its prose);
  ``kinds``:  the report kinds that tell the user about it (empty: nothing is lost that a
              reader could see, so nothing is reported);
  ``points``: for destinations tbconvert cannot read back (tables, web pages), how many points
              of a source series the destination leaves out (the report must count exactly
              these);
  ``view``:   for destinations that can be read back, what TensorBoard's view of the data
              loses (a function on :func:`oracle.tb_view`'s result, applied to the expected
              view).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from tbconvert.model import BlobSequenceSeries, DataClass, ScalarSeries, TensorSeries

# README label of a row's destination -> the registered format names it stands for.
README_DESTINATIONS = {
    "Parquet, HDF5": ("parquet", "hdf5"),
    "event files": ("tfevents",),
    "TensorBoard.dev export": ("tbdev",),
    "CSV": ("csv",),
    "web view (`html`)": ("html",),
}


@dataclass(frozen=True)
class Loss:
    readme: str
    kinds: tuple[str, ...] = ()
    points: Callable | None = None
    view: Callable[[dict], dict] | None = None
    # said in the README's prose (its promises), not in the table's row
    elsewhere: bool = False
    # a loss the README does not state yet (its check is an expected failure until it does)
    documented: bool = True


# -- what a table or web page leaves out, per source series --------------------------------

def _not_scalar(series) -> int:
    return 0 if isinstance(series, ScalarSeries) else len(series)


# The plugins the web view draws (hparams only from its own three summary tags).
_WEB_PLUGINS = {"histograms": TensorSeries, "text": TensorSeries,
                "images": BlobSequenceSeries, "audio": BlobSequenceSeries}
_HPARAMS_TAGS = {"_hparams_/experiment", "_hparams_/session_start_info",
                 "_hparams_/session_end_info"}


def _not_in_web_view(series) -> int:
    plugin = series.metadata.plugin_name
    if isinstance(series, ScalarSeries):
        return 0
    if plugin in _WEB_PLUGINS and isinstance(series, _WEB_PLUGINS[plugin]):
        return 0
    if plugin == "hparams" and series.tag in _HPARAMS_TAGS:
        return 0
    return len(series)


_WEB_MEDIA = {"images": (b"\x89PNG", b"GIF8", b"\xff\xd8\xff"), "audio": (b"RIFF",)}


def _media_not_shown(series) -> int:
    plugin = series.metadata.plugin_name
    if plugin not in _WEB_MEDIA or not isinstance(series, BlobSequenceSeries):
        return 0
    skip = 2 if plugin == "images" else 0      # an image sequence starts with width, height
    return sum(1 for seq in series.sequences() for blob in seq[skip:]
               if blob is not None and not bytes(blob).startswith(_WEB_MEDIA[plugin]))


# -- what TensorBoard's view loses ---------------------------------------------------------

def _without_run_records(view: dict) -> dict:
    for run in view.values():
        run["meta_graph"] = False
        if run["graph_from_meta_graph"]:
            run["graph"], run["serialized_graph"] = False, None
            run["graph_from_meta_graph"] = False
    return view


def _without_unknown_class(view: dict) -> dict:
    for run in view.values():
        run["tags"] = {tag: t for tag, t in run["tags"].items()
                       if t["data_class"] != DataClass.UNKNOWN}
    return view


def _without_empty_runs(view: dict) -> dict:
    return {name: run for name, run in view.items() if run["tags"] or run["graph"]}


def _start_at_first_point(view: dict) -> dict:
    # An export holds no run start time; a run read from one starts at its first point.
    for run in view.values():
        walls = [p[1] for t in run["tags"].values() for p in t["points"]]
        run["first_event"] = min(walls) if walls else None
    return view


def _scalars_as_float32(view: dict) -> dict:
    # the only scalar type both of TensorBoard's loaders show
    import numpy as np

    for run in view.values():
        for t in run["tags"].values():
            if t["data_class"] != DataClass.SCALAR:
                continue
            t["points"] = [(step, wall, (kind, shape, data) if kind in ("<f4", "string")
                            else ("<f4", shape, np.frombuffer(data, kind).astype("<f4").tobytes()))
                           for step, wall, (kind, shape, data) in t["points"]]
    return view


def _strip_string_nuls(view: dict) -> dict:
    # tensors only: blobs are files of their own, kept byte for byte
    for run in view.values():
        for t in run["tags"].values():
            if t["data_class"] != DataClass.TENSOR:
                continue
            t["points"] = [(step, wall, (kind, shape, tuple(b.rstrip(b"\0") for b in data))
                           if kind == "string" else (kind, shape, data))
                           for step, wall, (kind, shape, data) in t["points"]]
    return view


LOSSES: dict[str, tuple[Loss, ...]] = {
    "parquet": (),
    "hdf5": (),
    "tfevents": (
        # kept beside the runs: nothing TensorBoard shows is lost
        Loss("experiment name/description/times", ("experiment_facts_sidecar",)),
        # TensorBoard never shows them, so its view loses nothing
        Loss("points TensorBoard's restart rule hides", ("hidden_points_left_out",)),
        Loss("a blob the source lost", ("missing_blob_written_empty",)),
        Loss("run names that are not safe paths", ("run_renamed",)),
        Loss("scalars float32 cannot hold exactly", ("scalar_rounded_to_float32",),
             view=_scalars_as_float32),
    ),
    "tbdev": (
        Loss("run records (meta graphs, session logs other than restart markers)",
             ("run_records_dropped",),
             view=_without_run_records),
        Loss("UNKNOWN-class series", ("unsupported_series",), view=_without_unknown_class),
        Loss("runs without data", ("run_without_data_left_out",), view=_without_empty_runs),
        Loss("string tensors lose trailing NUL bytes", ("string_nul_stripped",),
             view=_strip_string_nuls),
        Loss("run start times before the run's first point", ("run_start_time_dropped",),
             view=_start_at_first_point),
    ),
    "csv": (
        Loss("anything that is not a scalar", ("not_in_table",), points=_not_scalar),
        Loss("experiment name/description/times", ("experiment_facts_dropped",)),
        Loss("event files and tables leave them out by default and say how many",
             ("hidden_points_left_out",), elsewhere=True),
    ),
    "html": (
        Loss("PR curves, graphs, custom-scalar layouts, other plugins' data",
             ("not_in_web_view",), points=_not_in_web_view),
        Loss("media other than PNG, GIF, JPEG, WAV", ("media_not_shown",),
             points=_media_not_shown),
    ),
}


def expected_view(view: dict, destination: str) -> dict:
    """TensorBoard's ``view`` of a source, minus what ``destination`` cannot hold."""
    view = copy.deepcopy(view)
    for loss in LOSSES.get(destination, ()):
        if loss.view is not None:
            view = loss.view(view)
    return view


def left_out(series, destination: str) -> dict[str, int]:
    """Points of one source series that ``destination`` leaves out, by report kind."""
    out = {}
    for loss in LOSSES.get(destination, ()):
        if loss.points is not None:
            n = loss.points(series)
            if n:
                out[loss.kinds[0]] = out.get(loss.kinds[0], 0) + n
    return out


def readme_rows(markdown: str) -> dict[str, list[str]]:
    """The README's loss table: ``{destination label: [text of each of its rows]}``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("### What each destination cannot hold"))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "destination":
            continue
        rows.setdefault(cells[0], []).append(" | ".join(cells[1:]))
    return rows


# -- a source holding one of everything some destination cannot hold ----------------------

def write_every_loss(path) -> None:
    """A Parquet archive (which holds everything) with one instance of every loss above."""
    import numpy as np

    import tbconvert
    from tbconvert import dtypes as dt
    from tbconvert.model import Experiment, Metadata, Run, RunRecord

    def md(plugin, dc, content=b""):
        return Metadata(plugin, content, "", "", dc)

    steps = np.arange(4)
    walls = 10.0 + steps
    scal = md("scalars", DataClass.SCALAR)
    image = md("images", DataClass.BLOB_SEQUENCE)
    text = md("text", DataClass.TENSOR, b"\x08\x01")
    run = "train"
    series = [
        # points TensorBoard's restart rule hides
        ScalarSeries(run=run, tag="loss", metadata=scal, steps=steps, wall_times=walls,
                     hidden=[False, True, False, False], values=np.arange(4, dtype=np.float32)),
        # a lost blob; and an image type the web view does not show (BMP)
        BlobSequenceSeries.from_sequences(
            run=run, tag="img", metadata=image, steps=steps[:2], wall_times=walls[:2],
            hidden=None, sequences=[[b"1", b"1", b"\x89PNG\r\n\x1a\n"], [b"1", b"1", None]]),
        BlobSequenceSeries.from_sequences(
            run=run, tag="bmp", metadata=image, steps=steps[:1], wall_times=walls[:1],
            hidden=None, sequences=[[b"1", b"1", b"BM" + bytes(30)]]),
        # scalars float32 cannot hold (2**24 + 1, 0.1)
        ScalarSeries(run=run, tag="big", metadata=scal, steps=steps[:2], wall_times=walls[:2],
                     hidden=None, values=np.array([16777217.0, 0.1])),
        # a string tensor ending in NUL bytes
        TensorSeries(run=run, tag="note", metadata=text, steps=steps[:2], wall_times=walls[:2],
                     hidden=None, dtypes=[dt.DT_STRING] * 2,
                     tensors=(dt.string_array([b"ab\0\0"], (1,)), dt.string_array([b"c"], (1,)))),
        # an UNKNOWN-class series of another plugin, and a PR curve
        TensorSeries(run=run, tag="custom", metadata=md("custom", DataClass.UNKNOWN),
                     steps=steps[:2], wall_times=walls[:2], hidden=None,
                     dtypes=[dt.DT_FLOAT] * 2,
                     tensors=(np.ones(2, np.float32), np.zeros(2, np.float32))),
        TensorSeries(run=run, tag="pr", metadata=md("pr_curves", DataClass.TENSOR, b"\x08\x03"),
                     steps=steps[:1], wall_times=walls[:1], hidden=None, dtypes=[dt.DT_FLOAT],
                     tensors=(np.ones((6, 3), np.float32),)),
    ]
    with tbconvert.open_writer(path, format="parquet") as w:
        w.write_experiment(Experiment(name="every loss", description="one of each"))
        # a start before the first point; a meta graph (a run record)
        w.write_run(Run(run, 1.0, (RunRecord("meta_graph_def", 0, 1.0, b""),)), iter(series))
        # a run name that is not a safe path
        w.write_run(Run("../outside", 2.0), iter([ScalarSeries(
            run="../outside", tag="x", metadata=scal, steps=steps[:1], wall_times=walls[:1],
            hidden=None, values=np.ones(1, np.float32))]))
        # a run without data
        w.write_run(Run("empty", 3.0), iter([]))
