"""One place maps a Redis failure to the contract's 503: ``seckill.web.errors.as_domain_error``
answers any ``RedisError`` with what ``seckill.store.plumbing.connection.unavailable`` says of
it (status, error, message, detail: ``no_replica``, ``storage``, or the failure's class), so
the store's methods let a raw RedisError through rather than each converting it (the few that
still do say why). Checked for every kind of failure, then through the routes of store methods
that used to convert it themselves, on a real Valkey that has stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.exceptions import ClusterDownError, RedisClusterException

from seckill.domain import errors
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import NotSent, unavailable
from seckill.store.plumbing.parts import part_tags
from seckill.web.errors import as_domain_error
from tests.support.admission import queued_activity
from tests.support.api import buy, create_activity, expect
from tests.support.tokens import ADMIN, user_headers

KINDS = [
    redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    NotSent("nothing was sent"),
    redis.TimeoutError("Timeout reading from socket"),
    redis.BusyLoadingError("Redis is loading the dataset in memory"),
    redis.ReadOnlyError("You can't write against a read only replica."),
    redis.AuthenticationError("invalid username-password pair"),
    ClusterDownError("The cluster is down"),
    redis.ResponseError("MISCONF Errors writing to the AOF file: No space left on device"),
    redis.ResponseError("NOREPLICAS Not enough good replicas to write."),
    redis.ResponseError("ERR unknown command 'NOSUCH'"),
]


@pytest.mark.parametrize("exc", KINDS, ids=lambda e: f"{type(e).__name__}:{str(e)[:10]}")
def test_the_web_mapping_answers_what_unavailable_says(exc: redis.RedisError) -> None:
    mapped, said = as_domain_error(exc, "GET", "/anything"), unavailable(exc)
    assert isinstance(mapped, errors.Unavailable)
    assert (mapped.status, mapped.body(), mapped.headers()) == \
        (said.status, said.body(), said.headers())
    assert said.status == 503 and said.body()["error"] == "unavailable"


def test_a_cluster_client_failure_outside_redis_errors_is_a_503_too() -> None:
    """redis-py's RedisClusterException (no node covers the slots, the cluster cannot be
    reached at all) is not a RedisError; a route meeting it is still refused 503, not 500."""
    mapped = as_domain_error(RedisClusterException("Redis Cluster cannot be connected"), "GET",
                             "/anything")
    assert isinstance(mapped, errors.Unavailable)
    assert mapped.body()["detail"] == "RedisClusterException"


def _raised(call: Callable[[], Any]) -> redis.RedisError:
    with pytest.raises(redis.RedisError) as raised:
        call()
    return raised.value


Routes = list[tuple[Callable[[], Any], Callable[[], Any]]]


def _same_503(routes: Routes) -> None:
    """Each route, then the store method that used to turn the failure into Unavailable
    itself: what the method raises now, mapped by unavailable(), is what the route answered
    before, and answers now."""
    for route, method in routes:
        response = route()
        body = expect(response, 503, "unavailable")
        assert body == unavailable(_raised(method)).body(), (response.request.path, body)


def test_the_queue_lets_a_redis_failure_through_to_the_same_503(
    make_app: Callable[..., Any], private_valkey: EmbeddedValkey
) -> None:
    # A long META_TTL and no purchase (whose sold-out listener drops the copies when Redis
    # goes): the activity's copy stays in the process, so the queue's own call is the one
    # that meets the stopped server.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="600")
    client = app.test_client()
    found = app.extensions["seckill"]
    queued = queued_activity(client, starts_in=60)["id"]
    expect(client.get(f"/seckill/{queued}/queue/state"), 200)
    private_valkey.stop()
    # The queue's wire drops its idle connections (as on a stop): each call then fails the
    # same way, before anything is sent (NotSent), whichever comes first.
    found.wire.close()
    _same_503([
        (lambda: client.get(f"/seckill/{queued}/queue/state"),
         lambda: found.queue.state(queued)),
        (lambda: client.get(f"/seckill/{queued}/queue", headers=user_headers("bob")),  # hot
         lambda: found.queue.status(queued, "bob")),
    ])


def test_orders_payments_and_levers_let_a_redis_failure_through_to_the_same_503(
    make_app: Callable[..., Any], private_valkey: EmbeddedValkey
) -> None:
    app = make_app(REDIS_URL=private_valkey.url)
    client = app.test_client()
    found = app.extensions["seckill"]
    aid = create_activity(client, payment_window=600)["id"]
    order_id = expect(buy(client, aid, "ann"), 200)["order_id"]
    private_valkey.stop()
    found.wire.close()  # as above: a payment's script fails the same way every time
    _same_503([
        (lambda: client.get(f"/seckill/{aid}/order", headers=user_headers("ann")),
         lambda: found.orders.order_status(aid, "ann")),
        (lambda: client.post(f"/admin/orders/{order_id}/cancel", headers=ADMIN),
         lambda: found.orders.find(order_id, aid)),
        (lambda: client.post(f"/admin/orders/{order_id}/pay", json={"payment_ref": "ref-1"},
                             headers=ADMIN),
         lambda: found.payments.pay(order_id, "ref-1")),
        (lambda: client.get("/admin/activities", headers=ADMIN),
         lambda: found.controls.page(None, 50, None)),
        (lambda: client.post(f"/admin/activities/{aid}/pause", headers=ADMIN),
         lambda: found.controls.current(aid)),
    ])


def test_a_lever_a_later_part_refuses_says_it_is_in_force_on_the_parts_before(
    app: Any, client: Any, make_activity: Callable[..., dict[str, Any]], rds: redis.Redis
) -> None:
    """The one conversion the levers keep (not the generic 503): the parts that took the pause
    keep it, and the answer says so, with the generic detail. Part 1's pause version made
    a word: the lever's script fails there (a real error reply), nothing else reads it."""
    aid = make_activity(total=10, shards=2)["id"]
    keys = app.extensions["seckill"].keys
    rds.hset(keys.meta(part_tags(aid, 2)[1]), "paused_v", "not a number")
    body = expect(client.post(f"/admin/activities/{aid}/pause", headers=ADMIN), 503,
                  "unavailable")
    assert body == {
        "error": "unavailable",
        "message": "the pause or resume is in force on 1 of the 2 parts of the stock; the "
                   "others follow within seconds (the database too); nothing to do but check "
                   "the activity",
        "detail": unavailable(redis.ResponseError("ERR user_script")).extra["detail"],
        "applied": "partly",
    }
    assert rds.hget(keys.meta(part_tags(aid, 2)[0]), "paused") == "1"
