"""Arrays kept in an anonymous temporary file instead of memory, appended and read back by
place: a long series' columns while a TensorBoard.dev line is read or written, a wide table's
rows until its header is known. The file is unlinked at once, so a killed process leaves
nothing behind."""

from __future__ import annotations

import tempfile

import numpy as np

from tbconvert.errors import OutputError


class ArrayFile:
    """An anonymous temporary file of arrays, appended to and read back by place."""

    def __init__(self, prefix: str = "tbconvert-") -> None:
        self._prefix = prefix
        self._file = None

    def put(self, arr: np.ndarray) -> int:
        """Append ``arr``'s bytes; returns where they start."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix=self._prefix)
            self._file.seek(0, 2)
            at = self._file.tell()
            self._file.write(memoryview(np.ascontiguousarray(arr)).cast("B"))
        except OSError as exc:
            from tbconvert.output import describe_os_error
            raise OutputError(describe_os_error(
                exc, f"temporary file in {tempfile.gettempdir()}")) from None
        return at

    def get(self, at: int, dtype, count: int) -> np.ndarray:
        arr = np.empty(count, dtype)
        self._file.seek(at)
        if self._file.readinto(memoryview(arr).cast("B")) != arr.nbytes:
            # (someone else truncated the temporary file)
            raise OutputError(f"temporary file in {tempfile.gettempdir()}: cut short while "
                              "it was read back")
        return arr

    def size(self) -> int:
        """Where the next array would start."""
        if self._file is None:
            return 0
        return self._file.seek(0, 2)

    def truncate(self, size: int = 0) -> None:
        """Forget the arrays put from ``size`` on (no column reads them any more)."""
        if self._file is not None:
            self._file.truncate(size)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
