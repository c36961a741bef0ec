"""Coverage-guided fuzzing of the TensorBoard.dev export reader (atheris / libFuzzer).

Each input is one selector byte and a payload. The selector says which part of a
real export (a copy of ``fixtures/tbdev_export``) the payload replaces: one of the
three JSON-lines files, ``metadata.json``, a whole npz archive, or one ``.npy``
member inside an npz. The whole export is then read, every series produced and
every array touched. Only :class:`tbconvert.errors.TbconvertError` with a one-line
message may escape; anything else is a crash.

Seeds are made at start from the fixture, so nothing generated is kept in the
repository. Run from the repository root::

    PYTHONPATH=$PWD python fuzz/fuzz_tbdev.py -max_total_time=600 -timeout=10 \\
        -rss_limit_mb=2048 [-artifact_prefix=DIR/] [CORPUS_DIR]

``CORPUS_DIR`` (optional, created if missing) keeps what the campaign found
interesting; the seeds are always added.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = next((REPO / "fixtures" / "tbdev_export").glob("experiment_*"))
LINES = 3
PARTS = ("scalars.json", "tensors.json", "blob_sequences.json", "metadata.json", "npz", "npy")


class Harness:
    """A private copy of the fixture export, one part swapped per input."""

    def __init__(self, workdir: Path) -> None:
        self.exp = Path(workdir) / FIXTURE.name
        shutil.copytree(FIXTURE, self.exp)
        for name in PARTS[:3]:   # a few lines of each kind: same code paths, more runs a second
            path = self.exp / name
            path.write_text("".join(path.read_text().splitlines(keepends=True)[:LINES]))
        first = json.loads((self.exp / "tensors.json").read_text().splitlines()[0])
        self.npz = self.exp / first["points"]["tensors_file_path"]
        self.saved = {p: p.read_bytes() for p in self.targets()}

    def targets(self) -> list[Path]:
        return [self.exp / name for name in PARTS[:4]] + [self.npz]

    def seeds(self) -> list[bytes]:
        """One input per part: the real bytes, so mutation starts from valid files."""
        out = [bytes([i]) + self.saved[self.exp / name] for i, name in enumerate(PARTS[:4])]
        out.append(bytes([4]) + self.saved[self.npz])
        with zipfile.ZipFile(io.BytesIO(self.saved[self.npz])) as z:
            out.append(bytes([5]) + z.read(z.namelist()[0]))
        return out

    def place(self, data: bytes) -> Path:
        """Put the payload in place; returns the file it replaced."""
        part, payload = PARTS[data[0] % len(PARTS)], data[1:]
        if part == "npy":
            # the payload is arr_0; the other members stay as they were
            with zipfile.ZipFile(io.BytesIO(self.saved[self.npz])) as z:
                members = [(n, z.read(n)) for n in z.namelist()]
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as z:
                for i, (name, content) in enumerate(members):
                    z.writestr(name, payload if i == 0 else content)
            self.npz.write_bytes(buf.getvalue())
            return self.npz
        if part == "npz":
            self.npz.write_bytes(payload)
            return self.npz
        (self.exp / part).write_bytes(payload)
        return self.exp / part

    def run_one(self, data: bytes) -> None:
        """Read the export with ``data`` in place; raise on anything but a clean outcome."""
        from tbconvert.errors import TbconvertError
        from tbconvert.formats.base import Options
        from tbconvert.formats.tbdev import TbdevReader
        from tbconvert.report import Report

        if not data:
            return
        changed = self.place(data)
        try:
            report = Report()
            reader = TbdevReader(self.exp, Options(), report)
            reader.experiment()
            for run_data in reader.iter_runs():
                for series in run_data.series:
                    touch(series)
            for issue in report.issues:
                if "\n" in issue.message:
                    raise AssertionError(f"a report message of several lines: {issue.message!r}")
        except TbconvertError as exc:
            if "\n" in str(exc):
                raise AssertionError(f"an error message of several lines: {exc!r}") from None
        finally:
            changed.write_bytes(self.saved[changed])


def touch(series) -> None:
    """Use what a writer would use, so lazily broken data shows up here."""
    len(series)
    series.steps.sum()
    series.wall_times.sum()
    for name in ("values", "dtypes"):
        if hasattr(series, name):
            getattr(series, name).sum()
    for t in getattr(series, "tensors", ()):
        getattr(t, "shape", None)
    if hasattr(series, "sequences"):
        for seq in series.sequences():
            for blob in seq:
                if blob is not None:
                    len(blob)


def main(argv: list[str]) -> None:
    import atheris

    with atheris.instrument_imports():
        import tbconvert.budget
        import tbconvert.formats.tbdev  # noqa: F401  (instrumented for coverage)

    shm = Path("/dev/shm")   # each input rewrites a file: memory-backed where there is one
    work = Path(tempfile.mkdtemp(prefix="fuzz_tbdev_", dir=shm if shm.is_dir() else None))
    harness = Harness(work / "export")
    seed_dir = work / "seeds"
    seed_dir.mkdir()
    for i, seed in enumerate(harness.seeds()):
        (seed_dir / f"seed_{i}").write_bytes(seed)
    args = list(argv)
    if not any(a.startswith("-max_len=") for a in args):
        args.insert(1, "-max_len=65536")
    if not any(a.startswith("-len_control=") for a in args):
        args.insert(1, "-len_control=0")   # the npz seeds are kilobytes: mutate them whole
    corpus = [a for a in args[1:] if not a.startswith("-")]
    for c in corpus:
        Path(c).mkdir(parents=True, exist_ok=True)
    args.append(str(seed_dir))   # read-only extra corpus: new finds go to the first directory
    if not corpus:
        args.insert(1, str(work / "corpus"))
        (work / "corpus").mkdir()
    atheris.Setup(args, harness.run_one)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main(sys.argv)
