"""The seed's run: 100 000 red-envelope packets created (split, pushed) and then
grabbed by concurrent users directly against ``lua/grab.lua``: every packet goes exactly once,
to distinct users, and the amounts sum to the total exactly.

Prints the split time, the creation time and grabs/s (``pytest -s`` shows them). Real Valkey
(the session's, this test's key prefix, deleted afterwards) and the test's own database.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import redis
from flask import Flask

from seckill.domain import packets
from seckill.domain.activities import parse_new_activity
from seckill.store.sale.activity import catalog
from tests.support.timing import iso

COUNT = 100_000
AMOUNT = 10_000_000  # cents: 100 000.00, 1.00 on average
USERS = 110_000  # 10 % more than there are packets
THREADS = 8
PIPELINE = 250


def test_100k_packets_grabbed_by_concurrent_users(app: Flask, prefix: str) -> None:
    services = app.extensions["seckill"]
    keys = services.keys
    activity = parse_new_activity({
        "id": "hongbao", "name": "New year", "kind": "packets", "amount": AMOUNT,
        "count": COUNT, "starts_at": iso(-60), "ends_at": iso(3600),
    })
    assert activity.seed is not None
    aid = activity.id

    started = time.perf_counter()
    expected = packets.split(AMOUNT, COUNT, activity.seed)
    split_s = time.perf_counter() - started

    reports: list[tuple[float, int]] = []
    started = time.perf_counter()
    catalog.create_activity(services.book, services.activities, activity,
                            lambda done, total: reports.append((time.perf_counter(), done)))
    create_s = time.perf_counter() - started
    assert reports[0][1] == 0 and reports[-1][1] == COUNT, "progress from 0 to the count"
    assert len(reports) >= 10, "progress is reported as the chunks go"
    push_s = reports[-1][0] - reports[0][0]

    url = services.settings.redis_url
    rds = redis.Redis.from_url(url, decode_responses=True)
    try:
        assert rds.llen(keys.packets(aid)) == COUNT
        sha = rds.script_load(services.scripts.grab.script)
        grab_keys = keys.grab_keys(aid)
        won: list[tuple[str, str, int]] = []
        refused: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()
        gate = threading.Barrier(THREADS)
        errors: list[BaseException] = []

        def crowd(index: int) -> None:
            own = redis.Redis.from_url(url, decode_responses=True)
            mine: list[tuple[str, str, int]] = []
            no: collections.Counter[str] = collections.Counter()
            try:
                uids = [f"user{n:06d}" for n in range(index, USERS, THREADS)]
                gate.wait(30)
                for start in range(0, len(uids), PIPELINE):
                    part = uids[start : start + PIPELINE]
                    pipe = own.pipeline(transaction=False)
                    for uid in part:
                        pipe.evalsha(sha, len(grab_keys), *grab_keys, uid, 1, aid)
                    for uid, reply in zip(part, pipe.execute(), strict=True):
                        if reply[0] == "ok":
                            mine.append((uid, str(reply[1]), int(reply[3])))
                        else:
                            no[str(reply[0])] += 1
            except BaseException as exc:  # surfaced below, with the thread's results
                errors.append(exc)
            finally:
                own.close()
            with lock:
                won.extend(mine)
                refused.update(no)

        threads = [threading.Thread(target=crowd, args=(i,)) for i in range(THREADS)]
        calls_before, usec_before = _evalsha_stats(rds)
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        grab_s = time.perf_counter() - started
        calls_after, usec_after = _evalsha_stats(rds)
        assert not errors, errors[:1]
        assert not any(t.is_alive() for t in threads)

        assert len(won) == COUNT, "count == packets"
        assert refused == {"sold_out": USERS - COUNT}, refused
        assert sum(amount for _, _, amount in won) == AMOUNT, "sum of grabbed amounts == total"
        assert len({uid for uid, _, _ in won}) == COUNT, "distinct users"
        assert len({order_id for _, order_id, _ in won}) == COUNT
        assert sorted(amount for _, _, amount in won) == sorted(expected), "no packet twice"

        pipe = rds.pipeline(transaction=True)
        pipe.llen(keys.packets(aid))
        pipe.hmget(keys.meta(aid), "remaining", "sold", "amount_given")
        pipe.hlen(keys.buyers(aid))
        pipe.hlen(keys.amounts(aid))
        pipe.xlen(keys.orders(aid))
        listed, meta, buyers, amounts, queued = pipe.execute()
        assert listed == 0
        assert meta == ["0", str(COUNT), str(AMOUNT)]
        assert buyers == amounts == queued == COUNT
        stream_sum = _stream_amounts(rds, keys.orders(aid))
        assert stream_sum == AMOUNT, "the orders queued for the database add up too"

        print(f"\n{COUNT} packets: split {split_s:.2f}s; created (database row, split, "
              f"push, meta) {create_s:.2f}s, of which the push {push_s:.2f}s; "
              f"{USERS} users in {THREADS} threads grabbed them in {grab_s:.2f}s: "
              f"{COUNT / grab_s:,.0f} grabs/s ({USERS / grab_s:,.0f} attempts/s); the server "
              f"spent {(usec_after - usec_before) / max(1, calls_after - calls_before):.1f} "
              "us per script call")
        assert create_s < 30, f"creating {COUNT} packets took {create_s:.1f}s"
    finally:
        names = [keys.meta(aid), keys.buyers(aid), keys.orders(aid), keys.packets(aid),
                 keys.amounts(aid)]
        rds.delete(*names)
        rds.close()


def _evalsha_stats(rds: redis.Redis) -> tuple[int, int]:
    stats: Any = rds.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def _stream_amounts(rds: redis.Redis, stream: str) -> int:
    total, start = 0, "-"
    for _ in range(1000):  # bounded: 100 000 entries, 5 000 at a time
        entries: Any = rds.xrange(stream, min=start, max="+", count=5000)
        total += sum(int(fields["amount"]) for _, fields in entries)
        if len(entries) < 5000:
            break
        start = "(" + str(entries[-1][0])
    return total
