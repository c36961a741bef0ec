"""Column builders of the tables that are not scalars: histograms, text, media and numeric tensors."""

from __future__ import annotations

import numpy as np

from tbconvert import dtypes as dt
from tbconvert.columns import PointColumns, as_float64, report_inexact, rounded_in_float64
from tbconvert.media_headers import wav_info
from tbconvert.model import BlobSequenceSeries, ScalarSeries, Series, TensorSeries, as_scalar_series
from tbconvert.report import Report, are, plural, were

# First bytes -> file extension, for blobs that are files.
MAGIC = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "jpg"), (b"GIF87a", "gif"),
         (b"GIF89a", "gif"), (b"RIFF", "wav"), (b"OggS", "ogg"), (b"fLaC", "flac"),
         (b"ID3", "mp3"), (b"BM", "bmp"))


def sniff(blob: bytes, default: str = "bin") -> str:
    """The file type of ``blob`` from its first bytes: png, jpg, gif, wav... else ``default``."""
    for magic, ext in MAGIC:
        if blob.startswith(magic):
            if ext == "wav" and blob[8:12] != b"WAVE":
                continue
            return ext
    return default


def plugin_of(chunk: Series) -> str:
    return chunk.metadata.plugin_name


class HistogramColumns(PointColumns):
    """Rows ``run, tag, step, wall_time, left, right, count``: one per bucket."""

    def __init__(self, keep_hidden: bool, report: Report) -> None:
        super().__init__(keep_hidden, report)
        self._buckets: list[np.ndarray] = []

    def add_chunk(self, chunk: Series) -> bool:
        if plugin_of(chunk) != "histograms" or not isinstance(chunk, TensorSeries):
            return False
        good = [i for i, t in enumerate(chunk.tensors)
                if t.ndim == 2 and t.shape[1] == 3 and t.dtype.kind in "fiu"]
        if len(good) < len(chunk):
            bad = len(chunk) - len(good)
            self.report.add("bad_histogram",
                            f"{chunk.run}/{chunk.tag}: {plural(bad, 'point')} "
                            f"{are(bad)} not [k, 3] numeric tensors and not "
                            "in the histogram table",
                            run=chunk.run, tag=chunk.tag, count=bad)
            chunk = chunk.take(good)
        sizes = np.array([t.shape[0] for t in chunk.tensors], np.int64)
        empty = int(np.count_nonzero(sizes == 0))
        if empty:
            self.report.add("empty_histogram",
                            f"{chunk.run}/{chunk.tag}: {plural(empty, 'point')} {are(empty)} "
                            f"{'a histogram' if empty == 1 else 'histograms'} of no buckets "
                            "and not in the histogram table",
                            run=chunk.run, tag=chunk.tag, count=empty)
        self.add(chunk, repeat=sizes)
        if len(chunk):
            self._buckets.append(np.concatenate([t.astype(np.float64) for t in chunk.tensors]))
        return True

    def arrow(self):
        import pyarrow as pa
        b = self._cat(self._buckets, np.float64).reshape(-1, 3)
        return self.table({"left": pa.array(b[:, 0]), "right": pa.array(b[:, 1]),
                           "count": pa.array(b[:, 2])})

    def take(self):
        """The rows so far as a table, forgotten here (a table written a part at a time)."""
        table = self.arrow()
        self.clear_rows()
        self._buckets.clear()
        return table


# One value may fill a whole shape (legal TensorFlow): the one way a few bytes of input become
# many cells, each a row, a file or a table cell. Past this many, such a point is left out of
# text views rather than multiplied; archives keep it as it is.
MAX_FILLED_CELLS = 1 << 14


def text_points(chunk: TensorSeries) -> tuple[list[int], list[list], list[int | None]]:
    """The text of a text chunk's points: ``(keep, cells, skipped)``.

    ``keep`` are the points that have text and ``cells[j]`` the row-major cells of point
    ``keep[j]``: ``bytes`` as logged for strings; for numbers ``str`` of the element in its
    own dtype, as TensorBoard's text dashboard spells a number in a table (float32 0.1 is
    ``"0.1"``, a bool ``"True"``, bfloat16 its value as float32). ``skipped`` holds one entry
    per point without text: ``None`` for a tensor kept as raw bytes (a type that has no text,
    or contents that do not decode), else the number of cells one value fills.
    """
    keep, cells, skipped = [], [], []
    for p, (code, t) in enumerate(zip(chunk.dtypes.tolist(), chunk.tensors, strict=True)):
        flat = np.asarray(t).reshape(-1)
        point = None
        if code != dt.DT_RAW_PROTO and flat.dtype.kind in "OSUbiufc":
            if len(flat) > MAX_FILLED_CELLS and _one_value(flat):
                skipped.append(len(flat))
                continue
            point = _cells(code, flat)
        if point is None:
            skipped.append(None)
            continue
        keep.append(p)
        cells.append(point)
    return keep, cells, skipped


