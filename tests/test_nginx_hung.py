"""A hung gateway instance behind nginx: its GETs move to the other instance within the GET
read timeout, its purchases are never sent anywhere else.

The instance is hung for real: its gunicorn (master and worker, processes this module
started) is frozen with SIGSTOP, so the kernel still accepts connections for it and nobody
ever answers, which is how a stuck process looks from nginx. nginx runs the config
``seckill nginx render`` writes, with its defaults.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.ops.stack.nginx import NginxOptions
from tests.support.nginx import Answer, Instances, call, create_activity, front, frozen
from tests.support.tokens import user_headers

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.

DEFAULTS = NginxOptions(backends=["-"])
# A hot GET to the hung instance waits out the GET timeout, then the other one answers it
# (a few ms; more on this shared 2-core machine). The order status and the health check wait
# out the instance's read timeout (they may wait on the database), then move too.
GET_BOUND = DEFAULTS.get_timeout + 1.5
READ_BOUND = DEFAULTS.read_timeout + 1.5
WATCH = 8.0  # seconds of GETs while one instance is hung: more than fail_timeout (2 s) twice


def upstreams(proxy_run_dir: Path, marker: str) -> list[str]:
    """The upstream statuses a stopped nginx logged (its buffer is written when it exits)
    for the requests whose line holds ``marker``."""
    text = (proxy_run_dir / "access.log").read_text(errors="replace")
    return [m.group(1) for line in text.splitlines() if marker in line
            if (m := re.search(r" upstream=(.*)$", line))]


def test_a_hung_instance_s_gets_are_answered_by_the_other_within_the_get_timeout(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager
) -> None:
    """For WATCH seconds with one instance frozen, four clients keep asking every public GET
    that reaches the gateway: each is answered 200 by the live instance, a hot one within
    GET_BOUND, the others within READ_BOUND; some of them were sent to the hung one first
    (nginx logged its 504, then the other's 200)."""
    hung, live = instances.backends
    aid = create_activity(http, f"http://{live}", total=100)
    marker = uuid.uuid4().hex[:8]
    hot = [f"/seckill/time?m={marker}", f"/seckill/activities/{aid}?m={marker}",
           f"/seckill/url?activity={aid}&m={marker}"]
    paths = [*hot, f"/seckill/{aid}/order?m={marker}", f"/healthz?m={marker}"]
    answers: list[tuple[str, float, Answer]] = []
    lock = threading.Lock()

    def ask(client: int) -> None:
        deadline = time.monotonic() + WATCH
        for turn in range(10_000):
            if time.monotonic() > deadline:
                return
            path = paths[(client + turn) % len(paths)]
            started = time.monotonic()
            # A user per request: the per-user rate limit is not what this is about.
            answer = call(http, "GET", f"{proxy.base}{path}", user_headers(f"w{client}-{turn}"))
            with lock:
                answers.append((path, time.monotonic() - started, answer))
            time.sleep(0.02)

    with front(instances, tmp_path, ip_rate="off", access_log=True) as proxy:
        assert call(http, "GET", f"{proxy.base}/seckill/time").status == 200
        with frozen(hung), ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(ask, client) for client in range(4)]:
                future.result(timeout=WATCH + 2 * READ_BOUND + 30)
    logged = upstreams(proxy.run_dir, marker)

    failed = [(p, round(s, 2), a.status, a.body) for p, s, a in answers if a.status != 200]
    assert not failed, failed
    slow = sorted(((round(s, 2), p) for p, s, _ in answers if p in hot), reverse=True)
    assert slow[0][0] <= GET_BOUND, slow[:5]
    slow = sorted(((round(s, 2), p) for p, s, _ in answers if p not in hot), reverse=True)
    assert slow[0][0] <= READ_BOUND, slow[:5]
    names = {a.headers["X-Seckill-Instance"] for _, _, a in answers}
    assert names == {instances.names[1]}, names
    # The hung instance was asked (its read timed out, the request moved), more than once:
    # it comes back into the pool after fail_timeout and is found hung again.
    moved = [u for u in logged if u.startswith("504, ")]
    assert len(moved) >= 2, collections_of(logged)
    assert all(u == "504, 200" for u in moved), collections_of(logged)


