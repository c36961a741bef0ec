"""A whole source in memory: :func:`read` and the :class:`Data` it returns."""

from __future__ import annotations

from tbconvert import api
from tbconvert.model import Experiment, Run, ScalarSeries, Series, as_scalar_series
from tbconvert.report import Report
from tbconvert.restarts import Restarts
from tbconvert.restarts import check as check_restarts


class Data:
    """A whole source in memory, with short ways in. Made by :func:`read`.

    ``runs`` maps each run name (source order; ``"."`` is the logdir itself) to its
    :class:`~tbconvert.model.Run` (start time, run-level events); ``series`` maps
    run name -> tag -> series, every chunk joined, without the points TensorBoard's
    restart rule hides unless ``restarts="keep-all"`` (then they are kept, marked
    in ``hidden``).

    Example::

        >>> data = tbconvert.read("fixtures/torch_logdir")
        >>> "train" in data.runs
        True
        >>> loss = data.scalars("train", "loss")     # a ScalarSeries
        >>> loss.steps[:3], loss.values[:3]          # numpy arrays   # doctest: +SKIP
        >>> import numpy as np
        >>> np.column_stack((loss.steps, loss.values)).shape      # (step, value) pairs
        (50, 2)
    """

    def __init__(self, experiment: Experiment, runs: dict[str, Run],
                 series: dict[str, dict[str, Series]], report: Report,
                 restarts: Restarts = "visible") -> None:
        check_restarts(restarts)
        self.experiment = experiment
        self.runs = runs
        self.report = report
        self.restarts = restarts
        # every point as read, for tables made from this data with either restart choice
        self.every_point = series
        self.series = series if restarts == "keep-all" else {
            run: {tag: s.visible() for tag, s in tags.items()} for run, tags in series.items()}

    def tags(self, run: str | None = None) -> list[str]:
        """Tags of ``run``, or of all runs (sorted, each once)."""
        if run is not None:
            return list(self._run(run))
        return sorted({t for tags in self.series.values() for t in tags})

    def _run(self, run: str) -> dict:
        try:
            return self.series[run]
        except KeyError:
            raise KeyError(f"no run {run!r}; runs: {', '.join(self.runs)}") from None

    def scalars(self, run: str, tag: str) -> ScalarSeries:
        """A scalar series: ``.steps``, ``.wall_times`` and ``.values`` are numpy arrays."""
        tags = self._run(run)
        if tag not in tags:
            raise KeyError(f"run {run!r} has no tag {tag!r}; tags: {', '.join(tags)}")
        s = as_scalar_series(tags[tag])
        if s is None:
            raise TypeError(f"{run}/{tag} is not a scalar series ({type(tags[tag]).__name__})")
        return s

    def __iter__(self):
        """``(run, tag, series)`` for every series."""
        for run, tags in self.series.items():
            for tag, s in tags.items():
                yield run, tag, s

    def __repr__(self) -> str:
        n = sum(len(t) for t in self.series.values())
        return f"<tbconvert.Data: {len(self.runs)} runs, {n} series>"


def read(path, *, runs=None, tags=None, restarts: Restarts = "visible", format: str | None = None,
         storage_options: dict | None = None, allow_pickle: bool = False,
         ignore_checksum: bool = False, jobs: int = 1, from_format: str | None = None) -> Data:
    """Read a whole source into memory (the model, with numpy arrays). For data that fits.

    ``path`` may be a URL (``s3://bucket/logs``; ``storage_options`` go to its file system).
    ``allow_pickle`` reads TensorBoard 2.3 exports, whose string tensors are pickled;
    ``ignore_checksum`` reads an archive whose checksum does not match (what is damaged is
    reported); ``jobs`` reads the runs of an event-file logdir in that many processes;
    ``format`` (or ``from_format``) names the source's format when it cannot be told.

    Example::

        >>> data = tbconvert.read("fixtures/torch_logdir", runs="^train$")
        >>> data.scalars("train", "lr").values.dtype
        dtype('float32')
    """
    from tbconvert.model import concat
    check_restarts(restarts)
    report = Report()
    options = api.make_options(runs=runs, tags=tags, storage_options=storage_options,
                               allow_pickle=allow_pickle, ignore_checksum=ignore_checksum,
                               jobs=jobs)
    found_runs: dict[str, Run] = {}
    found_series: dict[str, dict[str, Series]] = {}
    format = api.source_format(format, from_format)
    with api.open_reader(path, format=format, options=options, report=report) as reader:
        experiment = reader.experiment()
        for run_data in reader.iter_runs():
            name = run_data.run.name
            chunks: dict[str, list[Series]] = {}
            for chunk in run_data.series:
                if options.wants_tag(chunk.tag):
                    chunks.setdefault(chunk.tag, []).append(chunk)
            if not options.wants_run(name):
                continue
            found_runs[name] = run_data.run
            found_series[name] = {tag: concat(c) for tag, c in chunks.items()}
    return Data(experiment, found_runs, found_series, report, restarts)
