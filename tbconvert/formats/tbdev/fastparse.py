"""Fast paths for the two hot spots of reading an export; both fall back to the slow, general code.

* :func:`scalar_line`: a ``scalars.json`` line in the exporter's exact shape
  (``{"points": {"steps": [...], "values": [...], "wall_times": [...]}, ...``)
  has its three number lists parsed by numpy's C parser instead of building
  Python objects; only the small rest of the line goes through ``json``.
  Anything unexpected returns None and the caller parses the line with json.
* :func:`read_npz`: members of an uncompressed npz read with a header cache
  (all points of a series usually share dtype and shape), pickles refused
  unless allowed.
"""

from __future__ import annotations

import io
import re
import tokenize
import zipfile
import zlib

import numpy as np

from tbconvert import budget
from tbconvert.errors import CorruptDataError
from tbconvert.formats.tbdev import regular

_SCALAR_LINE = re.compile(
    rb'\{"points": \{"steps": \[([^\]]*)\], "values": \[([^\]]*)\], '
    rb'"wall_times": \[([^\]]*)\]\}, ')
_INT_CHARS = b"0123456789-, \t\r\n"
_FLOAT_CHARS = b"0123456789-+.eE, \t\r\n"
_I64 = np.iinfo(np.int64)


def _numbers(text: bytes, dtype, allowed: bytes) -> np.ndarray | None:
    """The list's numbers, or None for anything numpy might read differently from json.

    numpy reads lowercase ``inf``/``nan`` and ``infinity``, json does not: only the
    exporter's ``NaN``/``Infinity`` tokens pass, every other letter but an exponent's
    ``e`` sends the line to json. numpy refuses what it cannot read to the end
    (``1.2.3``, ``1e``, ``1 2``). It is more lenient than json only about spellings
    that have one obvious value (``+1``, ``01``, ``.5``, ``5.``), which no exporter wrote.
    """
    if not text.strip():
        return np.zeros(0, dtype)
    if dtype is np.float64:
        bare = text.replace(b"-Infinity", b"").replace(b"Infinity", b"").replace(b"NaN", b"")
        if bare.translate(None, allowed):
            return None
        text = text.replace(b"-Infinity", b"-inf").replace(b"Infinity", b"inf") \
            .replace(b"NaN", b"nan")
    elif text.translate(None, allowed):
        return None
    try:
        arr = np.fromstring(text, dtype=dtype, sep=",")
    except ValueError:
        return None
    if len(arr) != text.count(b",") + 1:
        return None
    if dtype is np.int64 and len(arr) and (arr.max() == _I64.max or arr.min() == _I64.min):
        return None  # possibly clamped: let json decide
    return arr


def scalar_line(raw: bytes):
    """``(obj_without_points, steps, values, wall_times)`` or None to use the slow path."""
    m = _SCALAR_LINE.match(raw)
    if m is None:
        return None
    steps = _numbers(m.group(1), np.int64, _INT_CHARS)
    if steps is None:
        return None
    values = _numbers(m.group(2), np.float64, _FLOAT_CHARS)
    walls = _numbers(m.group(3), np.float64, _FLOAT_CHARS)
    if values is None or walls is None:
        return None
    try:
        rest = budget.loads_json(b'{"points": null, ' + raw[m.end():], "line")
    except CorruptDataError:
        return None
    # a repeated "points" key later in the line wins in json: leave such lines to it
    if not isinstance(rest, dict) or rest.get("points", 0) is not None:
        return None
    return rest, steps, values, walls


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
