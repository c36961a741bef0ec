"""One event file's DataFrame per event type, laid out as tbparse lays it out.

Columns come in tbparse's order (``step``, ``tag``, the value columns, then
``wall_time``, ``dir_name``, ``file_name``); with ``pivot`` one column per tag
(``<tag>/<field>`` for extra fields), NaN where a row belongs to another tag.
Numbers are numpy columns; only values that are arrays (histogram buckets,
decoded images and audio, tensors) are one object per point, as in tbparse.
"""

from __future__ import annotations

import numpy as np

from tbconvert.formats.tfevents import forms
from tbconvert.model import BlobSequenceSeries, ScalarSeries
from tbconvert.tbparse import _media
from tbconvert.tbparse._points import Scalars, Tensors, unpack
from tbconvert.tbparse._read import SSI_TAG, UNKNOWN

_SCALARS = (ScalarSeries, Scalars)

SCALARS, TENSORS, HISTOGRAMS, IMAGES, AUDIO, HPARAMS, TEXT = (
    "scalars", "tensors", "histograms", "images", "audio", "hparams", "text")
ALL_EVENT_TYPES = frozenset({SCALARS, TENSORS, HISTOGRAMS, IMAGES, AUDIO, HPARAMS, TEXT})
ALL_EXTRA_COLUMNS = frozenset({"dir_name", "file_name", "wall_time", "min", "max", "num", "sum",
                               "sum_squares", "width", "height", "content_type",
                               "length_frames", "sample_rate"})
_TAIL = ("wall_time", "dir_name", "file_name")
_TEXT_SUFFIX = "/text_summary"
# Series the reader makes from events that are not summaries (graphs, run metadata):
# tbparse has no table for them.
_NOT_SUMMARIES = frozenset({"graphs", "graph_tagged_run_metadata"})


def event_type(md, histo_form: bool = True, tag: str | None = None) -> str | None:
    """Which tbparse table a tag's points belong to (by the form they were written in; the
    metadata alone cannot tell a histogram written as a tensor, whose points tbparse puts
    in its tensors table: ``histo_form`` says whether they came as ``histo`` values)."""
    kind = forms.legacy_kind(md, tag)
    if kind == forms.HISTO and not histo_form:
        return TENSORS
    if kind is not None:
        return {forms.SIMPLE: SCALARS, forms.HISTO: HISTOGRAMS, forms.IMAGE: IMAGES,
                forms.AUDIO: AUDIO}[kind]
    if md.plugin_name == "text":
        return TEXT
    if md.plugin_name == "hparams":
        return HPARAMS
    if md.plugin_name in _NOT_SUMMARIES:
        return None
    return TENSORS


class Rows:
    """The rows of one tag in one file: its visible points, in read order, and their read
    positions (packed)."""

    __slots__ = ("tag", "series", "seq")

    def __init__(self, tag: str, series, seq: np.ndarray) -> None:
        self.tag, self.series, self.seq = tag, series, seq


def tag_type(dir_data, td) -> str | None:
    """:func:`event_type` of a tag of ``dir_data``, told by how its first point was written."""
    if forms.legacy_kind(td.metadata, td.tag) != forms.HISTO:
        return event_type(td.metadata, tag=td.tag)
    first, _ = td.first_last()
    return event_type(td.metadata, first is None or (first, td.tag) in dir_data.histos, td.tag)


_LEGACY_TABLES = {forms.SIMPLE: SCALARS, forms.HISTO: HISTOGRAMS, forms.IMAGE: IMAGES,
                  forms.AUDIO: AUDIO}


