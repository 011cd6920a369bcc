"""orjson as Flask's JSON provider: every body the gateway writes goes through here."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response
from flask.json.provider import JSONProvider


class OrjsonProvider(JSONProvider):
    """Flask's JSON provider, on orjson."""

    mimetype = "application/json"

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        """Serialize ``obj`` to JSON text (orjson; ``kwargs`` are ignored)."""
        return orjson.dumps(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        """Parse JSON text or bytes (orjson; ``kwargs`` are ignored)."""
        return orjson.loads(s)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        """A JSON response of the arguments, as ``flask.jsonify`` makes one."""
        return json_response(self._prepare_response_obj(args, kwargs))


def json_response(obj: Any, status: int = 200) -> Response:
    """A response with ``obj`` as its JSON body (orjson) and the given status."""
    return Response(orjson.dumps(obj), status=status, mimetype="application/json")
