"""A tbconvert Parquet archive as a Dask DataFrame, one partition per part file."""

from __future__ import annotations

import json
from pathlib import Path

from tbconvert.errors import CorruptDataError, MissingDependencyError
from tbconvert.formats.parquet import MARKER_FILE


def to_dask(path, *, storage_options: dict | None = None, **read_parquet_options):
    """A lazy ``dask.dataframe`` of the archive at ``path``: a directory dataset (the parts
    its marker lists, one partition each, in the order of their names, as Dask sorts them)
    or a single ``.parquet`` file; ``path`` may be
    an fsspec URL (``s3://bucket/logs.dataset``) with ``storage_options``.

    Columns and dtypes are the archive's (see ``docs/archives.md``); text columns (run, tag,
    plugin name...) come as pandas' Arrow-backed strings, as ``pandas.read_parquet`` gives
    them with pandas 3 (Dask's ``dataframe.convert-string`` setting decides). Extra keyword
    arguments go to :func:`dask.dataframe.read_parquet` (``columns=``, ``filters=``...).
    """
    try:
        import dask.dataframe as dd
    except ImportError:
        raise MissingDependencyError("to_dask needs Dask: pip install 'tbconvert[dask]'") from None
    from tbconvert import remote
    files = _parts(remote.localize(path), storage_options)
    return dd.read_parquet(files, storage_options=storage_options, **read_parquet_options)


def _parts(path, storage_options) -> list:
    from tbconvert import remote
    if remote.is_remote(str(path)):
        import fsspec
        url = str(path).rstrip("/")
        fs, _, (root,) = fsspec.get_fs_token_paths(url, storage_options=storage_options or {})
        if not fs.isdir(root):
            return [url]
        try:
            marker = json.loads(fs.cat_file(f"{root}/{MARKER_FILE}"))
        except (OSError, ValueError) as exc:
            raise CorruptDataError(f"{url}: not a tbconvert Parquet dataset ({exc})") from None
        files = [p["file"] for p in marker.get("parts", [])]
        fs.invalidate_cache(root)
        there = {key.rstrip("/").rsplit("/", 1)[-1] for key in fs.ls(root, detail=False)}
        missing = [f for f in files if f not in there]
        if missing:
            raise CorruptDataError(f"{url}: damaged dataset: {len(missing)} part(s) its "
                                   f"{MARKER_FILE} lists are missing ({missing[0]}...)")
        return [f"{url}/{f}" for f in files]
    path = Path(path)
    if not path.is_dir():
        _check_parquet(path)
        return [str(path)]
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet.reader import read_marker
    from tbconvert.report import Report
    marker = read_marker(path, Options(), Report())
    return [str(path / p["file"]) for p in marker["parts"]]


def _check_parquet(path: Path) -> None:
    """A clear error for what Dask would fail on with a Parquet reader's message."""
    from tbconvert import registry
    from tbconvert.errors import FormatError
    fmt = registry.detect_source(path)      # FormatError: missing, or no known format
    if fmt.name != "parquet":
        raise FormatError(f"{path}: a {fmt.name} source; to_dask reads Parquet archives "
                          f"(convert it to one first: tbconvert.convert({str(path)!r}, "
                          "'archive.parquet'))")