def _cells(code: int, flat: np.ndarray) -> list:
    if code == dt.DT_STRING or flat.dtype.kind in "OSU":
        return [_string_cell(x) for x in flat.tolist()]
    if code == dt.DT_BFLOAT16:   # kept as its bits: the upper half of a float32
        flat = dt.bfloat16_values(flat)
    if flat.dtype.kind in "biu":
        return [str(x) for x in flat.tolist()]
    # numpy's own scalars: a Python float would spell float32 0.1 as 0.10000000149011612
    return [str(x) for x in flat]


def _string_cell(x) -> bytes | str:
    if isinstance(x, (bytes, str)):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    return str(x)    # never bytes(x): bytes(5) is five NUL bytes, bytes(2**40) a terabyte


def _one_value(flat: np.ndarray) -> bool:
    if flat.dtype == object:
        first = flat[0]
        return isinstance(first, (bytes, str)) and all(
            x is first or (type(x) is type(first) and x == first) for x in flat)
    # by bytes, so that a shape filled with NaN counts as one value too
    b = np.ascontiguousarray(flat).view(np.uint8).reshape(len(flat), -1)
    return bool((b == b[0]).all())


def with_text(chunk: TensorSeries, report: Report, left_out) -> tuple[TensorSeries, list[list]]:
    """``chunk`` without its points that have no text (reported as unsupported_series, what
    happens to them in the words ``left_out(n)`` gives), and the cells of those it keeps."""
    keep, cells, skipped = text_points(chunk)
    if skipped:
        n = len(skipped)
        report.add("unsupported_series", f"{chunk.run}/{chunk.tag}: {no_text(skipped)}; "
                   f"{left_out(n)}", run=chunk.run, tag=chunk.tag, count=n)
        chunk = chunk.take(keep)
    empty = sum(1 for point in cells if not point)
    if empty:
        report.add("empty_text", f"{chunk.run}/{chunk.tag}: {plural(empty, 'point')} "
                   f"{are(empty)} text of no cells (a shape with a 0 dimension); "
                   f"{left_out(empty)}", run=chunk.run, tag=chunk.tag, count=empty)
    return chunk, cells


def no_text(skipped: list[int | None]) -> str:
    """Why the points :func:`text_points` skipped have no text, in words."""
    raw = skipped.count(None)
    filled = [n for n in skipped if n is not None]
    parts = []
    if raw:
        parts.append(f"{plural(raw, 'point')} {'is a tensor' if raw == 1 else 'are tensors'} "
                     "kept as raw bytes (a type that has no text, or contents that do not "
                     "decode)")
    if filled:
        most = max(filled)
        parts.append(f"{plural(len(filled), 'point')} {are(len(filled))} one value filling "
                     f"{'up to ' if min(filled) < most else ''}{most} cells (more than "
                     f"{MAX_FILLED_CELLS} are not multiplied out)")
    return "; ".join(parts)


def _decode(raw: bytes | str, report: Report, chunk: Series) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.add("text_not_utf8",
                   f"{chunk.run}/{chunk.tag}: a text value is not UTF-8; undecodable bytes became "
                   "U+FFFD in the table (tbconvert media writes the raw bytes)",
                   run=chunk.run, tag=chunk.tag)
        return raw.decode("utf-8", "replace")


class TextColumns(PointColumns):
    """Rows ``run, tag, step, wall_time, index, dims, text``: one per cell.

    A rank-0 text point is one row (``index`` 0, ``dims`` ""); a rank-1 or
    rank-2 point (TensorBoard renders those as a table) gives one row per
    element in row-major order, ``index`` the flat position and ``dims`` the
    dimensions as ``"2x2"``, so the table can be rebuilt with ``reshape``.
    Numbers logged as text are their text (see :func:`text_points`); points
    without text are reported, not listed.
    """

    def __init__(self, keep_hidden: bool, report: Report) -> None:
        super().__init__(keep_hidden, report)
        self._index: list[int] = []
        self._shape: list[str] = []
        self._text: list[str] = []

    def add_chunk(self, chunk: Series) -> bool:
        if plugin_of(chunk) != "text" or not isinstance(chunk, TensorSeries):
            return False
        chunk, cells = with_text(chunk, self.report, lambda n: f"{'it is' if n == 1 else 'they are'} "
                                 "not in the text table")
        self.add_cells(chunk, cells)
        return True

    def add_cells(self, chunk: TensorSeries, cells: list[list]) -> None:
        """Rows for each point of ``chunk``, whose cells :func:`text_points` gave."""
        sizes = []
        for t, point in zip(chunk.tensors, cells, strict=True):
            shape = "x".join(str(d) for d in np.shape(t))
            sizes.append(len(point))
            self._index.extend(range(len(point)))
            self._shape.extend([shape] * len(point))
            self._text.extend(_decode(c, self.report, chunk) for c in point)
        self.add(chunk, repeat=np.array(sizes, np.int64))

    def arrow(self):
        import pyarrow as pa
        return self.table({"index": pa.array(self._index, pa.int64()),
                           "dims": pa.array(self._shape, pa.string()),
                           "text": pa.array(self._text, pa.string())})


