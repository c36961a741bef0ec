"""An archive's run-level events checked as they are read.

Event files hold a run's session logs and log messages as protobuf messages; an archive
holds their bytes and a kind name, which a program other than tbconvert may have edited
or damaged. Such a record costs itself (reported), not its run, and never reaches an
event-file writer that could not write it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from tbconvert.formats.recordlog import RecordLog
from tbconvert.model import Run, RunRecord
from tbconvert.report import Report


def events(run: Run, report: Report, where: str) -> Iterator[RunRecord]:
    """The records of ``run`` that are events, in order, each other one reported as it is
    met: what :func:`checked` keeps, in one pass over records that may be millions."""
    for k, record in enumerate(run.records):
        why = record.damage()
        if why is None:
            yield record
        else:
            report.add("damaged_record", f"{where}: run {run.name!r}, run-level event {k} "
                       f"(step {record.step}): {why}; skipped", run=run.name)


def checked(run: Run, report: Report, where: str) -> Run:
    """``run`` without its records that are no event (each reported)."""
    if all(record.damage() is None for record in run.records):
        return run
    # (a second pass, and a copy, only for a run that holds damage)
    kept = events(run, report, where)
    return replace(run, records=RecordLog(kept, directory=run.records.directory)
                   if isinstance(run.records, RecordLog) else tuple(kept))
