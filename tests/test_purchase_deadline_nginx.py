"""After nginx's 504, "none" is final: a purchase that waited in a frozen gateway instance is
not decided when the instance wakes up.

Two real gunicorn instances behind real nginx (the config ``seckill nginx render`` writes, its
defaults: a purchase's read timeout of 10 s, the gateway's decision budget 5 s), one frozen
with SIGSTOP while a crowd buys. Its buyers get 504; the instance is woken and reads the
requests that waited in its socket: nginx's ``X-Request-Start`` stamp says they are older than
the budget, so the script refuses them and no order appears, then or later. Each of those
buyers can buy again.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import redis
import urllib3

from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.nginx import Instances, call, create_activity, front, frozen
from tests.support.tokens import user_headers

# Two gunicorn instances of this module's own and a client pool: the fixtures ``instances``
# and ``http`` of tests/support/nginx.py.

AFTER_WAKING = 4.0  # seconds the woken instance is watched: its backlog is read at once


def test_a_purchase_past_nginx_s_timeout_is_never_decided_when_its_instance_wakes(
    instances: Instances, tmp_path: Path, http: urllib3.PoolManager, valkey: EmbeddedValkey
) -> None:
    hung, live = instances.backends
    aid = create_activity(http, f"http://{live}", total=100)
    buyers = [f"d{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    urls = {}
    for uid in buyers:
        issued = call(http, "GET", f"http://{live}/seckill/url?activity={aid}", user_headers(uid))
        assert issued.status == 200, issued.body
        urls[uid] = issued.body["url"]
    store = redis.Redis.from_url(valkey.url, decode_responses=True)
    try:
        with front(instances, tmp_path, ip_rate="off", backends=[hung, live],
                   max_fails=0) as proxy:
            with frozen(hung), ThreadPoolExecutor(len(buyers)) as pool:
                futures = {uid: pool.submit(call, http, "POST", f"{proxy.base}{urls[uid]}",
                                            user_headers(uid)) for uid in buyers}
                answers = {uid: f.result(timeout=60) for uid, f in futures.items()}
            # Woken: whatever waited in its socket is read and answered now (to nobody).
            told_failed = {uid for uid, a in answers.items() if a.status == 504}
            assert told_failed, {uid: (a.status, a.body) for uid, a in answers.items()}
            deadline = time.monotonic() + AFTER_WAKING
            while time.monotonic() < deadline:
                decided = told_failed & set(store.hkeys(instances.key(aid, "buyers")))
                assert not decided, f"decided after their 504: {decided}"
                time.sleep(0.1)
            for uid in told_failed:
                status = call(http, "GET", f"{proxy.base}/seckill/{aid}/order", user_headers(uid))
                assert (status.status, status.body["status"]) == (200, "none"), status.body
                # Nothing was counted against them either: they buy now.
                again = call(http, "POST", f"{proxy.base}{urls[uid]}", user_headers(uid))
                assert again.status == 200, again.body
    finally:
        store.close()
    # The woken instance did read and answer those purchases (to nobody): the script refused
    # them, the test is not passing because they never arrived.
    seen = instances.access_logs[0].read_text(errors="replace")
    assert any(urls[uid] in seen for uid in told_failed), seen[-2000:]
