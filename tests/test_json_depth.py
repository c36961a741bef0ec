"""The nesting depth of untrusted JSON (``budget.json_depth``), against its definition."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tbconvert import budget
from tbconvert.errors import CorruptDataError


def defined_depth(value) -> int:
    """1 + the deepest member for an object or array (an empty one is 1), 0 for a scalar."""
    if isinstance(value, dict):
        return 1 + max(map(defined_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(defined_depth, value), default=0)
    return 0


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(values)
def test_depth_is_the_defined_one(value):
    parsed = json.loads(json.dumps(value))
    assert budget.json_depth(parsed) == defined_depth(parsed)


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("depth", [1, 2, budget.MAX_JSON_DEPTH])
def test_nesting_up_to_the_limit_is_read(depth):
    assert budget.json_depth(json.loads(nested(depth))) == depth
    assert budget.loads_json(nested(depth), "x") == json.loads(nested(depth))
    wrapped = '{"a": [{"b": ' + nested(depth - 3) + "}]}" if depth > 3 else nested(depth)
    assert budget.json_depth(json.loads(wrapped)) == defined_depth(json.loads(wrapped))


def test_deeper_nesting_is_counted_only_past_the_limit_and_refused():
    deep = json.loads(nested(900))      # json.loads itself reads this deep
    assert budget.json_depth(deep) == budget.MAX_JSON_DEPTH + 1
    with pytest.raises(CorruptDataError, match="nested deeper than"):
        budget.loads_json(nested(budget.MAX_JSON_DEPTH + 1), "x")
    with pytest.raises(CorruptDataError, match="nested too deeply|nested deeper than"):
        budget.loads_json(nested(100_000), "x")


def test_scalars_have_no_depth():
    assert [budget.json_depth(v) for v in (1, "a", None, 2.5, True)] == [0] * 5