def point_types(dir_data, td) -> np.ndarray | None:
    """The table of each point of a tag written in several legacy forms (``add_scalar`` and
    ``add_histogram`` under one name), which tbparse files point by point by the field each
    was written in; None for a tag of one form, whose points all go to :func:`tag_type`'s.
    Worked out once per tag."""
    if td.point_types is not UNKNOWN:
        return td.point_types
    td.point_types = None
    kind = forms.legacy_kind(td.metadata, td.tag)
    if kind not in _LEGACY_TABLES or not any(isinstance(c, Tensors) for c in td.chunks):
        return None
    points = [a for c in td.chunks for a in
              (c.tensors if isinstance(c, Tensors) else [None] * len(c))]
    if kind != forms.SIMPLE and all(a is not None and a.ndim for a in points):
        return None
    seqs = td.seq().tolist()
    types = np.empty(len(points), dtype=object)
    for i, (a, q) in enumerate(zip(points, seqs, strict=True)):
        if a is None or a.ndim == 0:
            types[i] = SCALARS
        elif isinstance(dir_data.histos.get((q, td.tag)), tuple) or (
                a.ndim == 2 and a.shape[1] == 3 and a.dtype.kind in "fiu"):
            types[i] = HISTOGRAMS
        elif a.dtype == object:
            types[i] = IMAGES if a.ndim == 1 else AUDIO
        else:
            types[i] = TENSORS
    td.point_types = types
    return types


def file_rows(dir_data, index: int, etype: str, keep_hidden: bool) -> list[Rows]:
    """Each tag of ``etype`` with points in file ``index``, in order of first appearance
    (hidden points included, as the tag's first point made tbparse's reading list it)."""
    found = []
    for td in dir_data.tags.values():
        types = point_types(dir_data, td)
        if types is None:
            if tag_type(dir_data, td) != etype:
                continue
            first, last = td.first_last()
            if first is None:
                continue
            files = dir_data.file_of(np.array([first, last]))
            if files[0] == files[1]:
                # every point in one file: its read positions stay packed
                if files[0] == index:
                    found.append((first, _one_file_rows(td, keep_hidden)))
                continue
        seq = td.seq()
        mask = dir_data.file_of(seq) == index
        if types is not None:
            mask &= types == etype
        if mask.any():
            found.append(_rows_of(td, seq, mask, keep_hidden))
    found.sort(key=lambda x: x[0])
    return [r for _, r in found]


def _one_file_rows(td, keep_hidden: bool) -> Rows:
    series = td.series()
    if keep_hidden or series.hidden is None:
        return Rows(td.tag, series.with_hidden(None), td.packed_seq())
    idx = np.flatnonzero(~series.hidden)
    return Rows(td.tag, series.take(idx).with_hidden(None), td.seq()[idx])


def _rows_of(td, seq: np.ndarray, mask: np.ndarray, keep_hidden: bool) -> tuple[int, Rows]:
    """The points of ``td`` that ``mask`` picks (its visible ones unless ``keep_hidden``),
    with the read position of the first one picked, hidden or not."""
    first = int(seq[np.argmax(mask)])
    series = td.series()
    keep = mask if keep_hidden or series.hidden is None else mask & ~series.hidden
    idx = np.flatnonzero(keep)
    return first, Rows(td.tag, series.take(idx).with_hidden(None), seq[idx])


class _Cols:
    """tbparse's column dict: NaN-filled columns created on first use, in that order."""

    def __init__(self, n: int, extra: set, file_name: str, walls, with_wall: bool) -> None:
        self.n = n
        self.cols: dict = {}
        self.ints: dict[str, int] = {}   # integer columns: how many rows are filled
        if "dir_name" in extra:
            self.cols["dir_name"] = StrColumn([""], np.zeros(n, np.int32)) if n else []
        if "file_name" in extra:
            self.cols["file_name"] = StrColumn([file_name], np.zeros(n, np.int32)) if n else []
        if "wall_time" in extra and with_wall:
            self.cols["wall_time"] = walls if n else []

    def numbers(self, name: str, start: int, values) -> None:
        col = self.cols.get(name)
        if col is None:
            col = self.cols[name] = np.full(self.n, np.nan)
            if np.asarray(values).dtype.kind in "iu":
                self.ints[name] = 0
        if name in self.ints:
            self.ints[name] += len(values)
        col[start:start + len(values)] = values

    def objects(self, name: str, start: int, values) -> None:
        col = self.cols.get(name)
        if col is None:
            col = self.cols[name] = np.full(self.n, np.nan, dtype=object)
        elif col.dtype != object:
            # a float column that now gets other values: its floats become Python floats,
            # as in tbparse's list
            col = self.cols[name] = col.astype(object)
        if isinstance(values, np.ndarray) and values.dtype != object:
            col[start:start + len(values)] = values
            return
        for i, value in enumerate(values, start):   # one by one: a value may be an array
            col[i] = value

    def take(self, order: np.ndarray) -> None:
        for name, col in self.cols.items():
            if isinstance(col, StrColumn):
                self.cols[name] = StrColumn(col.names, col.codes[order])
            elif isinstance(col, np.ndarray):
                self.cols[name] = col[order]

    def frame(self):
        import pandas as pd
        for name, filled in self.ints.items():
            # a column of integers on every row is an integer column (NaN makes it float)
            if filled == self.n:
                self.cols[name] = self.cols[name].astype(np.int64)
        for name in _TAIL:
            if name in self.cols:
                self.cols[name] = self.cols.pop(name)
        cols = {k: (_objects(v) if isinstance(v, np.ndarray) and v.dtype == object else
                    v.series() if isinstance(v, StrColumn) else v)
                for k, v in self.cols.items()}
        return pd.DataFrame(cols, copy=False)


