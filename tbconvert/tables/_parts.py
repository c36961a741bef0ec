"""A table written to a file a part at a time, so that memory stays bounded whatever its rows:
the histogram table has a row per bucket (63 million rows for 100,000 legacy histograms,
which held whole took 8 GB)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np

from tbconvert.errors import UsageError

# Rows gathered before they are written out as a part (about 12 MB of histogram buckets).
PART_ROWS = 1 << 18
# Points of a chunk added to the table at once.
SLICE_POINTS = 64


def collect_into(add, collector, source, options, report, fmt) -> int:
    """Feed ``source`` to ``collector`` (a :class:`~tbconvert.columns.PointColumns` with
    ``add_chunk`` and ``take``), handing its rows to ``add(table)`` every :data:`PART_ROWS`
    rows and at the end (a table of no rows when there were none); the rows handed."""
    from tbconvert.tables._source import feed
    handed = 0

    def take(_run, chunk) -> bool:
        nonlocal handed
        kept = False
        # a reader's chunk of histograms may make millions of rows: added a slice at a time
        for a in range(0, max(len(chunk), 1), SLICE_POINTS):
            piece = chunk if len(chunk) <= SLICE_POINTS else \
                chunk.take(np.arange(a, min(a + SLICE_POINTS, len(chunk))))
            kept |= collector.add_chunk(piece)
            if collector.rows >= PART_ROWS:
                handed += collector.rows
                add(collector.take())
        return kept
    feed(source, options, report, take, fmt)
    if collector.rows or not handed:
        handed += collector.rows
        add(collector.take())
    return handed


@contextlib.contextmanager
def table_file(path, *, force: bool = False, storage_options=None):
    """``add(table)`` for each part of one table (parts of one schema, in order), written to
    ``path`` (``.csv`` or ``.parquet``, or such a URL) as ``save_table`` writes a whole
    table: under a temporary name, in place once complete."""
    from tbconvert import remote
    from tbconvert.output import AtomicOutput
    from tbconvert.tables import TABLE_SUFFIXES, check_table_path
    path = remote.localize(path)
    if remote.is_remote(path):
        check_table_path(path, force=force, storage_options=storage_options)
        stage = remote.staged_output(path, storage_options, force=force, directory=False)
        try:
            with table_file(stage.local, force=True) as add:
                yield add
        except BaseException:
            stage.abort()
            raise
        stage.commit()
        return
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise UsageError(f"{path}: name the output .csv or .parquet")
    with AtomicOutput(path, force=force, directory=False).writing() as tmp:
        if suffix == ".csv":
            from tbconvert.formats.csv import encode
            with open(tmp, "wb") as f:
                first = [True]

                def add_rows(table) -> None:
                    encode.write(table, f, with_header=first[0])
                    first[0] = False
                yield add_rows
            return
        import pyarrow.parquet as pq

        from tbconvert.formats.parquet.writer import local_sink
        with local_sink(tmp) as sink:
            writer = []

            def add_group(table) -> None:
                if not writer:
                    writer.append(pq.ParquetWriter(sink, table.schema))
                writer[0].write_table(table)
            try:
                yield add_group
            finally:
                if writer:
                    writer[0].close()
