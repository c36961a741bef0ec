"""A static, self-contained web view of an experiment (``--to html``; write-only).

``tbconvert convert SRC site/ --to html`` writes ``site/index.html`` with its
scripts, styles and data beside it: a page that opens from disk (``file://``)
or from any static host, offline, with no server code. See docs/html.md.
"""

from __future__ import annotations

from tbconvert.formats.base import Format, classes_on_demand, deferred

# Every point of the experiment, beside index.html: the data tbconvert reads back.
PARQUET_NAME = "experiment.parquet"


class HtmlFormat(Format):
    name = "html"
    description = ("static web view: index.html with charts, media, text and hparams "
                   "(a directory; opens from disk or a static host); write-only")
    reader = None
    writer = deferred("tbconvert.formats.html.writer:HtmlWriter")
    writer_requires = ("pyarrow", "crc32c", "google.protobuf", "tensorboard", "plotly",
                       "markdown_it", "nh3")


__all__ = ["HtmlFormat", "HtmlWriter", "PARQUET_NAME"]

__getattr__ = classes_on_demand(HtmlFormat, __name__)
