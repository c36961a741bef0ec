"""What untrusted input may make tbconvert allocate, inflate or recurse into.

Every reader parses files that anyone could have crafted. A few bytes must never
become gigabytes (a tensor shape of ``[2**40]`` with one value, an npz member that
inflates a thousandfold, JSON nested a hundred thousand deep), so each expansion is
bounded here, relative to the size of what was read. Real data stays far inside
these limits; anything over them is refused with a :class:`CorruptDataError` that
names the file and offset, and costs only the record or file that holds it.
"""

from __future__ import annotations

import json
import os

from tbconvert.errors import CorruptDataError

# Tensors: TensorFlow allows 254 dimensions, numpy and HDF5 32; no summary uses more than a few.
MAX_DIMS = 32
# Bytes a decoded value may take: this much for any record, plus RATIO times its encoded size.
# A constant tensor of 64 MiB from one value is legal TensorFlow; a terabyte is not data.
EXPANSION_BASE = 64 << 20
EXPANSION_RATIO = 16
# Compressed members (npz): bytes inflated per byte of the file read, plus a base.
INFLATE_BASE = 256 << 20
INFLATE_RATIO = 1100          # deflate's own ceiling is about 1032:1
# JSON documents and lines: nesting depth of objects and arrays.
MAX_JSON_DEPTH = 64
# Run and tag names, in characters.
MAX_NAME_CHARS = 16_384
# Relative file paths named by data (an export's tensor and blob paths): Linux's PATH_MAX.
MAX_PATH_CHARS = 4096
# One blob file of an export. The uploader refused blobs over 10 MiB unless the server raised
# its limit; a blob is held in memory whole, so a file past this is a hole, not data.
MAX_BLOB_BYTES = 1 << 30
# Share of physical memory the inflated members of one archive may take together.
INFLATE_MEMORY_SHARE = 4


def check_dims(shape, where: str) -> None:
    """Refuse a shape with too many dimensions or a negative size."""
    if len(shape) > MAX_DIMS:
        raise CorruptDataError(f"{where}: a tensor of {len(shape)} dimensions (at most "
                               f"{MAX_DIMS} are read)")
    if any(int(d) < 0 for d in shape):
        raise CorruptDataError(f"{where}: a tensor shape with a negative size {list(shape)}")


def check_expansion(decoded_bytes: int, encoded_bytes: int, where: str) -> None:
    """Refuse a value that would decode to far more bytes than were read for it."""
    allowed = EXPANSION_BASE + EXPANSION_RATIO * max(0, int(encoded_bytes))
    if decoded_bytes > allowed:
        raise CorruptDataError(f"{where}: a value of {int(encoded_bytes)} bytes would expand to "
                               f"{int(decoded_bytes)} bytes (at most {allowed} are allowed)")


def inflate_allowance(file_bytes: int) -> int:
    """Total bytes the compressed members of a file of ``file_bytes`` may inflate to."""
    return INFLATE_BASE + INFLATE_RATIO * max(0, int(file_bytes))


def memory_allowance() -> int:
    """Bytes one archive's inflated members may take together: a share of physical memory."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        physical = 0
    if physical <= 0:
        physical = 4 << 30
    return max(EXPANSION_BASE, physical // INFLATE_MEMORY_SHARE)


def inflate_limit(file_bytes: int) -> int:
    """Total bytes an archive of ``file_bytes`` may inflate to: its allowance, capped by memory."""
    return min(inflate_allowance(file_bytes), memory_allowance())


def json_depth(obj) -> int:
    """Nesting depth of a value ``json.loads`` gave (objects and arrays; a scalar is 0),
    counted no further than one level past :data:`MAX_JSON_DEPTH`. Level by level, without
    recursion; only the containers of each level are kept (a sync reads a manifest of
    thousands of values on every round)."""
    depth, level = 0, [obj] if type(obj) is dict or type(obj) is list else []
    while level and depth <= MAX_JSON_DEPTH:
        depth += 1
        deeper: list = []
        keep = deeper.append
        for item in level:
            for value in item.values() if type(item) is dict else item:
                kind = type(value)
                if kind is dict or kind is list:
                    keep(value)
        level = deeper
    return depth


def loads_json(text, where: str, *, max_depth: int = MAX_JSON_DEPTH):
    """``json.loads`` for untrusted text: deep nesting and bad text are one clear error."""
    try:
        obj = json.loads(text)
    except RecursionError:
        raise CorruptDataError(f"{where}: JSON nested too deeply (at most {max_depth} levels "
                               "are read)") from None
    except (ValueError, TypeError) as exc:   # JSONDecodeError and UnicodeDecodeError
        raise CorruptDataError(f"{where}: not valid JSON ({exc})") from None
    if isinstance(obj, (dict, list)) and json_depth(obj) > max_depth:
        raise too_deep(where, max_depth)
    return obj


def too_deep(where: str, max_depth: int = MAX_JSON_DEPTH) -> CorruptDataError:
    return CorruptDataError(f"{where}: JSON nested deeper than {max_depth} levels")
