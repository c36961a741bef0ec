"""Coverage-guided fuzzing of the Parquet and HDF5 archive readers (atheris).

    python fuzz/fuzz_archives.py [CORPUS_DIR] [-max_total_time=60] [libFuzzer flags]

Seeds are made at start-up: the fixture logdirs converted to both archive formats, plus a
small archive of every kind of series. An input is one byte choosing the format and how it
is read, then the file. HDF5 inputs are sealed again before reading (as a forger would), so
the fuzzer reaches HDF5 and tbconvert's own checks rather than stopping at the seal; Parquet
inputs are read with and without ``--ignore-checksum``. Reading must end in data, a
reported skip, or a TbconvertError; anything else is a finding.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["tbconvert"]):
    import tbconvert
    from tbconvert.errors import TbconvertError
    from tbconvert.formats.hdf5 import seal

FORMATS = ("parquet", "hdf5")
_WORK = Path(tempfile.mkdtemp(prefix="fuzz-archives-"))


def make_seeds(corpus: Path) -> None:
    """Archives made from the repository's fixtures (one input file each)."""
    import numpy as np

    from tbconvert import dtypes as dt
    from tbconvert.formats.base import Options
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries, TensorSeries

    corpus.mkdir(parents=True, exist_ok=True)
    sources = [ROOT / "fixtures" / d for d in ("torch_logdir", "tensorboardx_logdir")]
    for k, fmt in enumerate(FORMATS):
        suffix = ".parquet" if fmt == "parquet" else ".h5"
        for src in sources:
            if not src.is_dir():
                continue
            out = _WORK / f"{src.name}{suffix}"
            if not out.exists():
                tbconvert.convert(src, out)
            (corpus / f"{fmt}-{src.name}").write_bytes(bytes([k]) + out.read_bytes())
        out = _WORK / f"small{suffix}"
        if not out.exists():
            md = Metadata("scalars", b"", "", "", DataClass.SCALAR)
            hist = Metadata("histograms", b"\x08\x01", "", "", DataClass.TENSOR)
            w = tbconvert.open_writer(out, options=Options())
            with w:
                w.write_run(Run("r", 1.0), iter([
                    ScalarSeries(run="r", tag="s", metadata=md, steps=np.arange(5),
                                 wall_times=np.arange(5.0), hidden=[0, 1, 0, 0, 0],
                                 values=np.arange(5, dtype=np.float32)),
                    TensorSeries(run="r", tag="t", metadata=hist, steps=[0, 1],
                                 wall_times=[0, 1], hidden=None,
                                 dtypes=[dt.DT_DOUBLE, dt.DT_STRING],
                                 tensors=(np.ones((2, 2)), dt.string_array([b"a"], (1,))))]))
        (corpus / f"{fmt}-small").write_bytes(bytes([k]) + out.read_bytes())


def read(data: bytes) -> None:
    if len(data) < 2:
        return
    mode = data[0]
    fmt = FORMATS[mode % 2]
    path = _WORK / ("input.parquet" if fmt == "parquet" else "input.h5")
    path.write_bytes(data[1:])
    if fmt == "hdf5" and len(data) > seal.USERBLOCK + 1 and data[1:1 + len(seal.MAGIC)] == seal.MAGIC:
        fd = os.open(path, os.O_RDWR)
        try:
            seal.write_seal(fd)
        finally:
            os.close(fd)
    try:
        loaded = tbconvert.read(path, format=fmt, ignore_checksum=bool(mode & 2), restarts="keep-all")
    except TbconvertError as exc:
        if "\n" in str(exc):
            raise AssertionError(f"a message of several lines: {exc!r}") from None
        return
    for tags in loaded.series.values():
        for series in tags.values():
            len(series)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    corpus = Path(args[0]) if args else _WORK / "corpus"
    make_seeds(corpus)
    argv = [sys.argv[0]] + [a for a in sys.argv[1:] if a.startswith("-")] + [str(corpus)]
    atheris.Setup(argv, lambda data: read(data))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
