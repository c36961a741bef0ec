"""Which formats exist, loaded by name on first use, and how a path's format is told.

Each format has one :class:`FormatRecord`: its name, where its :class:`Format` class lives,
the suffixes that name it, whether it writes a directory, and where it stands in the order
directory sources are sniffed. Everything else asks the record; a format's class reads its
``suffixes`` and ``directory_output`` from it. Records name modules rather than hold
classes, so telling a format by suffix imports no format's libraries.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from tbconvert.errors import FormatError, UsageError
from tbconvert.formats.base import Format, has_reader, has_writer


@dataclass(frozen=True)
class FormatRecord:
    """The facts about one format that are known without importing it.

    Attributes:
      name: what ``--from``/``--to`` say, and the :class:`Format` subclass's ``name``.
      module, cls: where the :class:`Format` subclass is (imported on first use).
      suffixes: lower-case name endings that name the format (``.parquet``); none for
        formats told by content alone.
      directory_output: the writer writes a directory when the destination's name carries
        none of ``suffixes`` (so such a destination needs ``--to``).
      sniff_rank: sources whose suffix names no format are sniffed by the formats that have
        a rank, lowest first (an export holds no event files, so it is asked before the
        event-file layout); None: never sniffed.
    """

    name: str
    module: str
    cls: str
    suffixes: tuple[str, ...] = ()
    directory_output: bool = False
    sniff_rank: int | None = None

    def load(self) -> type[Format]:
        fmt = getattr(importlib.import_module(self.module), self.cls)
        if fmt.name != self.name:
            raise TypeError(f"{self.module}.{self.cls} is named {fmt.name!r}, "
                            f"not {self.name!r} as its record says")
        return fmt


_BUILTIN = (
    FormatRecord("csv", "tbconvert.formats.csv", "CsvFormat", suffixes=(".csv",)),
    FormatRecord("hdf5", "tbconvert.formats.hdf5", "Hdf5Format", suffixes=(".h5", ".hdf5"),
                 sniff_rank=1),
    FormatRecord("html", "tbconvert.formats.html", "HtmlFormat", directory_output=True),
    FormatRecord("parquet", "tbconvert.formats.parquet", "ParquetFormat",
                 suffixes=(".parquet", ".pq"), directory_output=True, sniff_rank=1),
    FormatRecord("tbdev", "tbconvert.formats.tbdev", "TbdevFormat", directory_output=True,
                 sniff_rank=0),
    FormatRecord("tfevents", "tbconvert.formats.tfevents", "TfeventsFormat",
                 directory_output=True, sniff_rank=2),
)

_RECORDS: dict[str, FormatRecord] = {r.name: r for r in _BUILTIN}


def register(record: FormatRecord) -> None:
    """Add a format (a plug-in's, or a test's). Its name and suffixes must be new."""
    if record.name in _RECORDS:
        raise UsageError(f"a format named {record.name!r} is already registered")
    for other in _RECORDS.values():
        shared = set(record.suffixes) & set(other.suffixes)
        if shared:
            raise UsageError(f"suffix {sorted(shared)[0]!r} already names format {other.name!r}")
    if any(s != s.lower() or not s.startswith(".") for s in record.suffixes):
        raise UsageError(f"suffixes are lower case and start with a dot: {record.suffixes!r}")
    _RECORDS[record.name] = record


def canonical(name: str) -> str:
    """The name of the format ``name`` names, in whatever case it came; an unknown name as it
    is (refused where it is used, with a did-you-mean)."""
    try:
        return record(name).name
    except UsageError:
        return name


def unregister(name: str) -> None:
    """Remove a format added by :func:`register`; built-in formats stay."""
    if any(r.name == name for r in _BUILTIN):
        raise UsageError(f"{name!r} is a built-in format")
    _RECORDS.pop(name, None)


def record(name: str) -> FormatRecord:
    """The record of format ``name``; a did-you-mean error for unknown names."""
    rec = _RECORDS.get(name) if isinstance(name, str) else None
    if rec is None and isinstance(name, str):
        # in any case, as a suffix is told: --to PARQUET as OUT.PARQUET
        rec = next((r for key, r in _RECORDS.items() if key.casefold() == name.casefold()),
                   None)
    if rec is None:
        if not isinstance(name, str):
            raise UsageError(f"a format is named by a string such as 'parquet', not "
                             f"{type(name).__name__} {name!r}; known: {', '.join(names())}")
        import difflib  # only for a name that is not a format's
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"unknown format {name!r}.{hint} Known: {', '.join(names())}")
    return rec


def names() -> list[str]:
    """Names of the formats this installation knows, alphabetical."""
    return sorted(_RECORDS)


def get(name: str) -> type[Format]:
    """The format called ``name`` (imported now); a did-you-mean error for unknown names.

    A format that fails to import is an error, not a format left out."""
    return record(name).load()


def all_formats() -> list[type[Format]]:
    """Every format, alphabetical (each imported)."""
    return [get(name) for name in names()]


def suffix_format(path: Path) -> str | None:
    """The name of the format that ``path``'s suffix names (``x.parquet``: parquet), if any."""
    name = Path(path).name.lower()
    for rec in _RECORDS.values():
        if name.endswith(rec.suffixes) and rec.suffixes:
            return rec.name
    return None


