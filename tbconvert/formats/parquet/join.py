"""One Parquet file made of the row groups of others, their column chunks copied as encoded.

Encoding is most of the work of writing Parquet, and Arrow does it in the process that
writes the file. A single-file archive converted with ``--jobs N`` therefore has each run
encoded by a worker into a Parquet file of its own, and the leading process only copies the
column chunks into the one file and writes a footer that lists them where they now are. The
copies are the bytes Arrow's own writer would have put there: a column chunk does not depend
on where it lies, only its footer entry does (its offsets, moved here).
"""

from __future__ import annotations

from collections.abc import Callable

from tbconvert.formats.parquet import footer as F

# replace(group, column, its ColumnChunk struct, the file it lies in) -> (the new chunk's
# bytes, its ColumnChunk struct, where it starts in the file that struct describes), or None
# to copy the chunk as it is
Replace = Callable[[int, int, list, object], "tuple[bytes, list, int] | None"]

_BLOCK = 4 << 20
_OFFSETS = (F.CM_DATA_PAGE_OFFSET, F.CM_INDEX_PAGE_OFFSET, F.CM_DICTIONARY_PAGE_OFFSET)


def chunk_span(chunk: list) -> tuple[int, int]:
    """Where a column chunk's pages start in its file, and how many bytes they take."""
    meta = F.get(chunk, F.CC_META)
    if meta is None:
        raise ValueError("a column chunk without its metadata")
    for fid in (F.CC_OFFSET_INDEX_OFFSET, F.CC_COLUMN_INDEX_OFFSET):
        if F.get(chunk, fid) is not None:
            raise ValueError("a column chunk with a page index (not written by tbconvert)")
    if F.get(meta, F.CM_BLOOM_FILTER_OFFSET) is not None:
        raise ValueError("a column chunk with a bloom filter (not written by tbconvert)")
    starts = [F.get(meta, fid) for fid in (F.CM_DICTIONARY_PAGE_OFFSET, F.CM_INDEX_PAGE_OFFSET,
                                          F.CM_DATA_PAGE_OFFSET)]
    return min(s for s in starts if s), F.get(meta, F.CM_COMPRESSED_SIZE)


def _moved(chunk: list, delta: int) -> list:
    if F.get(chunk, F.CC_FILE_OFFSET):     # Arrow writes 0 (the field is deprecated)
        F.put(chunk, F.CC_FILE_OFFSET, F.I64, F.get(chunk, F.CC_FILE_OFFSET) + delta)
    meta = F.get(chunk, F.CC_META)
    for fid in _OFFSETS:
        if F.get(meta, fid):
            F.put(meta, fid, F.I64, F.get(meta, fid) + delta)
    return chunk


def _sizes(chunk: list) -> tuple[int, int]:
    meta = F.get(chunk, F.CC_META)
    return F.get(meta, F.CM_UNCOMPRESSED_SIZE), F.get(meta, F.CM_COMPRESSED_SIZE)


