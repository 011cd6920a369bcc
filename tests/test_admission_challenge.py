"""Joining a ``"challenge": true`` queue through the gateway (in-process, both backends): the
challenge route, and a join with a missing, wrong, reused or another user's solution refused
with 403 ``challenge_failed``, a good one let in."""

from __future__ import annotations

import base64
import json

from flask.testing import FlaskClient

from tests.support.admission import join, queued_activity
from tests.support.api import expect
from tests.support.backends import BOTH_BACKENDS
from tests.support.challenge import challenge_for, solve
from tests.support.tokens import user_headers

pytestmark = BOTH_BACKENDS


def test_a_join_needs_a_fresh_solution_of_the_users_own_challenge(client: FlaskClient) -> None:
    aid = queued_activity(client, total=3, starts_in=60, challenge=True)["id"]
    expect(join(client, aid, "ann"), 403, "challenge_failed")  # none
    expect(join(client, aid, "ann", {"altcha": "bm90IGEgc29sdXRpb24="}), 403,
           "challenge_failed")  # garbage
    issued = challenge_for(client, aid, "ann")
    good = solve(issued)
    wrong = json.loads(base64.b64decode(good))
    wrong["number"] += 1
    expect(join(client, aid, "ann", {"altcha": base64.b64encode(json.dumps(wrong).encode())
                                     .decode()}), 403, "challenge_failed")
    expect(join(client, aid, "bob", {"altcha": good}), 403, "challenge_failed")  # not bob's
    assert expect(join(client, aid, "ann", {"altcha": good}), 200)["status"] == "waiting"
    expect(join(client, aid, "ann", {"altcha": good}), 403, "challenge_failed")  # reused
    bobs = solve(challenge_for(client, aid, "bob"))
    assert expect(join(client, aid, "bob", {"altcha": bobs}), 200)["status"] == "waiting"


def test_a_queue_without_a_challenge_issues_none(client: FlaskClient,
                                                 make_activity: object) -> None:
    aid = queued_activity(client, total=3, starts_in=60)["id"]
    expect(client.get(f"/seckill/{aid}/challenge", headers=user_headers("ann")), 400,
           "bad_request")
    expect(client.get(f"/seckill/{aid}/challenge"), 401, "unauthenticated")
    assert expect(join(client, aid, "ann"), 200)["status"] == "waiting"


def test_a_solution_that_is_not_base64_is_a_bad_request_even_where_none_is_needed(
        client: FlaskClient) -> None:
    """The contract's schema of the join body holds on every queue (schemathesis found ":Q"
    accepted on a queue without a challenge)."""
    aid = queued_activity(client, total=3, starts_in=60)["id"]
    for bad in (":Q", 5, "A" * 1025, None):
        refused = expect(join(client, aid, "ann", {"altcha": bad}), 400, "bad_request")
        assert refused["field"] == "altcha"
    assert expect(join(client, aid, "ann", {"altcha": "QUJD"}), 200)["status"] == "waiting"
