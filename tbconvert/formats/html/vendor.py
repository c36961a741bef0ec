"""The charting library the site bundles: plotly.js, from the ``plotly`` Python package.

It is copied into every site at write time, so the page needs no network; the
package is the ``html`` extra (``pip install 'tbconvert[html]'``).
"""

from __future__ import annotations

from importlib import resources

from tbconvert.errors import MissingDependencyError

_HINT = "the html format needs plotly (the charting library it bundles): pip install 'tbconvert[html]'"


def plotly_js() -> bytes:
    """The minified plotly.js bundle the installed ``plotly`` package ships."""
    try:
        root = resources.files("plotly")
    except ModuleNotFoundError:
        raise MissingDependencyError(_HINT) from None
    path = root / "package_data" / "plotly.min.js"
    try:
        return path.read_bytes()
    except OSError:
        raise MissingDependencyError(
            f"{_HINT} (the installed plotly has no package_data/plotly.min.js)") from None


def check() -> None:
    """Fail early, before anything is read, when a needed package is missing."""
    for module, extra in (("plotly", "plotly"), ("markdown_it", "markdown-it-py"), ("nh3", "nh3")):
        try:
            __import__(module)
        except ImportError:
            raise MissingDependencyError(
                f"the html format needs {extra}: pip install 'tbconvert[html]'") from None
