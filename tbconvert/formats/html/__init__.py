"""A static, self-contained web view of an experiment (``--to html``; write-only).

``tbconvert convert SRC site/ --to html`` writes ``site/index.html`` with its
scripts, styles and data beside it: a page that opens from disk (``file://``)
or from any static host, offline, with no server code. See docs/html.md.
"""

from __future__ import annotations

from tbconvert.formats.base import Format, deferred


class HtmlFormat(Format):
    name = "html"
    description = ("static web view: index.html with charts, media, text and hparams "
                   "(a directory; opens from disk or a static host); write-only")
    suffixes = ()
    directory = True
    reader = None
    writer = deferred("tbconvert.formats.html.writer:HtmlWriter")


__all__ = ["HtmlFormat", "HtmlWriter"]


def __getattr__(name: str):
    if name == "HtmlWriter":
        return HtmlFormat.writer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
