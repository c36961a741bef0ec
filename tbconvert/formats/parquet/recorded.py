"""The row groups an archive's JSON records (rows, and checksums of each column), kept
compact while the archive is read.

As JSON objects, the 20,000 row groups of an archive of 20,000 runs (one each) took 34 MB
of dicts and strings; here each row group's checksums are 20 bytes a column in one buffer,
and a row group is made a dict again each time it is asked for.
"""

from __future__ import annotations

from array import array

from tbconvert.formats.parquet import schema as S

_WIDTH = 20     # bytes of a checksum (hex digits in the JSON: twice as many)


class Recorded:
    """The archive's recorded row groups, each added as the JSON gives it, up to the first
    that is damaged (``damaged``: its index and its JSON)."""

    def __init__(self) -> None:
        self._rows = array("q")
        self._sums = bytearray()
        self._odd: dict[int, dict] = {}     # row groups that are not packed (see _append)
        self.damaged: tuple[int, object] | None = None
        self.count = 0

    def add(self, obj) -> None:
        if self.damaged is None:
            try:
                self._append(S.row_group_from_json(obj, self.count))
            except S.BadMetadata:
                self.damaged = self.count, obj
        self.count += 1

    def _append(self, group: dict) -> None:
        crcs = group["crc32c"]
        packed = bytearray()
        for name in S.COLUMNS:
            text = crcs[name]
            try:
                raw = bytes.fromhex(text)
            except ValueError:
                break
            if len(raw) != _WIDTH or raw.hex() != text:
                break
            packed += raw
        if len(packed) != _WIDTH * len(S.COLUMNS) or not 0 <= group["rows"] < 1 << 63:
            # (kept as the JSON has it)
            self._odd[len(self._rows)] = group
            packed, group = bytearray(_WIDTH * len(S.COLUMNS)), {"rows": 0}
        self._rows.append(group["rows"])
        self._sums += packed

    def checked(self) -> Recorded:
        """Itself, once every row group was read: :class:`schema.BadMetadata` for the first
        that is damaged, as :func:`schema.row_groups_from_json` says."""
        if self.damaged is not None:
            S.row_group_from_json(self.damaged[1], self.damaged[0])
        return self

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> dict:
        i = range(len(self._rows))[i]     # (an IndexError past the end, as a list's)
        odd = self._odd.get(i)
        if odd is not None:
            return {"rows": odd["rows"], "crc32c": dict(odd["crc32c"])}
        at = i * _WIDTH * len(S.COLUMNS)
        crcs = {name: self._sums[at + k * _WIDTH:at + (k + 1) * _WIDTH].hex()
                for k, name in enumerate(S.COLUMNS)}
        return {"rows": self._rows[i], "crc32c": crcs}

    def __iter__(self):
        return (self[i] for i in range(len(self._rows)))
