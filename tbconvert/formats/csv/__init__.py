"""Analysis tables as a conversion destination: CSV (write-only).

``tbconvert convert SRC out.csv`` writes every scalar point in long form
(``run,tag,step,wall_time,value``); ``--wide`` writes one row per (run, step)
and one column per tag. Other data (histograms, images, text...) is counted
and reported; the ``histograms``, ``media`` and ``hparams`` commands and the
:mod:`tbconvert.tables` API cover it.
"""

from __future__ import annotations

from tbconvert.formats.base import Format, classes_on_demand, deferred


class CsvFormat(Format):
    name = "csv"
    description = "scalars as a CSV table (long, or --wide); write-only"
    reader = None
    writer = deferred("tbconvert.formats.csv.writer:CsvWriter")
    writer_requires = ("pyarrow",)


__all__ = ["CsvFormat", "CsvWriter"]

__getattr__ = classes_on_demand(CsvFormat, __name__)
