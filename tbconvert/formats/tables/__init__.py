"""Analysis tables as a conversion destination: CSV (write-only).

``tbconvert convert SRC out.csv`` writes every scalar point in long form
(``run,tag,step,wall_time,value``); ``--wide`` writes one row per (run, step)
and one column per tag. Other data (histograms, images, text...) is counted
and reported; the ``histograms``, ``media`` and ``hparams`` commands and the
:mod:`tbconvert.tables` API cover it.
"""

from __future__ import annotations

from tbconvert.formats.base import Format, deferred


class CsvFormat(Format):
    name = "csv"
    description = "scalars as a CSV table (long, or --wide); write-only"
    suffixes = (".csv",)
    directory = False
    reader = None
    writer = deferred("tbconvert.formats.tables.csv_writer:CsvWriter")


__all__ = ["CsvFormat", "CsvWriter"]


def __getattr__(name: str):
    if name == "CsvWriter":
        return CsvFormat.writer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
