"""A challenge queue while Redis is away: issuing a challenge and checking a join's solution
both answer the contract's 503 ``unavailable`` (seckill.web.errors's one mapping of a Redis
failure; neither view maps it on its own)."""

from __future__ import annotations

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.admission import join, queued_activity
from tests.support.api import expect
from tests.support.challenge import challenge_for, solve
from tests.support.tokens import user_headers


def test_challenge_and_join_answer_503_while_redis_is_away(make_app, private_valkey:
                                                           EmbeddedValkey) -> None:
    # A long META_TTL: the activity's copy stays in the process, so the challenge's own Redis
    # call is the one that fails.
    client = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="600").test_client()
    aid = queued_activity(client, total=3, starts_in=60, challenge=True)["id"]
    good = solve(challenge_for(client, aid, "ann"))
    private_valkey.stop()

    refused = expect(client.get(f"/seckill/{aid}/challenge", headers=user_headers("bob")),
                     503, "unavailable")
    assert refused["detail"] == "ConnectionError"
    refused = expect(join(client, aid, "ann", {"altcha": good}), 503, "unavailable")
    assert refused["detail"] == "ConnectionError"
