"""Stacking per-file frames into one, sorted and (with ``pivot``) merged by step, as tbparse.

tbparse sorts the stacked rows by ``dir_name``, ``file_name`` (when those
columns are asked for), ``tag`` (long format) and ``step``; in wide format
the rows of one step (per directory and file) become one row, a tag's values
at a repeated step becoming a list. The same pandas sort is used here so that
rows of equal keys keep exactly tbparse's order.
"""

from __future__ import annotations

import numpy as np

_GROUP_TAIL = ("step", "wall_time", "dir_name", "file_name")


def merge_values(s):
    """One group's values of one column: NaNs dropped, lists flattened, one value unwrapped."""
    if len(s) == 1:
        return s
    out = []
    for x in s:
        if isinstance(x, list):
            out.extend(x)
        elif np.isscalar(x):
            if not (isinstance(x, float) and np.isnan(x)) and not _is_null(x):
                out.append(x)
        else:
            out.append(x)
    if not out:
        return np.nan
    return out[0] if len(out) == 1 else out


def _is_null(x) -> bool:
    import pandas as pd
    return bool(pd.isnull(x))


def combine(frames, pivot: bool, extra: set):
    import pandas as pd
    frames = [f for f in frames if f is not None]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        return pd.DataFrame()
    keys = [k for k in ("dir_name", "file_name") if k in extra]
    if not pivot:
        keys.append("tag")
    keys.append("step")
    keys = [k for k in keys if k in df.columns]
    df.sort_values(keys, ignore_index=True, inplace=True)
    if not pivot:
        return df
    by = keys if keys else [True] * len(df)
    merged = df.groupby(by, sort=False).aggregate(merge_values)
    merged.reset_index(inplace=True)
    middle = sorted(c for c in df.columns if c not in _GROUP_TAIL)
    order = [c for c in ["step"] + middle + ["wall_time", "dir_name", "file_name"]
             if c in df.columns]
    return merged[order]
