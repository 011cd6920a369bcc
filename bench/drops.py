"""The drops scenario of ``python -m bench run`` (``--scenario drops``): what variants, limits
per person and the issue as a whole cost a purchase, three pairs in one run.

* ``purchase-variant`` against ``purchase`` on the same gateway: a purchase of one variant of
  a 5-variant activity (named in the query, ``/buy?variant=<vid>``, as the sale page buys; the
  requests spread over the five) against a single-item purchase (target ≥ 0.95x);
  ``purchase-variant-body`` (a diagnostic) names it in a body, ``{"variant": "<vid>"}``: a body
  costs gunicorn's parser about 8 % of a purchase (``purchase-body`` / ``purchase``), which is
  why the query form exists;
* ``purchase-person`` against ``purchase-user`` on the same gateway: ``"limit_by": "person"``
  against ``"limit_by": "user"``, the same kind of tokens in both (each a distinct account
  carrying a distinct person in the ``SECKILL_PERSON_CLAIM`` claim), so only the limit differs
  (≥ 0.95x);
* ``purchase-alone`` against ``purchase-before``: the single-item purchase today against the
  same on the code before the drops (a git worktree of ``--before-commit``), each on a
  gunicorn of its own that serves nothing else (no slower: ≥ 0.95x is within noise).

Why ``purchase-alone`` and not ``purchase``: the gateway that serves ``purchase`` also serves
the four other workloads, round after round. An A/A run (the "before" gateway serving today's
code, ``--before-commit HEAD``, Intel Xeon, 9 rounds, the same users in every run) gave
``purchase`` / ``purchase-before`` 0.87x, its gunicorn 17 % more CPU per purchase, on the
same code. ``purchase-alone`` is today's code in a third gunicorn, from this checkout, started
and used as the "before" one is: the pair differs in the code only. ``purchase`` /
``purchase-alone`` (a diagnostic) is what serving the other workloads costs: 0.83x with the
same users in every run, 0.97x and 1.09x with a fresh crowd per run (:func:`fresh_crowd`),
so the token memory was most of it.

Why a scenario of ``bench run`` and not a module of its own: the harness already has what the
three pairs need (Valkey, the gateway, the tokens and signed URLs, wrk, the Redis and CPU
counters, the report), and the ``edge`` scenario showed how a scenario brings its own server
and report section (``bench/dropsreport.py`` here).

The "before" gateway: ``git worktree add --detach`` of the commit into a temp folder, a
gunicorn started there with the same settings and environment as today's (its own key prefix,
database and metrics folder, the same Valkey), removed with ``git worktree remove --force``
afterwards. Python puts the current directory first on ``sys.path`` (``python -m gunicorn``),
ahead of the venv's editable install of this checkout, so the worktree's ``seckill`` and
``edge`` are the ones imported: checked before it starts (a child Python in the worktree says
where it imported them from) and once it answers (its ``/openapi.json`` must be the worktree's
file byte for byte).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stack import (
    ADMIN_TOKEN,
    JWT_SECRET,
    Stack,
    server_env,
    server_problems,
    start_gunicorn,
)
from bench.workloads import Prepared, Run, Setup, Workload, iso, new_id
from edge.identity import mint_user_token
from seckill.store.plumbing.keys import KeySpace
from tests.support.servers import REPO_ROOT

# The parent of c472fb2 ("edge: a passage carries the person ..."), the first commit of issue
# #26 that changed the server. Not b1c8e35: sessions' commits interleave, and eleven #26 commits
# are older than it, four of them in lua/purchase.lua or seckill/domain/activities.py (8208bb9,
# a37b056, 17e124a, f1514e6). a710f52 has all of the edge cache that the gateway runs; what it lacks
# besides #26 is the nginx exporter's log parsing (48ccf6d, 021dccd), which no purchase runs.
BEFORE_COMMIT = "a710f52"
BEFORE = "purchase-before"
SERVER = "gateway-before"
BEFORE_PREFIX = "bbefore"
ALONE = "purchase-alone"  # today's code on a gunicorn that serves nothing else
ALONE_SERVER = "gateway-alone"
ALONE_PREFIX = "balone"
VARIANT_BODY = "purchase-variant-body"
NAMES = (BEFORE, ALONE, "purchase-variant", VARIANT_BODY, "purchase-body", "purchase-user",
         "purchase-person")


@dataclass(frozen=True)
class Pair:
    """One ratio the report gives: ``measured``'s 200s/s over ``baseline``'s in each round."""

    measured: str
    baseline: str
    text: str  # what it answers, as the report's table says it
    diagnostic: bool = False  # explains a target; not one itself


# The three targets, then the diagnostics, which explain them: what a process's
# history costs the single-item pair; what a request body costs, and what a variant costs
# beyond a single item sent with a body.
PAIRS = (
    Pair("purchase-variant", "purchase",
         "a purchase of one variant ≥ 0.95x a single-item purchase, same gateway"),
    Pair("purchase-person", "purchase-user",
         "a `limit_by: person` purchase ≥ 0.95x a `limit_by: user` one"),
    Pair(ALONE, BEFORE, "the single-item purchase no slower than before the drops, each on a "
                        "gunicorn that serves nothing else (≥ 0.95x the same on the old code "
                        "counts as within noise)"),
    Pair("purchase", ALONE,
         "diagnostic: the single-item purchase on the gateway that serves every workload / on "
         "one that serves only it, the same code (what the process's history costs)",
         diagnostic=True),
    Pair("purchase", BEFORE,
         "diagnostic: the single-item purchase on the gateway that serves every workload / "
         "before the drops (the target's measure until stop 35: the code and the history)",
         diagnostic=True),
    Pair(VARIANT_BODY, "purchase",
         "diagnostic: a purchase of one variant named in a body `{\"variant\": \"<vid>\"}` "
         "(the contract's first form) / a single-item purchase", diagnostic=True),
    Pair("purchase-body", "purchase",
         "diagnostic: the single-item purchase with a request body `{\"quantity\": 1}` / "
         "without (what a purchase pays for a body)", diagnostic=True),
    Pair(VARIANT_BODY, "purchase-body",
         "diagnostic: a purchase of one variant in a body / a single-item purchase with a body "
         "(what a variant costs beyond its body)", diagnostic=True),
)
CLAIM = "person"  # SECKILL_PERSON_CLAIM on both gateways (the old code reads no such name)
VARIANTS = 5
_PERSON_JWTS: list[str] = []


@dataclass
class Before:
    """The "before" gateway: which code it serves and how that was checked."""

    commit: str
    subject: str
    imported: dict[str, str] = field(default_factory=dict)  # module -> its file, in the tree
    served: str = ""  # what the /openapi.json check found


def chosen(names: list[str]) -> bool:
    return any(n in NAMES for n in names)


def gateway_env(names: list[str]) -> dict[str, str]:
    """What the scenario adds to the gateways' environment: the person claim."""
    return {"SECKILL_PERSON_CLAIM": CLAIM} if chosen(names) else {}


