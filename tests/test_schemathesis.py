"""An outside client: schemathesis, driven by the served ``/openapi.json``, against a live gateway.

A real gunicorn (gevent workers, ``gunicorn.conf.py``) on a free port, on the session's Valkey
and a SQLite file of its own. Before the run the operator API creates real activities, and a few
real orders are bought, so the generated calls reach the sale and not only its 404s: the path
and query ids are drawn from them half of the time. Every check of schemathesis runs, on every
operation (examples, coverage and fuzzing phases), then a stateful phase follows the document's
links: create an activity, get its purchase URL, buy through it, read the order, cancel it.
User calls carry a valid user JWT, operator calls the operator token. Bounded: a few examples
per operation and a deadline per call, so the file runs in well under three minutes. The same
run goes through a real nginx in front of it too: on its operator port every operation, on its
public port every operation served there (nginx answers some calls itself: its 413, 414 and 431
must be the document's too).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge.identity import mint_user_token
from seckill.ops.stack.embedded import EmbeddedValkey
from tests.support.gateway import gateway_env
from tests.support.schemathesis_hooks import LEVER_TARGET
from tests.support.servers import REPO_ROOT, gunicorn_server, nginx_server
from tests.support.timing import iso
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, METRICS_TOKEN

FUZZER = "fuzzer@example.com"
# Per operation and phase; SECKILL_SCHEMATHESIS_EXAMPLES=5000 for a deeper run by hand.
MAX_EXAMPLES = int(os.environ.get("SECKILL_SCHEMATHESIS_EXAMPLES") or 200)
STATEFUL_EXAMPLES = MAX_EXAMPLES  # scenarios of the stateful phase (each up to 10 calls)
# Through nginx the question is whether the front's own answers (its 413, 414, 431, 404...)
# agree with the document; the gateway's answers behind it are the direct run's, fuzzed in
# depth there. A quarter of the examples, with every phase.
PROXIED_EXAMPLES = max(1, MAX_EXAMPLES // 4)
# schemathesis's default answers to a valid request, and to an invalid one. An invalid body may
# also be over the 4 KiB every body is held to (extra properties, long arrays): 413 refuses it
# as well as a 400 would (a fuzzed 5 KiB webhook registration was counted a wrong acceptance).
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
REJECTED = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429",
            "5xx"]
# Seconds per phase run: a bound on a hang, not a speed claim. The first run takes 59 s on
# CI's machine and reached 150 s (killed) on a 2.5x slower one in a fresh-clone run.
RUN_TIMEOUT = max(600, MAX_EXAMPLES // 2)
ACCESS_LINE = re.compile(r'"([A-Z]+) ([^ ?"]+)[^"]*" (\d{3}) ')
# The stateful flow, as answers in the access log: (method, path pattern, status).
FLOW_OPERATIONS = ("createActivity", "getPurchaseUrl", "purchase", "getOrderStatus",
                   "cancelOrder")
# Runs of the flow at most (each a new seed; the test stops at the first that completes the
# set). Which scenarios a run draws is chance, and a cancel needs create, URL and buy before it
# in the same scenario: a fresh-clone CI run's four runs reached every step but the cancel
# (13 purchases, 23 cancels of ids the links did not carry). Eight make that rare.
FLOW_RUNS = 8
FLOW = {
    "create": ("POST", r"/admin/activities", 201),
    "url": ("GET", r"/seckill/url", 200),
    "buy": ("POST", r"/seckill/[^/]+/[^/]+/buy", 200),
    "order": ("GET", r"/seckill/[^/]+/order", 200),
    "cancel": ("POST", r"/admin/orders/[^/]+/cancel", 200),
}
REQUEST_TIMEOUT = 10.0  # seconds: a call slower than this is a failure (max_response_time)


def call(base: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    """One JSON call to the live gateway; its status and body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


@dataclasses.dataclass
class Seeded:
    activities: list[str]  # real activity ids
    orders: list[str]  # real order ids
    tokens: list[str]  # the fuzzer's purchase-URL tokens for the open activities
    lever: str  # the activity the fuzzer's pause and end act on (tests.support.schemathesis_hooks)


