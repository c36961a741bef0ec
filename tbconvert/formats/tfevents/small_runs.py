"""Small runs read together.

A hyperparameter sweep is hundreds of runs of a few tens of kilobytes each. Read one at a
time, each file pays the fixed cost of framing its records and of decoding them by
template: about a millisecond a run, more than its bytes cost. Here the files of several
small runs are framed and decoded as one buffer, and each file's records then go to its run
as if it had been read on its own (:meth:`TfeventsReader.read_blocks`).

The files are put together only when that cannot change what is read: every one a regular
file read whole, and the records of the joined bytes tiling each file, from its first byte
to its last, without damage. Framing then finds in each file exactly the records a reading
of that file alone finds, and the bulk decoders are exact whatever records they are given.
Anything else (damage, a file that changes, an error) leaves the runs to be read one by one,
as usual, so that every problem is reported in the usual words.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tbconvert import sourcefiles
from tbconvert.errors import raise_if_exhausted
from tbconvert.formats.tfevents import event_files, records
from tbconvert.formats.tfevents.assemble import RunAssembler
from tbconvert.formats.tfevents.blob_templates import BlobColumns
from tbconvert.formats.tfevents.summary_templates import TagColumns

# A run of at most this many bytes of event files is read with others ...
SMALL_RUN_BYTES = 256 << 10
# ... up to this many bytes and files at once (the decoded points of a group, and a few
# objects per file, are held until its runs are built: 20,000 runs of a few hundred bytes in
# one group took 70 MiB more than read alone).
GROUP_BYTES = 4 << 20
GROUP_FILES = 256
# What a small run costs beyond its bytes, read and written with others, in bytes of a
# large run's reading (a sweep's runs of 27 KB took 0.7 ms each, as long as 80 KB of a
# large run).
SMALL_RUN_COST = 48 << 10


class Apart(Exception):
    """These files are not read together (see the module's notes)."""


def groups(sizes: list[int], files: list[int], cap: int = GROUP_BYTES) -> list[list[int]]:
    """The runs of ``sizes`` bytes in ``files`` event files each, in order, as groups of
    run indices: consecutive small runs together, up to ``cap`` bytes (at most
    :data:`GROUP_BYTES`) and :data:`GROUP_FILES` files a group; a larger run alone."""
    cap = min(cap, GROUP_BYTES)
    out: list[list[int]] = []
    held = count = 0
    small = False
    for k, size in enumerate(sizes):
        if size > SMALL_RUN_BYTES:
            out.append([k])
            small = False
            continue
        if not small or held + size > cap or count + files[k] > GROUP_FILES:
            out.append([])
            held = count = 0
            small = True
        out[-1].append(k)
        held += size
        count += files[k]
    return out


def plan(reader, runs: list, sizes: list[int]) -> Iterator[tuple[str, Callable]]:
    """``(name, read)`` of every run in order, ``read(progress)`` giving its
    assembler (as ``reader.read_run`` does); small runs are read in groups, a group when
    its first run is asked for. ``sizes``: the bytes of each run's files."""
    for group in groups(sizes, [len(files) for _, files in runs]):
        batch = together(reader, [runs[k] for k in group])
        for j, k in enumerate(group):
            name, paths = runs[k]
            yield name, _reading(reader, name, paths, batch, j)


def _reading(reader, name: str, files: list[Path], batch: Group | None, j: int) -> Callable:
    if batch is not None and batch.has(j):
        return lambda progress: batch.read_run(j, progress)
    return lambda progress: reader.read_run(name, files, progress=progress)


def together(reader, runs: list) -> Group | None:
    """The runs ``(name, files)`` read together, None when they are read one by one."""
    return _group(reader, runs) if len(runs) > 1 else None


def _group(reader, runs: list) -> Group | None:
    try:
        return Group(reader, runs)
    except Apart:
        return None
    except Exception as exc:  # noqa: BLE001 - each run is then read alone, and its fault told
        raise_if_exhausted(exc)
        return None


def _tail(path: Path, start: int) -> bytes:
    """The bytes of the regular file ``path`` from ``start`` to its end; :class:`Apart` for
    anything unusual."""
    try:
        fd = sourcefiles.open_regular(path)
    except OSError:
        raise Apart from None
    try:
        size = os.fstat(fd).st_size
        if size < start:
            raise Apart
        data = os.pread(fd, size - start + 1, start) if size > start else b""
    except OSError:
        raise Apart from None
    finally:
        os.close(fd)
    if len(data) != size - start:           # growing or shrinking as it is read
        raise Apart
    return data


def held_records(items: list[tuple[object, Path, int]],
                 apart: bool = False) -> dict[object, dict[Path, tuple]]:
    """The bytes ``[start, end)`` of the files ``(key, path, start)`` framed and decoded as
    one buffer, each ``start`` where a record begins: per key, ``{path: (size, start,
    blocks, decoded)}`` as :meth:`TfeventsReader.read_blocks` takes them (the reader's
    ``held``). A key any of whose files could not be taken is left out (its files read as
    usual); :class:`Apart` when none could, or their records do not tile every file.
    ``apart``: each file is framed on its own, and a key whose records do not tile one of
    its files is left out, the others still read together (see :func:`_frames`)."""
    from tbconvert.formats.tfevents.reader import decode
    files: list[tuple[object, Path, int, bytes]] = []
    taken: dict = {}
    for key, path, start in items:
        if taken.get(key) is False:
            continue
        try:
            data = _tail(path, start)
        except Apart:
            taken[key] = False
            continue
        taken[key] = True
        files.append((key, path, start, data))
    files = [f for f in files if taken[f[0]]]
    if apart:
        files, starts, lengths, bounds = _frames(files)
    if not files:
        raise Apart
    sizes = np.array([len(f[3]) for f in files], dtype=np.int64)
    offsets = np.zeros(len(files) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    buf = b"".join(f[3] for f in files)
    if apart:
        starts = starts + np.repeat(offsets[:-1], np.diff(bounds))
    else:
        starts, lengths, damage = records.scan(buf)
        heads = starts - records.HEADER
        # record k of the buffer is of file f when bounds[f] <= k < bounds[f + 1]
        bounds = np.searchsorted(heads, offsets)
        whole = sizes > 0
        if damage or _framed(lengths) != len(buf) or not np.array_equal(
                heads[bounds[:-1][whole]], offsets[:-1][whole]):
            raise Apart
    columns, blob_columns, rest = decode(buf, starts, lengths, files=len(files))
    del buf
    per_file: list[tuple[list, list]] = [([], []) for _ in files]
    for cols in columns:
        for f, part in _cut(cols, bounds, _tag_columns):
            per_file[f][0].append(part)
    for blobs in blob_columns:
        for f, part in _cut(blobs, bounds, _blob_columns):
            per_file[f][1].append(part)
    cuts = np.searchsorted(rest, bounds)
    out: dict[object, dict[Path, tuple]] = {}
    for f, (key, path, start, data) in enumerate(files):
        lo, hi = int(bounds[f]), int(bounds[f + 1])
        block = records.Block(data, start, starts[lo:hi] - offsets[f], lengths[lo:hi], [])
        decoded = (per_file[f][0], per_file[f][1], rest[cuts[f]:cuts[f + 1]] - lo)
        out.setdefault(key, {})[path] = (start + len(data), start, [block] if data else [],
                                         decoded)
    return out


def _framed(lengths: np.ndarray) -> int:
    """The bytes that records of payloads ``lengths`` take with their framing: all of a
    buffer's when they tile it."""
    return int(lengths.sum()) + len(lengths) * (records.HEADER + records.FOOTER)


def _frames(files: list) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Each file's records framed on its own (the framing of unlike files joined, such as
    the new bytes of runs of different writers, took twice as long as of each alone): the
    files whose records tile them, and of those, every record's start in its own bytes, its
    length, and the bounds of each file's records (``bounds[f]:bounds[f + 1]``). A key with
    a file that does not tile (a record still being written at its end, damage) is left
    out whole: its run reads, and tells, as usual."""
    framed, dropped = [], set()
    for f in files:
        starts, lengths, damage = records.scan(f[3])
        if damage or _framed(lengths) != len(f[3]):
            dropped.add(f[0])
        else:
            framed.append((f, starts, lengths))
    framed = [x for x in framed if x[0][0] not in dropped]
    counts = np.array([len(x[1]) for x in framed], dtype=np.int64)
    bounds = np.zeros(len(framed) + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    empty = np.zeros(0, np.int64)
    return ([x[0] for x in framed],
            np.concatenate([x[1] for x in framed]) if framed else empty,
            np.concatenate([x[2] for x in framed]) if framed else empty, bounds)


class Group:
    """The files of several runs, framed and decoded as one buffer; each run then read from
    them with :meth:`read_run`. A run whose files could not be taken reads as usual."""

    def __init__(self, reader, runs: list) -> None:
        self.reader = reader
        self.runs = runs
        self._files = held_records([(j, p, 0) for j, (_, paths) in enumerate(runs)
                                    for p in paths
                                    if not p.name.endswith(event_files.PROFILE_EMPTY)])

    def has(self, j: int) -> bool:
        return j in self._files

    def read_run(self, j: int, progress, reader=None) -> RunAssembler:
        """Run ``j`` read from the group's records, as ``reader.read_run`` reads it (its
        ``_read_file`` takes the held records of each file); ``reader``: another than the
        group's (a run's own, whose report and counts are the run's alone)."""
        name, paths = self.runs[j]
        reader = reader or self.reader
        reader.held = self._files.pop(j)
        try:
            return reader.read_run(name, paths, progress=progress)
        finally:
            reader.held = {}


