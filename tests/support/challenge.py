"""ALTCHA challenges as a buyer's client meets them: one the gateway issues
(:func:`challenge_for`), and its solution as the widget would send it (:func:`solve`)."""

from __future__ import annotations

from typing import Any

import altcha
from flask.testing import FlaskClient

from tests.support.api import expect
from tests.support.tokens import user_headers


def solve(issued: dict[str, Any]) -> str:
    """The base64 solution the widget would send, found by altcha's own solver."""
    assert set(issued) == {"algorithm", "challenge", "maxnumber", "salt", "signature"}, issued
    found = altcha.solve_challenge_v1(altcha.ChallengeV1(
        issued["algorithm"], issued["challenge"], issued["maxnumber"], issued["salt"],
        issued["signature"]))
    assert found is not None
    return altcha.PayloadV1(issued["algorithm"], issued["challenge"], found.number,
                            issued["salt"], issued["signature"]).to_base64()


def challenge_for(client: FlaskClient, aid: str, uid: str) -> dict[str, object]:
    """The challenge the gateway issues ``uid`` for ``aid`` (200, never cached)."""
    answer = client.get(f"/seckill/{aid}/challenge", headers=user_headers(uid))
    issued = expect(answer, 200)
    assert answer.headers["Cache-Control"] == "no-store"
    assert set(issued) == {"algorithm", "challenge", "maxnumber", "salt", "signature"}
    return issued