def _objects(col: np.ndarray):
    """An object column as pandas gets it from tbparse's list: a list, so that pandas infers
    its dtype; a column of arrays (nothing to infer: it stays ``object``) as it is, since
    pandas' inference makes several temporaries of the column's length."""
    import pandas as pd
    if len(col) and all(type(x) is np.ndarray for x in col):
        return pd.Series(col, dtype=object, copy=False)
    return list(col)


class StrColumn:
    """A column of strings on every row as codes into a few names: made into pandas'
    string column straight from Arrow buffers, without a Python object per row (nor
    Arrow's compute kernels, whose first use alone takes several MiB)."""

    def __init__(self, names: list[str], codes: np.ndarray) -> None:
        self.names, self.codes = names, codes

    def series(self):
        dtype = _str_dtype()
        if dtype is None or dtype.storage != "pyarrow":
            return np.array(self.names, dtype=object)[self.codes]
        import pandas as pd
        import pyarrow as pa
        encoded = [np.frombuffer(name.encode("utf-8"), np.uint8) for name in self.names]
        codes, n = self.codes, len(self.codes)
        # rows come in runs of one name (grouped by tag): each run is filled in one go
        bounds = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1, [n]))
        lengths = np.array([len(e) for e in encoded], np.int64)
        offsets = np.zeros(n + 1, np.int64)
        if len(bounds) > 1024:
            np.cumsum(lengths[codes], out=offsets[1:])
        else:
            for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                run = offsets[a + 1:b + 1]
                np.multiply(np.arange(1, b - a + 1, dtype=np.int64), lengths[codes[a]], out=run)
                run += offsets[a]
        data = np.empty(int(offsets[-1]), np.uint8)
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            name = encoded[codes[a]]
            if len(name):
                data[offsets[a]:offsets[b]].reshape(b - a, len(name))[:] = name
        arr = pa.Array.from_buffers(pa.large_string(), n,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        return pd.Series(arr, dtype=dtype)


def _str_dtype():
    """The dtype pandas gives a column of strings (``str`` from pandas 3 on), or None for
    plain objects; known without building a column to ask."""
    import pandas as pd
    if int(pd.__version__.split(".")[0]) < 3:
        try:
            if not pd.get_option("future.infer_string"):
                return None
        except (KeyError, pd.errors.OptionError):
            return None
    return pd.StringDtype(na_value=np.nan)


def _python_values(arrays) -> list:
    """Tensor points as tbparse gives them: a rank-0 tensor as its Python value."""
    return [a.item() if a.shape == () else a for a in arrays]


def leaf_frame(dir_data, index: int, file_name: str, etype: str, pivot: bool, extra: set,
               keep_hidden: bool = False):
    """The DataFrame tbparse builds for file ``index`` of a directory and ``etype``."""
    if etype == HPARAMS:
        return _hparams_frame(dir_data, index, file_name, pivot, extra)
    rows = file_rows(dir_data, index, etype, keep_hidden)
    in_order = False
    if not pivot:
        names = [_shown_tag(etype, r.tag) for r in rows]
        if len(set(names)) == len(names) and all(
                not len(r.series) or bool((np.diff(r.series.steps) >= 0).all()) for r in rows):
            # Each tag's steps already increase: tags in name order are the sorted rows.
            rows = [r for _, r in sorted(zip(names, rows, strict=True), key=lambda x: x[0])]
            in_order = True
    n = sum(len(r.series) for r in rows)
    walls = (np.concatenate([r.series.wall_times for r in rows])
             if rows and "wall_time" in extra else None)
    cols = _Cols(n, extra, file_name, walls, True)
    names = [_shown_tag(etype, r.tag) for r in rows]
    if n:
        # filled in place: kept steps may be narrower than the column
        steps = cols.cols["step"] = np.empty(n, np.int64)
        start = 0
        for r in rows:
            steps[start:start + len(r.series)] = r.series.steps
            start += len(r.series)
    if not pivot and n:
        code = np.int8 if len(rows) < 128 else np.int16 if len(rows) < 1 << 15 else np.int32
        cols.cols["tag"] = StrColumn(names, np.repeat(np.arange(len(rows), dtype=code),
                                                      [len(r.series) for r in rows]))
    start = 0
    for tag, r in zip(names, rows, strict=True):
        m = len(r.series)
        if not m:
            continue
        fields = _fields(etype, r, dir_data, extra)
        for name, values in fields:
            key = (tag if name == "value" else tag + "/" + name) if pivot else name
            if isinstance(values, np.ndarray) and values.dtype != object:
                cols.numbers(key, start, values)
            else:
                cols.objects(key, start, values)
        start += m
    if not pivot and n and not in_order:
        # In the order tbparse's stable sort by (tag, step) gives, so the sort has nothing to do.
        _, rank = np.unique(np.array(names, dtype=object), return_inverse=True)
        cols.take(np.lexsort((cols.cols["step"], rank[cols.cols["tag"].codes])))
    return cols.frame()


def _shown_tag(etype: str, tag: str) -> str:
    # PyTorch and tensorboardX store text under "<tag>/text_summary"; tbparse shows "<tag>"
    if etype == TEXT and tag.endswith(_TEXT_SUFFIX):
        return tag[:-len(_TEXT_SUFFIX)]
    return tag


def _fields(etype: str, r: Rows, dir_data, extra: set) -> list:
    """``(column, values)`` of one tag's rows, in tbparse's column order."""
    s = r.series
    if etype == SCALARS and isinstance(s, _SCALARS):
        return [("value", s.values)]    # widened to float64 as it is copied into the column
    if etype == SCALARS:
        # a tag first written as simple values and later as tensors of another shape
        return [("value", _python_values(_arrays(s)))]
    if etype == TEXT:
        return [("value", [_text(a) for a in _arrays(s)])]
    if etype == TENSORS and isinstance(s, _SCALARS) and s.values.dtype.kind == "f":
        # rank-0 float tensors: tbparse's Python floats, as one float column
        return [("value", s.values)]
    if etype == TENSORS:
        arrays = _arrays(s)
        if dir_data.histos:
            raw = [dir_data.histos.get((q, r.tag)) for q in unpack(r.seq).tolist()]
            arrays = [a if isinstance(h, tuple) or h is None else h for a, h in zip(arrays, raw, strict=True)]
        return [("value", _python_values(arrays))]
    if etype == HISTOGRAMS:
        return _histogram_fields(r, dir_data, extra)
    if etype == IMAGES:
        seqs = _sequences(s)
        out = [("value", [_media.decode_image(q[2]) for q in seqs])]
        for name in ("height", "width"):
            if name in extra:
                pos = 1 if name == "height" else 0
                out.append((name, np.array([int(q[pos]) for q in seqs], dtype=np.int64)))
        return out
    if etype == AUDIO:
        seqs = _sequences(s)
        clips = [_media.decode_wav(q[0]) for q in seqs]
        out = [("value", [c[0] for c in clips])]
        if "content_type" in extra:
            out.append(("content_type", np.array(["audio/wav"] * len(clips), dtype=object)))
        if "length_frames" in extra:
            out.append(("length_frames", np.array([c[0].shape[0] for c in clips], np.int64)))
        if "sample_rate" in extra:
            out.append(("sample_rate", np.array([c[1] for c in clips], np.float64)))
        return out
    raise ValueError(etype)


def _arrays(s) -> list:
    if isinstance(s, _SCALARS):
        return [s.values[i:i + 1].reshape(()) for i in range(len(s))]
    if isinstance(s, BlobSequenceSeries):
        out = []
        for seq in s.sequences():
            arr = np.empty(len(seq), dtype=object)
            arr[:] = [b"" if b is None else b for b in seq]
            out.append(arr)
        return out
    return list(s.tensors)


def _sequences(s) -> list:
    if isinstance(s, Tensors):
        return [list(a.reshape(-1)) for a in s.tensors]
    if isinstance(s, BlobSequenceSeries):
        return list(s.sequences())
    return [list(a.reshape(-1)) for a in s.tensors]


def _text(arr):
    if arr.size == 1:
        return _decode(arr.reshape(()).item())
    # tbparse fails on text tensors of several strings (tables): each is decoded, in an
    # array of the tensor's shape (a list would read as values merged by ``pivot``).
    out = np.empty(arr.size, dtype=object)
    out[:] = [_decode(x) for x in arr.reshape(-1)]
    return out.reshape(arr.shape)


def _decode(x) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)


