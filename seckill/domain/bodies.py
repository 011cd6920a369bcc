"""The shape every JSON body is checked against first: an object, with only the fields its
operation knows. A field the operation does not know is refused by name, never ignored: a
misspelt ``totl`` must not create an activity with the default total."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from seckill.domain import errors


def json_object(body: Any, shape: str = "") -> dict[str, Any]:
    """``body`` if it is a JSON object; BadRequest otherwise, saying ``shape`` (what the body
    should look like) when given."""
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object" + (f": {shape}" if shape else ""))
    return body


def known_fields(body: dict[str, Any], known: Collection[str], *, where: str = "",
                 field: str | None = None) -> dict[str, Any]:
    """``body`` if each of its fields is one of ``known``; BadRequest naming the others
    otherwise (in ``fields``; or, for an object inside a field, ``where`` in the message and
    ``field`` as the field at fault)."""
    unknown = sorted(set(body) - set(known))
    if not unknown:
        return body
    listed = ", ".join(unknown)[:200]
    message = f"{where} has unknown fields: {listed}" if where else f"unknown fields: {listed}"
    if field is not None:
        raise errors.BadRequest(message, field=field)
    raise errors.BadRequest(message, fields=unknown)
