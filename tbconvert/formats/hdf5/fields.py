"""A series' fields as an HDF5 archive holds them, each checked: damage is told in plain words
that name the field and what it should be ("its steps are float64, not int64"), and a skipped
series counts the points it really held, from the first of its fields that can be trusted."""

from __future__ import annotations

import h5py
import numpy as np

from tbconvert.errors import raise_if_exhausted
from tbconvert.formats.hdf5 import schema
from tbconvert.formats.hdf5.audit import DatasetRefused, check_dataset
from tbconvert.model import DataClass, Metadata
from tbconvert.report import plural, were

# What h5py and the checks below raise on a damaged archive.
_DAMAGE = (OSError, KeyError, TypeError, ValueError, IndexError, RuntimeError)


def _str(value, name: str | None = None) -> str:
    """A string attribute's value; ``name``: the attribute of a series or run, which a
    :class:`_Damaged` names when the value is no string."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, bytes):   # (numpy's bytes_ too)
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            if name is None:
                raise
            raise _Damaged(f"its {name} attribute is not valid UTF-8") from None
    if not isinstance(value, str):
        if name is None:
            raise TypeError(f"expected a string attribute, got {type(value).__name__}")
        raise _Damaged(f"its {name} attribute is {_a(value)}, not a string")
    return value


class _Damaged(ValueError):
    """Damage to one part of a series (or run), in plain words that name the part and what
    it should be: "its steps are float64, not int64". The report tells this text; any other
    exception raised while a series is read is told in general words (see _reason)."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, _Damaged):
        return str(exc)
    return "part of it cannot be read (the HDF5 structures holding it are damaged)"


def _show(text: str) -> str:
    """A string the archive holds, quoted and cut short."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


def _dtype_words(dtype: np.dtype) -> str:
    """An HDF5 dataset's or attribute's element type in words: "float64", "strings",
    "variable-length uint8"."""
    if h5py.check_string_dtype(dtype) is not None or dtype.kind == "U":
        return "strings"
    base = h5py.check_vlen_dtype(dtype)
    if base is not None:
        return f"variable-length {_dtype_words(np.dtype(base))}"
    if dtype.names:
        return "compound records"
    if dtype.subdtype is not None:
        return f"arrays of {_dtype_words(dtype.subdtype[0])}"
    if dtype.kind == "O":
        return "objects"
    return dtype.name


def _a(value) -> str:
    """What an attribute's value is, with its article: "a str", "an array of int64"."""
    if isinstance(value, h5py.Empty):
        return "an empty value"
    if isinstance(value, str):
        return "a str"
    if isinstance(value, bytes):
        return "a byte string"
    if isinstance(value, np.ndarray):
        if value.ndim:
            return f"an array of {_dtype_words(value.dtype)}"
        return _a(value[()])
    word = _dtype_words(value.dtype) if isinstance(value, np.generic) else type(value).__name__
    return ("an " if word[:1] in "aeio" else "a ") + word