_HISTO_FIELDS = ("counts", "limits", "max", "min", "num", "sum", "sum_squares")


def _histogram_fields(r: Rows, dir_data, extra: set) -> list:
    raw = [dir_data.histos.get((q, r.tag)) for q in unpack(r.seq).tolist()]
    raw = [h if isinstance(h, tuple) else None for h in raw]
    if any(h is None for h in raw):
        raw = [h if h is not None else _from_tensor(a) for h, a in zip(raw, _arrays(r.series), strict=True)]
    out = []
    for name in _HISTO_FIELDS:
        if name in ("counts", "limits"):
            out.append((name, [h[6] if name == "counts" else h[5] for h in raw]))
        elif name in extra:
            pos = {"min": 0, "max": 1, "num": 2, "sum": 3, "sum_squares": 4}[name]
            out.append((name, np.array([h[pos] for h in raw], dtype=np.float64)))
    return out


def _from_tensor(arr) -> tuple:
    """Histogram fields of a point the reader only kept as ``[k, 3]`` buckets."""
    arr = np.asarray(arr, dtype=np.float64).reshape(-1, 3)
    counts, rights = arr[:, 2], arr[:, 1]
    lo = float(arr[0, 0]) if len(arr) else 0.0
    hi = float(arr[-1, 1]) if len(arr) else 0.0
    return (lo, hi, float(counts.sum()), np.nan, np.nan, rights.copy(), counts.copy())


