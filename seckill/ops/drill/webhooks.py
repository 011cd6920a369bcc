"""The drill's shop: a real receiver of the gateway's webhooks, and the invariant
that every stored order's events arrived.

The receiver listens on the loopback, verifies each delivery's signature with the
``standardwebhooks`` library (a bad one is answered 401 and counted; one whose connection ends
before its body, a sender killed between its headers and its body, is counted apart as torn:
the dispatcher retries it), and records what came (it can also be down, slow, answer 500 or
cut its answer's body, as a shop's endpoint does on a bad day: each event must still arrive
once by id, in order per order):
``webhook-id``, type, order and body. At the end the drill reads the orders of its
activities from the database and expects, per order: ``order.created``; then
``order.paid`` if it was paid, ``order.expired`` if its hold lapsed, ``order.cancelled`` if it
was cancelled otherwise; each once (one ``webhook-id`` per event, however many attempts), the
later ones after ``order.created``; no event of an order the database does not hold; and an
``activity.sold_out`` for every activity whose stored orders hold its total at the end.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from seckill.domain.events import (
    ACTIVITY_SOLD_OUT,
    ORDER_CANCELLED,
    ORDER_CREATED,
    ORDER_EXPIRED,
    ORDER_PAID,
)
from seckill.ops.drill.checks import Invariant
from seckill.sql.engine import make_engine
from seckill.sql.schema import activities, orders

NAME = "every order's events reached the shop"


@dataclasses.dataclass(frozen=True)
class Arrival:
    """One verified delivery, in the order it arrived."""

    webhook_id: str
    type: str
    order_id: str | None
    body: bytes


# How long the receiver's "slow" mode takes to answer: longer than the dispatcher's attempt
# timeout (seckill/webhooks/options.py, 10 s), so the attempt fails after the shop took it.
SLOW_S = 11.0
MODES = ("ok", "slow", "500", "cut")


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that verifies and records deliveries. Its
    ``mode`` rehearses a shop that misbehaves: ``slow`` (answers after :data:`SLOW_S`),
    ``500``, ``cut`` (a 200 whose body ends early); :meth:`down` and :meth:`up` close and
    reopen its port. A delivery it took (verified) is recorded whatever it answered then."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.arrivals: list[Arrival] = []
        self.refused = 0  # deliveries whose signature did not verify
        # Attempts whose connection ended before their body did: the dispatcher killed between
        # its headers and its body (two writes), which it retries. Not a bad signature.
        self.torn = 0
        self.mode = "ok"
        self.answered: dict[str, int] = {}  # mode -> attempts answered in it
        self._lock = threading.Lock()
        self._handler = self._make_handler(Webhook(secret))
        self._server = self._serve(0)
        self.port = int(self._server.server_address[1])

    def _make_handler(self, verifier: Webhook) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                mode = receiver.mode
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                if len(body) < length:  # the sender is gone: nobody to answer
                    with receiver._lock:
                        receiver.torn += 1
                    self.close_connection = True
                    return
                with receiver._lock:
                    receiver.answered[mode] = receiver.answered.get(mode, 0) + 1
                if mode == "500":  # refused before the shop looked at it
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                try:
                    event = verifier.verify(body, dict(self.headers.items()))
                except (WebhookVerificationError, ValueError):
                    with receiver._lock:
                        receiver.refused += 1
                    self.send_response(401)
                    self.end_headers()
                    return
                data = event.get("data") or {}
                arrival = Arrival(self.headers["webhook-id"], str(event.get("type")),
                                  data.get("order_id"), body)
                with receiver._lock:
                    receiver.arrivals.append(arrival)
                if mode == "slow":
                    time.sleep(SLOW_S)
                if mode == "cut":  # a 200 whose body stops half-way, the connection closed
                    self.send_response(200)
                    self.send_header("Content-Length", "64")
                    self.end_headers()
                    self.wfile.write(b'{"received": tr')
                    self.close_connection = True
                    return
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler

    def _serve(self, port: int) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", port), self._handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True,
                         name="drill-receiver").start()
        return server

    @property
    def url(self) -> str:
        """Where the endpoint is registered."""
        return f"http://127.0.0.1:{self.port}/seckill-events"

    def start(self) -> Receiver:
        """Already serving (in a thread of its own); returns the receiver."""
        return self

    def down(self) -> None:
        """Close its port: the dispatcher's connections are refused."""
        self._server.shutdown()
        self._server.server_close()

    def up(self) -> None:
        """Open its port again (the same one)."""
        self._server = self._serve(self.port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def snapshot(self) -> list[Arrival]:
        """What arrived so far, in order."""
        with self._lock:
            return list(self.arrivals)


def expected_events(database_url: str, aids: list[str]) -> dict[str, list[str]]:
    """order id -> the event types its stored row calls for, in the order they happen."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(orders.c.order_id, orders.c.status, orders.c.payment)
                .where(orders.c.activity_id.in_(aids))).all()
    finally:
        engine.dispose()
    wanted: dict[str, list[str]] = {}
    for order_id, status, payment in rows:
        kinds = [ORDER_CREATED]
        if payment == "paid":
            kinds.append(ORDER_PAID)
        if payment == "expired":
            kinds.append(ORDER_EXPIRED)
        elif status == "cancelled":
            kinds.append(ORDER_CANCELLED)
        wanted[order_id] = kinds
    return wanted


def sold_out_at_the_end(database_url: str, aids: list[str]) -> set[str]:
    """The activities whose stored confirmed orders hold their whole total now."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            totals = dict(conn.execute(sa.select(activities.c.id, activities.c.total)
                                       .where(activities.c.id.in_(aids))).all())
            sold = dict(conn.execute(
                sa.select(orders.c.activity_id, sa.func.sum(orders.c.quantity))
                .where(orders.c.activity_id.in_(aids), orders.c.status == "confirmed")
                .group_by(orders.c.activity_id)).all())
    finally:
        engine.dispose()
    return {aid for aid, total in totals.items()
            if total is not None and int(sold.get(aid) or 0) >= int(total)}


