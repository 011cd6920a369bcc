"""The workloads a scenario is made of, how each is set up, and what is checked after it.

A workload is one kind of wrk run against one server. Scenarios (``bench.cli``) pick
workloads; every round runs each picked workload once, in the order of ``ORDER``, so that
workloads alternate (A B C A B C ...) and each figure can be divided by its baseline's figure
from the same round.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.stack import (
    ADMIN_TOKEN,
    GATEWAY_PREFIX,
    JWT_SECRET,
    SEED_PREFIX,
    URL_KEY,
    URL_TTL,
    Stack,
)
from bench.wrk import WrkResult
from edge.identity import mint_user_token
from edge.purchase_url import PurchaseUrlSigner
from seckill.domain.activities import Activity
from seckill.domain.clock import now_ms
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.activities import ActivityStore

OK = frozenset({"200"})
GONE = frozenset({"410"})
SALE = frozenset({"200", "410"})
PAUSED = frozenset({"503"})


@dataclass(frozen=True)
class Workload:
    name: str
    server: str  # gateway | hello | seed
    method: str
    label: str
    group: str  # baseline | gateway | sale | alternative | oversell | connections
    baseline: str | None  # the workload each round's figure is divided by
    expected: frozenset[str]  # the statuses that are the right answer
    counted: bool = False  # every line once (a sale of N buyers), not a timed run
    big: bool = False  # run at --big-connections instead of --connections


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("seed", "seed", "POST", "`POST /seed/<aid>/<uid>/buy`: the seed's purchase script "
             "only (`bench/seed_purchase.lua`, one EVALSHA, no edge), distinct users, large stock",
             "baseline", "seed", OK),
    # The drops (bench/drops.py): the purchase on the code before them, in its own
    # gunicorn from a git worktree, then beside `purchase` (each pair adjacent in ORDER).
    Workload("purchase-before", "gateway-before", "POST", "`purchase` on a gateway serving "
             "the code before the drops (a git worktree)", "baseline", None, OK),
    Workload("purchase-alone", "gateway-alone", "POST", "`purchase` on a gateway of its own "
             "serving today's code and nothing else (as `purchase-before`'s does)", "baseline",
             None, OK),
    Workload("purchase", "gateway", "POST", "`POST /seckill/<aid>/<token>/buy`: JWT, window, "
             "sold-out flag, signed URL, per-user limit, script + WAITAOF; distinct users, "
             "large stock", "gateway", "seed", OK),
    Workload("purchase-variant", "gateway", "POST", "`purchase` of one variant of a "
             "5-variant activity, named in the query as the sale page does, "
             "`/buy?variant=<vid>`", "gateway", "purchase", OK),
    # Diagnostics beside it: the same in the body, and the single-item purchase with a body,
    # the part of a bodied purchase that is not the variant's own (reading and parsing a body).
    Workload("purchase-variant-body", "gateway", "POST", "`purchase-variant` with the body "
             "`{\"variant\": \"<vid>\"}` instead of the query", "gateway", "purchase", OK),
    Workload("purchase-body", "gateway", "POST", "`purchase` with the body `{\"quantity\": 1}` "
             "(the single-item purchase sends none)", "gateway", "purchase", OK),
    Workload("purchase-user", "gateway", "POST", "`purchase` on a `limit_by: user` activity, "
             "tokens carrying the person claim", "baseline", None, OK),
    Workload("purchase-person", "gateway", "POST", "`purchase` on a `limit_by: person` "
             "activity, each request a distinct person", "gateway", "purchase-user", OK),
    # Webhooks (bench/webhooks.py): purchases while the webhooks' dispatcher delivers.
    Workload("purchase-shop", "gateway", "POST", "`purchase` while the webhooks' dispatcher "
             "delivers every event (the orders worker's order.created) to one endpoint, a "
             "local 204 receiver", "gateway", "purchase", OK),
    Workload("url", "gateway", "GET", "`GET /seckill/url?activity=<aid>`: JWT, window, "
             "per-user limit, signing; distinct users", "gateway", "seed", OK),
    Workload("script", "seed", "POST", "`POST /script/<aid>/<uid>/buy`: today's "
             "`lua/purchase.lua` only (one EVALSHA, no edge); distinct users, large stock",
             "alternative", "seed", OK),
    Workload("unsafe", "seed", "POST", "`POST /unsafe/<aid>/<uid>/buy`: HGET then HINCRBY, not "
             "atomic; distinct users, large stock", "alternative", "seed", OK),
    Workload("lock", "seed", "POST", "`POST /lock/<aid>/<uid>/buy`: SET NX PX lock around "
             "read + decrement; distinct users, large stock", "alternative", "seed", OK),
    Workload("hello", "hello", "GET", "`GET /hello`: bare Flask, `{\"ok\": 1}`; each request "
             "with a distinct user's JWT header, ignored, like the gateway's requests", "baseline",
             "hello", OK),
    Workload("sold-out", "gateway", "POST", "purchases after the stock is gone, each a distinct "
             "user with a valid purchase URL: 410 from the in-process flag", "gateway", "hello",
             GONE),
    Workload("open-sale", "gateway", "POST", "N distinct buyers on S units, each request once",
             "sale", "hello", SALE, counted=True),
    Workload("oversell-unsafe", "seed", "POST", "the unsafe design: N distinct buyers on S units",
             "oversell", None, SALE, counted=True),
    Workload("oversell-lock", "seed", "POST", "the lock design: N distinct buyers on S units",
             "oversell", None, SALE, counted=True),
    Workload("oversell-script", "seed", "POST", "the script: N distinct buyers on S units",
             "oversell", None, SALE, counted=True),
    Workload("hello-c1000", "hello", "GET", "`GET /hello` at the big connection count",
             "connections", "hello-c1000", OK, big=True),
    Workload("purchase-c1000", "gateway", "POST", "purchases in stock at the big connection "
             "count", "connections", "hello-c1000", OK, big=True),
    Workload("sold-out-c1000", "gateway", "POST", "the sold-out flood at the big connection "
             "count", "connections", "hello-c1000", GONE, big=True),
    # The edge cache (bench/edge.py): one gateway behind two nginx fronts, `nginx` with the edge
    # cache of activity-level refusals, `nginx-off` without it (every request reaches the
    # gateway, as before the issue). Distinct users throughout.
    Workload("url-sold-out-nginx", "nginx", "GET", "`GET /seckill/url?activity=<aid>` of a "
             "sold-out activity through nginx with the edge cache: 410 `sold_out`, nginx "
             "repeating the gateway's answer for the rest of each second", "edge", "hello", GONE),
    Workload("url-sold-out-nginx-off", "nginx-off", "GET", "the same through nginx without "
             "the edge cache: every request reaches the gateway", "edge-off", "hello", GONE),
    Workload("url-ended-nginx", "nginx", "GET", "`GET /seckill/url` of an ended activity "
             "through the cached front: 410 `ended`", "edge", "hello", GONE),
    Workload("url-paused-nginx", "nginx", "GET", "`GET /seckill/url` of a paused activity "
             "through the cached front: 503 `paused`", "edge", "hello", PAUSED),
    Workload("buy-ended-nginx", "nginx", "POST", "purchases (valid signed URLs) of an ended "
             "activity through the cached front: 410 `ended`", "edge", "hello", GONE),
    Workload("buy-paused-nginx", "nginx", "POST", "purchases (valid signed URLs) of a paused "
             "activity through the cached front: 503 `paused`", "edge", "hello", PAUSED),
    Workload("buy-sold-out-nginx", "nginx", "POST", "the sold-out purchase flood through the "
             "cached front, not cached by design: 410 from the gateway's flag", "edge",
             "buy-sold-out-nginx-off", GONE),
    Workload("buy-sold-out-nginx-off", "nginx-off", "POST", "the sold-out purchase flood "
             "through the uncached front", "edge-off", "hello", GONE),
    Workload("purchase-nginx", "nginx", "POST", "purchases in stock (large stock) through the "
             "cached front: the full purchase path", "edge", "purchase-nginx-off", OK),
    Workload("purchase-nginx-off", "nginx-off", "POST", "purchases in stock through the "
             "uncached front", "edge-off", "hello", OK),
    Workload("open-sale-nginx", "nginx", "POST", "N distinct buyers on S units through the "
             "cached front, each request once", "sale", "hello", SALE, counted=True),
]}

ORDER = list(WORKLOADS)


@dataclass
class Run:
    workload: str
    round: int
    connections: int
    result: WrkResult
    foreign: float  # cores' worth of CPU other processes used during the run
    load: tuple[float, float]  # 1-minute load average before and after
    reads: int  # Redis round trips during the run
    calls: dict[str, int]  # Redis commands during the run
    background: int = 0  # of them sent by the gateway's background threads (not by requests)
    # CPU seconds used during the run (CpuMeter.spent): "server" (the gunicorn answering it, its
    # workers included) and "valkey"
    cpu: dict[str, float] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: bool = False  # a correctness check failed (winners != units, ...)

    @property
    def rate(self) -> float:
        return self.result.rate

    @property
    def expected_answers(self) -> int:
        wanted = WORKLOADS[self.workload].expected
        return sum(n for status, n in self.result.statuses.items() if status in wanted)

    @property
    def unexpected(self) -> dict[str, int]:
        wanted = WORKLOADS[self.workload].expected
        return {s: n for s, n in self.result.statuses.items() if s not in wanted}

    @property
    def commands(self) -> int:
        return sum(self.calls.values())

    def per_request(self) -> tuple[float, float]:
        """Redis (round trips, commands) per request the server handled: wrk's count, or the
        server's own when the run knows it (purchases in stock: units sold)."""
        n = int(self.checks.get("served") or self.result.requests)
        return (self.reads / n, self.commands / n) if n else (0.0, 0.0)


