"""Telling URLs from paths, and building the fsspec file system for one.

Local paths (and ``file://`` URLs, which are turned into paths) never reach fsspec:
they stay on the readers' own fast path. Every other ``scheme://`` goes through
fsspec, whose protocol packages are optional extras; a URL whose package is
missing is refused in one line naming the extra to install.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tbconvert.errors import MissingDependencyError, UsageError

_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")

# protocol -> (extra, module the protocol needs)
PROTOCOLS: dict[str, tuple[str, str]] = {
    "s3": ("s3", "s3fs"), "s3a": ("s3", "s3fs"),
    "gs": ("gcs", "gcsfs"), "gcs": ("gcs", "gcsfs"),
    "az": ("azure", "adlfs"), "abfs": ("azure", "adlfs"), "abfss": ("azure", "adlfs"),
    "hf": ("hf", "huggingface_hub"),
    "http": ("http", "aiohttp"), "https": ("http", "aiohttp"),
}
READ_ONLY = frozenset({"http", "https"})
# Stores where one PUT (or a multipart upload, completed last) makes an object appear whole.
ATOMIC_PUT = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"})

# Defaults for S3: bounded retries with backoff (throttling, dropped connections) and a
# short connect timeout, so an unreachable endpoint fails in seconds, not minutes.
_S3_CONFIG = {"retries": {"max_attempts": 4, "mode": "standard"}, "connect_timeout": 5,
              "read_timeout": 120}


def is_url(location) -> bool:
    """Whether ``location`` is a ``scheme://`` URL (``file://`` included)."""
    return isinstance(location, str) and _URL_RE.match(location) is not None


def protocol(url: str) -> str:
    return _URL_RE.match(url).group(1).lower()


def is_remote(location) -> bool:
    """A URL that fsspec must handle (not a local path, not ``file://``)."""
    return is_url(location) and protocol(location) != "file"


def localize(location):
    """``file://`` URLs as local paths, ``~`` as the home directory; anything else unchanged.
    Every source and destination a user names passes through here, so a value that is no
    location is refused here."""
    if not isinstance(location, (str, os.PathLike)):
        raise UsageError(f"expected a path (str or os.PathLike) or a URL, not "
                         f"{type(location).__name__}")
    if is_url(location) and protocol(location) == "file":
        parts = urlsplit(location)
        if parts.netloc not in ("", "localhost"):
            raise UsageError(f"{location}: file:// URLs must name a local path "
                             "(file:///abs/path)")
        return Path(unquote(parts.path))
    if not is_url(location):
        # ``~`` is the home directory, as pandas and pyarrow take it (and the shell, unquoted):
        # one rule for every format, never a directory named ``~``
        expanded = os.path.expanduser(location)
        if expanded != os.fspath(location):
            return Path(expanded) if isinstance(location, os.PathLike) else expanded
    return location


def join(url: str, name: str) -> str:
    """``url/name`` for a URL (a path ``Path`` would collapse ``//``)."""
    return url.rstrip("/") + "/" + name


def check_plain_key(url: str, root: str) -> None:
    """Refuse a destination whose key holds ``.``, ``..`` or an empty part (``//``): a store
    keeps them as literal key names, which no reader (tbconvert's included) resolves."""
    parts = root.strip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        from tbconvert.errors import UsageError
        raise UsageError(f"{url}: a destination URL may not hold '.', '..' or an empty part "
                         "('//'): an object store would keep them as literal names, which no "
                         "reader resolves; name the prefix plainly")


def basename(url: str) -> str:
    rest = url[len(protocol(url)) + 3:].rstrip("/")
    return rest.rsplit("/", 1)[-1] or rest or "output"


def parse_storage_options(items) -> dict:
    """``KEY=VALUE`` strings as a dict for fsspec. Values are JSON where they parse
    (``true``, ``5``, ``{"a": 1}``), strings otherwise; ``a.b=1`` nests (``{"a": {"b": 1}}``)."""
    out: dict = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--storage-option {key!r}: expected KEY=VALUE")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        target = out
        *parents, last = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise UsageError(f"--storage-option {key}: {part} is given twice")
        target[last] = parsed
    return out


def missing_extra(url: str, what: str = "") -> MissingDependencyError:
    proto = protocol(url)
    extra = PROTOCOLS.get(proto, (None, None))[0]
    fix = (f"pip install 'tbconvert[{extra}]'" if extra
           else "install the fsspec package that implements it")
    return MissingDependencyError(f"{url}: {proto}:// URLs need {what or 'an extra package'}; "
                                  f"{fix}")


def filesystem(url: str, storage_options: dict | None = None):
    """``(fs, path)``: the fsspec file system for ``url`` and the path within it."""
    proto = protocol(url)
    extra = PROTOCOLS.get(proto)
    try:
        import fsspec
    except ImportError:
        raise missing_extra(url, "fsspec") from None
    if extra is not None:
        import importlib.util
        if importlib.util.find_spec(extra[1]) is None:
            raise missing_extra(url, extra[1]) from None
    options = dict(storage_options or {})
    if proto in ("s3", "s3a"):
        options = _s3_options(options)
    try:
        cls = fsspec.get_filesystem_class(proto)
    except ImportError as exc:
        raise missing_extra(url, getattr(exc, "name", None) or "a package") from None
    except ValueError:
        raise UsageError(f"{url}: unknown protocol {proto}://") from None
    try:
        fs = cls(**options)
    except TypeError as exc:
        raise UsageError(f"{url}: a --storage-option this store does not take "
                         f"({_scrubbed(exc)})") from None
    except ImportError as exc:
        raise missing_extra(url, getattr(exc, "name", None) or "a package") from None
    except Exception as exc:  # noqa: BLE001 - a store's own setup error, said in one line
        from tbconvert.remote.failures import describe
        raise describe(exc, url) from None
    return fs, fs._strip_protocol(url).rstrip("/")


def _s3_options(options: dict) -> dict:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options and "endpoint_url" not in options.get(
            "client_kwargs", {}):
        options["endpoint_url"] = endpoint
    config = dict(_S3_CONFIG)
    config.update(options.get("config_kwargs") or {})
    options["config_kwargs"] = config
    return options


def _scrubbed(exc) -> str:
    from tbconvert.remote.failures import scrub
    return scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])