def check_suffix(dst, to_format: str | None) -> None:
    """``--to csv x.parquet`` would write a CSV file under a Parquet name: refuse it. So is
    ``x.parquet/``: the slash names a directory, the suffix a file of that format."""
    named = suffix_format(dst)
    text = os.fspath(dst) if isinstance(dst, (str, os.PathLike)) else ""
    if named is not None and text.endswith(("/", os.sep)) and to_format in (None, named):
        rec = _RECORDS[named]
        fix = (f"for a directory dataset name it without {'/'.join(rec.suffixes)} "
               f"(with --to {named}), or leave out the /" if rec.directory_output
               else "leave out the /")
        raise UsageError(f"{dst}: the trailing / names a directory, but the name says one "
                         f"{named} file; {fix}")
    if to_format not in _RECORDS or named is None or named == to_format:
        return
    wanted = suffixes(to_format)
    fix = (f"name it {' or '.join(wanted)}" if wanted
           else f"{to_format} writes a directory: choose a name without that suffix")
    raise UsageError(f"{dst}: the name says {named} but --to is {to_format}; {fix}, "
                     "or leave out --to")


def suffixes(name: str) -> tuple[str, ...]:
    """The suffixes that name format ``name`` (none for formats told by content)."""
    rec = _RECORDS.get(name)
    return rec.suffixes if rec is not None else ()


def _by_suffix(path: Path) -> type[Format] | None:
    name = suffix_format(path)
    return get(name) if name is not None else None


def detect_source(path: Path) -> type[Format]:
    """Tell the format of an existing source from its suffix or its content."""
    if not path.exists():
        raise FormatError(f"{path}: no such file or directory")
    named = _by_suffix(path)
    if named is not None and has_reader(named):
        return named
    ranked = sorted((r for r in _RECORDS.values() if r.sniff_rank is not None),
                    key=lambda r: r.sniff_rank)
    for rec in ranked:
        fmt = rec.load()
        if fmt.sniff(path):
            return fmt
    if named is not None:     # a suffix that names a format tbconvert only writes (.csv)
        raise FormatError(f"{path}: {named.name} is a format tbconvert writes but does not "
                          "read back; convert the source it was made from")
    what = "directory" if path.is_dir() else "file"
    entries: list = []
    try:     # one that cannot be looked into is told as such, not as an unknown format
        if what == "directory":
            from tbconvert.sourcefiles import listdir  # (no access time touched)
            entries = listdir(path)
            for entry in entries[:1]:     # (listed, but maybe not to be entered)
                os.stat(entry)
        else:
            open(path, "rb").close()
    except OSError as exc:
        from tbconvert.errors import raise_if_exhausted
        raise_if_exhausted(exc)
        raise FormatError(f"{path}: cannot be read ({exc.strerror})") from None
    data = web_view_data(path, [e.name for e in entries])
    if data is not None:
        raise FormatError(web_view_message(path, data))
    plugin = _plugin_of(path, what == "directory")
    if plugin is not None:
        # (--from would not help: the data of a plugin beside the event files is no format)
        raise FormatError(f"{path}: a {what} of TensorBoard's {plugin} plugin, not event data, "
                          "which tbconvert does not read; name the logdir that holds the "
                          "runs instead")
    readable = ", ".join(f.name for f in all_formats() if has_reader(f))
    if what == "directory" and not entries:
        raise FormatError(f"{path}: cannot tell the format of this directory: it is empty; "
                          "check the path")
    found = ("no event files at any depth (files named *tfevents*), no TensorBoard.dev export "
             "and no archive in it" if what == "directory"
             else "not an event file, nor a Parquet or HDF5 archive")
    raise FormatError(f"{path}: cannot tell the format of this {what}: {found}; check the path, "
                      f"or pass --from with one of {readable} to read it as that format")


def web_view_data(path: Path, names) -> Path | None:
    """The Parquet file of a web view tbconvert wrote (``--to html``) at the directory
    ``path`` whose entries are ``names``, None when it is no such directory."""
    from tbconvert.formats.html import PARQUET_NAME
    return path / PARQUET_NAME if {PARQUET_NAME, "index.html"} <= set(names) else None


def web_view_message(path: Path, data: Path) -> str:
    return (f"{path}: a web view tbconvert wrote (--to html); the data it shows is in {data}: "
            "pass that file instead")


def _plugin_of(path: Path, is_dir: bool) -> str | None:
    """The plugin whose files (beside event files) ``path``, as given, names or lies in."""
    from tbconvert.formats.tfevents import plugin_files
    found = plugin_files.place([*Path(path).parts, *([""] if is_dir else [])])
    return None if found is None else found[1]


def detect_destination(path: Path) -> type[Format]:
    """Tell the destination format from its suffix; directories need ``--to``."""
    fmt = _by_suffix(path)
    if fmt is not None and has_writer(fmt):
        return fmt
    raise UsageError(
        f"{path}: cannot tell which format to write from the name; pass --to with one of: "
        f"{', '.join(f.name for f in all_formats() if has_writer(f))}")