# Each run's crowd: users numbered from here up, n per run, never two runs the same.
_FIRST_FRESH_USER = 1_000_000  # above the users 0..--users-1 the other scenarios reuse
_next_user = [_FIRST_FRESH_USER]


def fresh_crowd(n: int, persons: bool = False) -> list[tuple[str, str]]:
    """(user id, token) of ``n`` users no gateway has seen, each a person of their own in
    ``CLAIM`` when ``persons``.

    Why not the same users 0..n-1 in every run, as other scenarios send: the gateway remembers
    the last 10,000 to 20,000 tokens it verified (``edge.identity``), and a gateway serving several
    workloads of the same users found some tokens remembered and others not, by the order of
    the runs (the body diagnostic was 0.77x in even rounds, where its run followed the person
    workloads' other tokens, against 1.00x in odd ones). A fresh crowd is the same for every
    run on every gateway: each purchase verifies its token, as most do in a sale behind
    several gateway processes (the purchase rarely reaches the process that saw the token's
    ``GET /seckill/url``)."""
    first = _next_user[0]
    _next_user[0] += n
    out = []
    for k in range(first, first + n):
        uid = Setup.uid(k)
        claims: dict[str, object] | None = {CLAIM: f"person-{k}"} if persons else None
        out.append((uid, mint_user_token(uid, JWT_SECRET, ttl=6 * 3600, claims=claims)))
    return out


