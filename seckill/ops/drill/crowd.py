"""The drill's crowd: a bounded number of distinct buyers, released at an even pace over the
drill, each asking for a purchase URL and then buying once, through keep-alive connections.

Every request is bounded by a timeout and recorded (time, phase, endpoint, status, error code,
a purchase's order id, units and variants, the person behind the account if any). A purchase
answered 502/503 (but ``paused``)/504, or lost to a timeout or a dropped connection, has an
*unknown* outcome: the crowd asks its order status within seconds, as the sale page does
(:class:`Asker`), and :func:`resolve_unknown` asks again at the end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import queue
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from edge.identity import mint_user_token

# Seconds, for every request of the crowd: longer than nginx's read timeout (10 s), as the sale
# page sets no deadline of its own and hears nginx's 504 first; a gateway answering after that
# is one the buyer already left.
TIMEOUT = 15.0
NETWORK = 0  # the status recorded when no HTTP answer came
# 503 `unavailable` details that say a purchase was refused before anything was decided (the
# sale page's REFUSED_DETAILS, and the gray failures' expired purchase and full disk).
REFUSED_DETAILS = frozenset({"no_replica", "inconsistent", "expired", "storage"})
# The sale page's waits before each ask of the order status after an unknown outcome (s).
ORDER_WAITS = (0.0, 0.5, 1.0, 2.0, 4.0)


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One request of the crowd and what it got."""

    at: float  # seconds since the drill's start
    phase: str
    endpoint: str  # "url", "buy", "pay", "order"
    status: int  # NETWORK (0) when no answer came
    error: str  # the body's error code, or "timeout" / "connection" / "" when ok
    uid: str
    aid: str
    order_id: str = ""
    units: int = 0  # a purchase answered 200: the units it sold
    person: str = ""  # the person behind the account (their token's person claim), if any
    items: str = ""  # a purchase answered 200 on an activity with variants: "s:1,m:1"
    detail: str = ""  # an error body's "detail" (503 unavailable: expired, storage, ...)
    answered: float = 0.0  # seconds since the drill's start when the answer (or none) came

    def unknown_outcome(self) -> bool:
        """A purchase whose outcome the answer does not tell: no answer, or a 5xx but
        ``paused`` (the sale page asks the order status of all of them)."""
        return (self.endpoint == "buy" and (self.status == NETWORK or self.status >= 500)
                and self.error != "paused")

    def refused(self) -> bool:
        """An answer that says nothing was decided: a 4xx, ``paused``, or a 503 whose detail
        says it was refused first."""
        return (400 <= self.status < 500 or self.error == "paused"
                or (self.status == 503 and self.detail in REFUSED_DETAILS))


@dataclasses.dataclass(frozen=True)
class Buyer:
    """One distinct user (an account) and the activity they try to buy, whether they pay, the
    person behind the account (several accounts may share one) and the purchase's terms: its
    body (None: an empty one), or its query (``?variant=<vid>``, as the sale page sends it)."""

    uid: str
    aid: str
    pays: bool
    person: str = ""
    body: dict[str, Any] | None = None
    query: str = ""


def buyer_token(buyer: Buyer, jwt_secret: str, person_claim: str, ttl: int) -> str:
    """The buyer's JWT, with the person claim when a person stands behind the account."""
    claims: dict[str, object] | None = {person_claim: buyer.person} if buyer.person else None
    return mint_user_token(buyer.uid, jwt_secret, ttl, claims=claims)


def items_text(body: dict[str, Any]) -> str:
    """A 200's or an order status's ``items`` as ``"s:1,m:1"`` ("" without)."""
    items = body.get("items")
    if not isinstance(items, list):
        return ""
    return ",".join(f"{i.get('variant')}:{i.get('quantity')}" for i in items
                    if isinstance(i, dict))


def units_of(body: dict[str, Any]) -> int | None:
    """The units a 200 or an order status names: its items' quantities, else its
    ``quantity``; None when it says nothing (an order status without variants)."""
    items = body.get("items")
    if isinstance(items, list):
        return sum(i["quantity"] for i in items
                   if isinstance(i, dict) and isinstance(i.get("quantity"), int))
    quantity = body.get("quantity")
    return quantity if isinstance(quantity, int) else None


