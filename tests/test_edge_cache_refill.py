"""Units that come back are on sale through nginx within 2 s, under a running flood.

nginx repeats an activity's ``sold_out`` (the URL) and ``paused`` (the URL and the purchase)
for the rest of the second the gateway gave it, and each gateway process answers a sold-out
activity from its own flag and copy: all must let go once units come back. Real nginx (no
per-IP limit) in front of the two gunicorn instances of tests/test_nginx.py, and a bounded
crowd through nginx: fresh users (``GET /seckill/url``, then the purchase it signed) and ticket
holders (a URL signed before the sell-out or the pause, POSTed again and again).

Units come back four ways: a restock, an operator's cancel, a resume, an unpaid hold expiring
(the orders worker's expirer, as ``seckill worker`` runs it). Each unit's time to sale is
counted from the moment it came back (the operator call's return; for the hold, the Redis time
the expiry step wrote on the cancel entry it queued with the unit's return) to the 200 that
sold it again: at most 2 s. Then the ledger: ``sold + remaining == total``, nothing below zero,
and the live orders in Redis are exactly the crowd's 200s but those returned. Times are
wall-clock (``time.time()``): Redis and this test read one host's clock.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis
import urllib3

from seckill.config import Settings
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import close_client
from seckill.store.plumbing.keys import split_buyer_entry
from seckill.worker.expiry import Expirer
from seckill.worker.stop import StopFlag
from tests.support.gateway import gateway_env
from tests.support.nginx import USER_RATE, Answer, Instances, call, create_activity, front
from tests.support.orders import built_worker
from tests.support.servers import NginxFront
from tests.support.tokens import ADMIN, user_headers

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.

BOUND = 2.0  # the contract: units that come back are on sale through nginx within 2 s
# Ticket holders retry in one tight loop, so they may buy every unit that comes back before a
# fresh user is let through nginx again: each case returns at least TICKETS + 2 units, so that
# both ways of buying are seen selling again.
TICKETS = 5
HIT = "HIT"
# What the crowd may be told while units come and go; anything else fails the test.
EXPECTED = {("url", 200, None), ("url", 410, "sold_out"), ("url", 503, "paused"),
            ("buy", 200, None), ("buy", 410, "sold_out"), ("buy", 503, "paused")}


@pytest.fixture
def proxy(instances: Instances, tmp_path: Path) -> Iterator[NginxFront]:
    with front(instances, tmp_path, ip_rate="off") as running:
        yield running


@pytest.fixture
def store(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    """The instances' Redis, read only: the live orders and the expiry's cancel entries."""
    client = redis.Redis.from_url(valkey.url, decode_responses=True)
    yield client
    close_client(client)


@dataclass(frozen=True)
class Sale:
    user: str
    order_id: str
    at: float  # when the 200 arrived


@dataclass
class Ticket:
    user: str
    headers: dict[str, str]
    url: str  # the purchase URL signed for this user


class Flood:
    """A bounded crowd through nginx, in threads until :meth:`stop`, ``seconds`` or
    ``requests``: ``fresh`` threads of new users (URL, then purchase) and one thread cycling
    over ``tickets`` (a ticket sold a unit is done). It keeps every 200 and, per route and
    refusal, when nginx last answered it from its cache."""

    def __init__(self, http: urllib3.PoolManager, proxy: NginxFront, aid: str,
                 tickets: list[Ticket], fresh: int = 3, seconds: float = 12.0,
                 requests: int = 8000) -> None:
        self.http, self.proxy, self.aid = http, proxy, aid
        self.tickets = collections.deque(tickets)
        self.deadline = time.monotonic() + seconds
        self.left = requests
        self.lock = threading.Lock()
        self.sales: list[Sale] = []
        # when a fresh user asked for a purchase URL and when they got it (a 200)
        self.issued: list[tuple[float, float]] = []
        self.hits: dict[tuple[str, str], float] = {}  # (route, error) -> last nginx answer
        self.answers: collections.Counter[tuple[str, int, str | None, bool]] = (
            collections.Counter())
        self.unexpected: list[tuple[str, int, Any]] = []
        self.failures: list[BaseException] = []
        self.halt = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(self._fresh,), daemon=True)
                        for _ in range(fresh)]
        if tickets:
            self.threads.append(threading.Thread(target=self._run, args=(self._ticket,),
                                                 daemon=True))
        for thread in self.threads:
            thread.start()

    def _run(self, one: Callable[[], None]) -> None:
        try:
            while not self.halt.is_set() and time.monotonic() < self.deadline:
                with self.lock:
                    self.left -= 1
                    if self.left < 0:
                        return
                one()
        except BaseException as exc:  # kept, raised by stop(): a silent thread proves nothing
            self.failures.append(exc)

    def _fresh(self) -> None:
        user = f"fresh-{uuid.uuid4().hex[:12]}"
        headers = user_headers(user)
        asked = time.time()
        got = self._note("url", call(self.http, "GET", self.url(), headers))
        if got.status == 200:
            with self.lock:
                self.issued.append((asked, time.time()))
            self._buy(user, headers, f"{self.proxy.base}{got.body['url']}")

    def _ticket(self) -> None:
        with self.lock:
            if not self.tickets:
                self.halt.wait(0.01)  # every ticket holder bought; the fresh threads go on
                return
            ticket = self.tickets.popleft()
        if not self._buy(ticket.user, ticket.headers, ticket.url):
            with self.lock:
                self.tickets.append(ticket)

    def _buy(self, user: str, headers: dict[str, str], url: str) -> bool:
        bought = self._note("buy", call(self.http, "POST", url, headers))
        if bought.status != 200:
            return False
        with self.lock:
            self.sales.append(Sale(user, bought.body["order_id"], time.time()))
        return True

    def _note(self, route: str, answer: Answer) -> Answer:
        error = answer.body.get("error") if isinstance(answer.body, dict) else None
        cached = answer.headers.get("X-Cache") == HIT
        with self.lock:
            self.answers[route, answer.status, error, cached] += 1
            if (route, answer.status, error) not in EXPECTED:
                self.unexpected.append((route, answer.status, answer.body))
            if cached:
                self.hits[route, str(error)] = time.time()
        return answer

    def url(self) -> str:
        return f"{self.proxy.base}/seckill/url?activity={self.aid}"

    def sales_after(self, moment: float) -> list[Sale]:
        with self.lock:
            return sorted((s for s in self.sales if s.at > moment), key=lambda s: s.at)

    def issued_after(self, moment: float) -> list[float]:
        """When the URLs given after ``moment`` were received."""
        with self.lock:
            return sorted(got for _, got in self.issued if got > moment)

    def issued_within(self, start: float, end: float) -> list[float]:
        """When the URLs asked for after ``start`` and received before ``end`` were received:
        a request that straddles either moment may have been decided outside the window
        (a 200 recorded just after nginx's first cached refusal was recorded, under load)."""
        with self.lock:
            return sorted(got for asked, got in self.issued if asked > start and got < end)

    def nginx_said(self, route: str, error: str) -> float:
        """When nginx last answered ``error`` to ``route`` from its cache (0: never)."""
        with self.lock:
            return self.hits.get((route, error), 0.0)

    def join(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=20)
        assert not any(thread.is_alive() for thread in self.threads), "the flood did not stop"

    def stop(self) -> None:
        """Stop; the threads' failures and any answer not in ``EXPECTED`` fail the test."""
        self.join()
        if self.failures:
            raise self.failures[0]
        assert not self.unexpected, self.unexpected[:5]


@contextlib.contextmanager
def flooding(http: urllib3.PoolManager, proxy: NginxFront, aid: str,
             tickets: list[Ticket]) -> Iterator[Flood]:
    flood = Flood(http, proxy, aid, tickets)
    try:
        yield flood
    finally:
        flood.join()


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` past ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.01)


def admin(http: urllib3.PoolManager, proxy: NginxFront, method: str, path: str,
          body: dict[str, Any] | None = None) -> Answer:
    headers = {**ADMIN, "Content-Type": "application/json"} if body is not None else ADMIN
    answer = call(http, method, f"{proxy.admin_base}{path}", headers,
                  None if body is None else orjson.dumps(body))
    assert answer.status == 200, (path, answer.status, answer.body)
    return answer


def stats(http: urllib3.PoolManager, proxy: NginxFront, aid: str) -> dict[str, Any]:
    return dict(admin(http, proxy, "GET", f"/admin/activities/{aid}/stats").body)


def tickets_for(http: urllib3.PoolManager, proxy: NginxFront, aid: str, count: int = TICKETS
                ) -> list[Ticket]:
    """``count`` users holding a signed purchase URL (asked while the sale is open)."""
    found = []
    for _ in range(count):
        user = f"ticket-{uuid.uuid4().hex[:12]}"
        headers = user_headers(user)
        got = call(http, "GET", f"{proxy.base}/seckill/url?activity={aid}", headers)
        assert got.status == 200, got.body
        found.append(Ticket(user, headers, f"{proxy.base}{got.body['url']}"))
    return found


def sold_out_behind_nginx(http: urllib3.PoolManager, proxy: NginxFront, flood: Flood,
                          aid: str) -> float:
    """Wait until the crowd bought everything and nginx answers ``sold_out`` from its cache;
    the moment nginx said so (nothing is on sale from then on until a unit comes back)."""
    wait_until(lambda: stats(http, proxy, aid)["remaining"] == 0, 5, "sold out")
    since = time.time()
    wait_until(lambda: flood.nginx_said("url", "sold_out") > since, 3,
               "nginx answering sold_out from its cache")
    return flood.nginx_said("url", "sold_out")


def on_sale_again(flood: Flood, refused: float, returns: list[float],
                  asked: float | None = None) -> dict[str, Any]:
    """How long after coming back (``returns``, one moment per unit; ``asked``: when the
    operator was asked, the units being back before the call returns) they were on sale
    through nginx; each within the bound.

    * ``sold``: per unit, the seconds to the 200 that sold it again. Nothing was on sale from
      ``refused`` (nginx refusing the crowd) to the first return, so the i-th 200 after
      ``refused`` cannot come before the i-th unit back: it is that unit's sale.
    * ``url``: the seconds to the first URL a fresh user was given: nginx stopped repeating the
      refusal of ``GET /seckill/url`` (the ticket holders alone might buy every unit).
    * ``paths``: who bought them (a ticket holder, or a fresh user)."""
    returns = sorted(returns)
    quiet = flood.issued_within(refused, asked or returns[0])
    assert not quiet, f"purchase URLs issued while nothing was on sale: {quiet}"
    timeout = returns[-1] - time.time() + 3 * BOUND
    wait_until(lambda: len(flood.sales_after(refused)) >= len(returns), timeout,
               f"{len(returns)} units sold again (sold: {len(flood.sales_after(refused))})")
    wait_until(lambda: bool(flood.issued_after(returns[0])), timeout, "a purchase URL again")
    sales = flood.sales_after(refused)[: len(returns)]
    found: dict[str, Any] = {
        "sold": [round(sale.at - back, 3) for sale, back in zip(sales, returns, strict=True)],
        "url": round(flood.issued_after(returns[0])[0] - returns[0], 3),
        "paths": [sale.user.split("-")[0] for sale in sales],
    }
    with flood.lock:
        answered = sum(flood.answers.values())
        by_nginx = sum(n for (_, _, _, cached), n in flood.answers.items() if cached)
    print(f"on sale again: {found}; {answered} requests so far, {by_nginx} answered by nginx")
    assert max(found["sold"]) <= BOUND and found["url"] <= BOUND, found
    return found


def hash_of(store: redis.Redis, key: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in store.hgetall(key).items()}


def ledger(http: urllib3.PoolManager, proxy: NginxFront, store: redis.Redis, instances: Instances,
           aid: str, sales: list[Sale]) -> dict[str, Any]:
    """Nobody was sold a unit that was not there: the counters agree and stay in bounds, and
    the live orders in Redis are exactly the crowd's 200s but those returned (cancelled or
    expired, each the order the crowd was sold)."""
    numbers = stats(http, proxy, aid)
    assert numbers["remaining"] >= 0 and numbers["sold"] + numbers["remaining"] == numbers[
        "total"], numbers
    sold_to = {sale.user: sale.order_id for sale in sales}
    assert len(sold_to) == len({sale.order_id for sale in sales}) == len(sales)
    live = {uid: split_buyer_entry(value)[0]
            for uid, value in hash_of(store, instances.key(aid, "buyers")).items()}
    returned = hash_of(store, instances.key(aid, "cancelled"))
    assert returned == {uid: sold_to[uid] for uid in returned}, (returned, sold_to)
    assert live == {uid: order for uid, order in sold_to.items() if uid not in returned}
    assert numbers["sold"] == numbers["buyers"] == len(live)
    return numbers


# -- the four ways units come back -----------------------------------------------------------


def beyond_tickets(flood: Flood) -> int:
    """Units to give back so that fresh users get some whatever the ticket holders buy."""
    with flood.lock:
        return len(flood.tickets) + 2


def test_a_restock_is_on_sale_through_nginx_within_two_seconds(
        http, proxy, instances, store) -> None:
    aid = create_activity(http, proxy.admin_base, total=2)
    with flooding(http, proxy, aid, tickets_for(http, proxy, aid)) as flood:
        refused = sold_out_behind_nginx(http, proxy, flood, aid)
        add, asked = beyond_tickets(flood), time.time()
        admin(http, proxy, "POST", f"/admin/activities/{aid}/stock", {"add": add})
        on_sale_again(flood, refused, [time.time()] * add, asked)
        flood.stop()
    numbers = ledger(http, proxy, store, instances, aid, flood.sales)
    assert (numbers["total"], numbers["sold"], len(flood.sales)) == (2 + add,) * 3


def test_cancelled_orders_are_on_sale_through_nginx_within_two_seconds(
        http, proxy, instances, store) -> None:
    total = TICKETS + 2
    aid = create_activity(http, proxy.admin_base, total=total)
    with flooding(http, proxy, aid, tickets_for(http, proxy, aid)) as flood:
        refused = sold_out_behind_nginx(http, proxy, flood, aid)
        winners = flood.sales_after(0)[: beyond_tickets(flood)]
        asked, returns = time.time(), []
        for winner in winners:
            answer = admin(http, proxy, "POST", f"/admin/orders/{winner.order_id}/cancel")
            returns.append(time.time())
            assert answer.body["status"] == "cancelled", answer.body
        on_sale_again(flood, refused, returns, asked)
        flood.stop()
    numbers = ledger(http, proxy, store, instances, aid, flood.sales)
    assert (numbers["total"], numbers["sold"]) == (total, total)
    assert len(flood.sales) == total + len(winners)
    assert hash_of(store, instances.key(aid, "cancelled")) == {
        winner.user: winner.order_id for winner in winners}


def test_a_resumed_sale_is_on_sale_through_nginx_within_two_seconds(
        http, proxy, instances, store) -> None:
    total = TICKETS + 2
    aid = create_activity(http, proxy.admin_base, total=total)
    tickets = tickets_for(http, proxy, aid)
    admin(http, proxy, "POST", f"/admin/activities/{aid}/pause")
    with flooding(http, proxy, aid, tickets) as flood:
        # nginx answers paused from its cache, to the URL and to the ticket holders' purchase
        wait_until(lambda: min(flood.nginx_said("url", "paused"),
                               flood.nginx_said("buy", "paused")) > 0, 5,
                   "nginx answering paused")
        assert flood.sales_after(0) == [], "sold while paused"  # the scripts refuse too
        refused = max(flood.nginx_said("url", "paused"), flood.nginx_said("buy", "paused"))
        asked = time.time()
        admin(http, proxy, "POST", f"/admin/activities/{aid}/resume")
        on_sale_again(flood, refused, [time.time()] * total, asked)
        flood.stop()
    numbers = ledger(http, proxy, store, instances, aid, flood.sales)
    assert (numbers["total"], numbers["sold"], len(flood.sales)) == (total,) * 3


@contextlib.contextmanager
def expiring(instances: Instances, valkey: EmbeddedValkey) -> Iterator[StopFlag]:
    """The orders worker's expiry loop on the instances' Redis and database, in a thread as
    ``seckill worker`` runs it (a short refresh, so that a new activity is seen at once).
    The environment is the one tests/test_nginx.py gives its instances."""
    database = instances.tmp / "orders.db"
    assert database.exists(), database
    settings = Settings.from_env(gateway_env(valkey.url, instances.prefix, instances.tmp / "data",
                                             f"sqlite:///{database}", USER_RATE))
    stop = StopFlag()
    with built_worker(settings) as worker:
        expirer = Expirer(worker.client, worker.keys, worker.book,
                          batch=settings.expiry_batch, refresh_seconds=0.2)
        thread = threading.Thread(target=expirer.run, args=(stop,), name="expiry", daemon=True)
        thread.start()
        try:
            yield stop
        finally:
            stop.event.set()
            thread.join(timeout=10)
            assert not thread.is_alive(), "the expiry loop did not stop"


def expiries(store: redis.Redis, instances: Instances, aid: str) -> list[float]:
    """When the expiry returned each unit: the Redis time (ms) on the cancel entry it queued
    in the same atomic step that put the unit back."""
    entries = cast(list[tuple[str, dict[str, str]]], store.xrange(instances.key(aid, "orders")))
    return [int(fields["ts"]) / 1000 for _, fields in entries
            if fields.get("type") == "cancel" and fields.get("reason") == "expired"]


def test_an_expired_hold_is_on_sale_through_nginx_within_two_seconds(
        http, proxy, instances, store, valkey) -> None:
    total = TICKETS + 2
    aid = create_activity(http, proxy.admin_base, total=total, payment_window=2)
    with expiring(instances, valkey) as expiry, \
            flooding(http, proxy, aid, tickets_for(http, proxy, aid)) as flood:
        refused = sold_out_behind_nginx(http, proxy, flood, aid)
        held = flood.sales_after(0)
        wait_until(lambda: len(expiries(store, instances, aid)) == total, 2 + 2 * BOUND,
                   "every unpaid hold expired")
        returns = expiries(store, instances, aid)
        # nginx was repeating the sell-out when the units came back
        assert refused < min(returns), (refused, returns)
        on_sale_again(flood, refused, returns)
        flood.stop()
        expiry.event.set()  # nothing expires after this: the ledger is read at rest
    numbers = ledger(http, proxy, store, instances, aid, flood.sales)
    assert hash_of(store, instances.key(aid, "cancelled")) == {
        sale.user: sale.order_id for sale in held}
    assert (numbers["total"], numbers["sold"], len(flood.sales)) == (total, total, 2 * total)
    assert numbers["payments"]["expired"] == total, numbers
