"""Members of an export's ``.npz`` tensor files, read within the resource budget.

Members of an uncompressed npz are read with a header cache (all points of a
series usually share dtype and shape); pickles are refused unless allowed.
"""

from __future__ import annotations

import io
import tokenize
import zipfile
import zlib

import numpy as np

from tbconvert import budget
from tbconvert.errors import CorruptDataError
from tbconvert.formats.tbdev import regular


class PickledDataError(ValueError):
    """An npz member holds pickled objects and pickles are not allowed."""


_header_cache: dict[bytes, tuple[np.dtype, bool, tuple]] = {}


def _npy(data: bytes, allow_pickle: bool) -> np.ndarray:
    if data[:6] == b"\x93NUMPY" and len(data) > 10:
        if data[6] == 1:
            start = 10 + int.from_bytes(data[8:10], "little")
            header = data[10:start]
        else:
            start = 12 + int.from_bytes(data[8:12], "little")
            header = data[12:start]
        cached = _header_cache.get(header)
        if cached is not None:
            dtype, fortran, shape = cached
            count = int(np.prod(shape, dtype=np.int64))
            if len(data) - start == count * dtype.itemsize:
                arr = np.frombuffer(data, dtype=dtype, count=count, offset=start)
                return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
    else:
        header = None
    _check_size(data)
    try:
        arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=allow_pickle)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise PickledDataError(str(exc)) from None
        raise
    if header is not None and arr.dtype != object and not arr.dtype.hasobject \
            and len(_header_cache) < 4096:
        _header_cache[header] = (arr.dtype, bool(np.isfortran(arr)) and arr.ndim > 1, arr.shape)
    return arr


def _check_size(data: bytes) -> None:
    """A header must not promise more bytes than the member holds: numpy would allocate the
    promised size before finding out (a length field must never cause a huge allocation)."""
    fp = io.BytesIO(data)
    major, _ = np.lib.format.read_magic(fp)
    read_header = (np.lib.format.read_array_header_1_0 if major == 1
                   else np.lib.format.read_array_header_2_0)
    try:
        shape, _, dtype = read_header(fp, max_header_size=1 << 16)
    except (SyntaxError, tokenize.TokenError, TypeError, KeyError, OverflowError) as exc:
        # numpy parses the header as Python literals; damage surfaces as any of these
        raise ValueError(f"unreadable array header ({type(exc).__name__})") from None
    # numpy accepts bools as sizes ((True,) is a shape to it) but a shape is made of ints
    if not isinstance(shape, tuple) or any(type(d) is not int for d in shape):
        raise ValueError(f"array header has a shape that is not integers: {shape!r:.80}")
    budget.check_dims(shape, "array header")
    if dtype.hasobject:
        return  # pickled: refused or unpickled later, sized by the pickle itself
    count = 1
    for dim in shape:
        count *= int(dim)
    if count * dtype.itemsize != len(data) - fp.tell():
        raise ValueError(f"array header declares {count * dtype.itemsize} bytes of data, "
                         f"the member holds {len(data) - fp.tell()}")


# Deflate expands at most about 1032:1; a member declaring more is damaged (or a zip bomb).
_MAX_DEFLATE_RATIO = 1100
# What one damaged member may raise while it is inflated and parsed.
MEMBER_ERRORS = (ValueError, TypeError, SyntaxError, tokenize.TokenError, EOFError, OSError,
                 zipfile.BadZipFile, zlib.error, KeyError, OverflowError, CorruptDataError)


class Npz:
    """An npz archive checked as a whole, its members read one at a time.

    Opening checks everything the central directory declares: member names
    ``arr_0 ... arr_N``, compression, each member's inflate ratio, and the total
    the members inflate to against :func:`budget.inflate_limit` of the file's
    size, so a zip bomb of many small members is refused before anything is
    inflated. Members are then inflated only when :meth:`array` asks for them.
    """

    def __init__(self, fh, file_size: int, member_re) -> None:
        self._zf = zipfile.ZipFile(fh)
        try:
            self._members = self._check(file_size, member_re)
        except BaseException:
            self._zf.close()
            raise

    def _check(self, file_size: int, member_re) -> list:
        members, total = [], 0
        for info in self._zf.infolist():
            m = member_re.fullmatch(info.filename)
            if m is None:
                raise ValueError(f"unexpected member {info.filename!r:.200}")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ValueError(f"member {info.filename!r} uses an unexpected compression")
            if info.file_size > _MAX_DEFLATE_RATIO * max(info.compress_size, 64):
                raise ValueError(f"member {info.filename!r} declares {info.file_size} bytes "
                                 f"from {info.compress_size} compressed bytes")
            total += info.file_size
            members.append((int(m.group(1)), info))
        limit = budget.inflate_limit(file_size)
        if total > limit:
            raise ValueError(f"members declare {total} bytes in all from a file of {file_size} "
                             f"bytes (at most {limit} are read)")
        members.sort(key=lambda x: x[0])
        if [i for i, _ in members] != list(range(len(members))):
            raise ValueError("members are not arr_0 ... arr_N")
        return [info for _, info in members]

    def __len__(self) -> int:
        return len(self._members)

    def array(self, i: int, allow_pickle: bool) -> np.ndarray:
        """Point ``i``'s array (inflated now; raises one of :data:`MEMBER_ERRORS`)."""
        info = self._members[i]
        with self._zf.open(info) as member:
            data = member.read(info.file_size + 1)
        if len(data) != info.file_size:
            raise ValueError(f"member {info.filename!r} holds {len(data)} bytes, its entry "
                             f"declares {info.file_size}")
        return _npy(data, allow_pickle)

    def close(self) -> None:
        self._zf.close()


def read_npz(path, allow_pickle: bool, member_re) -> list[np.ndarray]:
    """Arrays ``arr_0 ... arr_N`` of an npz in point order (sorted by number)."""
    with regular.open_regular(path) as fh:
        npz = Npz(fh, regular.size_of(fh), member_re)
        try:
            return [npz.array(i, allow_pickle) for i in range(len(npz))]
        finally:
            npz.close()
