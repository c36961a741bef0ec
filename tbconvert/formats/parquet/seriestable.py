"""The series of an archive file as its reader keeps them while it reads the file.

An entry is ``(run_index, tag, kind, metadata, scalar dtype or None)``. Kept as tuples,
with a string and a :class:`~tbconvert.model.Metadata` of their own, 100,000 series took
24 MB for as long as the file was read. Here the tags are one UTF-8 buffer, and what the
series of a plugin share (kind, dtype, plugin, its content, description, data class) is
kept once: about 40 bytes a series. An entry is made again each time it is asked for.
"""

from __future__ import annotations

from array import array

from tbconvert.model import Metadata

# (tags come from JSON, which may hold lone surrogates: they come back as they were)
_UTF8 = "utf-8"
_ERRORS = "surrogatepass"


class SeriesTable:
    def __init__(self) -> None:
        self._runs = array("q")
        self._shapes = array("l")      # each series' index into _shared
        self._tag_ends = array("q")
        self._tags = bytearray()
        self._shared: list[tuple] = []
        self._shared_ids: dict[tuple, int] = {}
        self._shown: dict[int, str] = {}   # display names that are not the series' tag

    @classmethod
    def of(cls, entries) -> SeriesTable:
        table = cls()
        for entry in entries:
            table.append(entry)
        return table

    def append(self, entry: tuple) -> None:
        run, tag, kind, md, dtype = entry
        shared = (kind, dtype, md.plugin_name, md.plugin_content, md.description, md.data_class)
        k = self._shared_ids.setdefault(shared, len(self._shared))
        if k == len(self._shared):
            self._shared.append(shared)
        i = len(self._runs)
        self._runs.append(run)
        self._shapes.append(k)
        self._tags += tag.encode(_UTF8, _ERRORS)
        self._tag_ends.append(len(self._tags))
        if md.display_name != tag:
            self._shown[i] = md.display_name

    def done(self) -> None:
        """No more entries: what was kept to find shared parts goes."""
        self._shared_ids = {}

    def __len__(self) -> int:
        return len(self._runs)

    def __getitem__(self, i: int) -> tuple:
        i = range(len(self._runs))[i]     # (an IndexError past the end, as a list's)
        kind, dtype, plugin, content, description, data_class = self._shared[self._shapes[i]]
        start = self._tag_ends[i - 1] if i else 0
        tag = self._tags[start:self._tag_ends[i]].decode(_UTF8, _ERRORS)
        md = Metadata(plugin_name=plugin, plugin_content=content,
                      display_name=self._shown.get(i, tag), description=description,
                      data_class=data_class)
        return self._runs[i], tag, kind, md, dtype

    def __iter__(self):
        return (self[i] for i in range(len(self._runs)))

    def run(self, i: int) -> int:
        return self._runs[i]

    def kind(self, i: int) -> str:
        return self._shared[self._shapes[i]][0]