def person_jwts(n: int) -> list[str]:
    """Tokens of accounts 0..n-1 (``Setup.uid``), each naming a person of its own."""
    for i in range(len(_PERSON_JWTS), n):
        _PERSON_JWTS.append(mint_user_token(Setup.uid(i), JWT_SECRET, ttl=6 * 3600,
                                            claims={CLAIM: f"person-{i}"}))
    return _PERSON_JWTS[:n]


def create_activity(setup: Setup, base: str, fields: dict[str, Any], prefix: str = "g") -> str:
    """An open activity created through the operator API of the gateway at ``base``."""
    aid = new_id(prefix)
    status, body = setup.call(base, "POST", "/admin/activities", {
        "id": aid, "name": "Benchmark", "starts_at": iso(-60), "ends_at": iso(6 * 3600),
        **fields}, {"Authorization": f"Bearer {ADMIN_TOKEN}"})
    if status != 201:
        raise RuntimeError(f"creating an activity on {base} failed: {status} {body}")
    return aid


def limited_activity(setup: Setup, limit_by: str, total: int) -> str:
    """An open stock activity on today's gateway limited by ``limit_by`` (person or user)."""
    return create_activity(setup, setup.stack.base("gateway"),
                           {"total": total, "limit_by": limit_by},
                           "p" if limit_by == "person" else "u")


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def imported_from(tree: Path, env: dict[str, str]) -> dict[str, str]:
    """Where a Python started in ``tree`` (as gunicorn is) imports ``seckill`` and ``edge``
    from; RuntimeError unless both are the tree's (not the venv's editable install)."""
    code = ("import json, seckill, edge; "
            "print(json.dumps({m.__name__: m.__file__ for m in (seckill, edge)}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"importing the worktree's packages failed: {done.stderr[-2000:]}")
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    wrong = {m: f for m, f in found.items() if not Path(f).resolve().is_relative_to(
        tree.resolve())}
    if wrong:
        raise RuntimeError(f"a Python started in {tree} imports {wrong}, not the worktree's")
    return found


def _openapi(base: str) -> bytes:
    with urllib.request.urlopen(f"{base}/openapi.json", timeout=30) as response:
        data: bytes = response.read()
        return data


def served_check(stack: Stack, tree: Path) -> str:
    """The running "before" gateway serves the worktree's code: its OpenAPI document is the
    worktree's file, byte for byte (and differs from today's gateway's, when the files do)."""
    old = _openapi(stack.base(SERVER))
    if old != (tree / "seckill" / "web" / "openapi.json").read_bytes():
        raise RuntimeError("the before gateway's /openapi.json is not the worktree's file")
    if old == _openapi(stack.base("gateway")):
        return "its /openapi.json is the worktree's file (the same as today's document)"
    return ("its /openapi.json is the worktree's file byte for byte, and not today's "
            "gateway's")


@contextlib.contextmanager
def before_gateway(stack: Stack, names: list[str], args: Any,
                   env_extra: dict[str, str]) -> Iterator[Before | None]:
    """The gateway of ``args.before_commit`` when ``purchase-before`` runs (registered in
    ``stack.servers`` as ``gateway-before``), up until the block ends; then its worktree is
    removed."""
    if BEFORE not in names:
        yield None
        return
    commit = _git("rev-parse", "--verify", f"{args.before_commit}^{{commit}}")
    info = Before(commit=commit, subject=_git("log", "-1", "--format=%h %s", commit)[:140])
    with tempfile.TemporaryDirectory(prefix="seckill-bench-before-") as tmp:
        tree = Path(tmp) / "tree"
        _git("worktree", "add", "--detach", str(tree), commit)
        try:
            folder = Path(tmp) / "run"
            env = _side_env(stack, folder, args, env_extra, BEFORE_PREFIX)
            info.imported = imported_from(tree, env)
            with contextlib.ExitStack() as stop:
                stack.servers[SERVER] = start_gunicorn(stop, SERVER, env, folder,
                                                       app="wsgi:app", cwd=tree)
                info.served = served_check(stack, tree)
                try:
                    yield info
                finally:
                    stack.servers.pop(SERVER, None)  # stopped next: no longer the stack's
        finally:
            _git("worktree", "remove", "--force", str(tree))


def _side_env(stack: Stack, folder: Path, args: Any, env_extra: dict[str, str],
              prefix: str) -> dict[str, str]:
    """A side gateway's environment: today's gateway's, with its own key prefix, database
    and metrics folder (in ``folder``)."""
    (folder / "data").mkdir(parents=True)
    env = server_env(stack.valkey.url, folder, "gateway", args.workers, args.worker_connections)
    env.update(env_extra)
    env["SECKILL_KEY_PREFIX"] = prefix
    return env


@contextlib.contextmanager
def alone_gateway(stack: Stack, names: list[str], args: Any,
                  env_extra: dict[str, str]) -> Iterator[bool]:
    """Today's code in a gunicorn of its own (``gateway-alone``, from this checkout) when
    ``purchase-alone`` runs, up until the block ends; whether it runs."""
    if ALONE not in names:
        yield False
        return
    with tempfile.TemporaryDirectory(prefix="seckill-bench-alone-") as tmp, \
            contextlib.ExitStack() as stop:
        env = _side_env(stack, Path(tmp), args, env_extra, ALONE_PREFIX)
        stack.servers[ALONE_SERVER] = start_gunicorn(stop, ALONE_SERVER, env, Path(tmp),
                                                     app="wsgi:app")
        try:
            yield True
        finally:
            stack.servers.pop(ALONE_SERVER, None)  # stopped next: no longer the stack's


def settings(info: Before | None, names: list[str]) -> str:
    """The report's paragraph on the scenario's set-up, empty when it did not run."""
    if not chosen(names):
        return ""
    text = (f"\n\nThe drops' pairs: both gateways run with `SECKILL_PERSON_CLAIM={CLAIM}`; "
            "`purchase-user` and `purchase-person` send the same kind of tokens (each a "
            "distinct account naming a distinct person); `purchase-variant` buys one of "
            f"{VARIANTS} variants (`v0`..`v{VARIANTS - 1}`, request i buys `v<i mod "
            f"{VARIANTS}>`), each with as much stock as the crowd, named in the query "
            "(`/buy?variant=<vid>`, no body, as the sale page buys); `purchase-variant-body` "
            "(a diagnostic) names it in the body `{\"variant\": \"<vid>\"}` instead; "
            "`purchase-body` (a diagnostic) is the single-item purchase sending the body "
            "`{\"quantity\": 1}`. The drops workloads run in this order in odd rounds and "
            "reversed in even rounds: `purchase-before`, `purchase-alone`, `purchase`, "
            "`purchase-variant`, `purchase-variant-body`, `purchase-body`, `purchase-user`, "
            "`purchase-person` (each target's pair adjacent, "
            "its order swapped every round). Every run of these, `purchase` included, sends a "
            "crowd of its own: users no gateway has seen (from u1000000 up), so that each "
            "purchase verifies its token on every gateway alike (`bench.drops.fresh_crowd`).")
    if ALONE in names:
        text += (" `purchase-alone`: a third gunicorn serving this checkout's code (the same "
                 f"settings and environment, key prefix `{ALONE_PREFIX}`, its own database, "
                 "the same Valkey) that serves nothing else, as the \"before\" one does: the "
                 "single-item target compares the two, so that only the code differs.")
    if info is not None:
        text += (f" `purchase-before`: a second gunicorn (the same settings and environment, "
                 f"key prefix `{BEFORE_PREFIX}`, its own database, the same Valkey) started in "
                 f"a `git worktree add --detach` of commit `{info.subject}` ({info.commit}), "
                 "removed after the run. A Python started there (as its gunicorn was) "
                 "imports " + ", ".join(f"`{m}` from `{f}`" for m, f in info.imported.items())
                 + ", the worktree's (the current directory comes before the venv's editable "
                 f"install of this checkout on `sys.path`); {info.served}.")
    return text


def in_order(chosen_workloads: list[Workload], round_no: int) -> list[Workload]:
    """The round's order: the drops workloads (and ``purchase``) reversed among their places
    in even rounds, so every pair, adjacent in ``ORDER``, swaps its order every round."""
    out = list(chosen_workloads)
    if round_no % 2 or not chosen([w.name for w in out]):
        return out
    places = [i for i, w in enumerate(out) if w.name in NAMES or w.name == "purchase"]
    for i, w in zip(places, [out[i] for i in reversed(places)], strict=True):
        out[i] = w
    return out


def prepare(setup: Setup, workload: Workload, args: Any, tag: str) -> Prepared:
    """The activity, the request file and the checks of one drops run."""
    users = args.users
    limited = workload.name in ("purchase-user", "purchase-person")
    crowd = fresh_crowd(users, persons=limited)

    def buys(aid: str) -> list[str]:
        return [f"/seckill/{aid}/{setup.signer.sign(aid, uid)[0]}/buy\t{jwt}"
                for uid, jwt in crowd]

    if workload.name in (BEFORE, ALONE):
        server, prefix = (SERVER, BEFORE_PREFIX) if workload.name == BEFORE else (
            ALONE_SERVER, ALONE_PREFIX)
        aid = create_activity(setup, setup.stack.base(server), {"total": users * 10})
        return Prepared(setup.write(tag, buys(aid)), users,
                        sold_check(setup, KeySpace(prefix), aid))
    if workload.name in ("purchase-variant", VARIANT_BODY):
        variants = [{"id": f"v{k}", "name": f"EU {40 + k}", "total": users * 2}
                    for k in range(VARIANTS)]
        aid = create_activity(setup, setup.stack.base("gateway"), {"variants": variants})
        if workload.name == VARIANT_BODY:
            lines = [f'{line}\t{{"variant": "v{i % VARIANTS}"}}'
                     for i, line in enumerate(buys(aid))]
        else:  # the terms in the query, as the sale page sends them (no body)
            lines = [line.replace("/buy\t", f"/buy?variant=v{i % VARIANTS}\t", 1)
                     for i, line in enumerate(buys(aid))]
        return Prepared(setup.write(tag, lines), users,
                        sold_check(setup, setup.gateway_keys, aid, VARIANTS))
    if workload.name in ("purchase", "purchase-body"):
        aid = create_activity(setup, setup.stack.base("gateway"), {"total": users * 10})
        lines = buys(aid)
        if workload.name == "purchase-body":
            lines = [f'{line}\t{{"quantity": 1}}' for line in lines]
        return Prepared(setup.write(tag, lines), users,
                        sold_check(setup, setup.gateway_keys, aid))
    aid = limited_activity(setup, workload.name.removeprefix("purchase-"), users * 10)
    return Prepared(setup.write(tag, buys(aid)), users, sold_check(setup, setup.gateway_keys, aid))


def sold_check(setup: Setup, keys: KeySpace, aid: str, variants: int = 0
               ) -> Callable[[Run], None]:
    """After a run: every 200 sold a unit, each buyer (account or person) bought one, and
    each variant's sold + remaining == total with the variants' sold summing to the sold."""

    def check(run: Run) -> None:
        time.sleep(0.5)  # answers wrk stopped waiting for
        meta = setup.meta(keys, aid)
        ok, sold = run.result.statuses.get("200", 0), meta.get("sold", 0)
        run.checks.update(sold=sold, ok=ok, served=sold, buyers=meta["buyers"])
        wrong = []
        if sold < ok:
            wrong.append(f"{ok} answers of 200 but only {sold} sold")
        if meta["buyers"] != sold:
            wrong.append(f"{sold} units sold to {meta['buyers']} buyers (one each)")
        if variants:
            fields = [f"v:v{k}:{f}" for k in range(variants)
                      for f in ("total", "remaining", "sold")]
            raw: Any = setup.stack.client.hmget(keys.meta(aid), fields)
            got = [int(x) for x in raw]
            per = [got[k * 3:k * 3 + 3] for k in range(variants)]
            run.checks["variant_sold"] = [p[2] for p in per]
            if any(t != r + s for t, r, s in per) or sum(p[2] for p in per) != sold:
                wrong.append(f"variants' (total, remaining, sold) {per}, activity sold {sold}")
        if wrong:
            run.failed = True
            run.notes.append("WRONG: " + "; ".join(wrong))
        elif sold > ok:
            run.notes.append(f"{sold - ok} sold while wrk stopped waiting")

    return check


def problems(stack: Stack) -> dict[str, list[str]]:
    """The side gateways' error lines, while they are up."""
    return {name: server_problems(stack.servers[name].log_file)
            for name in (SERVER, ALONE_SERVER) if name in stack.servers}
