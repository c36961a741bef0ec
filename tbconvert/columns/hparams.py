"""Hyperparameter trials as a table, following TensorBoard's hparams plugin.

* A *session* (trial) is a run holding the tag ``_hparams_/session_start_info``
  (plugin ``hparams``); its hyperparameters are that message's ``hparams`` map.
* Metrics are the ``metric_infos`` of the experiment that governs the trials:
  the ``_hparams_/experiment`` of a trial's own run or of its nearest run above
  it (TensorFlow writes one for all trials in a parent run; PyTorch and
  tensorboardX write one into each ``add_hparams`` sub-run, so a logdir can
  hold several experiments side by side). The columns are the union over the
  selected trials' experiments, in order of appearance. A trial without an
  experiment gets, like the plugin's fallback, every scalar tag of its run or
  of a run below it: ``(tag, group)`` where ``group`` is the run's path
  relative to its nearest session run (``""`` for the session run).
* A metric's value is the last scalar point (in read order, after the
  restart rule) of tag ``metric.tag`` in run ``<session>/<metric.group>``.
* Status comes from ``_hparams_/session_end_info`` (``success``, ``failure``,
  ``running``; ``unknown`` when the trial did not say).
"""

from __future__ import annotations

import math

from tbconvert.model import ScalarSeries, as_scalar_series
from tbconvert.report import Report

EXPERIMENT_TAG = "_hparams_/experiment"
START_TAG = "_hparams_/session_start_info"
END_TAG = "_hparams_/session_end_info"
STATUS = {0: "unknown", 1: "success", 2: "failure", 3: "running"}


def _parse(content: bytes, run: str, tag: str, report: Report):
    from tensorboard.plugins.hparams import plugin_data_pb2
    try:
        return plugin_data_pb2.HParamsPluginData.FromString(content)
    except Exception:  # noqa: BLE001 - a damaged proto (any decode error): say so, keep going
        report.add("bad_hparams", f"{run}/{tag}: the hparams plugin data does not parse; "
                   "this trial information is not in the table", run=run, tag=tag)
        return None


def _value(v):
    kind = v.WhichOneof("kind")
    if kind == "number_value":
        return float(v.number_value)
    if kind == "string_value":
        return v.string_value
    if kind == "bool_value":
        return bool(v.bool_value)
    return None


class Collected:
    """What one pass over a source yields for the hparams table."""

    def __init__(self) -> None:
        self.run_order: list[str] = []
        self.starts: dict[str, object] = {}
        self.ends: dict[str, object] = {}
        self.experiments: dict[str, object] = {}   # run -> its experiment
        self.last: dict[tuple[str, str], float] = {}   # (run, tag) -> last scalar value
        self.scalar_tags: dict[str, list[str]] = {}
        self.in_table: set[tuple[str, str]] = set()    # (run, tag) whose last value is a cell
        self.last_hidden: set[tuple[str, str]] = set()  # (run, tag) whose last point is hidden

    def add(self, run_name: str, chunks, report: Report) -> None:
        self.run_order.append(run_name)
        for chunk in chunks:
            chunk = as_scalar_series(chunk, report) or chunk
            if isinstance(chunk, ScalarSeries):
                if len(chunk):
                    key = (run_name, chunk.tag)
                    if key not in self.last:
                        self.scalar_tags.setdefault(run_name, []).append(chunk.tag)
                    self.last[key] = float(chunk.values[-1])
                    # (only read with --restarts keep-all: a point the restart rule hides)
                    if chunk.hidden is not None and chunk.hidden[-1]:
                        self.last_hidden.add(key)
                    else:
                        self.last_hidden.discard(key)
                continue
            md = chunk.metadata
            if md.plugin_name != "hparams" or chunk.tag not in (EXPERIMENT_TAG, START_TAG, END_TAG):
                continue
            if chunk.tag == START_TAG and run_name in self.starts:
                continue
            if chunk.tag == END_TAG and run_name in self.ends:
                continue
            if chunk.tag == EXPERIMENT_TAG and run_name in self.experiments:
                continue
            data = _parse(md.plugin_content, run_name, chunk.tag, report)
            if data is None:
                continue
            which = data.WhichOneof("data")
            if chunk.tag == START_TAG and which == "session_start_info":
                self.starts[run_name] = data.session_start_info
            elif chunk.tag == END_TAG and which == "session_end_info":
                self.ends[run_name] = data.session_end_info
            elif chunk.tag == EXPERIMENT_TAG and which == "experiment":
                self.experiments[run_name] = data.experiment

    def experiment_of(self, session: str):
        """The experiment at or nearest above ``session`` (a root-level ``.`` run covers all)."""
        run = _nearest(self.experiments, session)
        if run is None:
            run = next((r for r in ("", ".") if r in self.experiments), None)
        return None if run is None else self.experiments[run]

    def metrics(self, sessions: list[str]) -> list[tuple[str, str]]:
        """``(tag, group)`` of each metric of ``sessions``: their experiments' metrics in
        order of appearance, then (for trials without one) their scalar tags, sorted."""
        names: dict[tuple[str, str], None] = {}
        without = set()
        for session in sessions:
            experiment = self.experiment_of(session)
            if experiment is None:
                without.add(session)
                continue
            for m in experiment.metric_infos:
                names.setdefault((m.name.tag, m.name.group.strip("/")), None)
        found = set()
        for run, tags in self.scalar_tags.items():
            session = _nearest(set(self.starts), run)
            if session not in without:
                continue
            group = run[len(session):].strip("/") if session != run else ""
            found.update((tag, group) for tag in tags)
        for name in sorted(found):
            names.setdefault(name, None)
        return list(names)


