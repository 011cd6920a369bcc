"""The in-process sold-out flag: no Redis call for a rejection, and dropped in every process
when stock comes back (pub/sub), so a cancelled unit is sold again."""

from __future__ import annotations

import time

import redis

from tests.conftest import ADMIN, buy, expect, user_headers


def commands(conn: redis.Redis) -> dict[str, int]:
    """Calls per command on the server, leaving out the INFO that asks."""
    stats = conn.info("commandstats")
    return {name: int(v["calls"]) for name, v in stats.items() if name != "cmdstat_info"}


def flagged_purchase(client, aid, uid, url):
    """POST a purchase through a URL fetched before the sale sold out."""
    return client.post(url, headers=user_headers(uid))


def test_sold_out_rejections_make_no_redis_call(make_app, private_valkey):
    # Long TTLs: within this test nothing expires, so any Redis call would be per request.
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
    # The first loser learns "sold out" from the script, and flags the activity; the next
    # request refreshes this process's copy of the activity once.
    expect(client.post(urls["late0"], headers=user_headers("late0")), 410, "sold_out")
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


def test_an_expiring_flag_sends_one_request_to_redis_not_the_crowd(make_app, private_valkey):
    """When the flag's TTL runs out under load, one request re-checks it with the script and
    the others keep the flag's answer: 40 simultaneous rejections cost one EVALSHA, and the
    activity's cached copy is refreshed once, not 40 times."""
    import threading

    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="0.3",
                   SECKILL_META_TTL="0.3")
    client = app.test_client()
    expect(client.post("/admin/activities", headers=ADMIN, json={
        "id": "flag3", "name": "x", "total": 1,
        "starts_at": "2020-01-01T00:00:00Z", "ends_at": "2099-01-01T00:00:00Z"}), 201)
    users = [f"late{i}" for i in range(40)]
    urls = {uid: expect(client.get("/seckill/url?activity=flag3", headers=user_headers(uid)),
                        200)["url"] for uid in ["winner", *users]}
    expect(client.post(urls["winner"], headers=user_headers("winner")), 200)
    expect(client.post(urls["late0"], headers=user_headers("late0")), 410, "sold_out")
    time.sleep(0.4)  # both the flag and the cached activity have expired

    observer = redis.Redis.from_url(private_valkey.url)
    before = commands(observer)
    barrier = threading.Barrier(len(users))
    answers: list[int] = []

    def late(uid: str) -> None:
        own = app.test_client()
        barrier.wait(5)
        answers.append(own.post(urls[uid], headers=user_headers(uid)).status_code)

    threads = [threading.Thread(target=late, args=(uid,)) for uid in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    after = commands(observer)
    observer.close()
    assert answers == [410] * len(users)
    assert after.get("cmdstat_evalsha", 0) - before.get("cmdstat_evalsha", 0) == 1
    assert after.get("cmdstat_hgetall", 0) - before.get("cmdstat_hgetall", 0) <= 2