def _hparams_frame(dir_data, index: int, file_name: str, pivot: bool, extra: set):
    names, values = _session_hparams(dir_data, index)
    cols = _Cols(len(names), extra, file_name, None, False)
    if pivot:
        for i, (name, value) in enumerate(zip(names, values, strict=True)):
            cols.objects(name, i, [value])
    elif names:
        cols.cols["tag"] = np.array(names, dtype=object)
        cols.cols["value"] = values
    frame = cols.frame()
    return frame


def _session_hparams(dir_data, index: int):
    td = dir_data.tags.get(SSI_TAG)
    if td is None or td.metadata.plugin_name != "hparams":
        return [], []
    seq = td.seq()
    in_file = seq[dir_data.file_of(seq) == index]
    if not len(in_file):
        return [], []
    # as tbparse reads each file on its own: the file's first session start (a training
    # that resumed into a new file logged its hyperparameters again there)
    content = dir_data.histos.get((int(in_file[0]), SSI_TAG))
    if not isinstance(content, bytes):
        if int(in_file[0]) != int(seq[0]):
            return [], []
        content = td.metadata.plugin_content     # read in bulk: the run's first metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    try:
        ssi = HParamsPluginData.FromString(content).session_start_info
    except Exception:  # noqa: BLE001 - unreadable plugin data: no hyperparameters
        return [], []
    names = list(ssi.hparams.keys())
    values = []
    for name in names:
        kind = ssi.hparams[name].WhichOneof("kind")
        values.append(getattr(ssi.hparams[name], kind) if kind else None)
    return names, values
