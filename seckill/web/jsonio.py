"""orjson as Flask's JSON provider: every body the gateway writes goes through here."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response
from flask.json.provider import JSONProvider


class OrjsonProvider(JSONProvider):
    mimetype = "application/json"

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return orjson.dumps(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return orjson.loads(s)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        return json_response(self._prepare_response_obj(args, kwargs))


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status=status, mimetype="application/json")
