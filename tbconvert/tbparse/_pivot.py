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
    return _merged(s)


def _is_null(x) -> bool:
    import pandas as pd
    return bool(pd.isnull(x))


def combine(frames, pivot: bool, extra: set, presorted: bool = False):
    """One frame of ``frames`` sorted as tbparse sorts; ``presorted``: each frame's rows
    are already in that order (then one frame is kept as it is)."""
    import pandas as pd
    parts = [f for f in frames if f is not None]
    frames.clear()      # the parts are copied into one frame: let them go as soon as they are
    if not parts:
        return pd.DataFrame()
    single = len(parts) == 1
    df = pd.concat(parts, ignore_index=True) if not single else parts[0]
    del parts
    if df.empty:
        return pd.DataFrame()
    keys = [k for k in ("dir_name", "file_name") if k in extra]
    if not pivot:
        keys.append("tag")
    keys.append("step")
    keys = [k for k in keys if k in df.columns]
    if not (single and presorted) and not _in_order(df, keys, strict=len(keys) == 1):
        df = df.sort_values(keys, ignore_index=True)   # (inplace=: deprecated by pandas 3.1)
    if not pivot:
        return df
    merged = _merge_groups(df, keys)
    if merged is None:
        by = keys if keys else [True] * len(df)
        merged = df.groupby(by, sort=False).aggregate(merge_values)
        merged.reset_index(inplace=True)
    middle = sorted(c for c in df.columns if c not in _GROUP_TAIL)
    order = [c for c in ["step"] + middle + ["wall_time", "dir_name", "file_name"]
             if c in df.columns]
    return merged[order]


def _in_order(df, keys, strict: bool) -> bool:
    """Are the rows already sorted by ``keys``? A stable sort (several keys) leaves sorted rows
    as they are; a one-key sort is not stable, so then only strictly increasing keys count."""
    if len(df) < 2:
        return False
    less = np.zeros(len(df) - 1, dtype=bool)
    equal = np.ones(len(df) - 1, dtype=bool)
    for k in keys:
        col = df[k]
        if col.dtype.kind in "iuf":
            v = col.to_numpy()
            lo, hi = v[:-1], v[1:]
            lt, eq = lo < hi, lo == hi
        else:
            import pyarrow as pa
            import pyarrow.compute as pc
            try:
                v = pa.chunked_array(col.array._pa_array)
            except AttributeError:
                return False
            if v.null_count:
                return False
            lo, hi = v.slice(0, len(v) - 1), v.slice(1)
            lt = pc.less(lo, hi).to_numpy(zero_copy_only=False)
            eq = pc.equal(lo, hi).to_numpy(zero_copy_only=False)
        less |= equal & lt
        equal &= eq
    return bool(less.all()) if strict else bool((less | equal).all())


def _merge_groups(df, keys):
    """What ``df.groupby(keys, sort=False).aggregate(merge_values).reset_index()`` gives, for
    rows sorted by ``keys``, without a Python call per group where no values are merged.

    Each column goes through pandas' own pointwise cast, as in its aggregation; None when
    this pandas lacks it (the caller then lets pandas do the work).
    """
    import pandas as pd
    n = len(df)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        v = df[k].to_numpy()
        change[1:] |= v[1:] != v[:-1]
    starts = np.flatnonzero(change)
    sizes = np.diff(np.append(starts, n))
    out = {}
    for k in keys:
        out[k] = df[k].iloc[starts].reset_index(drop=True)
    for name in df.columns:
        if name in keys:
            continue
        merged = _merge_column(df[name], starts, sizes)
        if merged is None:
            return None
        out[name] = merged
    return pd.DataFrame(out)


def _merge_column(ser, starts: np.ndarray, sizes: np.ndarray):
    import pandas as pd
    cast = getattr(ser.array, "_cast_pointwise_result", None)
    if cast is None:
        return None
    values = ser.to_numpy() if isinstance(ser._values, np.ndarray) else np.asarray(
        ser.array, dtype=object)
    n = len(values)
    if values.dtype == object:
        is_list = np.fromiter((type(x) is list for x in values), dtype=bool, count=n)
        null = np.asarray(pd.isna(values), dtype=bool)
    else:
        is_list = np.zeros(n, dtype=bool)
        null = np.isnan(values) if values.dtype.kind == "f" else np.zeros(n, dtype=bool)
    count = np.add.reduceat((~null).astype(np.int64), starts)
    lists = np.add.reduceat(is_list.astype(np.int64), starts) > 0
    multi = sizes > 1
    slow = multi & ((count > 1) | lists)
    last = np.maximum.reduceat(np.where(null, -1, np.arange(n)), starts)
    result = np.empty(len(starts), dtype=object)
    # one row: the row's own element (a numpy scalar for a numeric column, as pandas takes
    # it out of the one-row Series); merged values are Python scalars (iterating a Series)
    single = ~multi
    _put(result, single, values[starts[single]])
    # several rows, one value: that value
    one = multi & ~slow & (count == 1)
    picked = values[last[one]]
    _put(result, one, picked.tolist() if values.dtype != object else picked)
    result[multi & ~slow & (count == 0)] = np.nan
    for g in np.flatnonzero(slow).tolist():
        group = values[starts[g]:starts[g] + sizes[g]]
        result[g] = _merged(group.tolist() if values.dtype != object else list(group))
    return cast(result)


def _put(result: np.ndarray, mask: np.ndarray, items) -> None:
    """``result[mask] = items`` element by element when items may be arrays themselves."""
    idx = np.flatnonzero(mask)
    if isinstance(items, np.ndarray) and items.dtype != object:
        result[idx] = list(items)   # numpy scalars, not Python ones
        return
    for i, item in zip(idx.tolist(), items, strict=True):
        result[i] = item


def _merged(items):
    out = []
    for x in items:
        if isinstance(x, list):
            out.extend(x)
        elif np.isscalar(x):
            if not _is_null(x):
                out.append(x)
        else:
            out.append(x)
    if not out:
        return np.nan
    return out[0] if len(out) == 1 else out
