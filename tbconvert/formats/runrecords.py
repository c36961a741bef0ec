"""An archive's run-level events checked as they are read.

Event files hold a run's session logs and log messages as protobuf messages; an archive
holds their bytes and a kind name, which a program other than tbconvert may have edited
or damaged. Such a record costs itself (reported), not its run, and never reaches an
event-file writer that could not write it.
"""

from __future__ import annotations

from dataclasses import replace

from tbconvert.model import Run
from tbconvert.report import Report


def checked(run: Run, report: Report, where: str) -> Run:
    """``run`` without its records that are no event (each reported)."""
    kept = []
    for k, record in enumerate(run.records):
        why = record.damage()
        if why is None:
            kept.append(record)
        else:
            report.add("damaged_record", f"{where}: run {run.name!r}, run-level event {k} "
                       f"(step {record.step}): {why}; skipped", run=run.name)
    return run if len(kept) == len(run.records) else replace(run, records=tuple(kept))