def _int(value, name: str) -> int:
    """An integer attribute's value (what tbconvert writes as int32)."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise _Damaged(f"its {name} attribute is {_a(value)}, not an integer")
    return int(value)


def _byte_attr(value, name: str) -> bytes:
    """A bytes attribute's value (what tbconvert writes as a 1-D uint8 array). Nothing else
    is taken: a wider integer would wrap, and a byte string loses its trailing NUL bytes."""
    if not isinstance(value, np.ndarray) or value.dtype != np.uint8 or value.ndim != 1:
        raise _Damaged(f"its {name} attribute is {_a(value)}, not bytes (a uint8 array)")
    return value.tobytes()


def _metadata(get) -> Metadata:
    """A series' metadata from its attributes (``get(name)``: an attribute's raw value)."""
    code = _int(get("data_class"), "data_class")
    try:
        data_class = DataClass(code)
    except ValueError:
        raise _Damaged(f"its data_class attribute is {code}, not 0 to 3 (unknown, scalar, "
                       "tensor or blob sequence)") from None
    return Metadata(plugin_name=_str(get("plugin_name"), "plugin_name"),
                    plugin_content=_byte_attr(get("plugin_content"), "plugin_content"),
                    display_name=_str(get("display_name"), "display_name"),
                    description=_str(get("description"), "description"),
                    data_class=data_class)


def _kind(value) -> str:
    kind = _str(value, "kind")
    if kind not in schema.KINDS:
        raise _Damaged(f"its kind attribute is {_show(kind)}, not {', '.join(schema.KINDS[:-1])} "
                       f"or {schema.KINDS[-1]}")
    return kind


def _attr_getter(attrs):
    """``get(name)`` for :func:`_metadata`: an attribute's value through h5py, its absence
    or an unreadable value told as :class:`_Damaged`."""
    def get(name: str):
        try:
            if name not in attrs:
                raise _Damaged(f"its {name} attribute is missing")
            return attrs[name]
        except _Damaged:
            raise
        except UnicodeDecodeError:
            raise _Damaged(f"its {name} attribute is not valid UTF-8") from None
        except _DAMAGE as exc:
            raise_if_exhausted(exc)
            raise _Damaged(f"its {name} attribute cannot be read (HDF5 cannot decode it)") from None
    return get


def _dataset(s: h5py.Group, name: str) -> h5py.Dataset:
    try:
        obj = s.get(name)
    except _DAMAGE as exc:
        raise_if_exhausted(exc)
        raise _Damaged(f"its {name} dataset cannot be opened (its HDF5 header is damaged)") from None
    if obj is None:
        raise _Damaged(f"its {name} dataset is missing")
    if not isinstance(obj, h5py.Dataset):
        what = "a group" if isinstance(obj, h5py.Group) else "a named datatype"
        raise _Damaged(f"its {name} is {what}, not a dataset")
    return obj


def _check(ds: h5py.Dataset, name: str, kinds: str, expected: str, vlen=None) -> None:
    """A dataset of one of the numpy ``kinds`` that stores about as much as it declares;
    ``vlen``: a variable-length one, whose elements ``vlen(dtype)`` takes."""
    if ds.shape is None:
        raise _Damaged(f"its {name} hold {_shape_words(None)}")
    dtype = ds.dtype
    if dtype.kind not in kinds or (vlen is not None and not vlen(h5py.check_vlen_dtype(dtype))):
        raise _Damaged(f"its {name} are {_dtype_words(dtype)}, not {expected}")
    try:
        check_dataset(ds, kinds, f"its {name} dataset")
    except DatasetRefused as exc:   # (it declares more data than the file stores)
        raise _Damaged(str(exc)) from None


def _vlen_ints(base) -> bool:
    return isinstance(base, np.dtype) and base.kind in "iu"


def _vlen_bytes(base) -> bool:
    return isinstance(base, np.dtype) and base == np.uint8


def _shape_words(shape) -> str:
    if shape is None:
        return "nothing (an empty HDF5 dataspace)"
    if len(shape) == 1:
        return plural(int(shape[0]), "entry", "entries")
    return f"the shape {tuple(int(d) for d in shape)}"


def _expect_len(ds: h5py.Dataset, name: str, n: int, like: str = "like its steps") -> None:
    if ds.shape != (n,):
        raise _Damaged(f"its {name} hold {_shape_words(ds.shape)}, not {n} {like}")


def _read(ds: h5py.Dataset, name: str, a: int, b: int) -> np.ndarray:
    """``ds[a:b]``, a failure told as the dataset's (within the shape checked, only damaged
    chunks fail)."""
    try:
        return ds[a:b]
    except _DAMAGE as exc:
        raise_if_exhausted(exc)
        raise _Damaged(f"its {name} cannot be read (HDF5 cannot decode the stored data)") from None


# Datasets that tell a series' point count (and how many entries more than points they
# hold), in the order they are trusted: steps define the points, the rest must match them.
_COUNTED = (("steps", 0), ("wall_times", 0), ("hidden", 0), ("values", 0), ("dtypes", 0),
            ("shapes", 0), ("data_offsets", 1), ("string_offsets", 1), ("blob_offsets", 1))


def _point_count(s: h5py.Group) -> int | None:
    """How many points series group ``s`` holds, as the first of its datasets that can be
    trusted for it says (one that opens, has one dimension, or rows for dense values, and
    stores about as much as it declares); None when none can."""
    for name, extra in _COUNTED:
        try:
            ds = s.get(name)
            if not isinstance(ds, h5py.Dataset):
                continue
            shape = ds.shape
            if not shape or (len(shape) != 1 and name != "values"):
                continue
            check_dataset(ds, ds.dtype.kind, name)
            if int(shape[0]) >= extra:
                return int(shape[0]) - extra
        except _DAMAGE as exc:
            raise_if_exhausted(exc)
    return None


def _loss(n: int | None, done: int) -> str:
    if n is None:
        return "an unknown number of points were skipped (no part of it left tells how many)"
    if n == 0:
        return "it held no points; its tag was skipped"
    if done == 0:
        return f"its {plural(n, 'point')} {were(n)} skipped"
    return f"{n - done} of its {plural(n, 'point')} {were(n - done)} skipped (the first {done} were read)"