def collections_of(logged: list[str]) -> dict[str, int]:
    """How many requests nginx logged with each upstream status list."""
    counts: dict[str, int] = {}
    for entry in logged:
        counts[entry] = counts.get(entry, 0) + 1
    return counts


def test_a_purchase_sent_to_a_hung_instance_is_never_sent_to_another(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager, valkey: EmbeddedValkey
) -> None:
    """Both instances always in the pool (max_fails=0), one frozen: a crowd of purchases at
    once. Those that reached the hung instance are answered 504 after the purchase's read
    timeout (10 s), each reached nginx's one upstream only, and none of their buyers bought:
    while it is still frozen, nothing but the live instance could have decided them."""
    hung, live = instances.backends
    aid = create_activity(http, f"http://{live}", total=100)
    buyers = [f"b{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
    urls = {}
    for uid in buyers:  # straight from the live instance
        issued = call(http, "GET", f"http://{live}/seckill/url?activity={aid}", user_headers(uid))
        assert issued.status == 200, issued.body
        urls[uid] = issued.body["url"]
    store = redis.Redis.from_url(valkey.url, decode_responses=True)
    with front(instances, tmp_path, ip_rate="off", access_log=True,
               backends=[hung, live], max_fails=0) as proxy, frozen(hung):
        started = time.monotonic()
        with ThreadPoolExecutor(len(buyers)) as pool:
            futures = {uid: pool.submit(call, http, "POST", f"{proxy.base}{urls[uid]}",
                                        user_headers(uid)) for uid in buyers}
            answers = {uid: (f.result(timeout=60), time.monotonic() - started)
                       for uid, f in futures.items()}
        bought_while_frozen = set(store.hkeys(instances.key(aid, "buyers")))
    store.close()
    logged = upstreams(proxy.run_dir, f"/seckill/{aid}/")

    timed_out = {uid for uid, (a, _) in answers.items() if a.status == 504}
    assert timed_out, {uid: (a.status, a.body) for uid, (a, _) in answers.items()}
    assert {uid for uid, (a, _) in answers.items() if a.status == 200} == set(buyers) - timed_out
    for uid in timed_out:
        answer, seconds = answers[uid]
        assert answer.body["error"] == "gateway_timeout", answer.body
        assert DEFAULTS.read_timeout - 0.5 <= seconds <= DEFAULTS.read_timeout + 5, seconds
    assert bought_while_frozen == set(buyers) - timed_out, bought_while_frozen
    # One upstream per purchase: the 504s are the hung instance's alone.
    assert sorted(logged) == sorted(["504"] * len(timed_out)
                                    + ["200"] * (len(buyers) - len(timed_out))), logged
    # And the live instance never saw them (its access log names every request it got).
    seen_live = instances.access_logs[1].read_text(errors="replace")
    for uid in timed_out:
        assert urls[uid] not in seen_live, uid


@pytest.mark.parametrize(("get_timeout", "read_timeout"), [(3, 10), (2, 20), (3, 1)])
def test_a_timed_out_get_can_always_move(tmp_path: Path, get_timeout: int,
                                         read_timeout: int) -> None:
    """nginx moves a request only within proxy_next_upstream_timeout of its start: that must
    hold a first try's connect and read timeouts, or a hung instance's GET is a 504. A hot
    GET's timeout is never longer than the others'."""
    from seckill.ops.stack import nginx

    text = nginx.render(NginxOptions(backends=["127.0.0.1:9001"], run_dir=tmp_path,
                                     get_timeout=get_timeout, read_timeout=read_timeout))
    seconds = {name: int(value) for name, value in
               re.findall(r"^\s*(proxy_\w+_timeout) (\d+)s;", text, re.M)}
    reads = {int(v) for v in re.findall(r"^\s*proxy_read_timeout (\d+)s;", text, re.M)}
    assert reads == {min(get_timeout, read_timeout), read_timeout}, reads
    assert seconds["proxy_next_upstream_timeout"] > (
        seconds["proxy_connect_timeout"] + read_timeout), seconds
