"""Which formats exist, loaded by name on first use, and how a path's format is told."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
from pathlib import Path

from tbconvert.errors import FormatError, TbconvertError
from tbconvert.formats.base import Format, has_reader, has_writer

# name -> "module:Class"; kept alphabetical. Formats import nothing until asked for.
_BUILTIN: dict[str, str] = {
    "csv": "tbconvert.formats.tables:CsvFormat",
    "hdf5": "tbconvert.formats.hdf5:Hdf5Format",
    "html": "tbconvert.formats.html:HtmlFormat",
    "parquet": "tbconvert.formats.parquet:ParquetFormat",
    "tbdev": "tbconvert.formats.tbdev:TbdevFormat",
    "tfevents": "tbconvert.formats.tfevents:TfeventsFormat",
}
# Suffixes that name a format, so telling one does not import every format's libraries.
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "csv": (".csv",),
    "hdf5": (".h5", ".hdf5"),
    "parquet": (".parquet", ".pq"),
}

# Directory layouts are sniffed in this order (an export also holds no event files).
_SNIFF_ORDER = ("tbdev", "parquet", "tfevents")


def names() -> list[str]:
    """Names of the formats this installation knows."""
    return [name for name in _BUILTIN if _loadable(name)]


def _loadable(name: str) -> bool:
    module = _BUILTIN[name].split(":")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def get(name: str) -> type[Format]:
    """The format called ``name``; a did-you-mean error for unknown names."""
    if name not in _BUILTIN or not _loadable(name):
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise FormatError(f"unknown format {name!r}.{hint} Known: {', '.join(names())}")
    module, cls = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), cls)


def all_formats() -> list[type[Format]]:
    """Every format that loads; one that fails to import is left out, not fatal."""
    out = []
    for name in names():
        try:
            out.append(get(name))
        except (ImportError, AttributeError):
            continue
    return out


def suffix_format(path: Path) -> str | None:
    """The name of the format that ``path``'s suffix names (``x.parquet``: parquet), if any."""
    name = Path(path).name.lower()
    for fmt_name, suffixes in _SUFFIXES.items():
        if any(name.endswith(s) for s in suffixes):
            return fmt_name
    return None


def suffixes(name: str) -> tuple[str, ...]:
    """The suffixes that name format ``name`` (none for directory formats)."""
    return _SUFFIXES.get(name, ())


def _by_suffix(path: Path) -> type[Format] | None:
    name = path.name.lower()
    for fmt_name, suffixes in _SUFFIXES.items():
        if any(name.endswith(s) for s in suffixes) and _loadable(fmt_name):
            try:
                return get(fmt_name)
            except (ImportError, AttributeError):
                return None
    return None


def detect_source(path: Path) -> type[Format]:
    """Tell the format of an existing source from its suffix or its content."""
    if not path.exists():
        raise FormatError(f"{path}: no such file or directory")
    fmt = _by_suffix(path)
    if fmt is not None and has_reader(fmt):
        return fmt
    for name in _SNIFF_ORDER:
        try:
            fmt = get(name)
        except (TbconvertError, ImportError, AttributeError):
            continue
        if fmt.sniff(path):
            return fmt
    what = "directory" if path.is_dir() else "file"
    raise FormatError(
        f"{path}: cannot tell the format of this {what} (no event files, export or archive "
        f"found); pass --from with one of: "
        f"{', '.join(f.name for f in all_formats() if has_reader(f))}")


def detect_destination(path: Path) -> type[Format]:
    """Tell the destination format from its suffix; directories need ``--to``."""
    fmt = _by_suffix(path)
    if fmt is not None and has_writer(fmt):
        return fmt
    raise FormatError(
        f"{path}: cannot tell which format to write from the name; pass --to with one of: "
        f"{', '.join(f.name for f in all_formats() if has_writer(f))}")
