"""Loading what a JSON line points to: npz tensor archives and blob files.

Paths from the JSON are resolved only inside the experiment directory
(``/`` or ``\\`` separators; ``..``, absolute paths and symlinks out are
refused and reported). Nulls, missing files, count mismatches and unreadable
archives are reported and never crash; pickled archives are refused unless
``options.allow_pickle``.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tbconvert import budget
from tbconvert import dtypes as dt
from tbconvert.errors import UnsupportedError
from tbconvert.formats.tbdev import export_dir, npz_files, regular
from tbconvert.model import BlobSequenceSeries, Metadata, TensorSeries
from tbconvert.names import is_within

# A long series of images or audio is handed on in chunks of about this many blob bytes.
BLOB_CHUNK_BYTES = 64 << 20

_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
# Tensors handed over in one TensorSeries: a large npz streams through in pieces of this size.
TENSOR_CHUNK_BYTES = 64 << 20


class _BadLine(ValueError):
    """A JSON line that cannot be used; the message says why."""


@dataclass
class _Entry:
    """Where one line of one JSON file is."""

    kind: str
    file: Path
    line_no: int
    offset: int
    length: int
    run: str = ""      # the run as the line spells it (before any renaming)


@dataclass
class _Chunk:
    """One parsed line: columns as arrays, payload not loaded yet."""

    entry: _Entry
    tag: str
    metadata: Metadata
    metadata_b64: str
    steps: np.ndarray
    wall_times: np.ndarray
    # scalars: float64 values (a long line's three columns are spill.MeasuredColumn instead);
    # tensors: path or None; blobs: list of lists
    payload: object

    @property
    def where(self) -> str:
        return f"{self.entry.file}:{self.entry.line_no}"


def _numpy_to_model(arr: np.ndarray) -> tuple[int, np.ndarray]:
    """An npz array -> (TensorFlow dtype code, the model's array)."""
    kind = arr.dtype.kind
    if kind == "S":
        return dt.DT_STRING, dt.string_array(arr.reshape(-1), arr.shape)
    if kind in "OU":
        flat = []
        for v in arr.reshape(-1):
            if isinstance(v, (bytes, np.bytes_)):
                flat.append(bytes(v))
            elif isinstance(v, str):
                flat.append(v.encode("utf-8"))
            else:
                raise dt.TensorDecodeError(
                    f"an object array holds a {type(v).__name__}, not a string")
        return dt.DT_STRING, dt.string_array(flat, arr.shape)
    code = dt.tf_dtype_of(arr.dtype)
    return code, arr.astype(dt.numpy_dtype(code), copy=False)


class PayloadMixin:
    """Tensor and blob loading for :class:`~tbconvert.formats.tbdev.reader.TbdevReader`."""

    def _resolve(self, rel: str, chunk: _Chunk, run: str) -> Path | None:
        """A tensor/blob path from the JSON, only if it stays inside the experiment."""
        where = f"{chunk.where}: {run}/{chunk.tag}"
        if len(rel) > budget.MAX_PATH_CHARS:
            self.report.add("bad_path", f"{where}: a path of {len(rel)} characters (at most "
                            f"{budget.MAX_PATH_CHARS} are read); treated as missing",
                            path=chunk.entry.file, run=run, tag=chunk.tag)
            return None
        norm = rel.replace("\\", "/")
        parts = [p for p in norm.split("/") if p not in ("", ".")]
        root = self.source.root
        path = None
        if not (norm.startswith("/") or _DRIVE_RE.match(norm) or ".." in parts or not parts
                or "\x00" in norm):
            path = root.joinpath(*parts)
            try:
                inside = is_within(root, path)
            except (OSError, RuntimeError, ValueError) as exc:
                # RuntimeError: pathlib's word for a symlink loop
                why = ("is a symlink loop" if isinstance(exc, RuntimeError)
                       else f"cannot be resolved ({getattr(exc, 'strerror', None) or exc})")
                self.report.add("bad_path", f"{where}: path {rel!r:.200} {why}; treated as "
                                "missing", path=chunk.entry.file, run=run, tag=chunk.tag)
                return None
            if not inside:
                path = None
        if path is None:
            # an exporter writes plain relative paths: anything else is refused as it is,
            # before it is resolved
            why = ("has '..' parts" if ".." in parts else "is absolute"
                   if norm.startswith("/") or _DRIVE_RE.match(norm) else "is empty"
                   if not parts else "holds a NUL" if "\x00" in norm
                   else "points outside the export")
            self.report.add("unsafe_path", f"{where}: path {rel!r:.200} {why}; treated as "
                            "missing", path=chunk.entry.file, run=run, tag=chunk.tag)
        return path

    def _tensors(self, run: str, chunk: _Chunk) -> Iterator[TensorSeries]:
        """The chunk's points as one or more TensorSeries (at most ``TENSOR_CHUNK_BYTES`` of
        tensors each), inflating one npz member at a time."""
        n = len(chunk.steps)
        if chunk.payload is None:
            if n == 0:
                yield self._tensor_series(run, chunk, [], [], [])
            else:
                self._lose_tensors(run, chunk, "tensors_file_path is null", "missing_tensors")
            return
        path = self._resolve(chunk.payload, chunk, run)
        if path is None:
            return
        kind = regular.kind_of(path)
        if kind is not None:
            why = "does not exist" if kind == "missing" else f"is {kind}"
            self._lose_tensors(run, chunk, f"{path} {why}", "missing_tensors")
            return
        try:
            fh = regular.open_regular(path)
        except OSError as exc:
            self._lose_tensors(run, chunk, f"{path}: cannot read ({regular.reason(exc)})",
                               "missing_tensors")
            return
        with fh:
            try:
                npz = self._open_npz(fh, path)
            except _BadLine as exc:
                self._lose_tensors(run, chunk, f"{path}: {exc}", "corrupt_tensor_file")
                return
            try:
                if len(npz) != n:
                    damage = self._first_damage(npz, path)
                    if damage is not None:   # the more useful of the two reasons
                        self._lose_tensors(run, chunk, f"{path}: {damage}",
                                           "corrupt_tensor_file")
                        return
                    self._lose_tensors(run, chunk, f"{path} holds {len(npz)} tensors for {n} "
                                       "steps; the whole chunk is left out rather than "
                                       "truncated", "tensor_count_mismatch")
                    return
                yield from self._stream_tensors(run, chunk, path, npz)
            finally:
                npz.close()

    def _stream_tensors(self, run: str, chunk: _Chunk, path: Path, npz) -> Iterator[TensorSeries]:
        index, codes, tensors, held = [], [], [], 0
        bad: dict[str, list[int]] = {}
        for i in range(len(npz)):
            try:
                arr = self._member(npz, i, path)
                code, value = _numpy_to_model(arr)
            except (_BadLine, dt.TensorDecodeError) as exc:
                bad.setdefault(str(exc), []).append(i)
                continue
            index.append(i)
            codes.append(code)
            tensors.append(value)
            held += getattr(value, "nbytes", 0) + 64
            if held >= TENSOR_CHUNK_BYTES:
                yield self._tensor_series(run, chunk, index, codes, tensors)
                index, codes, tensors, held = [], [], [], 0
        if index:
            yield self._tensor_series(run, chunk, index, codes, tensors)
        for why, points in bad.items():
            self.report.add("corrupt_tensor", f"{chunk.where}: {run}/{chunk.tag}: {path}: "
                            f"{why}; {len(points)} point(s) lost (first: step "
                            f"{int(chunk.steps[points[0]])}), the others are kept",
                            path=chunk.entry.file, run=run, tag=chunk.tag, count=len(points))

    def _first_damage(self, npz, path: Path) -> str | None:
        for i in range(len(npz)):
            try:
                self._member(npz, i, path)
            except _BadLine as exc:
                return str(exc)
        return None

    def _tensor_series(self, run: str, chunk: _Chunk, index, codes, tensors) -> TensorSeries:
        take = np.asarray(index, dtype=np.intp)
        return TensorSeries(run=run, tag=chunk.tag, metadata=chunk.metadata,
                            steps=chunk.steps[take], wall_times=chunk.wall_times[take],
                            hidden=None, dtypes=np.asarray(codes, np.int32),
                            tensors=tuple(tensors))

    def _lose_tensors(self, run, chunk: _Chunk, why, kind) -> None:
        n = len(chunk.steps)
        if why is not None:
            self.report.add(kind, f"{chunk.where}: {run}/{chunk.tag}: {why}; {n} point(s) lost",
                            path=chunk.entry.file, run=run, tag=chunk.tag, count=n)
        return None

    def _open_npz(self, fh, path: Path):
        magic = fh.read(4)
        if magic not in _ZIP_MAGIC:
            raise _BadLine("not an npz archive")
        fh.seek(0)
        try:
            return npz_files.Npz(fh, regular.size_of(fh), export_dir.ARR_RE)
        except npz_files.MEMBER_ERRORS as exc:
            raise _BadLine(f"unreadable npz ({exc})") from None

    def _member(self, npz, i: int, path: Path) -> np.ndarray:
        try:
            return npz.array(i, self.options.allow_pickle)
        except npz_files.PickledDataError:
            raise UnsupportedError(
                f"{path}: holds pickled string tensors (a TensorBoard 2.3 export); "
                "unpickling can run code from the file, so it is off by default. If you "
                "trust this export, rerun with --allow-pickle") from None
        except npz_files.MEMBER_ERRORS as exc:
            raise _BadLine(f"arr_{i}: unreadable ({exc})") from None
        except Exception as exc:  # unpickling with --allow-pickle can raise anything
            if self.options.allow_pickle:
                raise _BadLine(f"arr_{i}: unreadable ({type(exc).__name__}: {exc})") from None
            raise

    def _blobs(self, run: str, chunk: _Chunk):
        """The line's blob sequences as series chunks of about BLOB_CHUNK_BYTES each (a long
        series of images is never held whole), each with its holes told before it."""
        nulls = 0
        problems: dict[str, list] = {}   # why -> [count, first path]
        sequences: list = []
        first = held = 0
        read: dict = {}     # path -> its bytes, or why not: a blob named again is read once
        for i, seq in enumerate(chunk.payload):
            out = []
            for rel in seq:
                if rel is None:
                    nulls += 1
                    out.append(None)
                    continue
                path = self._resolve(rel, chunk, run)
                if path is None:
                    out.append(None)
                    continue
                if path not in read:
                    read[path] = self._read_blob(path)
                    if isinstance(read[path], bytes):
                        held += len(read[path])
                data = read[path]
                if isinstance(data, str):
                    problems.setdefault(data, [0, rel])[0] += 1
                    data = None
                out.append(data)
            sequences.append(out)
            if held >= BLOB_CHUNK_BYTES:
                self._tell_holes(run, chunk, nulls, problems)
                yield self._blob_chunk(run, chunk, first, sequences)
                first, sequences, held, read, nulls, problems = i + 1, [], 0, {}, 0, {}
        if sequences or not first:
            self._tell_holes(run, chunk, nulls, problems)
            yield self._blob_chunk(run, chunk, first, sequences)

    def _tell_holes(self, run: str, chunk: _Chunk, nulls: int, problems: dict) -> None:
        # (told before the chunk that holds them: a table counts only the holes not told yet)
        where = f"{chunk.where}: {run}/{chunk.tag}"
        if nulls:
            self.report.add("missing_blob", f"{where}: {nulls} blob(s) are null in the export "
                            "(never uploaded, too large, or the download failed); kept as holes "
                            "in the same positions", path=chunk.entry.file, run=run,
                            tag=chunk.tag, count=nulls)
        for why, (count, first) in problems.items():
            what = "do not exist" if why == "does not exist" else f"cannot be read: {why}"
            self.report.add("missing_blob", f"{where}: {count} blob file(s) {what} (first: "
                            f"{first!r:.200}); kept as holes in the same positions",
                            path=chunk.entry.file, run=run,
                            tag=chunk.tag, count=count)

    @staticmethod
    def _read_blob(path: Path) -> bytes | str:
        """The blob's bytes, or why they cannot be read."""
        try:
            return regular.read_regular(path, limit=budget.MAX_BLOB_BYTES)
        except OSError as exc:
            if isinstance(exc, regular.NotRegularFile) or exc.errno == errno.EFBIG:
                return str(exc.strerror)
            return regular.reason(exc)

    @staticmethod
    def _blob_chunk(run: str, chunk: _Chunk, first: int, sequences: list) -> BlobSequenceSeries:
        end = first + len(sequences)
        return BlobSequenceSeries.from_sequences(
            run=run, tag=chunk.tag, metadata=chunk.metadata, steps=chunk.steps[first:end],
            wall_times=chunk.wall_times[first:end], hidden=None, sequences=sequences)