def iso(delta_seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=delta_seconds)).isoformat()


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Setup:
    """Users, tokens, activities and request files for the runs of one benchmark."""

    def __init__(self, stack: Stack, folder: Path) -> None:
        self.stack = stack
        self.folder = folder
        self.signer = PurchaseUrlSigner([URL_KEY], URL_TTL)
        self.gateway_keys = KeySpace(GATEWAY_PREFIX)
        self.seed_keys = KeySpace(SEED_PREFIX)
        self.seed_activities = ActivityStore(stack.client, self.seed_keys, Scripts(stack.client))
        self._jwts: list[str] = []

    # -- users ---------------------------------------------------------------------------

    @staticmethod
    def uid(i: int) -> str:
        return f"u{i:07d}"

    def jwts(self, n: int) -> list[str]:
        """JWTs of users 0..n-1, minted once (as the site's login service would) and reused
        across runs: each run is a new activity, so a user is a new buyer in each."""
        for i in range(len(self._jwts), n):
            self._jwts.append(mint_user_token(self.uid(i), JWT_SECRET, ttl=6 * 3600))
        return self._jwts[:n]

    # -- HTTP ----------------------------------------------------------------------------

    @staticmethod
    def call(base: str, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(base + path, data=data, method=method, headers={
            "Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return int(response.status), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return int(exc.code), json.loads(exc.read() or b"{}")

    def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.call(self.stack.base("gateway"), method, path, body,
                         {"Authorization": f"Bearer {ADMIN_TOKEN}"})

    # -- activities ----------------------------------------------------------------------

    def gateway_activity(self, total: int) -> str:
        """An open activity created through the operator API."""
        aid = new_id("g")
        status, body = self.admin("POST", "/admin/activities", {
            "id": aid, "name": "Benchmark", "total": total,
            "starts_at": iso(-60), "ends_at": iso(6 * 3600),
        })
        if status != 201:
            raise RuntimeError(f"creating an activity failed: {status} {body}")
        return aid

    def seed_activity(self, total: int) -> str:
        """An open activity for the seed server, written into Redis as the gateway would."""
        aid = new_id("s")
        at = now_ms()
        self.seed_activities.create(Activity(
            id=aid, name="Benchmark", starts_ms=at - 60_000, ends_ms=at + 6 * 3600_000,
            total=total, remaining=total,
        ))
        return aid

    def meta(self, keys: KeySpace, aid: str) -> dict[str, int]:
        client = self.stack.client
        raw: Any = client.hgetall(keys.meta(aid))
        out = {k: int(raw[k]) for k in ("total", "remaining", "sold") if k in raw}
        out["buyers"] = int(client.hlen(keys.buyers(aid)))
        return out

    # -- request files -------------------------------------------------------------------

    def write(self, name: str, lines: list[str]) -> Path:
        path = self.folder / f"{name}.tsv"
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        return path

    def purchase_lines(self, aid: str, n: int) -> list[str]:
        """Users 0..n-1, each with their JWT and a purchase URL signed with the gateway's
        key: exactly what ``GET /seckill/url`` hands them (it signs with the same code)."""
        jwts = self.jwts(n)
        return [f"/seckill/{aid}/{self.signer.sign(aid, self.uid(i))[0]}/buy\t{jwts[i]}"
                for i in range(n)]

    def sell_out(self, aid: str, units: int) -> None:
        """Buy every unit over HTTP, with users outside the crowd's range."""
        base = self.stack.base("gateway")
        for i in range(units):
            uid = f"early-{aid}-{i}"
            jwt = mint_user_token(uid, JWT_SECRET, ttl=3600)
            token, _ = self.signer.sign(aid, uid)
            status, body = self.call(base, "POST", f"/seckill/{aid}/{token}/buy", None,
                                     {"Authorization": f"Bearer {jwt}"})
            if status != 200:
                raise RuntimeError(f"selling out {aid}: unit {i} answered {status} {body}")


@dataclass
class Prepared:
    requests_file: Path
    lines: int
    after: Callable[[Run], None]


def prepare(setup: Setup, workload: Workload, args: Any, tag: str) -> Prepared:
    """Create what the run needs (an activity, its request file) and the check to run after."""
    users = args.users
    name = workload.name.removesuffix("-c1000")

    def nothing(run: Run) -> None:
        return None

    if name == "hello":
        # Each request carries a distinct user's JWT, as the gateway's requests do (the app
        # ignores it): the baseline sees the same request bytes and the same client pattern.
        # (Identical requests, all one string, measure faster and with a shorter tail here.)
        jwts = setup.jwts(users)
        return Prepared(setup.write(tag, [f"/hello\t{jwt}" for jwt in jwts]), users, nothing)

    if name in ("seed", "script", "unsafe", "lock"):
        aid = setup.seed_activity(total=users * 10)
        return Prepared(setup.write(tag, [f"/{name}/{aid}/{setup.uid(i)}/buy\t"
                                          for i in range(users)]), users, nothing)

    if name.startswith("oversell-"):
        route = name.removeprefix("oversell-")
        n, units = args.alt_buyers, args.alt_units
        aid = setup.seed_activity(total=units)

        def oversold(run: Run) -> None:
            time.sleep(0.5)  # answers wrk stopped waiting for
            meta = setup.meta(setup.seed_keys, aid)
            run.checks.update(units=units, buyers_sent=n, sold=meta.get("sold", 0),
                              buyers=meta["buyers"],
                              remaining=meta.get("remaining"), ok=run.result.statuses.get(
                                  "200", 0), busy=run.result.statuses.get("503", 0),
                              oversold=max(0, meta.get("sold", 0) - units))

        return Prepared(setup.write(tag, [f"/{route}/{aid}/{setup.uid(i)}/buy\t"
                                          for i in range(n)]), n, oversold)

    if name == "purchase":
        aid = setup.gateway_activity(total=users * 10)

        def sold(run: Run) -> None:
            time.sleep(0.5)
            meta = setup.meta(setup.gateway_keys, aid)
            ok = run.result.statuses.get("200", 0)
            # Every purchase the gateway served sold a unit, those wrk stopped waiting for too.
            run.checks.update(sold=meta.get("sold", 0), ok=ok, served=meta.get("sold", 0))
            if meta.get("sold", 0) < ok:
                run.failed = True
                run.notes.append(f"WRONG: {ok} answers of 200 but only {meta.get('sold')} sold")
            elif meta.get("sold", 0) > ok:
                run.notes.append(f"{meta['sold'] - ok} sold while wrk stopped waiting")

        return Prepared(setup.write(tag, setup.purchase_lines(aid, users)), users, sold)

    if name == "url":
        aid = setup.gateway_activity(total=users * 10)
        jwts = setup.jwts(users)
        return Prepared(setup.write(tag, [f"/seckill/url?activity={aid}\t{jwts[i]}"
                                          for i in range(users)]), users, nothing)

    if name == "sold-out":
        units = args.soldout_units
        aid = setup.gateway_activity(total=units)
        setup.sell_out(aid, units)

        def still_sold_out(run: Run) -> None:
            time.sleep(0.5)
            meta = setup.meta(setup.gateway_keys, aid)
            run.checks.update(units=units, sold=meta.get("sold", 0), buyers=meta["buyers"])
            if meta.get("sold") != units or meta["buyers"] != units:
                run.failed = True
                run.notes.append(f"WRONG: {units} units but sold {meta.get('sold')}")

        return Prepared(setup.write(tag, setup.purchase_lines(aid, users)), users,
                        still_sold_out)

    if name == "open-sale":
        n, units = args.buyers, args.units
        aid = setup.gateway_activity(total=units)

        def winners(run: Run) -> None:
            time.sleep(0.5)
            meta = setup.meta(setup.gateway_keys, aid)
            stream = setup.stack.client.xlen(setup.gateway_keys.orders(aid))
            status, stats = setup.admin("GET", f"/admin/activities/{aid}/stats")
            ok = run.result.statuses.get("200", 0)
            run.checks.update(units=units, buyers_sent=n, ok=ok, sold=meta.get("sold"),
                              remaining=meta.get("remaining"), winners=meta["buyers"],
                              orders=int(stream), stats_sold=stats.get("sold"),
                              stats_buyers=stats.get("buyers"), complete=run.result.complete)
            good = (status == 200 and ok == units and meta.get("sold") == units
                    and meta["buyers"] == units and meta.get("remaining") == 0
                    and int(stream) == units and stats.get("sold") == units
                    and stats.get("buyers") == units and run.result.complete)
            if not good:
                run.failed = True
                run.notes.append(f"WRONG: winners must equal {units}: {run.checks}")

        return Prepared(setup.write(tag, setup.purchase_lines(aid, n)), n, winners)

    raise ValueError(f"unknown workload {workload.name!r}")