class JoinedFile:
    """A Parquet file written into the binary file ``fh`` from the row groups of others."""

    def __init__(self, fh, row_groups) -> None:
        self.fh = fh
        fh.write(F.MAGIC)
        self.pos = len(F.MAGIC)
        self.template: list | None = None     # the first file's footer: schema, creator...
        # each row group's footer struct, encoded, in a spool
        # (:class:`~tbconvert.formats.parquet.spool.Spool`: a file may have very many)
        self.row_groups = row_groups
        self.rows = 0
        # (src, at, to, size): bytes still to copy, grown while the next chunk follows on in
        # both files (a run's column chunks lie one after another: a copy per stretch, not
        # per chunk, saves a thousand system calls on a run of 6M points)
        self._pending: tuple | None = None
        # how far the file being appended has been copied
        self._src_pos = 0

    def append(self, src, replace: Replace | None = None) -> None:
        """Every row group of the Parquet file open in ``src``, in order (its footer is
        decoded anew here, so its structs are changed in place)."""
        fields, end = F.read(src)
        if self.template is None:
            self.template = fields
        elif F.get(fields, F.FILE_SCHEMA) != F.get(self.template, F.FILE_SCHEMA):
            raise ValueError("Parquet files of different schemas cannot be joined")
        _, groups = F.get(fields, F.FILE_ROW_GROUPS, (F.STRUCT, []))
        self._src_pos = len(F.MAGIC)
        for g, group in enumerate(groups):
            self._append_group(src, g, group, replace)
        self._copy_gap(src, end)
        self._flush_copy()

    def _copy_gap(self, src, at: int) -> None:
        """Copy what lies unlisted before ``at`` in ``src``: nothing in a file Arrow wrote
        alone; the null stand-in of a payload chunk written beside it (:mod:`large`), which
        the file written in one go holds there too."""
        if at > self._src_pos:
            self._copy(src, self._src_pos, at - self._src_pos)
            self._src_pos = at

    def _append_group(self, src, g: int, group: list, replace: Replace | None) -> None:
        etype, chunks = F.get(group, F.RG_COLUMNS)
        start = None
        unc_delta = comp_delta = 0
        # in the order they lie: a payload chunk (see large.py) may lie after later columns
        spans = [chunk_span(chunk) for chunk in chunks]
        for c in sorted(range(len(chunks)), key=lambda k: spans[k][0]):
            chunk = chunks[c]
            at, size = spans[c]
            if at < self._src_pos:
                raise ValueError("column chunks that overlap")
            self._copy_gap(src, at)
            self._src_pos = at + size
            if start is None:
                start = self.pos
            new = replace(g, c, chunk, src) if replace is not None else None
            if new is None:
                chunks[c] = _moved(chunk, self.pos - at)
                self._copy(src, at, size)
                continue
            data, new_chunk, at = new
            (old_unc, old_comp), (new_unc, new_comp) = _sizes(chunk), _sizes(new_chunk)
            unc_delta += new_unc - old_unc
            comp_delta += new_comp - old_comp
            chunks[c] = _moved(new_chunk, self.pos - at)
            self._flush_copy()
            self.fh.write(data)
            self.pos += len(data)
        F.put(group, F.RG_COLUMNS, F.LIST, (etype, chunks))
        for fid, delta in ((F.RG_TOTAL_BYTE_SIZE, unc_delta),
                           (F.RG_TOTAL_COMPRESSED_SIZE, comp_delta)):
            if F.get(group, fid) is not None:
                F.put(group, fid, F.I64, F.get(group, fid) + delta)
        if F.get(group, F.RG_FILE_OFFSET) is not None:
            F.put(group, F.RG_FILE_OFFSET, F.I64, self.pos if start is None else start)
        if F.get(group, F.RG_ORDINAL) is not None:
            F.put(group, F.RG_ORDINAL, F.I16, len(self.row_groups))
        self.rows += F.get(group, F.RG_NUM_ROWS)
        # encoded now, while later runs are still being read, not in the footer at the end
        self.row_groups.add(F.encode(group))

    def _copy(self, src, at: int, size: int) -> None:
        """``size`` bytes of ``src`` from ``at`` on, to come next in the file (copied by
        :meth:`_flush_copy`, with the bytes that follow them in ``src`` if those come next
        too)."""
        pending = self._pending
        if pending is not None and pending[0] is src and pending[1] + pending[3] == at:
            self._pending = (src, pending[1], pending[2], pending[3] + size)
        else:
            self._flush_copy()
            self._pending = (src, at, self.pos, size)
        self.pos += size

    def _flush_copy(self) -> None:
        """Copy the pending bytes: by the kernel from file to file where it can (no copy
        through this process's memory), else a block at a time (a chunk may hold a single
        point larger than a row group)."""
        if self._pending is None:
            return
        src, at, to, size = self._pending
        self._pending = None
        done = _copy_range(src, self.fh, at, to, size)
        if done < size:
            src.seek(at + done)
            left = size - done
            while left:
                block = src.read(min(left, _BLOCK))
                if not block:
                    raise ValueError("a column chunk runs past the end of its file")
                self.fh.write(block)
                left -= len(block)

    def close(self, key_value: dict[bytes, bytes]) -> None:
        """Write the footer (the file needs at least one :meth:`append`)."""
        self._flush_copy()
        fields = [list(f) for f in self.template]
        F.put(fields, F.FILE_NUM_ROWS, F.I64, self.rows)
        F.put(fields, F.FILE_ROW_GROUPS, F.LIST, (F.STRUCT, self.row_groups))
        F.put(fields, F.FILE_KEY_VALUE, F.LIST,
              (F.STRUCT, [[[F.KV_KEY, F.BINARY, k], [F.KV_VALUE, F.BINARY, v]]
                          for k, v in key_value.items()]))
        F.write(self.fh, fields)


def _copy_range(src, dst, at: int, to: int, size: int) -> int:
    """Copy ``size`` bytes of file ``src`` from ``at`` to ``to`` in file ``dst`` (at its end)
    with ``os.copy_file_range``; how many were copied before it stopped or was refused
    (0 where the system cannot: another platform, a file system that will not)."""
    import os
    copy = getattr(os, "copy_file_range", None)
    if copy is None or size <= 0:
        return 0
    dst.flush()
    done = 0
    try:
        while done < size:
            n = copy(src.fileno(), dst.fileno(), size - done, at + done, to + done)
            if n <= 0:
                break
            done += n
    except OSError:
        pass
    dst.seek(to + done)     # the writes that follow go after the copied bytes
    return done
