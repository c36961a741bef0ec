"""A drop-in for tbparse's ``SummaryReader``, on tbconvert's columnar event-file reader.

Switching is one changed import::

    from tbconvert.tbparse import SummaryReader   # was: from tbparse import SummaryReader

    reader = SummaryReader("logs/", pivot=False, extra_columns={"dir_name"})
    df = reader.scalars          # step, tag, value, dir_name: as tbparse gives them

The DataFrames have tbparse 0.0.9's columns, dtypes, row order and values
(``pivot`` and every ``extra_columns`` included). Where tbparse is wrong,
this one follows TensorBoard (see ``docs/tbparse.md``):

* ``restarts="visible"`` (default): a training restart that starts a new event
  file hides the points TensorBoard hides; ``"per-file"`` purges only within
  each file, as tbparse does; ``"keep-all"`` keeps every point.
* a damaged record costs only itself (reported in :attr:`SummaryReader.report`);
* nothing is ever sampled; images and audio need Pillow, not TensorFlow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

import numpy as np

from tbconvert.errors import MissingDependencyError
from tbconvert.report import Report, plural, were
from tbconvert.restarts import TbparseRestarts
from tbconvert.restarts import check as check_restarts
from tbconvert.tbparse import _frames
from tbconvert.tbparse._frames import (
    ALL_EVENT_TYPES,
    ALL_EXTRA_COLUMNS,
    AUDIO,
    HISTOGRAMS,
    HPARAMS,
    IMAGES,
    SCALARS,
    TENSORS,
    TEXT,
)
from tbconvert.tbparse._pivot import combine

__all__ = ["SummaryReader", "ALL_EVENT_TYPES", "ALL_EXTRA_COLUMNS", "RESTARTS"]

RESTARTS = get_args(TbparseRestarts)


def _pandas():
    try:
        import pandas
    except ImportError:
        raise MissingDependencyError("SummaryReader needs pandas: pip install "
                                     "'tbconvert[tbparse]'") from None
    return pandas


class SummaryReader:
    """Every event of an event file, or of every event file under a directory, as DataFrames.

    ``log_path`` is a directory or one event file. ``pivot=True`` gives one
    column per tag (values of a repeated step merged into a list);
    ``extra_columns`` adds any of :data:`ALL_EXTRA_COLUMNS`; ``event_types``
    limits what is parsed (default: all of :data:`ALL_EVENT_TYPES`).
    ``restarts`` is ``"visible"`` (TensorBoard's view), ``"per-file"``
    (tbparse's) or ``"keep-all"``.
    """

    def __init__(self, log_path: str, *, pivot: bool = False, extra_columns=None,
                 event_types=None, restarts: TbparseRestarts = "visible") -> None:
        # as tbparse: an empty (or any false) argument is the default
        extra = extra_columns or set()
        if not isinstance(extra, set):
            raise ValueError(f"`columns` should be a {set} instead of {type(extra)}")
        bad = extra - ALL_EXTRA_COLUMNS
        if bad:
            raise KeyError(f"Invalid columns entries: {bad}")
        types = event_types or set(ALL_EVENT_TYPES)
        if not isinstance(types, set):
            raise ValueError(f"`event_types` should be a {set} instead of {type(types)}")
        bad = types - ALL_EVENT_TYPES
        if bad:
            raise KeyError(f"Invalid event types: {bad}")
        check_restarts(restarts, RESTARTS)
        if not os.path.exists(log_path):
            raise ValueError(f"File or directory not found: {log_path}")
        _pandas()
        self._setup(log_path, bool(pivot), set(extra), set(types), restarts, Report())
        if os.path.isfile(log_path) and "tfevents" not in os.path.basename(log_path):
            pass    # not an event file by its name: empty tables, as for tbparse
        elif os.path.isfile(log_path):
            from tbconvert.tbparse._read import read_dir
            self._dir_data = read_dir([Path(log_path)], False, self.report, str(log_path),
                                      "wall_time" in extra)
            self._report_hidden(self._dir_data, str(log_path))
            self._index = 0
        else:
            self._populate()
        from tbconvert.tbparse._read import release_free_heap
        release_free_heap()

    def _setup(self, log_path, pivot, extra, types, restarts, report) -> None:
        self._log_path = log_path
        self._pivot = pivot
        self._extra_columns = extra
        self._event_types = types
        self._restarts = restarts
        self.report = report
        self._children: dict[str, SummaryReader] = {}
        self._dir_data = None
        self._index = None
        self._is_file = os.path.isfile(log_path)

    def _child(self, path: str) -> SummaryReader:
        child = object.__new__(SummaryReader)
        child._setup(path, self._pivot, self._extra_columns, self._event_types, self._restarts,
                     self.report)
        return child

    def _populate(self, ancestors: frozenset = frozenset()) -> None:
        from tbconvert.tbparse._read import read_dir
        # Symbolic links to directories are followed, as tbparse does, but never in a circle.
        ancestors = ancestors | {os.path.realpath(self._log_path)}
        try:
            names = sorted(os.listdir(self._log_path))
        except OSError as exc:
            self.report.add("unreadable_directory",
                            f"{self._log_path}: cannot be read ({exc.strerror}); skipped",
                            path=self._log_path)
            return
        files = []
        for name in names:
            path = os.path.join(self._log_path, name)
            if os.path.isfile(path):
                child = self._child(path)
                if "tfevents" in name:
                    child._index = len(files)
                    files.append(Path(path))
                self._children[name] = child
            elif os.path.isdir(path):
                if os.path.realpath(path) in ancestors:
                    self.report.add("symlink_loop",
                                    f"{path}: a link back to a directory above it; not followed",
                                    path=path, lost=False)
                    continue
                child = self._child(path)
                child._populate(ancestors)
                self._children[name] = child
            else:
                self.report.add("not_a_regular_file",
                                f"{path}: not a file or directory; skipped", path=path)
        if files:
            data = read_dir(files, self._restarts == "per-file", self.report, self._log_path,
                            "wall_time" in self._extra_columns)
            self._report_hidden(data, self._log_path)
            for child in self._children.values():
                if child._index is not None:
                    child._dir_data = data

    def _report_hidden(self, data, where: str) -> None:
        if self._restarts == "keep-all":
            return
        for td in data.tags.values():
            n = sum(c.hidden_count for c in td.chunks)
            if n:
                self.report.add("hidden_points_left_out",
                                f"{where}: {td.tag}: {plural(n, 'point')} TensorBoard's restart "
                                f"rule hides {were(n)} left out (restarts='keep-all' keeps them)",
                                path=where, tag=td.tag, count=n, lost=False)

    # -- what tbparse users touch ---------------------------------------------------------------
    @property
    def log_path(self) -> str:
        """The directory or event file this reader reads."""
        return self._log_path

    @property
    def children(self) -> dict[str, SummaryReader]:
        """A reader per entry of the directory (``{name: SummaryReader}``)."""
        return self._children.copy()

    def __getitem__(self, name) -> SummaryReader:
        return self.children[name]

    def __repr__(self) -> str:
        return f"SummaryReader(log_path='{self.log_path}')"

    @property
    def tags(self) -> dict[str, list[str]]:
        """``{event_type: [tag, ...]}``."""
        return self.get_tags()

    def get_tags(self, event_type: str | None = None):
        """Tags of ``event_type`` (a list), or of every type (a dict)."""
        if event_type is not None and event_type not in ALL_EVENT_TYPES:
            raise ValueError(f"Unknown event_type: {event_type}")
        types = [event_type] if event_type is not None else _TYPE_ORDER
        if self._is_file:
            out = {t: self._file_tags(t) for t in types}
        else:
            out = {}
            for t in types:
                merged = [tag for c in self._children.values() for tag in c.get_tags(t)]
                out[t] = list(dict.fromkeys(merged))
        return out[event_type] if event_type is not None else out

    def _file_tags(self, etype: str) -> list[str]:
        if self._dir_data is None or etype not in self._event_types:
            return []
        if etype == HPARAMS:
            return _frames._session_hparams(self._dir_data, self._index)[0]
        rows = _frames.file_rows(self._dir_data, self._index, etype, keep_hidden=True)
        return [r.tag for r in rows]

    def get_events(self, event_type: str):
        """A DataFrame of every ``event_type`` event under :attr:`log_path`."""
        if event_type not in ALL_EVENT_TYPES:
            raise ValueError(f"Unknown event_type: {event_type}")
        if event_type not in self._event_types:
            raise ValueError(f"event_type is ignored by user: {event_type}")
        if self._is_file:
            frames = [self._leaf_frame(event_type)]
        else:
            frames = []
            for name, child in self._children.items():
                df = child.get_events(event_type)
                if "dir_name" in df and not child._is_file:
                    top = df["dir_name"] == ""
                    df.loc[top, "dir_name"] = name
                    df.loc[~top, "dir_name"] = name + "/" + df.loc[~top, "dir_name"]
                frames.append(df)
        # A file's long table comes sorted, and so does every directory's table (hparams
        # come in the order they were logged).
        return combine(frames, self._pivot, self._extra_columns,
                       presorted=not self._pivot and event_type != HPARAMS)

    def _leaf_frame(self, etype: str):
        # Built from the columnar points at each call rather than kept: a frame of object
        # columns is several times the size of the points it is made from.
        if self._dir_data is None:
            return _frames._Cols(0, self._extra_columns, "", None, etype != HPARAMS).frame()
        return _frames.leaf_frame(self._dir_data, self._index, os.path.basename(self._log_path),
                                  etype, self._pivot, self._extra_columns,
                                  keep_hidden=self._restarts == "keep-all")

    @property
    def scalars(self):
        """Scalars written as ``simple_value`` (PyTorch, tensorboardX, TF1, Keras)."""
        return self.get_events(SCALARS)

    @property
    def tensors(self):
        """Tensor summaries (TF2 scalars, histograms and images; PR curves...), text and
        hparams left out."""
        return self.get_events(TENSORS)

    @property
    def histograms(self):
        """Histograms written as ``HistogramProto``: ``counts`` and ``limits`` per row."""
        return self.get_events(HISTOGRAMS)

    @property
    def images(self):
        """Images written as ``Summary.Image``, decoded to ``uint8`` arrays (no TensorFlow)."""
        return self.get_events(IMAGES)

    @property
    def audio(self):
        """Audio written as ``Summary.Audio``, decoded to ``float32`` arrays (no TensorFlow)."""
        return self.get_events(AUDIO)

    @property
    def hparams(self):
        """Hyperparameters of each session (one row per hyperparameter)."""
        return self.get_events(HPARAMS)

    @property
    def text(self):
        """Text summaries, decoded as UTF-8."""
        return self.get_events(TEXT)

    # -- tbparse's histogram helpers ---------------------------------------------------------
    @staticmethod
    def tensor_to_histogram(tensor) -> dict:
        """A ``[k, 3]`` (left, right, count) tensor as ``limits``/``counts``/``min``/... ."""
        tensor = np.asarray(tensor)
        limits = np.concatenate(([tensor[0][0]], tensor[:, 1]))
        counts = np.concatenate(([0], tensor[:, 2]))
        return {"limits": limits, "counts": counts, "min": limits[0], "max": limits[-1],
                "num": np.sum(counts), "sum": np.nan, "sum_squares": np.nan}

    buckets_to_histogram_dict = tensor_to_histogram

    @staticmethod
    def histogram_to_cdf(counts, limits, x) -> np.ndarray:
        """The cumulative share of values at each ``x`` (increasing), interpolated linearly
        inside buckets; ``counts[0]`` is 0 and ``limits[0]`` the first bucket's left edge."""
        counts, limits, x = (np.asarray(a, dtype=np.float64) for a in (counts, limits, x))
        if len(counts) != len(limits):
            raise ValueError("counts and limits must have the same length")
        if not np.all(np.diff(x) > 0):
            raise ValueError("x must be increasing")
        cumulative = np.cumsum(counts)
        return np.interp(x, limits, cumulative) / cumulative[-1]

    @staticmethod
    def histogram_to_pdf(counts, limits, x) -> tuple[np.ndarray, np.ndarray]:
        """``(centers, densities)`` between consecutive ``x``, from :meth:`histogram_to_cdf`."""
        x = np.asarray(x, dtype=np.float64)
        y = SummaryReader.histogram_to_cdf(counts, limits, x)
        return (x[1:] + x[:-1]) / 2, np.diff(y) / np.diff(x)

    @staticmethod
    def histogram_to_bins(counts, limits, lower_bound=None, upper_bound=None, n_bins: int = 30):
        """``(centers, counts)`` of ``n_bins`` equal bins over ``[lower_bound, upper_bound]``,
        each bucket's count shared out by overlap, as TensorBoard's histogram dashboard does.

        ``counts[0]`` is 0 and ``limits[0]`` the first bucket's left edge (the layout of
        :meth:`tensor_to_histogram` and of the ``histograms`` table's columns)."""
        counts = np.asarray(counts, dtype=np.float64)
        limits = np.asarray(limits, dtype=np.float64)
        if len(counts) != len(limits) or not len(counts) or counts[0] != 0:
            raise ValueError("counts and limits must have the same length, counts[0] == 0")
        if lower_bound is None or upper_bound is None:
            lower_bound = upper_bound = 0
        if upper_bound == lower_bound:
            # a range of no width gets a default one around it, as the dashboard draws it
            upper_bound = lower_bound * 1.1 + 1
            lower_bound = lower_bound / 1.1 - 1
        width = (upper_bound - lower_bound) / n_bins
        # bucket i (from 1) clipped to the range; rights never decrease
        rights = np.minimum(upper_bound, limits[1:])
        lefts = np.maximum(lower_bound, limits[:-1])
        widths = rights - lefts
        amounts = counts[1:]
        centers, bins = [], []
        first = 0   # buckets before this one were used up by earlier bins
        for j in range(n_bins):
            bin_left = lower_bound + j * width
            bin_right = bin_left + width
            # a bucket reaching past this bin is the last one it looks at (and the next
            # bin's first)
            last = int(np.searchsorted(rights, bin_right, side="right"))
            stop = min(last + 1, len(rights))
            total = 0
            for i in range(first, stop):
                if widths[i] > 0:
                    inter = min(rights[i], bin_right) - max(lefts[i], bin_left)
                    share = (inter / (rights[i] - lefts[i])) * amounts[i]
                    total += share if inter > 0 else 0
                else:
                    final = bin_right >= upper_bound
                    inside = bin_left <= lefts[i] and (
                        rights[i] <= bin_right if final else rights[i] < bin_right)
                    total += amounts[i] if inside else 0
            first = max(first, min(last, len(rights)))
            centers.append(bin_left + width / 2)
            bins.append(total)
        return centers, bins

    # tbparse hands out TensorBoard's accumulator objects here; these columns have none.
    def _no_raw(self, *args, **kwargs):
        from tbconvert.errors import UnsupportedError
        raise UnsupportedError(
            "raw TensorBoard events are not kept (events are read into columns); use the "
            "DataFrame properties, or tbconvert.read(path) for every point as numpy arrays")

    get_raw_tags = get_raw_events = _no_raw
    raw_tags = property(_no_raw)
    raw_events = property(_no_raw)

    @staticmethod
    def tensor_to_image(tensor) -> dict:
        """A TF2 image tensor ``[width, height, png, ...]`` decoded (no TensorFlow)."""
        from tbconvert.tbparse._media import decode_image
        image = np.stack([decode_image(b) for b in tensor[2:]], axis=0)
        if image.shape[0] == 1:
            image = image.squeeze(axis=0)
        return {"image": image, "width": int(tensor[0]), "height": int(tensor[1])}

    @staticmethod
    def tensor_to_audio(tensor) -> dict:
        """A TF2 audio tensor ``[[wav, label], ...]`` decoded (no TensorFlow)."""
        from tbconvert.tbparse._media import decode_wav
        clips = [decode_wav(b) for b in np.asarray(tensor)[:, 0]]
        audio = np.stack([c[0] for c in clips], axis=0)
        rate = np.stack([np.int32(c[1]) for c in clips], axis=0)
        length = audio.shape[1]
        if audio.shape[0] == 1:
            audio, rate = audio.squeeze(axis=0), rate.squeeze(axis=0)
        return {"audio": audio, "content_type": "audio/wav", "length_frames": length,
                "sample_rate": rate}


_TYPE_ORDER = [IMAGES, AUDIO, HISTOGRAMS, SCALARS, TENSORS, HPARAMS, TEXT]
