"""A tbconvert Parquet archive as a Dask DataFrame, one partition per part file.

Each partition's task reads its file as tbconvert's reader does (its metadata and its
checksums checked: see docs/archives.md), so a damaged or edited archive raises
:class:`~tbconvert.errors.CorruptDataError` naming the file instead of giving its rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from tbconvert.errors import CorruptDataError, MissingDependencyError, UsageError
from tbconvert.formats.parquet import MARKER_FILE

# The read_parquet options a checked read honours; any other would go unapplied.
_OPTIONS = ("columns", "filters")


def to_dask(path, *, storage_options: dict | None = None, **read_parquet_options):
    """A lazy ``dask.dataframe`` of the archive at ``path``: a directory dataset (the parts
    its marker lists, one partition each, in the order of their names, as Dask sorts them)
    or a single ``.parquet`` file; ``path`` may be
    an fsspec URL (``s3://bucket/logs.dataset``) with ``storage_options``.

    Columns and dtypes are the archive's (see ``docs/archives.md``); text columns (run, tag,
    plugin name...) come as pandas' Arrow-backed strings, as ``pandas.read_parquet`` gives
    them with pandas 3 (Dask's ``dataframe.convert-string`` setting decides). ``columns=``
    and ``filters=`` are taken as :func:`dask.dataframe.read_parquet` takes them.

    Every file is checked as tbconvert's reader checks it: a file without tbconvert's
    metadata is refused here (as ``tbconvert info`` refuses it), and each partition's task
    compares the file's values with the checksums written with them before giving any, so
    a damaged or edited archive raises :class:`~tbconvert.errors.CorruptDataError` naming
    the file when computed.
    """
    try:
        import dask.dataframe as dd
    except ImportError:
        raise MissingDependencyError("to_dask needs Dask: pip install 'tbconvert[dask]'") from None
    from tbconvert import remote
    other = sorted(set(read_parquet_options) - set(_OPTIONS))
    if other:
        raise UsageError(f"to_dask takes columns= and filters=, not {', '.join(other)}= "
                         "(it reads each file itself, to check it)")
    import dask
    from dask.utils import natural_sort_key
    # in the order of their names, as dask.dataframe.read_parquet sorts files
    files = sorted(_parts(remote.localize(path), storage_options), key=natural_sort_key)
    strings = _arrow_strings()
    columns = read_parquet_options.get("columns")
    if not files:       # a dataset of no run
        from tbconvert.formats.parquet import schema as S
        with dask.config.set({"dataframe.convert-string": False}):
            return dd.from_pandas(_to_pandas(_plain(S.SCHEMA).empty_table(), strings,
                                             columns), npartitions=1)
    # the first file's footer: refuses what tbconvert did not write now, not when computed
    meta = _to_pandas(_checked_schema(files[0], storage_options).empty_table(), strings,
                      columns)
    # The text columns are made Arrow strings here: Dask's own conversion would make the
    # byte and list columns strings too (read_parquet keeps them objects).
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(_read_part, files, meta=meta, label="tbconvert-read-parquet",
                           enforce_metadata=False, storage_options=storage_options,
                           filters=read_parquet_options.get("filters"), strings=strings,
                           columns=columns)


def _arrow_strings() -> bool:
    """Whether Dask gives text as Arrow-backed strings (its ``dataframe.convert-string``)."""
    from dask.dataframe.utils import pyarrow_strings_enabled
    return bool(pyarrow_strings_enabled())


def _read_part(source, *, storage_options, filters, strings, columns=None):
    """One partition: the file's rows once they match its checksums (every column is read
    to check them, then ``filters`` and ``columns`` applied)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    archive = _open_archive(source, storage_options)
    try:
        schema = _plain(archive.file.schema_arrow)
        table = pa.Table.from_batches([_plain_batch(b, schema)
                                       for b in archive.verified_batches()], schema=schema)
    finally:
        archive.close()
    if filters:
        table = table.filter(pq.filters_to_expression(filters))
    return _to_pandas(table, strings, columns)


