"""Text from the logs as safe HTML: Markdown rendered with raw HTML off, then sanitised.

Text summaries are untrusted. Raw HTML in them is shown as text (markdown-it
with ``html`` off), and the rendered HTML is cleaned by nh3 with a short list
of tags, no images (they would load from anywhere) and links limited to
whole http(s) and mailto URLs. The page also forbids inline script by its
Content-Security-Policy, so a mistake here still runs nothing.
"""

from __future__ import annotations

import numpy as np

_TAGS = {"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "b", "i", "code",
         "pre", "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td",
         "del", "s", "span"}
_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}
_renderer = None


def _md():
    global _renderer
    if _renderer is None:
        from markdown_it import MarkdownIt
        _renderer = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
    return _renderer


def sanitise(fragment: str) -> str:
    import nh3
    return nh3.clean(fragment, tags=_TAGS, attributes=_ATTRIBUTES,
                     url_schemes={"http", "https", "mailto"}, link_rel="noopener noreferrer nofollow",
                     # a relative link ("../x", "//host/x") would open a file beside the
                     # page, or another site: only whole http(s) and mailto URLs stay
                     url_relative="deny", filter_style_properties={"text-align"})


def render(text: str) -> str:
    """One Markdown string as sanitised HTML."""
    return sanitise(_md().render(text))


def render_tensor(strings: np.ndarray) -> str:
    """A text point: rank 0 is one Markdown paragraph; rank 1 and 2 a table of them, as
    TensorBoard's text dashboard shows them."""
    arr = np.asarray(strings, dtype=object)
    if arr.ndim == 0:
        return render(arr.item())
    if arr.ndim > 2:
        return render("```\n" + "\n".join(str(s) for s in arr.reshape(-1)) + "\n```")
    rows = arr.reshape(-1, 1) if arr.ndim == 1 else arr
    cells = "".join("<tr>" + "".join(f"<td>{_md().render(str(c))}</td>" for c in row) + "</tr>"
                    for row in rows)
    return sanitise(f"<table><tbody>{cells}</tbody></table>")
