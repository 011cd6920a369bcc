"""The body checks every operation's parser starts with (seckill.domain.bodies)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seckill.domain import errors
from seckill.domain.bodies import json_object, known_fields

KNOWN = ("id", "name", "total")


@pytest.mark.parametrize("body", [None, [], "{}", 3, True])
def test_anything_but_an_object_is_refused_with_the_shape_asked_for(body: Any) -> None:
    with pytest.raises(errors.BadRequest) as refused:
        json_object(body, '{"since": <time>}')
    assert refused.value.message == 'the body must be a JSON object: {"since": <time>}'
    with pytest.raises(errors.BadRequest) as plain:
        json_object(body)
    assert plain.value.message == "the body must be a JSON object"


@given(st.dictionaries(st.sampled_from(KNOWN), st.integers()),
       st.dictionaries(st.text(min_size=1).filter(lambda k: k not in KNOWN), st.integers()))
def test_unknown_fields_are_named_all_and_only(known: dict[str, int],
                                               others: dict[str, int]) -> None:
    body = {**known, **others}
    if not others:
        assert known_fields(body, KNOWN) is body
        return
    with pytest.raises(errors.BadRequest) as refused:
        known_fields(body, KNOWN)
    assert refused.value.extra["fields"] == sorted(others)
    assert refused.value.message.startswith("unknown fields: ")
    assert len(refused.value.message) <= len("unknown fields: ") + 200


def test_an_object_inside_a_field_names_where_and_the_field() -> None:
    with pytest.raises(errors.BadRequest) as refused:
        known_fields({"id": "a", "colour": "red"}, KNOWN, where="variants[2]",
                     field="variants")
    assert refused.value.message == "variants[2] has unknown fields: colour"
    assert refused.value.extra == {"field": "variants"}