def seed(base: str) -> Seeded:
    """Real activities of every kind and state the API can create, real orders in them, and the
    fuzzer's signed purchase URLs for the open ones."""
    tag = uuid.uuid4().hex[:6]
    bodies: list[dict[str, Any]] = [
        # per_user_limit at its maximum: any quantity the document allows may be bought.
        {"id": f"open-{tag}", "name": "Open sale", "total": 1_000_000,
         "per_user_limit": 10_000, "starts_at": iso(-60), "ends_at": iso(3600)},
        {"id": f"unlimited-{tag}", "name": "Free sample", "total": None,
         "per_user_limit": 10_000, "starts_at": iso(-60), "ends_at": iso(3600)},
        {"id": f"soon-{tag}", "name": "Upcoming", "total": 5, "starts_at": iso(3600),
         "ends_at": iso(7200)},
        {"id": f"packets-{tag}", "name": "Envelopes", "kind": "packets", "amount": 100_000,
         "count": 1_000, "starts_at": iso(-60), "ends_at": iso(3600)},
        # Fair admission: a queue on sale now, and a draw taking entries.
        {"id": f"queue-{tag}", "name": "Queued", "total": 1_000, "admission": "queue",
         "queue_opens_at": iso(-120), "starts_at": iso(-60), "ends_at": iso(3600)},
        {"id": f"draw-{tag}", "name": "Drawn", "total": 10, "admission": "draw",
         "queue_opens_at": iso(-60), "starts_at": iso(3600), "ends_at": iso(7200)},
    ]
    for body in bodies:
        status, answer = call(base, "POST", "/admin/activities", ADMIN_TOKEN, body)
        assert status == 201, answer
    activities = [str(body["id"]) for body in bodies]
    orders = []
    for uid in ("buyer-1", "buyer-2", "buyer-3"):
        token = mint_user_token(uid, JWT_SECRET, 3600)
        status, issued = call(base, "GET", f"/seckill/url?activity={activities[0]}", token)
        assert status == 200, issued
        status, bought = call(base, "POST", issued["url"], token, {})
        assert status == 200, bought
        orders.append(str(bought["order_id"]))
    # The operator's pause and end answer 503 paused / 410 ended on every later call about the
    # activity they hit: the hooks point them at one activity nothing else is sent to.
    lever = f"lever-{tag}"
    status, answer = call(base, "POST", "/admin/activities", ADMIN_TOKEN, {
        "id": lever, "name": "Levers", "total": 5, "starts_at": iso(-60), "ends_at": iso(3600)})
    assert status == 201, answer
    fuzzer = mint_user_token(FUZZER, JWT_SECRET, 3600)
    tokens = []
    for aid in activities:
        status, issued = call(base, "GET", f"/seckill/url?activity={aid}", fuzzer)
        if status == 200:
            tokens.append(str(issued["url"]).split("/")[3])
    return Seeded(activities, orders, tokens, lever)


