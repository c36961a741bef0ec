"""A source that is not in the format the caller named (``--from``, ``format=``).

That is a wrong guess, not damage: a directory read as an HDF5 file, a logdir read as a
Parquet dataset or an export read as event files is a :class:`FormatError` (exit 3, as
for a source whose format cannot be told), never corrupt data (exit 4), and the message
names the format the source looks like, when one can be told.
"""

from __future__ import annotations

from pathlib import Path

from tbconvert.errors import FormatError


def not_this_format(path, named: str, what: str) -> FormatError:
    """The error for ``path`` read as format ``named``: ``what`` it is or lacks, then the
    format its suffix or content tells, if another."""
    from tbconvert import registry  # the catalogue of formats sits beside them
    try:
        looks = registry.detect_source(Path(path)).name
    except FormatError:
        looks = None
    hint = (f"it looks like {looks} data (leave --from out to read it as that)"
            if looks is not None and looks != named else "check the path and --from")
    return FormatError(f"{path}: {what}, so it is not {named} data; {hint}")