class Client:
    """One keep-alive connection to a listener (from one loopback address when asked)."""

    def __init__(self, base: str, source: str | None = None) -> None:
        parts = urlsplit(base)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port
        self.source = source
        self.conn: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self.conn is None:
            source = (self.source, 0) if self.source else None
            kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self.conn = kind(self.host, self.port, timeout=TIMEOUT, source_address=source)
        return self.conn

    def call(
        self, method: str, path: str, token: str, body: Any = None
    ) -> tuple[int, dict[str, Any], str]:
        """``(status, JSON body or {}, error code)``; status 0 with ``timeout`` or
        ``connection`` when no answer came (the connection is then dropped)."""
        headers = {"Authorization": f"Bearer {token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif method == "POST":
            headers["Content-Length"] = "0"
        for _ in range(2):
            reused = self.conn is not None
            try:
                conn = self._connect()
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                status = response.status
                if response.will_close:
                    self.close()
                break
            except TimeoutError:
                self.close()
                return NETWORK, {}, "timeout"
            except (OSError, http.client.HTTPException):
                self.close()
                if not reused:
                    return NETWORK, {}, "connection"
                # A kept-alive connection the server closed (nginx restarted): retried once
                # on a new one, as browsers do; a purchase is safe to repeat (409 with its id).
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        if not isinstance(parsed, dict):
            parsed = {}
        error = str(parsed.get("error", "")) if status >= 300 else ""
        return status, parsed, error

    def close(self) -> None:
        """Drop the connection (the next call opens another)."""
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
            self.conn = None


def loopback_sources(base: str, count: int) -> list[str | None]:
    """One source address per thread: spread over 127.0.0.0/8 when the target is loopback
    (so that a per-address limit sees many clients), else the system's choice."""
    host = urlsplit(base).hostname or ""
    if not host.startswith("127."):
        return [None] * count
    return [f"127.0.{1 + n // 250}.{2 + n % 250}" for n in range(count)]


class Crowd:
    """Buyers released at an even pace over ``duration`` seconds by ``threads`` threads."""

    def __init__(
        self, base: str, admin_base: str, jwt_secret: str, admin_token: str,
        buyers: list[Buyer], duration: float, phase: Callable[[], str], started: float,
        threads: int = 48, person_claim: str = "",
    ) -> None:
        self.base, self.admin_base = base, admin_base
        self.jwt_secret, self.admin_token = jwt_secret, admin_token
        self.buyers, self.duration, self.phase, self.started = buyers, duration, phase, started
        self.threads = max(1, min(threads, len(buyers)))
        self.records: list[Record] = []  # list.append is atomic: shared by the threads
        if any(b.person for b in buyers) and not person_claim:
            raise ValueError("buyers with a person need the stack's person claim")
        self.tokens = {b.uid: buyer_token(b, jwt_secret, person_claim, 3 * 3600)
                       for b in buyers}
        self._work: queue.Queue[tuple[float, Buyer] | None] = queue.Queue()
        self._pool: list[threading.Thread] = []
        self.stop_requested = threading.Event()
        # While the whole stack is stopped no new buyer arrives (the shop is down too): the
        # schedule of those not yet released moves on by the hold.
        self._open = threading.Event()
        self._open.set()
        self._held_since = 0.0
        self.shift = 0.0
        self.asker: Asker | None = None  # asks unknown outcomes as the sale page does

    def ask_early(self) -> Asker:
        """Ask every unknown outcome's order status within seconds (started here)."""
        self.asker = Asker(self.base, self.now).start()
        return self.asker

    def hold(self) -> None:
        """Release no new buyer until :meth:`release` (those in flight go on)."""
        self._held_since = self.now()
        self._open.clear()

    def release(self) -> None:
        """Release buyers again, each later by the time held."""
        self.shift += self.now() - self._held_since
        self._open.set()

    def now(self) -> float:
        """Seconds since the drill's start."""
        return time.monotonic() - self.started

    def start(self) -> None:
        """Release the buyers (each at its moment) and start the threads."""
        step = self.duration / max(1, len(self.buyers))
        begin = self.now()
        for n, buyer in enumerate(self.buyers):
            self._work.put((begin + n * step, buyer))
        sources = loopback_sources(self.base, self.threads)
        for n in range(self.threads):
            self._work.put(None)
            thread = threading.Thread(target=self._run, args=(sources[n],), daemon=True,
                                      name=f"drill-crowd-{n}")
            thread.start()
            self._pool.append(thread)

    def join(self, timeout: float) -> bool:
        """Wait for every buyer (bounded); whether all are done. Late ones are stopped."""
        deadline = time.monotonic() + timeout
        for thread in self._pool:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._pool):
            self.stop_requested.set()
            for thread in self._pool:
                thread.join(2 * TIMEOUT)
            return False
        return True

    def _run(self, source: str | None) -> None:
        public, admin = Client(self.base, source), Client(self.admin_base, source)
        try:
            while not self.stop_requested.is_set():
                item = self._work.get()
                if item is None:
                    return
                at, buyer = item
                while not self._open.wait(0.5):
                    if self.stop_requested.is_set():
                        return
                wait = at + self.shift - self.now()
                if wait > 0 and self.stop_requested.wait(wait):
                    return
                self._buy(public, admin, buyer)
        finally:
            public.close()
            admin.close()

    def _record(self, phase: str, at: float, endpoint: str, status: int, error: str,
                buyer: Buyer, order_id: str = "", answer: dict[str, Any] | None = None
                ) -> None:
        units, items, detail = 0, "", ""
        if answer is not None and status == 200:
            units, items = units_of(answer) or 0, items_text(answer)
        elif answer is not None and status >= 300:
            detail = str(answer.get("detail") or "")[:40]
        record = Record(round(at, 3), phase, endpoint, status, error, buyer.uid, buyer.aid,
                        order_id, units, buyer.person, items, detail, round(self.now(), 3))
        self.records.append(record)
        if record.unknown_outcome() and self.asker is not None:
            self.asker.ask(buyer.aid, buyer.uid, self.tokens[buyer.uid])

    def _buy(self, public: Client, admin: Client, buyer: Buyer) -> None:
        token = self.tokens[buyer.uid]
        at, phase = self.now(), self.phase()
        status, body, error = public.call("GET", f"/seckill/url?activity={quote(buyer.aid)}",
                                          token)
        self._record(phase, at, "url", status, error, buyer, answer=body)
        url = body.get("url")
        if status != 200 or not isinstance(url, str):
            return
        at, phase = self.now(), self.phase()
        status, body, error = public.call("POST", url + buyer.query, token, buyer.body)
        order_id = str(body.get("order_id") or "")
        self._record(phase, at, "buy", status, error, buyer, order_id, body)
        if status == 200 and buyer.pays and order_id:
            at, phase = self.now(), self.phase()
            status, body, error = admin.call(
                "POST", f"/admin/orders/{quote(order_id)}/pay", self.admin_token,
                {"payment_ref": f"drill-{order_id}"[:128]})
            self._record(phase, at, "pay", status, error, buyer, order_id)