def _open_archive(source, storage_options):
    """``source`` (a local path or a URL) opened as tbconvert's reader opens an archive: its
    metadata checked (:class:`CorruptDataError` if not tbconvert's, or damaged)."""
    from tbconvert import remote
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet.reader import ArchiveFile
    from tbconvert.report import Report
    if not remote.is_remote(source):
        return ArchiveFile(Path(source), Options(), Report())
    fs, key = remote.urls.filesystem(source, storage_options)
    return ArchiveFile(source, Options(), Report(), fh=_on_store(source, fs.open, key, "rb"))


def _on_store(url: str, call, *args):
    """``call(*args)``, a store's failure told in one line (no such bucket, access denied,
    the endpoint unreachable...) as every command tells it."""
    from tbconvert.remote.failures import describe
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - a store's own error, said in one line
        raise describe(exc, url) from None


def _checked_schema(source, storage_options):
    """The Arrow schema of the archive ``source`` as partitions give it, once its tbconvert
    metadata is found and matches its checksum."""
    archive = _open_archive(source, storage_options)
    try:
        return _plain(archive.file.schema_arrow)
    finally:
        archive.close()


def _plain(schema):
    """``schema`` with text columns as strings: the reader keeps names dictionary-encoded,
    Dask gives them as text."""
    import pyarrow as pa
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                      for f in schema], metadata=None)


def _plain_batch(batch, schema):
    import pyarrow as pa
    return pa.RecordBatch.from_arrays(
        [col.cast(field.type) if col.type != field.type else col
         for col, field in zip(batch.columns, schema, strict=True)], schema=schema)


def _to_pandas(table, strings: bool, columns):
    """The pandas frame ``dask.dataframe.read_parquet`` makes of ``table``."""
    import pandas as pd
    import pyarrow as pa
    if columns is not None:
        table = table.select(list(columns))
    mapper = None
    if strings:
        text = pd.StringDtype("pyarrow")
        mapper = {pa.string(): text, pa.large_string(): text}.get
    return table.to_pandas(types_mapper=mapper)


def _parts(path, storage_options) -> list:
    from tbconvert import remote
    if remote.is_remote(str(path)):
        url = str(path).rstrip("/")
        fs, root = remote.urls.filesystem(url, storage_options)
        # (not there at all, or not to be read: told now, as the commands tell it)
        if _on_store(url, fs.info, root).get("type") != "directory":
            return [url]
        marker = _on_store(url, _remote_marker, fs, root, url)
        files = [p["file"] for p in marker.get("parts", [])]
        fs.invalidate_cache(root)
        there = {key.rstrip("/").rsplit("/", 1)[-1]
                 for key in _on_store(url, fs.ls, root, False)}
        _all_there(url, files, there)
        return [f"{url}/{f}" for f in files]
    path = Path(path)
    if not path.is_dir():
        _check_parquet(path)
        return [str(path)]
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet.reader import read_marker
    from tbconvert.report import Report
    marker = read_marker(path, Options(), Report())
    files = [p["file"] for p in marker["parts"]]
    _all_there(path, files, {f for f in files if (path / f).is_file()})
    return [str(path / f) for f in files]


def _remote_marker(fs, root: str, url: str) -> dict:
    try:
        return json.loads(fs.cat_file(f"{root}/{MARKER_FILE}"))
    except (FileNotFoundError, ValueError) as exc:
        raise CorruptDataError(f"{url}: not a tbconvert Parquet dataset ({exc})") from None


def _all_there(where, files: list, there: set) -> None:
    missing = [f for f in files if f not in there]
    if missing:
        raise CorruptDataError(f"{where}: damaged dataset: {len(missing)} part(s) its "
                               f"{MARKER_FILE} lists are missing ({missing[0]}...)")


def _check_parquet(path: Path) -> None:
    """A clear error for what Dask would fail on with a Parquet reader's message."""
    from tbconvert import registry
    from tbconvert.errors import FormatError
    fmt = registry.detect_source(path)      # FormatError: missing, or no known format
    if fmt.name != "parquet":
        raise FormatError(f"{path}: a {fmt.name} source; to_dask reads Parquet archives "
                          f"(convert it to one first: tbconvert.convert({str(path)!r}, "
                          "'archive.parquet'))")
