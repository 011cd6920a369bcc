"""The drill's shop (seckill/ops/drill/webhooks.py): the events check fails on crafted
arrivals that break it, and the receiver verifies signatures over real HTTP."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest
import urllib3
from standardwebhooks.webhooks import Webhook

from seckill.ops.drill.webhooks import Arrival, Receiver, missing_events, missing_sold_out

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtMTIz"


def arrival(wid: str, kind: str, oid: str, body: bytes = b"{}") -> Arrival:
    return Arrival(wid, kind, oid, body + wid.encode())


WANTED = {"a:1": ["order.created", "order.paid"], "a:2": ["order.created", "order.expired"],
          "a:3": ["order.created"]}
GOOD = [arrival("m1", "order.created", "a:1"), arrival("m2", "order.created", "a:2"),
        arrival("m3", "order.paid", "a:1"), arrival("m3", "order.paid", "a:1"),  # a retry
        arrival("m4", "order.expired", "a:2"), arrival("m5", "order.created", "a:3")]


def test_every_event_once_and_in_order_passes():
    assert missing_events(WANTED, GOOD) == []


def test_each_way_of_breaking_it_is_named():
    assert missing_events(WANTED, GOOD[:-1]) == ["a:3: no order.created"]
    assert missing_events(WANTED, [*GOOD, arrival("m6", "order.cancelled", "a:2")]) == [
        "a:2: order.cancelled, not called for by its row"]
    assert missing_events(WANTED, [*GOOD, arrival("m7", "order.created", "a:3")]) == [
        "a:3: order.created under 2 ids"]
    early = [GOOD[2], *GOOD[:2], *GOOD[3:]]
    assert missing_events(WANTED, early) == ["a:1: order.paid arrived before order.created"]
    assert missing_events(WANTED, [*GOOD, arrival("m8", "order.created", "b:9")]) == [
        "order.created of b:9, which the database does not hold"]
    changed = [*GOOD, Arrival("m5", "order.created", "a:3", b"other")]
    assert missing_events(WANTED, changed) == ["m5 sent with two different bodies"]


def test_the_receiver_verifies_signatures_over_http():
    receiver = Receiver(SECRET).start()
    http = urllib3.PoolManager()
    try:
        body = (b'{"type":"order.created","timestamp":"2026-11-27T00:00:00Z",'
                b'"data":{"order_id":"a:1"}}')
        stamp = datetime.now(UTC)
        signature = Webhook(SECRET).sign("msg_1", stamp, body.decode())
        headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(stamp.timestamp())),
                   "webhook-signature": signature, "content-type": "application/json"}
        assert http.request("POST", receiver.url, body=body, headers=headers).status == 204
        forged = {**headers, "webhook-signature": "v1,AAAA"}
        assert http.request("POST", receiver.url, body=body, headers=forged).status == 401
        garbage = {**headers, "webhook-signature": "garbage"}
        assert http.request("POST", receiver.url, body=body, headers=garbage).status == 401
    finally:
        receiver.stop()
    assert receiver.snapshot() == [Arrival("msg_1", "order.created", "a:1", body)]
    assert receiver.refused == 2


def test_a_delivery_torn_mid_body_is_no_bad_signature():
    """The dispatcher killed with kill -9 between its headers and its body (urllib3 sends
    them in two writes): the receiver gets a Content-Length and then the end of the
    connection. That is a torn attempt, which the dispatcher retries, not a forged one: the
    cluster drill once failed its events invariant on "1 deliveries with a bad signature"
    for this, with the event delivered once on the retry."""
    receiver = Receiver(SECRET).start()
    try:
        body = b'{"type":"order.created","data":{"order_id":"a:1"}}'
        stamp = datetime.now(UTC)
        head = (f"POST /seckill-events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"webhook-id: msg_1\r\nwebhook-timestamp: {int(stamp.timestamp())}\r\n"
                f"webhook-signature: {Webhook(SECRET).sign('msg_1', stamp, body.decode())}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n")
        host, port = receiver.url.split("/")[2].split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head.encode() + body[:10])
            sock.shutdown(socket.SHUT_WR)  # the sender is gone: nothing more comes
            while sock.recv(1024):  # until the receiver has handled it and closed
                pass
    finally:
        receiver.stop()
    assert (receiver.torn, receiver.refused, receiver.snapshot()) == (1, 0, [])


def test_a_sold_out_activity_without_its_event_is_named():
    told = Arrival("m9", "activity.sold_out", None,
                   b'{"type":"activity.sold_out","data":{"activity":"a","total":3,"sold":3}}')
    assert missing_sold_out({"a"}, [*GOOD, told]) == []
    assert missing_sold_out({"a", "b"}, [*GOOD, told]) == ["b: sold out, no activity.sold_out"]


def test_the_receiver_misbehaves_as_asked_and_comes_back():
    """Down (refused), 500 (not taken), a cut body (taken, the answer torn), then well."""
    receiver = Receiver(SECRET).start()
    http = urllib3.PoolManager(retries=False, timeout=5)
    body = b'{"type":"order.created","data":{"order_id":"a:1"}}'

    def send(wid: str) -> int:
        stamp = datetime.now(UTC)
        headers = {"webhook-id": wid, "webhook-timestamp": str(int(stamp.timestamp())),
                   "webhook-signature": Webhook(SECRET).sign(wid, stamp, body.decode()),
                   "content-type": "application/json"}
        return http.request("POST", receiver.url, body=body, headers=headers).status

    try:
        receiver.down()
        with pytest.raises(urllib3.exceptions.NewConnectionError):
            send("msg_0")
        receiver.up()
        receiver.mode = "500"
        assert send("msg_1") == 500
        receiver.mode = "cut"
        with pytest.raises(urllib3.exceptions.ProtocolError):
            send("msg_2")
        receiver.mode = "ok"
        assert send("msg_3") == 204
    finally:
        receiver.stop()
    assert [a.webhook_id for a in receiver.snapshot()] == ["msg_2", "msg_3"]
