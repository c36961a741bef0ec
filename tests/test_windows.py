"""``windows``: numpy's ``sliding_window_view`` of a 1-D array, built directly."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from tbconvert.formats.tfevents.windows import windows


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=0, max_size=64), width=st.integers(0, 70),
       start=st.integers(0, 8), dtype=st.sampled_from(["u1", "<u4", "<i8"]),
       from_bytes=st.booleans())
def test_windows_are_numpys_sliding_windows(data, width, start, dtype, from_bytes):
    size = np.dtype(dtype).itemsize
    raw = data[:len(data) // size * size]
    arr = np.frombuffer(raw, dtype) if from_bytes else np.frombuffer(raw, dtype).copy()
    arr = arr[start:]
    try:
        want = sliding_window_view(arr, width)
    except ValueError:
        with pytest.raises(ValueError):
            windows(arr, width)
        return
    got = windows(arr, width)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.array_equal(got, want)
    assert not got.flags.writeable
    if not from_bytes and got.size:
        w = windows(arr, width, writeable=True)
        w[0, -1] = 7
        assert arr[width - 1] == 7


def test_windows_of_other_arrays_are_numpys():
    arr = np.arange(20, dtype=np.uint8)[::2]          # not contiguous
    assert np.array_equal(windows(arr, 3), sliding_window_view(arr, 3))
    ro = np.frombuffer(b"abcdef", np.uint8)
    assert np.array_equal(windows(ro, 2, writeable=True), sliding_window_view(ro, 2))