def missing_sold_out(sold_out: set[str], arrivals: list[Arrival]) -> list[str]:
    """The activities sold out at the end of which no ``activity.sold_out`` arrived."""
    told = {decode(a)["data"].get("activity") for a in arrivals if a.type == ACTIVITY_SOLD_OUT}
    return [f"{aid}: sold out, no {ACTIVITY_SOLD_OUT}" for aid in sorted(sold_out - told)]


def missing_events(wanted: dict[str, list[str]], arrivals: list[Arrival]) -> list[str]:
    """What is wrong with ``arrivals`` against ``wanted`` (empty: nothing)."""
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], int] = {}
    bodies: dict[str, bytes] = {}
    wrong: list[str] = []
    for n, a in enumerate(arrivals):
        if a.order_id is None:
            continue
        key = (a.order_id, a.type)
        ids[key].add(a.webhook_id)
        first.setdefault(key, n)
        if bodies.setdefault(a.webhook_id, a.body) != a.body:
            wrong.append(f"{a.webhook_id} sent with two different bodies")
        if a.order_id not in wanted:
            wrong.append(f"{a.type} of {a.order_id}, which the database does not hold")
    got: dict[str, set[str]] = defaultdict(set)  # order id -> the types that arrived
    for oid, kind in ids:
        got[oid].add(kind)
    for order_id, kinds in sorted(wanted.items()):
        for kind in kinds:
            if kind not in got[order_id]:
                wrong.append(f"{order_id}: no {kind}")
            elif len(ids[(order_id, kind)]) > 1:
                wrong.append(f"{order_id}: {kind} under {len(ids[(order_id, kind)])} ids")
        wrong += [f"{order_id}: {kind}, not called for by its row"
                  for kind in sorted(got[order_id] - set(kinds))]
        created = first.get((order_id, ORDER_CREATED))
        for kind in kinds[1:]:
            at = first.get((order_id, kind))
            if created is not None and at is not None and at < created:
                wrong.append(f"{order_id}: {kind} arrived before {ORDER_CREATED}")
    return wrong


def check_events(database_url: str, aids: list[str], receiver: Receiver,
                 settle_s: float = 90.0) -> Invariant:
    """The invariant :data:`NAME`, once every expected event arrived or ``settle_s`` passed
    (the dispatcher drains its backlog meanwhile)."""
    deadline = time.monotonic() + settle_s
    while True:
        wanted = expected_events(database_url, aids)
        sold_out = sold_out_at_the_end(database_url, aids)
        arrivals = receiver.snapshot()
        wrong = missing_events(wanted, arrivals) + missing_sold_out(sold_out, arrivals)
        if not wrong or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if receiver.refused:
        wrong.insert(0, f"{receiver.refused} deliveries with a bad signature")
    events = sum(len(kinds) for kinds in wanted.values())
    torn = f"; {receiver.torn} torn by a killed sender, retried" if receiver.torn else ""
    return Invariant(NAME, not wrong, "; ".join(wrong[:5]) + (
        f" (and {len(wrong) - 5} more)" if len(wrong) > 5 else "") if wrong else
        f"{events} events of {len(wanted)} orders, each once and in order, and "
        f"{ACTIVITY_SOLD_OUT} of the {len(sold_out)} activities sold out at the end "
        f"({len(arrivals)} deliveries received, signatures verified{torn})")


def decode(arrival: Arrival) -> dict[str, Any]:
    """An arrival's body as JSON (for reports and tests)."""
    body: dict[str, Any] = orjson.loads(arrival.body)
    return body
