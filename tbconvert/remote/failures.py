"""Store failures as one-line errors naming the URL and the cause, with no secret in them.

fsspec back ends wrap the client's errors differently (s3fs turns botocore's into
``OSError`` subclasses and keeps the original as the cause), so the whole chain of
causes is read for what happened. Nothing a store or client says reaches a message
before :func:`scrub` has taken every known secret out of it.
"""

from __future__ import annotations

import os
import re

from tbconvert.errors import (
    FormatError,
    MissingDependencyError,
    OutputExistsError,
    StorageError,
    TbconvertError,
    UsageError,
)

_SECRET_KEY_RE = re.compile(r"secret|token|password|passwd|credential|sas|signature|"
                            r"account_key|access_key|key$|^key|sig$", re.I)
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
               "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN",
               "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET", "HF_TOKEN",
               "HUGGING_FACE_HUB_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS_JSON")
# Query parameters of signed URLs and headers that carry credentials.
_SIGNED_RE = re.compile(r"((?:X-Amz-(?:Signature|Credential|Security-Token)|Signature|sig|"
                        r"AWSAccessKeyId|token|Authorization)[=:]\s*)[^&\s'\"]+", re.I)

_SECRETS: set[str] = set()
# Shorter values are not replaced: real keys and tokens are long, and replacing a short
# word everywhere would garble messages without protecting anything.
_MIN_SECRET = 8


def remember_secrets(options: dict | None) -> None:
    """Note the secret values of storage options (and the environment's) for :func:`scrub`."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET:
            _SECRETS.add(value)
    _collect(options or {})


def _collect(options: dict, parent_secret: bool = False) -> None:
    for key, value in options.items():
        secret = parent_secret or bool(_SECRET_KEY_RE.search(str(key)))
        if isinstance(value, dict):
            _collect(value, secret)
        elif secret and isinstance(value, str) and len(value) >= _MIN_SECRET:
            _SECRETS.add(value)


def scrub(text: str) -> str:
    """``text`` with every known secret and signed-URL parameter replaced by ``***``."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _SIGNED_RE.sub(r"\1***", text)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError",
                          "ConnectionClosedError", "ServerDisconnectedError", "ReadTimeoutError",
                          "ClientConnectorDNSError"})


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or one it arose from) says the store could not be reached."""
    return any(type(e).__name__ in _UNREACHABLE or isinstance(e, (ConnectionError, TimeoutError))
               for e in _chain(exc))


def describe(exc: BaseException, url: str, *, writing: bool = False) -> TbconvertError:
    """The one-line error for a store failure ``exc`` while reading (or writing) ``url``."""
    if isinstance(exc, TbconvertError):
        return exc
    chain = list(_chain(exc))
    names = {type(e).__name__ for e in chain}
    codes = {_code(e) for e in chain} - {""}
    text = " ".join(str(e) for e in chain)
    endpoint = _endpoint_of(chain)
    if isinstance(exc, TypeError) and "unexpected keyword" in str(exc):
        return UsageError(f"{url}: a --storage-option this store does not take "
                          f"({scrub(_first_line(exc))})")
    if isinstance(exc, ImportError):
        from tbconvert.remote.urls import missing_extra
        return missing_extra(url, getattr(exc, "name", None) or "")
    if names & {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                "DefaultCredentialError"} or "Unable to locate credentials" in text:
        return StorageError(f"{url}: no credentials found; set them the store's usual way "
                            "(for S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
                            "~/.aws/credentials), or pass --storage-option anon=true for "
                            "public data")
    if codes & {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                "InvalidToken", "AuthorizationHeaderMalformed"}:
        return StorageError(f"{url}: the store rejected the credentials "
                            f"({sorted(codes)[0]}); check the key pair or token")
    if codes & {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                "TooManyRequests", "503"} or "reduce your request rate" in text:
        return StorageError(f"{url}: the store kept throttling requests (SlowDown) after "
                            "several retries with backoff; try again later or with fewer -j")
    if codes & {"NoSuchBucket"} or "NoSuchBucket" in text or "bucket does not exist" in text:
        cls = StorageError if writing else FormatError
        return cls(f"{url}: no such bucket; check the bucket name (and the region or "
                   "endpoint)")
    if codes == {"403"}:
        # the answer to a HEAD request has no body to name the reason
        return StorageError(f"{url}: access denied (HTTP 403, no reason given): the key "
                            "pair or token may be wrong, or not allowed to "
                            f"{'write' if writing else 'read'} here")
    if codes & {"AccessDenied", "AllAccessDisabled", "403", "AccountProblem"} or any(
            isinstance(e, PermissionError) for e in chain):
        return StorageError(f"{url}: access denied; the credentials in use may not "
                            f"{'write' if writing else 'read'} here")
    if unreachable(exc):
        where = f" {endpoint}" if endpoint else ""
        hint = ("the address and the network" if url.startswith(("http://", "https://")) else
                "the network, AWS_ENDPOINT_URL or --storage-option endpoint_url=...")
        return StorageError(f"{url}: cannot reach the endpoint{where} (gave up after several "
                            f"retries); check {hint}")
    if isinstance(exc, FileNotFoundError) or codes & {"NoSuchKey", "404"}:
        cls = StorageError if writing else FormatError
        return cls(f"{url}: no such file or directory")
    if isinstance(exc, FileExistsError):
        return OutputExistsError(f"{url} already exists; pass --force to replace it")
    detail = scrub(_first_line(exc))
    return StorageError(f"{url}: {'writing' if writing else 'reading'} failed: "
                        f"{type(exc).__name__}: {detail}")


def _endpoint_of(chain) -> str:
    for e in chain:
        endpoint = getattr(e, "kwargs", {}).get("endpoint_url") if hasattr(e, "kwargs") else None
        if endpoint:
            return scrub(str(endpoint))
    return ""


def _first_line(exc) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


__all__ = ["describe", "scrub", "remember_secrets", "MissingDependencyError"]
