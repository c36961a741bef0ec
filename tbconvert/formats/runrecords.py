"""An archive's run-level events checked as they are read.

Event files hold a run's session logs and log messages as protobuf messages; an archive
holds their bytes and a kind name, which a program other than tbconvert may have edited
or damaged. Such a record costs itself (reported), not its run, and never reaches an
event-file writer that could not write it.
"""

from __future__ import annotations

from dataclasses import replace

from tbconvert.formats.recordlog import RecordLog
from tbconvert.model import Run
from tbconvert.report import Report


def checked(run: Run, report: Report, where: str) -> Run:
    """``run`` without its records that are no event (each reported)."""
    damaged = [k for k, record in enumerate(run.records) if record.damage() is not None]
    if not damaged:
        return run
    # (a second pass, and a copy, only for a run that holds damage)
    skip = set(damaged)
    kept = RecordLog(directory=getattr(run.records, "directory", None))
    for k, record in enumerate(run.records):
        if k in skip:
            report.add("damaged_record", f"{where}: run {run.name!r}, run-level event {k} "
                       f"(step {record.step}): {record.damage()}; skipped", run=run.name)
        else:
            kept.append(record)
    return replace(run, records=kept if isinstance(run.records, RecordLog) else tuple(kept))
