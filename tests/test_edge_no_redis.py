"""Rejections at the edge cost no Redis call: the activity copies and the sold-out flags are
kept fresh by background threads, never by a request.

Commands are counted per connection on a Valkey of the test's own (``CLIENT LIST``'s
``tot-cmds``): the background threads' connections are named ``seckill-background-*``, so
what the requests sent and what the background sent are told apart.
"""

from __future__ import annotations

import itertools
import threading
import time

from tests.support.api import create_activity, expect
from tests.support.command_counts import Counts, commands_by_connection, observer  # noqa: F401
from tests.support.timing import iso, wait_until
from tests.support.tokens import user_headers


def test_a_sold_out_flood_makes_no_redis_call_while_the_background_keeps_working(
        make_app, private_valkey, observer):  # noqa: F811
    # Short intervals: the flood spans many rounds of the background check and refresh.
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_SOLD_OUT_TTL="0.2",
                   SECKILL_META_TTL="0.2")
    client = app.test_client()
    aid = create_activity(client, total=1)["id"]
    users = [f"late{i}" for i in range(120)]
    urls = {uid: expect(client.get(f"/seckill/url?activity={aid}", headers=user_headers(uid)),
                        200)["url"] for uid in ["winner", *users]}
    won = expect(client.post(urls["winner"], headers=user_headers("winner")), 200)
    expect(client.post(urls["late0"], headers=user_headers("late0")), 410, "sold_out")

    before = commands_by_connection(observer)
    stop = time.monotonic() + 2.0  # ten rounds of each background thread
    answers: list[tuple[int, str]] = []
    failures: list[BaseException] = []

    def flood(offset: int) -> None:
        own = app.test_client()
        try:
            for n in itertools.count(offset):
                if time.monotonic() > stop:
                    return
                uid = users[n % len(users)]
                step = n % 4
                if step == 0:
                    answer = own.post(urls["winner"], headers=user_headers("winner"))
                elif step == 1:
                    answer = own.get(f"/seckill/url?activity={aid}", headers=user_headers(uid))
                elif step == 2:
                    answer = own.get(f"/seckill/activities/{aid}")
                else:
                    answer = own.post(urls[uid], headers=user_headers(uid))
                answers.append((answer.status_code, str(answer.get_json().get("error"))))
                time.sleep(0.001)  # leave the background threads a share of the GIL
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    counts = Counts(before, commands_by_connection(observer))

    assert not failures, failures
    assert len(answers) > 200, len(answers)
    assert set(answers) == {(409, "already_purchased"), (410, "sold_out"), (200, "None")}
    assert counts.requests == 0, counts.requests
    # Meanwhile both background threads did their rounds, on their own connections (ten
    # each, on an idle machine).
    assert counts.background.get("seckill-background-sold-out", 0) >= 1, counts.background
    assert counts.background.get("seckill-background-activities", 0) >= 1, counts.background
    again = expect(client.post(urls["winner"], headers=user_headers("winner")), 409,
                   "already_purchased")
    assert again["order_id"] == won["order_id"]


def test_a_known_activity_is_answered_from_its_copy_however_old(make_app, private_valkey):
    """No request waits on Redis for an activity this process knows: with Redis gone for
    many refresh rounds, the copy still answers (a purchase, which needs the script, 503s)."""
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="0.1")
    client = app.test_client()
    aid = create_activity(client, starts_at=iso(600), ends_at=iso(1200))["id"]
    headers = user_headers("alice")
    expect(client.get(f"/seckill/activities/{aid}"), 200)
    open_now = create_activity(client)["id"]
    url = expect(client.get(f"/seckill/url?activity={open_now}", headers=headers), 200)["url"]

    private_valkey.stop()
    time.sleep(0.5)  # five failed refresh rounds
    for _ in range(3):
        assert expect(client.get(f"/seckill/activities/{aid}"), 200)["state"] == "upcoming"
        expect(client.get(f"/seckill/url?activity={aid}", headers=headers), 403, "not_started")
        time.sleep(0.15)
    expect(client.post(url, headers=headers), 503, "unavailable")


def test_copies_in_use_are_refreshed_in_the_background(make_app, private_valkey, observer):  # noqa: F811
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="0.1")
    client = app.test_client()
    aid = create_activity(client, name="Before")["id"]
    assert expect(client.get(f"/seckill/activities/{aid}"), 200)["name"] == "Before"

    before = commands_by_connection(observer)
    observer.hset(f"{app.extensions['seckill'].keys.meta(aid)}", "name", "After")
    wait_until(lambda: client.get(f"/seckill/activities/{aid}").get_json()["name"] == "After",
               3, what="the renamed activity")
    counts = Counts(before, commands_by_connection(observer))
    assert counts.requests == 0
    assert counts.background.get("seckill-background-activities", 0) > 0


def test_a_crowd_for_an_id_this_process_has_no_copy_of_loads_it_once(make_app, private_valkey,
                                                                     observer):  # noqa: F811
    app = make_app(REDIS_URL=private_valkey.url, SECKILL_META_TTL="60")
    aid = create_activity(app.test_client())["id"]  # creating it drops this process's copy

    def hgetalls() -> int:
        return int(observer.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0))

    before = hgetalls()
    barrier = threading.Barrier(40)
    answers: list[int] = []

    def read() -> None:
        own = app.test_client()
        barrier.wait(5)
        answers.append(own.get(f"/seckill/activities/{aid}").status_code)

    threads = [threading.Thread(target=read) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == [200] * 40
    assert hgetalls() - before == 1