class Asker:
    """The sale page's asking after an unknown outcome: the order status, at
    :data:`ORDER_WAITS` after the failure until it answers, in a few threads of its own (the
    buyer's own page would block; the crowd's threads must not)."""

    def __init__(self, base: str, now: Callable[[], float], threads: int = 4) -> None:
        self.base, self.now = base, now
        self.threads = threads
        # (aid, uid) -> (seconds since the start when it answered, the order status)
        self.early: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._work: queue.Queue[tuple[str, str, str] | None] = queue.Queue()
        self._pool: list[threading.Thread] = []

    def start(self) -> Asker:
        """Start the threads."""
        for n in range(self.threads):
            thread = threading.Thread(target=self._run, daemon=True, name=f"drill-asker-{n}")
            thread.start()
            self._pool.append(thread)
        return self

    def ask(self, aid: str, uid: str, token: str) -> None:
        """Ask this buyer's order status soon."""
        self._work.put((aid, uid, token))

    def stop(self, timeout: float = 30.0) -> None:
        """Finish what was asked (bounded), then stop."""
        for _ in self._pool:
            self._work.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._pool:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        client = Client(self.base)
        try:
            while (item := self._work.get()) is not None:
                aid, uid, token = item
                found: tuple[float, dict[str, Any]] = (self.now(), {"status": "unanswered"})
                for wait in ORDER_WAITS:
                    time.sleep(wait)
                    status, body, _ = client.call("GET", f"/seckill/{quote(aid)}/order", token)
                    if status == 200 and isinstance(body.get("status"), str):
                        found = (round(self.now(), 3), body)
                        break
                self.early.setdefault((aid, uid), found)
        finally:
            client.close()


def resolve_unknown(
    base: str, jwt_secret: str, records: list[Record], now: Callable[[], float],
    tokens: dict[str, str] | None = None,
) -> dict[tuple[str, str], dict[str, Any]]:
    """Ask ``GET /seckill/<aid>/order`` for every buyer whose purchase had an unknown
    outcome; ``(aid, uid) -> the order status`` (``{"status": "unanswered"}`` when even that
    failed, after a few bounded tries). ``tokens``: the crowd's own (an account of a person
    asks with its person claim; on an activity limited by person the status is the
    person's)."""
    asked = sorted({(r.aid, r.uid) for r in records if r.unknown_outcome()})
    found: dict[tuple[str, str], dict[str, Any]] = {}
    client = Client(base)
    try:
        for aid, uid in asked:
            token = (tokens or {}).get(uid) or mint_user_token(uid, jwt_secret, 600)
            body: dict[str, Any] = {"status": "unanswered"}
            for _ in range(5):
                status, answer, _error = client.call("GET", f"/seckill/{quote(aid)}/order",
                                                     token)
                if status == 200:
                    body = answer
                    break
                time.sleep(0.2)  # a restart's last seconds; bounded by the 5 tries
            found[(aid, uid)] = body
    finally:
        client.close()
    return found
