"""Hdf5Writer: the archive, its numbered run groups each written apart and copied in
(:mod:`~tbconvert.formats.hdf5.staged`), names as attributes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import h5py
import numpy as np

from tbconvert.errors import OutputError, UnsupportedError
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.hdf5 import large, schema, staged
from tbconvert.formats.hdf5.rungroup import STR, check_run_name
from tbconvert.formats.hdf5.seal import USERBLOCK, write_seal
from tbconvert.formats.hdf5.sink import FailSafeFile, writing
from tbconvert.interrupts import deferred
from tbconvert.model import Experiment, Run, Series
from tbconvert.output import AtomicOutput
from tbconvert.report import Report

# The scratch file of a run written in this process: beside the archive's temporary file
# (one file system, so a full disk is seen alike) and named after it (so whatever removes
# the temporary output by its name's mark removes this one too).
SCRATCH_SUFFIX = ".run"


class Hdf5Writer(Writer):
    """Writes ``.h5``/``.hdf5`` archives."""

    keeps_hidden = True
    # Runs can be written apart (stage_run, in a worker with --jobs) and appended
    # (append_staged).
    run_parts = "staged"
    # A run staged by a long-lived cluster worker once came out with its object headers laid
    # out otherwise (the same content, other bytes), which was not reproduced on one machine:
    # until it is understood, HDF5 archives are not staged on clusters.
    staged_on_cluster = False

    def __init__(self, path: Path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        self._out = AtomicOutput(self.path, force=options.force, directory=False)
        self._file = None
        self._sink: FailSafeFile | None = None
        self._scratch: Path | None = None
        self._run_names: list[str] = []
        self._large_blobs = False    # a run stored a blob apart: see large.py
        self._file = self.guard(self._open)

    @deferred()
    def _open(self):
        self._sink = FailSafeFile(self._out.tmp)
        f = h5py.File(self._sink, "w", libver=staged.LIBVER, userblock_size=USERBLOCK)
        f.attrs[schema.ATTR_FORMAT] = schema.FORMAT_NAME
        f.attrs[schema.ATTR_VERSION] = np.int64(schema.SCHEMA_VERSION)
        f.create_group(schema.RUNS)
        return f

    def write_experiment(self, experiment: Experiment) -> None:
        for key in schema.EXPERIMENT_ATTRS:
            if "\x00" in getattr(experiment, key):
                raise UnsupportedError(
                    f"{self.path}: the experiment's {key.replace('_', ' ')} holds a NUL character, "
                    "which HDF5 strings cannot store; convert to Parquet instead")

        def do():
            with self._writing():
                attrs = self._file.attrs
                for key in schema.EXPERIMENT_ATTRS:
                    name = key if key.startswith(schema.ATTR_EXPERIMENT_PREFIX) \
                        else schema.ATTR_EXPERIMENT_PREFIX + key
                    attrs[name] = getattr(experiment, key)
                attrs[schema.ATTR_EXPERIMENT_EXTRA] = json.dumps(experiment.extra, ensure_ascii=False)
        self.guard(do)

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        # Written apart and copied in, as a worker's run is: one way, the same bytes.
        check_run_name(run.name)
        scratch = self._out.tmp.with_name(self._out.tmp.name + SCRATCH_SUFFIX)
        self._scratch = scratch
        info = self.guard(lambda: staged.stage(scratch, run, series))
        self.append_staged(scratch, info, run.name)
        self._scratch = None

    @staticmethod
    def stage_run(path: Path, run: Run, series: Iterable[Series], report: Report,
                  options: Options) -> object:
        """In a worker process: write ``run`` on its own into the new file ``path`` (created
        exclusively; removed again if writing fails, whose OSError is raised as it is).
        Returns what :meth:`append_staged` is to be handed with it."""
        return staged.stage(Path(path), run, series)

    def append_staged(self, path: Path, info: object, run_name: str) -> None:
        """Copy the run staged in ``path`` (under ``run_name``, the name it was staged with)
        into the archive as its next run, then remove ``path``. Called in run order."""
        index = len(self._run_names)
        if self._file is None:   # closed, or given up after a failure
            Path(path).unlink(missing_ok=True)
            raise OutputError(f"{self.path}: the archive is no longer being written; the run "
                              f"{run_name!r} was not added")
        self.guard(lambda: staged.copy_staged(Path(path), info, run_name, self._file,
                                              schema.run_path(index), self._writing))
        self._run_names.append(run_name)
        if isinstance(info, dict) and info.get("large_blobs"):
            self._large_blobs = True

    def _writing(self):
        return writing(self._sink)

    def close(self) -> None:
        def finish():
            with self._writing():
                if self._file is not None:
                    if self._large_blobs:
                        self._file.attrs[schema.ATTR_VERSION] = np.int64(large.VERSION)
                    self._file.create_dataset(schema.RUN_NAMES,
                                              data=np.array(self._run_names, dtype=object), dtype=STR)
                    self._file.close()
                    self._file = None
            with deferred():
                write_seal(self._sink.fd)
                self._sink.close()
            # Not held back with the rest: a signal that came meanwhile stops the conversion
            # here, before the output appears, rather than just after it (when "partial output
            # was removed" would be untrue).
            self._out.commit()
        self.guard(finish)

    @deferred()
    def abort(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except Exception:  # noqa: BLE001 - failing already; the file is removed
                pass
            self._file = None
        if self._sink is not None:
            self._sink.close()
        if self._scratch is not None:
            self._scratch.unlink(missing_ok=True)
        self._out.abort()