def _cut(cols, bounds: np.ndarray, make) -> Iterator[tuple[int, object]]:
    """``(file, columns)`` for each file some of ``cols``' rows are of: its rows, their
    record indices counted from the file's first record. Grouped columns stay grouped,
    their tags in order of each one's first record in the file (as decoding the file alone
    orders them), each tag's rows in read order."""
    index = np.asarray(cols.index, dtype=np.int64)
    n = len(index)
    if not n:
        return
    tags = getattr(cols, "tags", None)
    tag_of = np.zeros(n, np.int64) if tags is None else \
        np.repeat(np.arange(len(tags)), np.diff(cols.bounds))
    fid = np.searchsorted(bounds, index, side="right") - 1
    # rows by (file, tag), each such group's rows in read order ...
    key = fid * (1 if tags is None else len(tags)) + tag_of
    order = np.lexsort((index, key))
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, n])
    # ... and the groups of a file in order of their first record
    group_file = fid[order[starts]]
    ranked = np.lexsort((index[order[starts]], group_file))
    starts, counts, group_file = starts[ranked], counts[ranked], group_file[ranked]
    moved = np.r_[0, np.cumsum(counts)[:-1]]
    order = order[np.repeat(starts - moved, counts) + np.arange(n)]
    group_tag = tag_of[order[moved]]
    edges = np.flatnonzero(np.r_[True, group_file[1:] != group_file[:-1], True])
    row = 0
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        f = int(group_file[a])
        rows = int(counts[a:b].sum())
        take = order[row:row + rows]
        yield f, make(cols, take, index[take] - bounds[f], group_tag[a:b], counts[a:b])
        row += rows


def _tag_columns(cols: TagColumns, take, index, tags, counts) -> TagColumns:
    part = TagColumns(cols.tag, cols.simple, cols.code, index, cols.steps[take],
                      cols.wall_times[take], cols.values[take], cols.metadata,
                      position=cols.position)
    if cols.tags is not None:
        tags = tags.tolist()
        part.tags = [cols.tags[t] for t in tags]
        part.tag = part.tags[0]
        part.bounds = np.r_[0, np.cumsum(counts)].astype(np.int64)
        if cols.positions is not None:
            part.positions = [cols.positions[t] for t in tags]
    return part


def _blob_columns(cols: BlobColumns, take, index, tags, counts) -> BlobColumns:
    blobs = cols.blobs
    return BlobColumns(cols.tag, index, cols.steps[take], cols.wall_times[take], cols.head,
                       [blobs[i] for i in take.tolist()], cols.metadata)