def _nearest(runs, run: str):
    """``run`` or its nearest ancestor run that is in ``runs``; None if there is none."""
    while run not in runs:
        if "/" not in run:
            return None
        run = run.rsplit("/", 1)[0]
    return run


def _column_name(name: str, taken: set, what: str, report: Report) -> str:
    if name not in taken:
        return name
    renamed, n = f"{name} ({what})", 1
    while renamed in taken:      # that name is an hparam's, or a metric's, too
        n += 1
        renamed = f"{name} ({what} {n})"
    report.add("column_renamed", f"{what} {name!r} clashes with another column; it is "
               f"named {renamed!r}", lost=False)
    return renamed


def trials_table(collected: Collected, report: Report, *, session_filter=None, tag_filter=None):
    """One row per session: run, hparams (sorted), metrics, status, start_time, end_time."""
    import pyarrow as pa

    sessions = [r for r in collected.run_order if r in collected.starts
                and (session_filter is None or session_filter(r))]
    hp_names = sorted({k for r in sessions for k in collected.starts[r].hparams})
    # tag_filter(tag, column name): a metric is chosen by its tag or by its column's name
    metrics = [m for m in collected.metrics(sessions)
               if tag_filter is None or tag_filter(m[0], f"{m[1]}/{m[0]}" if m[1] else m[0])]
    cols: dict[str, object] = {"run": pa.array(sessions, pa.string())}
    # the documented columns keep their names; an hparam or metric called so is renamed
    fixed = {"run", *_TRIAL_COLUMNS}
    for name in hp_names:
        values = [(_value(collected.starts[r].hparams[name])
                   if name in collected.starts[r].hparams else None) for r in sessions]
        kinds = {type(v) for v in values if v is not None}
        if len(kinds) > 1:
            report.add("mixed_hparam_types", f"hparam {name!r} has values of several types "
                       f"({', '.join(sorted(k.__name__ for k in kinds))}); its column holds "
                       "them as text", lost=False)
            values = [None if v is None else _text(v) for v in values]
        typ = {float: pa.float64(), bool: pa.bool_(), str: pa.string()}.get(
            next(iter(kinds)) if len(kinds) == 1 else str, pa.string())
        # (nor may a renamed one take the name of an hparam that comes later)
        taken = set(cols) | fixed | (set(hp_names) - {name})
        cols[_column_name(name, taken, "hparam", report)] = pa.array(values, typ)
    labels = {f"{group}/{tag}" if group else tag for tag, group in metrics}
    for tag, group in metrics:
        values = []
        for r in sessions:
            run = f"{r}/{group}" if group else r
            values.append(collected.last.get((run, tag)))
            if (run, tag) in collected.last:
                collected.in_table.add((run, tag))
                if (run, tag) in collected.last_hidden:
                    report.add("metric_from_hidden_point", f"{run}/{tag}: the metric's value is "
                               "its last point, which TensorBoard's restart rule hides "
                               "(--restarts keep-all); TensorBoard shows an earlier one",
                               run=run, tag=tag, lost=False)
        label = f"{group}/{tag}" if group else tag
        # (nor a renamed metric the name of a metric that comes later)
        taken = set(cols) | fixed | (labels - {label})
        cols[_column_name(label, taken, "metric", report)] = pa.array(values, pa.float64())
    status, start, end = [], [], []
    for r in sessions:
        e = collected.ends.get(r)
        status.append(STATUS.get(e.status, str(e.status)) if e is not None else "unknown")
        s = collected.starts[r].start_time_secs
        start.append(s if s else None)
        end.append(e.end_time_secs if e is not None and e.end_time_secs else None)
    for name, values, typ in zip(_TRIAL_COLUMNS, (status, start, end),
                                 (pa.string(), pa.float64(), pa.float64()), strict=True):
        cols[name] = pa.array(values, typ)
    return pa.table(cols)


_TRIAL_COLUMNS = ("status", "start_time", "end_time")


def _text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return repr(v)
    return str(v)

