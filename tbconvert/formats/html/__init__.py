"""A static, self-contained web view of an experiment (``--to html``; write-only).

``tbconvert convert SRC site/ --to html`` writes ``site/index.html`` with its
scripts, styles and data beside it: a page that opens from disk (``file://``)
or from any static host, offline, with no server code. See docs/html.md.
"""

from __future__ import annotations

from tbconvert.formats.base import Format
from tbconvert.formats.html.writer import HtmlWriter


class HtmlFormat(Format):
    name = "html"
    description = ("static web view: index.html with charts, media, text and hparams "
                   "(a directory; opens from disk or a static host); write-only")
    suffixes = ()
    directory = True
    reader = None
    writer = HtmlWriter


__all__ = ["HtmlFormat", "HtmlWriter"]
