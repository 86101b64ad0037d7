"""sluice's JSON fast paths give exactly what the json module gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.message import decode_json, encode_json

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_encode_and_decode_agree_with_the_json_module(value: Any) -> None:
    text = encode_json(value)
    assert text == json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert decode_json(text) == json.loads(text)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {1, 2}, object(), {"k": b"x"}])
def test_encode_refuses_what_json_cannot_hold(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        encode_json(bad)


def test_circular_structure_is_refused() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="refers to itself"):
        encode_json(loop)


@pytest.mark.parametrize("text", [' {"a": 1}', '{"a": 1} ', "[1] [2]", "{bad"])
def test_decode_of_unusual_text_behaves_as_json_loads(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            decode_json(text)
    else:
        assert decode_json(text) == expected
