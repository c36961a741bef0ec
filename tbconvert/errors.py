"""Expected failures. Each carries the exit code the command line returns for it.

Messages are one line, complete without a traceback, and name the file (and
record or line) involved and what to do.
"""

from __future__ import annotations

import re

# Messages name the command-line option; Python callers are told the keyword argument.
# (--storage-option stays: its KEY=VALUE form only exists on the command line.)
_PYTHON_WORDING = {
    "--force": "force=True",
    "--allow-pickle": "allow_pickle=True",
    "--ignore-checksum": "ignore_checksum=True",
    "--restarts keep-all": "restarts='keep-all'",
    "--restarts": "restarts",
    "--wide": "wide=True",
    "--runs": "runs",
    "--tags": "tags",
    "--jobs": "jobs",
    "--to": "to_format",
    "--from": "from_format",
    "--scheduler": "scheduler",
    "--break-lock": "break_lock=True",
}
_OPTION = re.compile("|".join(re.escape(option) + r"(?![\w-])"
                              for option in sorted(_PYTHON_WORDING, key=len, reverse=True)))


# A command a message advises, as the Python call that does the same
_EXPORT_COMMAND = re.compile(r"'tbconvert tbdev-export (.+?) -o OUTDIR'")


def python_wording(text: str) -> str:
    """``text`` with each command-line option named as a Python caller passes it."""
    text = _EXPORT_COMMAND.sub(lambda m: f"tbconvert.tbdev_export({m.group(1)!r}, OUTDIR)", text)
    return _OPTION.sub(lambda m: _PYTHON_WORDING[m.group(0)], text)

# Functions every message passes through before it is shown: object-store sources and
# destinations are staged in local temporary directories, and a message must name the
# URL the user gave (and never a secret), not the staging path.
MESSAGE_FILTERS: list = []


class TbconvertError(Exception):
    """An expected failure whose message is complete and safe to show.

    ``str(exc)`` speaks to Python callers (``force=True``); :meth:`cli_message` to
    command-line users (``--force``).
    """

    exit_code = 1

    def cli_message(self) -> str:
        text = super().__str__()
        for rewrite in MESSAGE_FILTERS:
            text = rewrite(text)
        return text

    def __str__(self) -> str:
        return python_wording(self.cli_message())


def in_words(exc: BaseException) -> str:
    """An exception as a line of a report: a tbconvert error's own message, in the command
    line's words as every report line is, anything else with its type."""
    if isinstance(exc, TbconvertError):
        return exc.cli_message()
    return f"{type(exc).__name__}: {exc}"


class UsageError(TbconvertError):
    """Bad arguments (a regex that does not compile, a missing option...)."""

    exit_code = 2


class FormatError(TbconvertError):
    """Unknown format name, input not found, or a format that cannot be told."""

    exit_code = 3


class CorruptDataError(TbconvertError):
    """Input that is damaged beyond what can be skipped, or a file that is not ours."""

    exit_code = 4


class UnsupportedError(TbconvertError):
    """A conversion that would lose data and was refused (e.g. pickled input)."""

    exit_code = 5


class OutputExistsError(TbconvertError, FileExistsError):
    """The destination exists and ``--force`` was not given."""

    exit_code = 6


class MissingDependencyError(TbconvertError, ImportError):
    """An optional package is needed (the message names the extra to install)."""

    exit_code = 7


class DataLossError(TbconvertError):
    """``--strict``: data was skipped or could not be written."""

    exit_code = 8


class DataLossWarning(UserWarning):
    """Data that a table function left out (points that share a step in a wide table,
    values it cannot hold...), when the caller passed no ``report`` to hear it."""


class OutputError(TbconvertError):
    """Writing failed (disk full, file-size limit, permission); partial output removed."""

    exit_code = 9


class StorageError(TbconvertError):
    """An object store refused or could not be reached (credentials, access denied, no such
    bucket, unreachable endpoint, throttling that outlasted the retries)."""

    exit_code = 11


class ClusterError(TbconvertError):
    """The Dask cluster was lost while its tasks ran (the scheduler went away): no fault of
    the data; partial output is removed, and the same command can be run again."""

    exit_code = 12


class OutOfResourcesError(OutputError):
    """The machine ran out of memory or file handles: no fault of the data, and no run is
    worth skipping for it (every other would fail alike). Partial output is removed, as for
    every error; the command line says what became of it."""


# What reading a run may raise that is not the run's fault: these end the whole conversion
# instead of costing that run alone (the places that read one run at a time let them through).
NOT_A_RUNS_FAULT = (KeyboardInterrupt, MemoryError, OutputError, MissingDependencyError)

_EXHAUSTED = {"EMFILE": "file handles (the limit of open files, `ulimit -n`)",
              "ENFILE": "file handles (the system's table of open files is full)",
              "ENOMEM": "memory", "ENOBUFS": "memory"}


def exhausted(exc: BaseException) -> str | None:
    """What the machine ran out of, if ``exc`` (or an exception it arose from) says it ran
    out of memory or file handles; else None."""
    import errno
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, MemoryError):
            return "memory"
        if isinstance(exc, OSError):
            name = errno.errorcode.get(exc.errno or 0)
            if name in _EXHAUSTED:
                return _EXHAUSTED[name]
            if "Too many open files" in str(exc):   # (Arrow's errors carry no errno)
                return _EXHAUSTED["EMFILE"]
        exc = exc.__cause__ or exc.__context__
    return None


def raise_if_exhausted(exc: BaseException) -> None:
    """An :class:`OutOfResourcesError` for an exception that says the machine ran out of
    memory or file handles: the places that skip what fails to read let nothing else by."""
    what = exhausted(exc)
    if what is not None:
        raise OutOfResourcesError(f"the machine ran out of {what}") from None