def toml(value: Any) -> str:
    """``value`` as TOML (inline tables and arrays; enough for the run's configuration)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml(item) for item in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


def config(base: str, seeded: Seeded | None) -> dict[str, Any]:
    """A run's configuration: the live gateway, both tokens, every check; path and query ids
    drawn from the ``seeded`` ones half of the time (None: from the links only)."""
    dictionaries: dict[str, Any] = {
        # A sale window open now, half of the time: new activities then reach the purchase
        # (random times are rarely "now").
        "opened": {"values": [iso(-3600)]}, "closes": {"values": [iso(7200)]},
        # And one unit, half of the time: a purchase within any per_user_limit.
        "one": {"values": [1]}}
    parameters: dict[str, Any] = {
        "body.starts_at": {"dictionary": "opened", "probability": 0.5},
        "body.ends_at": {"dictionary": "closes", "probability": 0.5},
        "body.quantity": {"dictionary": "one", "probability": 0.5}}
    if seeded is not None:
        dictionaries |= {"activities": {"values": seeded.activities},
                         "orders": {"values": seeded.orders},
                         "tokens": {"values": seeded.tokens}}
        real_ids = {"dictionary": "activities", "probability": 0.5}
        parameters |= {"path.aid": real_ids, "query.activity": real_ids,
                       "path.order_id": {"dictionary": "orders", "probability": 0.5},
                       "path.token": {"dictionary": "tokens", "probability": 0.5}}
    return {
        "base-url": base,
        "request-timeout": REQUEST_TIMEOUT,
        "dictionaries": dictionaries,
        "parameters": parameters,
        "auth": {"openapi": {
            "userToken": {"bearer": mint_user_token(FUZZER, JWT_SECRET, 3600)},
            "operatorToken": {"bearer": ADMIN_TOKEN},
            "metricsToken": {"bearer": METRICS_TOKEN},
        }},
        "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
        "checks": {
            "enabled": True,
            "max_response_time": REQUEST_TIMEOUT,
            # 410 (sold_out, ended) answers a well-formed call about a sale that is over, and the
            # edge gives it before it reads a body (docs/API.md: the order of the checks).
            "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "410"]},
            "negative_data_rejection": {"expected-statuses": [*REJECTED, "410"]},
        },
        "phases": {"stateful": {"max-steps": 10,
                                "generation": {"max-examples": STATEFUL_EXAMPLES}}},
        "hooks": "tests.support.schemathesis_hooks",
        "operations": [
            # A body within every field's length (characters) can still pass the 4 KiB that
            # every body is held to (bytes, the Conventions; 2,000 characters of description
            # are up to 12 KB of JSON; a webhook's events have no maxItems and its url is up
            # to 2,048): 413, which no JSON Schema can state.
            {"include-operation-id": ["createActivity", "editActivity", "createWebhook"],
             "checks": {"positive_data_acceptance": {
                            "expected-statuses": [*ACCEPTED, "410", "413"]},
                        "negative_data_rejection": {
                            "expected-statuses": [*REJECTED, "410"]}}},
            # A body the document calls valid, refused (400) for what the activity is now:
            # quantity over this activity's per_user_limit (1 for packets); a restock of
            # unlimited stock or packets, or one that takes the total past 1000000000. And a
            # purchase's items (up to 100, each with a variant id of up to 32 characters)
            # can pass the 4 KiB every body is held to: 413, valid or not (a fuzzed body of
            # 101 items, 5 KiB, was refused 413 and counted as a wrong rejection).
            {"include-operation-id": ["purchase", "restock"],
             "checks": {"positive_data_acceptance": {
                            "expected-statuses": [*ACCEPTED, "410", "400", "413"]},
                        "negative_data_rejection": {
                            "expected-statuses": [*REJECTED, "410"]}}},
            # The queue's calls on an activity without a queue (first_come, the seeded ones
            # but two), and a challenge where the queue needs none: 400 as the contract says.
            {"include-operation-id": ["joinQueue", "getQueueStatus", "getQueueState",
                                      "getChallenge", "setAdmissionFactor"],
             "checks": {"positive_data_acceptance": {
                 "expected-statuses": [*ACCEPTED, "410", "400"]}}},
        ],
    }


@dataclasses.dataclass
class LiveGateway:
    base: str
    folder: Path
    log: Path
    seeded: Seeded

    def answers_since(self, offset: int) -> list[tuple[str, str, int]]:
        """(method, path, status) of every answer logged past ``offset`` bytes of the log."""
        with self.log.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        return [(m, p, int(s)) for m, p, s in ACCESS_LINE.findall(text)]

    def run(self, *phases: str, real_ids: bool = True, only: tuple[str, ...] = (),
            examples: int = MAX_EXAMPLES) -> subprocess.CompletedProcess[str]:
        """``st run`` of these phases against the gateway, as a user would run it; the path and
        query ids come from the seeded ones half of the time when ``real_ids``; ``only``: these
        operations (ids), else all; ``examples``: per operation and phase."""
        name = "-".join(phases) + ("-only" if only else "")
        config_file = self.folder / f"{name}.toml"
        settings = config(self.base, self.seeded if real_ids else None)
        settings["generation"] = {**settings["generation"], "max-examples": examples}
        config_file.write_text("".join(f"{key} = {toml(value)}\n"
                                       for key, value in settings.items()))
        return subprocess.run(
            [str(Path(sys.executable).with_name("st")), "--config-file", str(config_file),
             "--no-color", "run", f"{self.base}/openapi.json", "--phases", ",".join(phases),
             "--workers", "1", "--report", "junit",
             "--report-junit-path", str(self.folder / f"{name}.xml"),
             *(arg for op in only for arg in ("--include-operation-id", op))],
            # Run in the test's folder (schemathesis and Hypothesis keep caches in the working
            # directory); the hooks module is found through PYTHONPATH.
            cwd=self.folder, env={**os.environ, "PYTHONPATH": str(REPO_ROOT),
                                  LEVER_TARGET: self.seeded.lever},
            capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
        )


@pytest.fixture(scope="module")
def gateway(valkey: EmbeddedValkey, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[LiveGateway]:
    """A live gateway with real activities and orders, and the run's configuration file."""
    folder: Path = tmp_path_factory.mktemp("schemathesis")
    env = gateway_env(valkey.url, f"st{uuid.uuid4().hex[:10]}", folder / "data",
                      f"sqlite:///{folder / 'orders.db'}", "1000/second")
    env["GUNICORN_ACCESSLOG"] = "-"  # one line per answer, in the log: what the run reached
    env["SECKILL_URL_TTL"] = "900"  # the seeded purchase URLs outlive the run
    # A deployment that names the person claim: `limit_by: person`, which the document
    # allows, is then a valid activity (without the claim it is the documented 400).
    env["SECKILL_PERSON_CLAIM"] = "person"
    # A deployment that takes payments in: POST /payments/webhook checks signatures (401)
    # rather than answering that it is not configured (404).
    env["SECKILL_PAYMENT_WEBHOOK_SECRET"] = "whsec_" + "c2NoZW1hdGhlc2lz" * 2
    log = folder / "gunicorn.log"
    with gunicorn_server(env, workers=2, log_file=log) as base:
        yield LiveGateway(base, folder, log, seed(base))


