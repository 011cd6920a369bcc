"""The in-process sold-out flag: no Redis call for a rejection, and dropped in every process
when stock comes back (pub/sub; a background check for a message lost anyway; every flag on a
listener reconnect), so a cancelled unit is sold again. ``tests/test_edge_no_redis.py`` counts
the commands of a sold-out flood while the background threads work."""

from __future__ import annotations

import threading
import time
import uuid

import redis

from tests.support.api import buy, expect
from tests.support.timing import wait_until
from tests.support.tokens import ADMIN, user_headers


def commands(conn: redis.Redis) -> dict[str, int]:
    """Calls per command on the server, leaving out the INFO that asks."""
    stats = conn.info("commandstats")
    return {name: int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info"}


def flagged_purchase(client, aid, uid, url):
    """POST a purchase through a URL fetched before the sale sold out."""
    return client.post(url, headers=user_headers(uid))


def test_sold_out_rejections_make_no_redis_call(make_app, private_valkey):
    # Long intervals: no background round runs within this test, so the server's command
    # counts are the requests' alone.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60",
                   SECKILL_META_TTL="60")
    client = app.test_client()
    created = client.post("/admin/activities", headers=ADMIN, json={
        "id": "flag1", "name": "x", "total": 1,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"})
    expect(created, 201)
    urls = {}
    for uid in ("winner", *(f"late{i}" for i in range(30))):
        got = client.get("/seckill/url?activity=flag1", headers=user_headers(uid))
        urls[uid] = expect(got, 200)["url"]
    won = expect(client.post(urls["winner"], headers=user_headers("winner")), 200)
    # The first loser learns "sold out" from the script, and flags the activity.
    expect(client.post(urls["late0"], headers=user_headers("late0")), 410, "sold_out")

    observer = redis.Redis.from_url(private_valkey.url)
    before = commands(observer)
    for i in range(1, 30):
        expect(client.post(urls[f"late{i}"], headers=user_headers(f"late{i}")), 410, "sold_out")
    again = expect(client.post(urls["winner"], headers=user_headers("winner")), 409,
                   "already_purchased")
    expect(client.get("/seckill/url?activity=flag1", headers=user_headers("late1")), 410,
           "sold_out")
    after = commands(observer)
    observer.close()
    assert again["order_id"] == won["order_id"]
    assert after == before  # 31 rejections, not one command on the server


def test_a_cancelled_unit_is_sold_again_in_every_process(make_app):
    # Two apps = two processes' worth of in-process state, on one Redis.
    one = make_app(SECKILL_SOLD_OUT_TTL="60").test_client()
    two = make_app(SECKILL_SOLD_OUT_TTL="60").test_client()
    created = one.post("/admin/activities", headers=ADMIN, json={
        "id": "flag2", "name": "x", "total": 1,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"})
    expect(created, 201)
    urls = {}
    for client, uid in ((one, "a"), (two, "b"), (two, "c")):
        urls[uid] = expect(client.get("/seckill/url?activity=flag2",
                                      headers=user_headers(uid)), 200)["url"]
    won = expect(buy(one, "flag2", "winner"), 200)
    # Both processes learn it is sold out (their own flags, for 60 s).
    expect(one.post(urls["a"], headers=user_headers("a")), 410, "sold_out")
    expect(two.post(urls["b"], headers=user_headers("b")), 410, "sold_out")
    expect(two.get("/seckill/url?activity=flag2", headers=user_headers("d")), 410, "sold_out")

    expect(one.post(f"/admin/orders/{won['order_id']}/cancel", headers=ADMIN), 200)
    # Process two hears of it through pub/sub, well before its flag would expire.
    deadline = time.monotonic() + 3
    while True:
        answer = two.post(urls["c"], headers=user_headers("c"))
        if answer.status_code != 410 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    expect(answer, 200)
    expect(two.post(urls["b"], headers=user_headers("b")), 410, "sold_out")


def activity_for(apps, total=1):
    """An open activity of ``total`` units, and a signed purchase URL for each user."""
    client = apps[0].test_client()
    aid = expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": f"f{uuid.uuid4().hex[:8]}", "name": "x", "total": total,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}), 201)["id"]
    return aid, lambda uid: expect(client.get(f"/seckill/url?activity={aid}",
                                              headers=user_headers(uid)), 200)["url"]


def purchase(app, url, uid):
    return app.test_client().post(url, headers=user_headers(uid))


def drops_of(app, aid):
    """The threads that dropped ``aid``'s flag in ``app`` (one name per drop)."""
    dropped: list[str] = []
    app.extensions["seckill"].board.on_clear.append(
        lambda which: dropped.append(threading.current_thread().name) if which in (aid, None)
        else None)
    return dropped


def test_units_returned_without_a_message_are_sold_again_after_the_background_check(make_app):
    """A lost pub/sub message (here: a restock that publishes nothing) costs at most one
    background check's interval, in every process, and no request had to ask Redis."""
    apps = [make_app(SECKILL_SOLD_OUT_TTL="0.3"), make_app(SECKILL_SOLD_OUT_TTL="0.3")]
    aid, url_for = activity_for(apps)
    urls = {uid: url_for(uid) for uid in ("winner", "a", "b", "c", "d")}
    expect(purchase(apps[0], urls["winner"], "winner"), 200)
    expect(purchase(apps[0], urls["a"], "a"), 410, "sold_out")
    expect(purchase(apps[1], urls["b"], "b"), 410, "sold_out")
    dropped = [drops_of(app, aid) for app in apps]

    services = apps[0].extensions["seckill"]
    assert services.scripts.restock(keys=[services.keys.meta(aid)], args=[2])[0] == "ok"
    wait_until(lambda: all(dropped), 3, what="both processes drop the flag")
    assert dropped == [["seckill-sold-out-listener"]] * 2  # the background check did it
    expect(purchase(apps[0], urls["c"], "c"), 200)
    expect(purchase(apps[1], urls["d"], "d"), 200)


def test_a_unit_cancelled_and_sold_again_unseen_changes_the_winners(make_app):
    """Remaining is 0 before and after, but the winners changed: the check sees it (the
    sale moved ``seq``, the cancellation ``sold``) and this process answers the new winner's
    repeat, not the old one's."""
    one, two = make_app(SECKILL_SOLD_OUT_TTL="0.3"), make_app(SECKILL_SOLD_OUT_TTL="0.3")
    aid, url_for = activity_for([one, two])
    urls = {uid: url_for(uid) for uid in ("first", "second", "late")}
    bought = expect(purchase(one, urls["first"], "first"), 200)
    expect(purchase(one, urls["late"], "late"), 410, "sold_out")
    expect(purchase(one, urls["first"], "first"), 409, "already_purchased")
    dropped = drops_of(one, aid)

    # The cancellation's message is lost (the script alone, no publish); another process
    # sells the unit again at once.
    services = one.extensions["seckill"]
    reply = services.scripts.cancel(keys=services.keys.cancel_keys(aid),
                                    args=[bought["order_id"], "first", 1, aid])
    assert reply[0] == "ok"
    resold = expect(purchase(two, urls["second"], "second"), 200)
    wait_until(lambda: dropped, 3, what="the flag with the old winners is dropped")
    expect(purchase(one, urls["first"], "first"), 410, "sold_out")
    again = expect(purchase(one, urls["second"], "second"), 409, "already_purchased")
    assert again["order_id"] == resold["order_id"]


def test_a_listener_reconnect_drops_every_flag(make_app, private_valkey):
    # A check interval longer than the test: only the reconnect can drop the flag.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60")
    aid, url_for = activity_for([app])
    urls = {uid: url_for(uid) for uid in ("winner", "late")}
    expect(purchase(app, urls["winner"], "winner"), 200)
    expect(purchase(app, urls["late"], "late"), 410, "sold_out")
    board = app.extensions["seckill"].board
    assert board.is_flagged(aid)
    dropped = drops_of(app, aid)

    observer = redis.Redis.from_url(private_valkey.url, decode_responses=True)
    listener = [c for c in observer.client_list()
                if c["name"] == "seckill-background-sold-out" and c["sub"] == "1"]
    assert len(listener) == 1, listener
    observer.client_kill_filter(_id=listener[0]["id"])
    wait_until(lambda: dropped, 5, what="the flags are dropped on resubscribing")
    assert not board.is_flagged(aid)
    wait_until(lambda: any(c["name"] == "seckill-background-sold-out" and c["sub"] == "1"
                           for c in observer.client_list()), 5, what="subscribed again")
    observer.close()


def test_without_the_background_check_a_request_rechecks_the_flag(make_app, monkeypatch):
    """The check cannot work (here: every round fails): a flag is then re-checked by one
    request a second, which finds the units a lost message announced and buys one."""
    app = make_app(SECKILL_SOLD_OUT_TTL="0.2")
    aid, url_for = activity_for([app])
    urls = {uid: url_for(uid) for uid in ("winner", "a", "b")}
    expect(purchase(app, urls["winner"], "winner"), 200)
    expect(purchase(app, urls["a"], "a"), 410, "sold_out")
    services = app.extensions["seckill"]
    dropped = drops_of(app, aid)

    def broken() -> None:
        raise redis.ConnectionError("the check cannot reach Redis")

    monkeypatch.setattr(services.board, "check", broken)
    wait_until(lambda: not services.board.vouched, 3, what="a failed round of the check")
    assert services.scripts.restock(keys=[services.keys.meta(aid)], args=[1])[0] == "ok"
    wait_until(lambda: purchase(app, urls["b"], "b").status_code == 200, 3,
               what="a request re-checks the flag and buys")
    assert dropped == [threading.current_thread().name]  # a request's thread, not the listener


def test_with_redis_down_the_flag_answers_and_one_request_a_second_tries(make_app,
                                                                         private_valkey):
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="0.1")
    _, url_for = activity_for([app])
    urls = {uid: url_for(uid) for uid in ("winner", *(f"u{i}" for i in range(20)))}
    expect(purchase(app, urls["winner"], "winner"), 200)
    expect(purchase(app, urls["u0"], "u0"), 410, "sold_out")
    private_valkey.stop()
    time.sleep(0.5)  # the flag has gone unverified for longer than 3 * ttl
    started = time.monotonic()
    answers = [purchase(app, urls[f"u{i}"], f"u{i}").status_code for i in range(20)]
    took = time.monotonic() - started
    assert sorted(set(answers)) == [410, 503], answers
    # One request per second asked Redis (and got 503); the others kept the flag's answer.
    assert answers.count(503) <= 1 + int(took), (answers, took)


def test_at_the_sell_out_one_request_reads_the_winners_for_the_whole_process(
        make_app, private_valkey):
    """Every purchase in flight hears "sold out" at once; only one of them reads the buyers
    hash to raise the flag (20 threads, a hash of 20,000 winners)."""
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60",
                   SECKILL_META_TTL="60")
    client = app.test_client()
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": "stampede", "name": "x", "total": 1,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}), 201)
    expect(buy(client, "stampede", "first"), 200)
    observer = redis.Redis.from_url(private_valkey.url, decode_responses=True)
    buyers = app.extensions["seckill"].keys.buyers("stampede")
    for start in range(0, 20_000, 2_000):  # winners enough to make the read take a while
        observer.hset(buyers, mapping={f"w{i}": f"stampede-0-{i}" for i in
                                       range(start, start + 2_000)})
    board = app.extensions["seckill"].board
    board.ensure_listening()
    before = commands(observer)
    gate = threading.Barrier(20)

    def hear_sold_out() -> None:
        gate.wait()
        board.mark("stampede")

    threads = [threading.Thread(target=hear_sold_out) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    after = commands(observer)
    observer.close()
    assert after.get("cmdstat_hgetall", 0) - before.get("cmdstat_hgetall", 0) == 2  # buyers,
    # and the packets' amounts, in the one MULTI
    assert board.is_flagged("stampede")


def test_a_sharded_activity_is_flagged_only_when_every_part_is_empty_then_costs_no_call(
        make_app, private_valkey):
    """Sharded stock: the winners of every part are in the flag (a winner's repeat is its own
    409), and the flood after the sell-out makes no Redis call; a cancel drops the flag."""
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="60",
                   SECKILL_META_TTL="60")
    client = app.test_client()
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": "flag-hot", "name": "x", "total": 4, "shards": 4,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}), 201)
    urls = {}
    for uid in (*(f"win{i}" for i in range(4)), *(f"late{i}" for i in range(20))):
        got = client.get("/seckill/url?activity=flag-hot", headers=user_headers(uid))
        urls[uid] = expect(got, 200)["url"]
    won = {uid: expect(client.post(urls[uid], headers=user_headers(uid)), 200)["order_id"]
           for uid in (f"win{i}" for i in range(4))}
    expect(client.post(urls["late0"], headers=user_headers("late0")), 410, "sold_out")
    observer = redis.Redis.from_url(private_valkey.url)
    before = commands(observer)
    for i in range(1, 20):
        expect(client.post(urls[f"late{i}"], headers=user_headers(f"late{i}")), 410, "sold_out")
    repeats = {uid: expect(client.post(urls[uid], headers=user_headers(uid)), 409,
                           "already_purchased")["order_id"] for uid in won}
    after = commands(observer)
    observer.close()
    assert repeats == won
    assert after == before
    expect(client.post(f"/admin/orders/{won['win2']}/cancel", headers=ADMIN), 200)
    expect(client.post(urls["late5"], headers=user_headers("late5")), 200)


def test_closing_the_board_does_not_wait_out_the_listeners_read(rds, prefix):
    """A process stops (a test's app, a gunicorn worker replaced) without waiting for the
    listener's read to time out: close() ends it at once."""
    from seckill.store.plumbing.keys import KeySpace
    from seckill.store.sale.purchase.soldout import SoldOutBoard

    board = SoldOutBoard(rds, KeySpace(prefix), ttl=30.0)  # reads of 0.2 s, no check due
    board.ensure_listening()
    timings = []
    for _ in range(3):  # a read may happen to be about to end: the slowest of three tells
        started = time.perf_counter()
        board.close()
        timings.append(time.perf_counter() - started)
        board = SoldOutBoard(rds, KeySpace(prefix), ttl=30.0)
        board.ensure_listening()
        time.sleep(0.05)  # inside the listener's read
    board.close()
    assert max(timings) < 0.1, timings
