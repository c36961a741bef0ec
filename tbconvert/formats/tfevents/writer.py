"""Writes event-file logdirs that TensorBoard reads exactly as the source.

One file per run, named ``events.out.tfevents.<secs>.<host>.<pid>.<n>.tbconvert``
after the run's first wall time. The file starts with the ``file_version``
event stamped with the run's start time (never "now", so runs keep their
order and relative times), then every point in wall-time order with each
tag's points in their original order, metadata on each tag's first point.

Both of TensorBoard's loaders show these files alike, the data server behind
the default ``--load_fast=auto`` and the Python one (``runfile``): each tag's
first value names its data class; scalars are float32; scalars, images and
audio go back to the legacy fields (``simple_value``, ``image``, ``audio``)
wherever both loaders rebuild them exactly, so readers that only know those
fields (the legacy ``EventAccumulator``, tbparse) see them; histograms stay
tensors. Values that share step and wall time share one event, as TF1 wrote
them. Graphs go back to ``graph_def`` events and tagged run metadata to
``tagged_run_metadata`` events, as their writers made them. A run is written
in bounded memory whatever its size (``runfile``, ``merge``).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from tbconvert.formats.base import Writer
from tbconvert.formats.tfevents import event_files
from tbconvert.formats.tfevents.runfile import RunFile
from tbconvert.model import Experiment, Run
from tbconvert.names import reserve, run_dir
from tbconvert.output import AtomicOutput


class TfeventsWriter(Writer):
    keeps_hidden = False
    keeps_byte_names = True    # a run directory spells its name's odd bytes itself, once (%XX)
    takes_hidden_witness = True  # see RunFile: tags all of whose points are hidden stay listed
    run_parts = "tfevents"
    carries_plugin_files = True  # a logdir keeps its plugins' files (plugin_copy)

    def __init__(self, path, options, report) -> None:
        super().__init__(path, options, report)
        self.out = AtomicOutput(self.path, force=options.force, directory=True)
        self._counter = 0
        self._dirs: set[str] = set()
        self._run_dirs: dict[str, str] = {}
        # Memory bounds of the per-run sorter (tests make them tiny to exercise spilling).
        self.limits: dict = {}

    def write_experiment(self, experiment: Experiment) -> None:
        if experiment.is_empty():
            return
        facts = dict(experiment.extra)
        facts.update(experiment_id=experiment.experiment_id, name=experiment.name,
                     description=experiment.description, create_time=experiment.create_time,
                     update_time=experiment.update_time)
        self.guard(lambda: (self.out.tmp / event_files.EXPERIMENT_SIDECAR).write_text(
            json.dumps(facts, sort_keys=True, indent=1) + "\n", encoding="utf-8"))
        kept = [what for what, value in (
            ("id", experiment.experiment_id), ("name", experiment.name),
            ("description", experiment.description),
            ("times", experiment.create_time or experiment.update_time),
            ("other facts", experiment.extra)) if value]
        self.report.add("experiment_facts_sidecar",
                        f"experiment {_listed(kept)} kept in "
                        f"{self.path / event_files.EXPERIMENT_SIDECAR} (TensorBoard does not "
                        "show them)", lost=False)

    def write_run(self, run: Run, series) -> None:
        rel, changed = self.claim_dir(run.name)
        write_run_file(self.out.tmp, rel, changed, run, series, self.report, self._counter,
                       self.guard, self.limits, keep_all=self.options.restarts == "keep-all",
                       skip_empty=self.options.tags is not None)
        self._counter += 1

    def claim_dir(self, run: str) -> tuple[str, bool]:
        """The run's directory (relative to the output; unique among the runs given so far),
        and whether its name had to change."""
        if not self._dirs:
            # a run named like the experiment facts file gets another directory
            reserve(self.out.tmp, event_files.EXPERIMENT_SIDECAR, self._dirs)
        readable = tensorboard_readable(run)
        directory, changed = run_dir(self.out.tmp, readable, self._dirs)
        rel = directory.relative_to(self.out.tmp).as_posix()
        self._run_dirs[run] = rel
        return rel, changed or readable != run

    def files_dir(self, run: str | None, above: str) -> str:
        """Where the plugin files of the directory ``above`` (relative to the source) go,
        relative to the output: the directory of the run ``run`` where it is one written here."""
        if run is not None and run in self._run_dirs:
            return self._run_dirs[run]
        return tensorboard_readable(above)

    def skip_counter(self) -> None:
        """A run written elsewhere (by :func:`write_run_file`) took the next file number."""
        self._counter += 1

    def close(self) -> None:
        self.guard(self.out.commit)

    def abort(self) -> None:
        self.out.abort()


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def tensorboard_readable(run: str) -> str:
    """``run`` with ``tfevents`` in its directory names spelt ``tf_events``: TensorBoard takes a
    directory so named for an event file, and then shows nothing of it, nor of the event files
    sorted after it in the run above it."""
    if run == "." or event_files.EVENT_MARK not in run:
        return run
    return run.replace(event_files.EVENT_MARK, "tf_events")


# Temporary names of event files being written: no "tfevents" in them, so a reader never takes
# a leftover (a worker killed mid-write) for data, and the output's owner removes them.
PART_TMP = ".tbconvert-part-"


def write_run_file(root: Path, rel: str, changed: bool, run: Run, series, report, counter: int,
                   guard, limits: dict | None = None, *, keep_all: bool = False,
                   host: str | None = None, pid: int | None = None,
                   skip_empty: bool = False) -> Path | None:
    """Write one run's event file into ``root/rel`` (a temporary name, renamed when complete:
    a run written twice, by a task run again, leaves one whole file); returns its path.
    ``keep_all``: the options say ``restarts="keep-all"`` (see :class:`RunFile`).
    ``skip_empty``: a run that no series reached (``--tags`` chose none of its tags) gets no
    file and no directory, and None is returned: TensorBoard would list it as a run without
    data, where ``--runs`` leaves such a run out."""
    if changed:
        report.add("run_renamed", f"run {run.name!r} written as directory {rel!r} "
                                  "(the name is not a safe path, is taken by another "
                                  "run or by the experiment facts file, or holds "
                                  "'tfevents', which TensorBoard cannot load as a run)", run=run.name,
                   lost=False)
    directory = root / rel if rel != "." else root
    body = RunFile(run, report, root, keep_all=keep_all, **(limits or {}))
    for chunk in series:
        # Only the writer's own failures (a full disk while spilling) become output errors.
        guard(lambda chunk=chunk: body.add(chunk))
    chunk = None    # the last series (a large image, say) need not wait for the file's writing
    if skip_empty and not body.tags:
        return None

    def write():
        name = event_files.event_file_name(body.start(), counter, host=host, pid=pid)
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{PART_TMP}{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "xb") as f:
                body.write(f)
            os.replace(tmp, directory / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return directory / name
    return guard(write)