# The operations nginx's public listener serves (the operator's and /metrics are 404 there).
PUBLIC_OPERATIONS = ("getTime", "getActivity", "getPurchaseUrl", "purchase", "getOrderStatus",
                     "healthz", "openapi", "getQueueStatus", "joinQueue", "getQueueState",
                     "getChallenge", "paymentWebhook")


@pytest.fixture(scope="module")
def proxied(gateway: LiveGateway, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[LiveGateway, LiveGateway]]:
    """The live gateway behind a real nginx: (its public port, its operator port). No per-IP
    limit: one fuzzer from one address is not a crowd (nginx's 429 is tested on its own)."""
    run_dir: Path = tmp_path_factory.mktemp("schemathesis-nginx")
    with nginx_server([gateway.base.removeprefix("http://")], run_dir, ip_rate="off") as proxy:
        yield (dataclasses.replace(gateway, base=proxy.base),
               dataclasses.replace(gateway, base=proxy.admin_base))


def passed(result: subprocess.CompletedProcess[str]) -> bool:
    """Whether the run ended with no failure (its report is in the assertion otherwise)."""
    return result.returncode == 0


def test_every_operation_passes_every_check(gateway: LiveGateway) -> None:
    result = gateway.run("examples", "coverage", "fuzzing")
    assert passed(result), result.stdout[-20000:] + result.stderr[-3000:]


@pytest.mark.parametrize("port", ["public", "operator"])
def test_through_nginx_every_operation_passes_every_check(
        proxied: tuple[LiveGateway, LiveGateway], port: str) -> None:
    public, operator = proxied
    if port == "public":
        result = public.run("examples", "coverage", "fuzzing", only=PUBLIC_OPERATIONS,
                            examples=PROXIED_EXAMPLES)
    else:
        result = operator.run("examples", "coverage", "fuzzing", examples=PROXIED_EXAMPLES)
    assert passed(result), result.stdout[-20000:] + result.stderr[-3000:]


def test_stateful_every_link(gateway: LiveGateway) -> None:
    result = gateway.run("stateful", real_ids=False)  # every operation; the ids links carry
    assert passed(result), result.stdout[-20000:] + result.stderr[-3000:]


def test_stateful_links_create_buy_read_cancel(gateway: LiveGateway) -> None:
    """Every run passes every check; the runs (at most FLOW_RUNS, each with a new seed) reach
    every step of the flow between them: an activity created, bought through its signed URL,
    its order read and cancelled (which scenarios a run draws is chance)."""
    reached: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for _ in range(FLOW_RUNS):
        offset = gateway.log.stat().st_size
        # The ids the links carry; the flow's operations only, so scenarios follow its links.
        result = gateway.run("stateful", real_ids=False, only=FLOW_OPERATIONS)
        assert passed(result), result.stdout[-20000:] + result.stderr[-3000:]
        answers = gateway.answers_since(offset)
        reached.update(step for step, (method, path, status) in FLOW.items()
                       for m, p, s in answers
                       if m == method and re.fullmatch(path, p) and s == status)
        seen.update(f"{m} {'/'.join(p.split('/')[:3])} {s}" for m, p, s in answers)
        if set(reached) == set(FLOW):
            return
    raise AssertionError(f"reached {dict(reached)}; answers: {seen.most_common()}")


def test_a_new_activity_is_known_to_every_instance_at_once(
        valkey: EmbeddedValkey, tmp_path: Path) -> None:
    """Found by the stateful run (ensure_resource_availability): an instance that had been
    asked for an id answered 404 after another created it, until its refresh."""
    env = gateway_env(valkey.url, f"st{uuid.uuid4().hex[:10]}", tmp_path / "data",
                      f"sqlite:///{tmp_path / 'orders.db'}", "1000/second")
    env["SECKILL_META_TTL"] = "30"  # no refresh during the test: only the announcement helps
    with gunicorn_server(env, workers=1) as first, gunicorn_server(env, workers=1) as second:
        aid = f"late-{uuid.uuid4().hex[:6]}"
        assert call(first, "GET", f"/seckill/activities/{aid}", "")[0] == 404
        time.sleep(1.0)  # the instance subscribes once it remembers an unknown id
        body = {"id": aid, "name": "Late", "total": 1, "starts_at": iso(-5),
                "ends_at": iso(600)}
        assert call(second, "POST", "/admin/activities", ADMIN_TOKEN, body)[0] == 201
        assert call(second, "GET", f"/seckill/activities/{aid}", "")[0] == 200
        deadline = time.monotonic() + 1.0  # the announcement's way through Redis pub/sub
        while call(first, "GET", f"/seckill/activities/{aid}", "")[0] != 200:
            assert time.monotonic() < deadline, "still unknown to the other instance"
            time.sleep(0.02)
