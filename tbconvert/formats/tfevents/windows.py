"""Every ``width`` consecutive items of a 1-D array as the rows of a 2-D view.

numpy's ``sliding_window_view`` checks and normalises its arguments for any number of axes:
about 30 us a call, and reading a few records (a sync's new bytes) makes a dozen such
calls. The view of a contiguous 1-D array is built here directly; anything else goes to
numpy's function.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def windows(data, width: int, writeable: bool = False) -> np.ndarray:
    """``sliding_window_view(data, width, writeable=writeable)``."""
    if (type(data) is not np.ndarray or data.ndim != 1 or not data.flags.c_contiguous
            or not 0 < width <= len(data) or (writeable and not data.flags.writeable)):
        return sliding_window_view(data, width, writeable=writeable)
    step = data.itemsize
    out = np.ndarray((len(data) - width + 1, width), data.dtype, buffer=data,
                     strides=(step, step))
    if not writeable:
        out.flags.writeable = False
    return out