def media_items(chunk: BlobSequenceSeries):
    """``(point, index, blob, extra)`` for each image or audio clip of a chunk.

    Images: blob 0 and 1 of each point are width and height (ASCII), image i
    is blob i + 2; ``extra`` is ``(width, height)``. Audio: every blob is a
    clip; ``extra`` is ``None``.
    """
    images = plugin_of(chunk) == "images"
    for p, seq in enumerate(chunk.sequences()):
        if images:
            size = tuple(_int_or_none(b) for b in seq[:2])
            for i, blob in enumerate(seq[2:]):
                yield p, i, blob, size
        else:
            for i, blob in enumerate(seq):
                yield p, i, blob, None


def _int_or_none(b):
    try:
        return int(b)
    except (TypeError, ValueError):
        return None


_CONTENT_TYPES = {"png": "image/png", "jpg": "image/jpeg", "gif": "image/gif", "bmp": "image/bmp",
                  "wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac", "mp3": "audio/mpeg"}


class UntoldHoles:
    """How many of a series' lost blobs a table or an extraction still has to tell: a source
    whose reading told them already (an export's null blob paths) is not told of them twice,
    one whose reading did not (an archive keeps its holes without a word) is."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self._seen: dict = {}      # (run, tag): holes met so far
        self._own: dict = {}       # (run, tag): holes told here so far
        self._told: dict = {}      # (run, tag): holes the report's issues count
        self._scanned = 0          # of the report's issues, those counted in _told

    def _told_of(self, key) -> int:
        # the report only grows while a table is built: its new issues are counted once each
        issues = self.report.issues
        if len(issues) < self._scanned:
            self._told, self._scanned = {}, 0
        for i in issues[self._scanned:]:
            if i.kind == "missing_blob":
                self._told[(i.run, i.tag)] = self._told.get((i.run, i.tag), 0) + i.count
        self._scanned = len(issues)
        return self._told.get(key, 0)

    def add(self, run: str, tag: str, lost: int, message) -> None:
        """The issue for the part of ``lost`` more holes of ``run``/``tag`` that no issue
        counts yet; ``message(n)`` words it."""
        key = (run, tag)
        told = self._told_of(key)
        by_reading = told - self._own.get(key, 0)
        self._seen[key] = self._seen.get(key, 0) + lost
        n = max(0, self._seen[key] - by_reading) - self._own.get(key, 0)
        if n > 0:
            self.report.add("missing_blob", message(n), run=run, tag=tag, count=n)
            self._own[key] = self._own.get(key, 0) + n


class MediaColumns(PointColumns):
    """Rows ``run, tag, step, wall_time, index, [width, height,] format, data`` for one plugin;
    with ``details``, also ``content_type`` and, for audio, ``sample_rate``, ``channels`` and
    ``length_frames`` (from the WAV header)."""

    def __init__(self, plugin: str, keep_hidden: bool, report: Report,
                 details: bool = False) -> None:
        super().__init__(keep_hidden, report)
        self.plugin = plugin
        self.details = details
        self._wav: list[tuple] = []
        self._index: list[int] = []
        self._width: list = []
        self._height: list = []
        self._format: list[str] = []
        self._data: list[bytes] = []
        self._holes = UntoldHoles(report)

    def add_chunk(self, chunk: Series) -> bool:
        if plugin_of(chunk) != self.plugin or not isinstance(chunk, BlobSequenceSeries):
            return False
        counts = np.zeros(len(chunk), np.int64)
        lost = 0
        for p, i, blob, size in media_items(chunk):
            if blob is None:
                lost += 1
                continue
            counts[p] += 1
            self._index.append(i)
            if size is not None:
                self._width.append(size[0])
                self._height.append(size[1])
            self._format.append(sniff(blob))
            self._data.append(blob)
        if lost:
            self._holes.add(chunk.run, chunk.tag, lost, lambda n: (
                f"{chunk.run}/{chunk.tag}: {plural(n, 'blob')} ({self.plugin}) {were(n)} lost "
                f"by the source and {are(n)} not in the table"))
        self.add(chunk, repeat=counts)
        return True

    def arrow(self):
        import pyarrow as pa
        cols = {"index": pa.array(self._index, pa.int64())}
        if self.plugin == "images":
            cols["width"] = pa.array(self._width, pa.int64())
            cols["height"] = pa.array(self._height, pa.int64())
        cols["format"] = pa.array(self._format, pa.string())
        if self.details:
            cols["content_type"] = pa.array(
                [_CONTENT_TYPES.get(f, "application/octet-stream") for f in self._format],
                pa.string())
            if self.plugin == "audio":
                info = [wav_info(b) for b in self._data]
                for j, name in enumerate(("sample_rate", "channels", "length_frames")):
                    cols[name] = pa.array([i[j] for i in info], pa.int64())
        cols["data"] = pa.array(self._data, pa.binary())
        return self.table(cols)


# Tensors the other tables hold, or that hold no numbers of their own.
_OTHER_TABLES = frozenset({"text", "hparams"})
_NOT_NUMBERS = frozenset({dt.DT_STRING, dt.DT_COMPLEX64, dt.DT_COMPLEX128, dt.DT_RAW_PROTO})


def _as_float64(code: int, arr: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(arr).reshape(-1)
    if code == dt.DT_BFLOAT16:   # kept as its bits: the upper half of a float32
        return dt.bfloat16_values(flat).astype(np.float64)
    return flat.astype(np.float64)


class TensorColumns(PointColumns):
    """Rows ``run, tag, step, wall_time, plugin, dtype, shape, values``: one per numeric
    tensor point (PR curves, histograms, meshes, TF2 scalars and third-party plugins);
    ``values`` is the tensor flattened in row-major order, ``shape`` e.g. ``"2x11"``
    (``""`` for a single number). Scalar series only with ``scalars``."""

    def __init__(self, keep_hidden: bool, report: Report, scalars: bool = False) -> None:
        super().__init__(keep_hidden, report)
        self.scalars = scalars
        self._plugin: list[str] = []
        self._dtype: list[str] = []
        self._shape: list[str] = []
        self._sizes: list[int] = []
        self._values: list[np.ndarray] = []

    def add_chunk(self, chunk: Series) -> bool:
        if isinstance(chunk, BlobSequenceSeries) or plugin_of(chunk) in _OTHER_TABLES:
            return False
        if not self.scalars and as_scalar_series(chunk) is not None:
            return False     # (the scalars table holds these: bfloat16 scalars too)
        if isinstance(chunk, ScalarSeries):
            keep = np.arange(len(chunk))
            code = dt.tf_dtype_of(chunk.values.dtype)
            self._values.append(as_float64(chunk, self.report))
            self._sizes.extend([1] * len(chunk))
            self._dtype.extend([dt.NAMES.get(code, str(chunk.values.dtype))] * len(chunk))
            self._shape.extend([""] * len(chunk))
        else:
            keep = [i for i, c in enumerate(chunk.dtypes.tolist()) if c not in _NOT_NUMBERS]
            if len(keep) < len(chunk):
                skipped = len(chunk) - len(keep)
                self.report.add("not_numeric_tensor",
                                f"{chunk.run}/{chunk.tag}: {plural(skipped, 'point')} "
                                f"{are(skipped)} strings or complex numbers "
                                "and not in the tensor table",
                                run=chunk.run, tag=chunk.tag, count=skipped)
            inexact = 0
            for i in keep:
                code, arr = int(chunk.dtypes[i]), chunk.tensors[i]
                inexact += int(np.count_nonzero(rounded_in_float64(arr)))
                self._values.append(_as_float64(code, arr))
                self._sizes.append(arr.size)
                self._dtype.append(dt.NAMES.get(code, str(arr.dtype)))
                self._shape.append("x".join(str(d) for d in arr.shape))
            report_inexact(self.report, chunk, inexact)
            chunk = chunk.take(keep)
        self._plugin.extend([plugin_of(chunk)] * len(keep))
        self.add(chunk)
        return True

    def arrow(self):
        import pyarrow as pa
        offsets = np.zeros(len(self._sizes) + 1, np.int64)
        np.cumsum(np.array(self._sizes, np.int64), out=offsets[1:])
        values = self._cat(self._values, np.float64)
        return self.table({
            "plugin": pa.array(self._plugin, pa.string()),
            "dtype": pa.array(self._dtype, pa.string()),
            "shape": pa.array(self._shape, pa.string()),
            "values": pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))})
