"""Loading what a JSON line points to: npz tensor archives and blob files.

Paths from the JSON are resolved only inside the experiment directory
(``/`` or ``\\`` separators; ``..``, absolute paths and symlinks out are
refused and reported). Nulls, missing files, count mismatches and unreadable
archives are reported and never crash; pickled archives are refused unless
``options.allow_pickle``.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tbconvert import dtypes as tfdt
from tbconvert.errors import UnsupportedError
from tbconvert.formats.tbdev import fastparse, layout
from tbconvert.model import BlobSequenceSeries, Metadata, TensorSeries
from tbconvert.names import is_within
from tbconvert import sourcefiles

_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


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


@dataclass
class _Chunk:
    """One parsed line: columns as arrays, payload not loaded yet."""

    entry: _Entry
    tag: str
    metadata: Metadata
    metadata_b64: str
    steps: np.ndarray
    wall_times: np.ndarray
    payload: object  # scalars: float64 values; tensors: path or None; blobs: list of lists

    @property
    def where(self) -> str:
        return f"{self.entry.file}:{self.entry.line_no}"


def _numpy_to_model(arr: np.ndarray) -> tuple[int, np.ndarray]:
    """An npz array -> (TensorFlow dtype code, the model's array)."""
    kind = arr.dtype.kind
    if kind == "S":
        return tfdt.DT_STRING, tfdt.string_array(arr.reshape(-1), arr.shape)
    if kind in "OU":
        flat = []
        for v in arr.reshape(-1):
            if isinstance(v, (bytes, np.bytes_)):
                flat.append(bytes(v))
            elif isinstance(v, str):
                flat.append(v.encode("utf-8"))
            else:
                raise tfdt.TensorDecodeError(
                    f"an object array holds a {type(v).__name__}, not a string")
        return tfdt.DT_STRING, tfdt.string_array(flat, arr.shape)
    code = tfdt.tf_dtype_of(arr.dtype)
    return code, arr.astype(tfdt.numpy_dtype(code), copy=False)


class PayloadMixin:
    """Tensor and blob loading for :class:`~tbconvert.formats.tbdev.reader.TbdevReader`."""

    def _resolve(self, rel: str, chunk: _Chunk, run: str) -> Path | None:
        """A tensor/blob path from the JSON, only if it stays inside the experiment."""
        norm = rel.replace("\\", "/")
        parts = [p for p in norm.split("/") if p not in ("", ".")]
        root = self.source.root
        if norm.startswith("/") or _DRIVE_RE.match(norm) or ".." in parts or not parts:
            path = None
        else:
            path = root.joinpath(*parts)
            if not is_within(root, path):
                path = None
        if path is None:
            self.report.add("unsafe_path", f"{chunk.where}: {run}/{chunk.tag}: path {rel!r} "
                            "points outside the export; treated as missing",
                            path=chunk.entry.file, run=run, tag=chunk.tag)
        return path

    def _tensors(self, run: str, chunk: _Chunk) -> TensorSeries | None:
        n = len(chunk.steps)
        common = dict(run=run, tag=chunk.tag, metadata=chunk.metadata, steps=chunk.steps,
                      wall_times=chunk.wall_times, hidden=None)
        if chunk.payload is None:
            if n == 0:
                return TensorSeries(**common, dtypes=np.zeros(0, np.int32), tensors=())
            return self._lose_tensors(run, chunk, "tensors_file_path is null", "missing_tensors")
        path = self._resolve(chunk.payload, chunk, run)
        if path is None:
            return self._lose_tensors(run, chunk, None, "missing_tensors")
        if not path.is_file():
            return self._lose_tensors(run, chunk, f"{path} does not exist", "missing_tensors")
        try:
            arrays = self._load_npz(path)
        except _BadLine as exc:
            return self._lose_tensors(run, chunk, f"{path}: {exc}", "corrupt_tensor_file")
        if len(arrays) != n:
            return self._lose_tensors(run, chunk, f"{path} holds {len(arrays)} tensors for {n} "
                                      "steps; the whole chunk is left out rather than "
                                      "truncated", "tensor_count_mismatch")
        codes, tensors = [], []
        for arr in arrays:
            try:
                code, value = _numpy_to_model(arr)
            except tfdt.TensorDecodeError as exc:
                return self._lose_tensors(run, chunk, f"{path}: {exc}", "unsupported_tensor")
            codes.append(code)
            tensors.append(value)
        return TensorSeries(**common, dtypes=np.asarray(codes, np.int32), tensors=tuple(tensors))

    def _lose_tensors(self, run, chunk: _Chunk, why, kind) -> None:
        n = len(chunk.steps)
        if why is not None:
            self.report.add(kind, f"{chunk.where}: {run}/{chunk.tag}: {why}; {n} point(s) lost",
                            path=chunk.entry.file, run=run, tag=chunk.tag, count=n)
        return None

    def _load_npz(self, path: Path) -> list[np.ndarray]:
        try:
            with sourcefiles.open_binary(path) as f:
                magic = f.read(4)
        except OSError as exc:
            raise _BadLine(f"cannot read ({exc.strerror or exc})") from None
        if magic not in _ZIP_MAGIC:
            raise _BadLine("not an npz archive")
        try:
            return fastparse.read_npz(path, self.options.allow_pickle, layout.ARR_RE)
        except fastparse.PickledDataError:
            raise UnsupportedError(
                f"{path}: holds pickled string tensors (a TensorBoard 2.3 export); "
                "unpickling can run code from the file, so it is off by default. If you "
                "trust this export, rerun with --allow-pickle") from None
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
            raise _BadLine(f"unreadable npz ({exc})") from None
        except Exception as exc:  # unpickling with --allow-pickle can raise anything
            if self.options.allow_pickle:
                raise _BadLine(f"unreadable npz ({type(exc).__name__}: {exc})") from None
            raise

    def _blobs(self, run: str, chunk: _Chunk) -> BlobSequenceSeries:
        nulls = missing = 0
        sequences = []
        for seq in chunk.payload:
            out = []
            for rel in seq:
                if rel is None:
                    nulls += 1
                    out.append(None)
                    continue
                path = self._resolve(rel, chunk, run)
                data = None
                if path is not None:
                    try:
                        data = sourcefiles.read_bytes(path)
                    except OSError:
                        missing += 1
                out.append(data)
            sequences.append(out)
        where = f"{chunk.where}: {run}/{chunk.tag}"
        if nulls:
            self.report.add("missing_blob", f"{where}: {nulls} blob(s) are null in the export "
                            "(never uploaded, too large, or the download failed); kept as holes "
                            "in the same positions", path=chunk.entry.file, run=run,
                            tag=chunk.tag, count=nulls)
        if missing:
            self.report.add("missing_blob", f"{where}: {missing} blob file(s) do not exist; kept "
                            "as holes in the same positions", path=chunk.entry.file, run=run,
                            tag=chunk.tag, count=missing)
        return BlobSequenceSeries.from_sequences(
            run=run, tag=chunk.tag, metadata=chunk.metadata, steps=chunk.steps,
            wall_times=chunk.wall_times, hidden=None, sequences=sequences)
