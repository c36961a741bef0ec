"""tbconvert.read: the one whole-source-in-memory API."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES

import tbconvert

PURGED = FIXTURES / "torch_logdir"


def test_load_is_not_public():
    assert not hasattr(tbconvert, "load") and "load" not in tbconvert.__all__
    assert "read" in tbconvert.__all__ and "Data" in tbconvert.__all__


def test_read_leaves_out_hidden_points_unless_keep_all():
    shown = tbconvert.read(PURGED, runs="^resumed_purged$")
    kept = tbconvert.read(PURGED, runs="^resumed_purged$", restarts="keep-all")
    hidden = sum(int(s.hidden.sum()) for _, _, s in kept if s.hidden is not None)
    assert hidden > 0, "the fixture has points TensorBoard's restart rule hides"
    assert sum(len(s) for _, _, s in kept) - sum(len(s) for _, _, s in shown) == hidden
    assert all(s.hidden is None or not s.hidden.any() for _, _, s in shown)


def test_runs_map_names_to_their_run_records():
    data = tbconvert.read(PURGED)
    assert list(data.runs) == [r.name for r in data.runs.values()]
    assert all(isinstance(r.start_time, float) for r in data.runs.values())


def test_tables_from_read_data_honour_their_own_restarts():
    data = tbconvert.read(PURGED, runs="^resumed_purged$")      # visible only, as read
    every = tbconvert.scalars_table(data, restarts="keep-all")
    visible = tbconvert.scalars_table(data)
    direct = tbconvert.scalars_table(PURGED, runs="^resumed_purged$", restarts="keep-all")
    assert every.num_rows == direct.num_rows > visible.num_rows
    assert np.asarray(every["hidden"]).any()


def test_read_refuses_an_unknown_restarts_choice():
    from tbconvert.errors import UsageError
    with pytest.raises(UsageError, match="restarts must be one of visible, keep-all"):
        tbconvert.read(PURGED, restarts="everything")
