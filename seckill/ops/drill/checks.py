"""The drill's invariants, checked on what it gathered (a pure function: the unit tests feed it
crafted evidence that must fail).

- every activity's counters agree: ``sold + remaining == total`` and ``remaining >= 0``, at the
  end and at each snapshot (before the clean stop, after the start on the same data);
- every purchase answered 200 (and every unknown outcome that went through) is stored;
- no buyer holds two orders of one activity, nor was answered 200 twice there;
- nothing is left pending once the worker has drained (a bounded wait);
- ``seckill reconcile`` finds no difference for any activity;
- per variant: each variant's ``sold + remaining == total`` at the same points,
  the variants add up to the activity's counters, each variant's ``sold`` equals the units of
  its live stored orders, and (without a payment window, where nothing comes back) the crowd
  was never answered 200 for more units of a variant than it has;
- per person: on an activity limited by person, no person (all their accounts
  together) holds more than one order or more than ``per_user_limit`` units, as the crowd saw
  it and as the database holds it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from seckill.ops.drill.crowd import Record


@dataclasses.dataclass(frozen=True)
class StoredRow:
    """An order as the database (or, against a deployment, the order status) tells it."""

    order_id: str
    aid: str
    uid: str  # on an activity limited by person: the person's key
    status: str
    units: int = 1
    account: str = ""  # on an activity limited by person: the account that bought
    items: tuple[tuple[str, int], ...] = ()  # with variants: (variant, units) of the order


# aid -> (its stats, {vid: units of its live stored orders}), read one after the other once
# they agree (or a bound passed): see drill_database.variant_books
VariantBooks = dict[str, tuple[dict[str, Any], dict[str, int]]]


@dataclasses.dataclass
class Evidence:
    """Everything the invariants are checked on."""

    records: list[Record]
    stats: dict[str, dict[str, Any]]  # aid -> GET /admin/activities/<aid>/stats, at the end
    stored: dict[str, list[StoredRow]] | None  # aid -> its orders; None: not readable
    resolved: dict[tuple[str, str], dict[str, Any]]  # (aid, uid) -> order status
    reconcile: dict[str, tuple[bool, str]] | None  # aid -> (clean, what it said); None: skipped
    snapshots: list[tuple[str, dict[str, dict[str, Any]]]] = dataclasses.field(
        default_factory=list)
    stored_from: str = "the database"
    activities: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # bodies
    variant_books: VariantBooks | None = None  # None: the database not readable here


@dataclasses.dataclass(frozen=True)
class Invariant:
    """One invariant and whether it held (None: it could not be checked here)."""

    name: str
    ok: bool | None
    detail: str


NAMES = (
    "sold + remaining == total",
    "every 200 stored",
    "no buyer twice",
    "nothing left pending",
    "reconcile clean",
    "per variant: sold + remaining == total",
    "per person: never over the limit",
)


def _counters(label: str, stats: dict[str, dict[str, Any]]) -> list[str]:
    bad = []
    for aid, s in sorted(stats.items()):
        total, remaining, sold = s.get("total"), s.get("remaining"), s.get("sold")
        if "total" not in s:
            bad.append(f"{label} {aid}: no stats (the operator API did not answer)")
            continue
        if total is None:  # unlimited stock: no counter to add up
            continue
        if not (isinstance(total, int) and isinstance(remaining, int)
                and isinstance(sold, int)):
            bad.append(f"{label} {aid}: counters unreadable {total}/{remaining}/{sold}")
        elif sold + remaining != total or remaining < 0:
            bad.append(f"{label} {aid}: sold {sold} + remaining {remaining} != total {total}")
    return bad


def none_is_final(early: dict[tuple[str, str], tuple[float, dict[str, Any]]],
                  resolved: dict[tuple[str, str], dict[str, Any]],
                  stored: dict[str, list[StoredRow]] | None) -> Invariant:
    """An unknown outcome whose order status said ``none`` within seconds (asked as the sale
    page asks) never becomes an order later: not in the status asked at the end, not in the
    database (by the account, or the buyer, that asked)."""
    name = "an unknown outcome's \"none\" is final"
    holders: dict[tuple[str, str], str] = {}
    bought_by: dict[str, str] = {}  # order id -> the account whose purchase made it
    for rows in (stored or {}).values():
        for row in rows:
            holders[(row.aid, row.account or row.uid)] = row.order_id
            bought_by[row.order_id] = row.account or row.uid
    nones = {key: at for key, (at, body) in early.items() if body.get("status") == "none"}
    later = []
    for (aid, uid), at in sorted(nones.items()):
        final = resolved.get((aid, uid), {})
        oid = (str(final.get("order_id")) if went_through(final)
               else holders.get((aid, uid), ""))
        if oid and bought_by.get(oid, uid) != uid:
            # A person's order, made by another of their accounts: the status of every
            # account of that person names it, but this account's purchase made nothing.
            oid = holders.get((aid, uid), "")
        if oid:
            later.append(f"{aid}/{uid}: none at {at:.1f} s, later order {oid}")
    unanswered = sum(1 for _, body in early.values() if body.get("status") == "unanswered")
    return Invariant(name, not later, "; ".join(later[:5]) + (
        f" (and {len(later) - 5} more)" if len(later) > 5 else "") if later else
        f"{len(early)} unknown outcomes asked within seconds: {len(nones)} none, all still "
        f"none at the end" + (f"; {unanswered} unanswered then" if unanswered else ""))


def went_through(body: dict[str, Any]) -> bool:
    """Whether an order status says the purchase was made."""
    return bool(body.get("order_id")) and body.get("status") in ("pending", "confirmed",
                                                                 "cancelled")


def check(ev: Evidence) -> list[Invariant]:
    """Each invariant of :data:`NAMES`, in that order."""
    found: list[Invariant] = []

    bad = _counters("end", ev.stats)
    for label, snapshot in ev.snapshots:
        bad += _counters(label, snapshot)
    checked = ", ".join(["the end", *(label for label, _ in ev.snapshots)])
    found.append(Invariant(NAMES[0], not bad, "; ".join(bad[:5]) or
                           f"{len(ev.stats)} activities, at {checked}"))

    answered = {(r.aid, r.uid): r.order_id for r in ev.records
                if r.endpoint == "buy" and r.status == 200}
    decided = dict(answered)
    for r in ev.records:  # a repeated purchase (a retried request) names the order it made
        if r.endpoint == "buy" and r.error == "already_purchased" and r.order_id:
            decided.setdefault((r.aid, r.uid), r.order_id)
    for (aid, uid), body in ev.resolved.items():
        if went_through(body):
            decided.setdefault((aid, uid), str(body["order_id"]))
    if ev.stored is None:
        found.append(Invariant(NAMES[1], None, "orders not readable here"))
    else:
        stored_ids = {row.order_id for rows in ev.stored.values() for row in rows}
        missing = sorted(oid or f"(no order id: {aid}/{uid})"
                         for (aid, uid), oid in decided.items() if oid not in stored_ids)
        found.append(Invariant(
            NAMES[1], not missing,
            f"{len(missing)} of {len(decided)} missing from {ev.stored_from}: "
            + ", ".join(missing[:5]) if missing else
            f"{len(answered)} answered 200 + {len(decided) - len(answered)} other purchases "
            f"that went through (unknown outcomes, repeats, a person's other accounts), all "
            f"in {ev.stored_from}"))

    twice = [f"{aid}/{uid} answered 200 {n}x" for (aid, uid), n in sorted(Counter(
        (r.aid, r.uid) for r in ev.records if r.endpoint == "buy" and r.status == 200).items())
        if n > 1]
    if ev.stored is not None:
        held = Counter((row.aid, row.uid) for rows in ev.stored.values() for row in rows)
        twice += [f"{aid}/{uid} holds {n} orders" for (aid, uid), n in sorted(held.items())
                  if n > 1]
    found.append(Invariant(NAMES[2], not twice, "; ".join(twice[:5]) or
                           f"{len(answered)} buyers answered 200, each once"))

    pending = {aid: int((s.get("orders") or {}).get("pending", -1))
               for aid, s in sorted(ev.stats.items())}
    left = [f"{aid}: {n} pending" for aid, n in pending.items() if n != 0]
    found.append(Invariant(NAMES[3], not left, "; ".join(left) or
                           "0 pending in every activity after the worker drained"))

    if ev.reconcile is None:
        found.append(Invariant(NAMES[4], None, "skipped (no access to Redis and the database)"))
    else:
        dirty = [f"{aid}: {said}" for aid, (clean, said) in sorted(ev.reconcile.items())
                 if not clean]
        found.append(Invariant(NAMES[4], not dirty, "; ".join(dirty)[:600] or
                               f"no difference in {len(ev.reconcile)} activities"))
    found.append(_per_variant(ev))
    found.append(_per_person(ev))
    return found


# -- variants and people -------------------------------------------------------------------

def variant_sums(stats: dict[str, Any]) -> str:
    """How an activity's variants fail to add up to its own counters ("" when they do).

    Only from a reading taken while nothing moves: the stats read the activity's counters
    and its variants' in two Redis calls, so under traffic a purchase may fall between."""
    listed = stats.get("variants")
    if not isinstance(listed, dict):
        return "no variants in the stats"
    sums = [sum(v.get(k, 0) for v in listed.values() if isinstance(v, dict))
            for k in ("total", "remaining", "sold")]
    whole = [stats.get("total"), stats.get("remaining"), stats.get("sold")]
    if sums == whole:
        return ""
    return (f"the variants add up to total/remaining/sold {sums[0]}/{sums[1]}/{sums[2]}, the "
            f"activity says {whole[0]}/{whole[1]}/{whole[2]}")


def variant_sold(stats: dict[str, Any]) -> dict[str, int]:
    """Each variant's ``sold`` in an activity's stats."""
    listed = stats.get("variants")
    if not isinstance(listed, dict):
        return {}
    return {vid: v["sold"] for vid, v in listed.items()
            if isinstance(v, dict) and isinstance(v.get("sold"), int)}


def books_agree(stats: dict[str, Any], units: dict[str, int]) -> bool:
    """Whether the variants add up and each one's sold is its live stored units."""
    sold = variant_sold(stats)
    return not variant_sums(stats) and bool(sold) and all(
        sold.get(vid) == units.get(vid, 0) for vid in set(sold) | set(units))


def _variant_counters(label: str, stats: dict[str, dict[str, Any]],
                      activities: dict[str, dict[str, Any]]) -> list[str]:
    """Each variant's counters in one reading of the stats (one Redis call: they must add
    up whatever the traffic)."""
    bad = []
    for aid, body in sorted(activities.items()):
        created = [str(v["id"]) for v in body.get("variants") or ()]
        if not created:
            continue
        s = stats.get(aid) or {}
        listed = s.get("variants")
        if not isinstance(listed, dict) or sorted(listed) != sorted(created):
            shown = sorted(listed) if isinstance(listed, dict) else listed
            bad.append(f"{label} {aid}: the stats list variants {shown}, created {created}")
            continue
        for vid in created:
            v = listed[vid] if isinstance(listed[vid], dict) else {}
            total, remaining, sold = v.get("total"), v.get("remaining"), v.get("sold")
            if not (isinstance(total, int) and isinstance(remaining, int)
                    and isinstance(sold, int)):
                bad.append(f"{label} {aid}/{vid}: counters unreadable {total}/{remaining}/{sold}")
                continue
            if sold + remaining != total or remaining < 0 or sold < 0:
                bad.append(f"{label} {aid}/{vid}: sold {sold} + remaining {remaining} != "
                           f"total {total}")
    return bad


def _orders_seen(ev: Evidence, aid: str) -> dict[str, tuple[str, str]]:
    """The orders the crowd saw made on ``aid``: order id -> (items text, person), from the
    200s and from the order status of unknown outcomes that went through."""
    seen: dict[str, tuple[str, str]] = {}
    person = {r.uid: r.person for r in ev.records}
    for r in ev.records:
        if r.aid == aid and r.endpoint == "buy" and r.status == 200:
            seen[r.order_id] = (r.items, r.person)
    for (raid, uid), body in ev.resolved.items():
        if raid == aid and went_through(body):
            items = ",".join(f"{i.get('variant')}:{i.get('quantity')}"
                             for i in body.get("items") or () if isinstance(i, dict))
            seen.setdefault(str(body["order_id"]), (items, person.get(uid, "")))
    return seen


def _units_by_variant(items: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for text in items:
        for part in filter(None, text.split(",")):
            vid, _, n = part.rpartition(":")
            found[vid] = found.get(vid, 0) + (int(n) if n.isdigit() else 0)
    return found


def _per_variant(ev: Evidence) -> Invariant:
    with_variants = {aid: b for aid, b in ev.activities.items() if b.get("variants")}
    if not with_variants:
        return Invariant(NAMES[5], None, "no activity with variants here")
    bad = _variant_counters("end", ev.stats, with_variants)
    for label, snapshot in ev.snapshots:
        bad += _variant_counters(label, snapshot, with_variants)
    # Added up, and against the database: on the reading the drill took once all was still
    # (without the database: on the end's).
    still = ev.variant_books if ev.variant_books is not None else {
        aid: (ev.stats.get(aid) or {}, None) for aid in with_variants}
    for aid, (stats, stored) in sorted(still.items()):
        if stats and variant_sums(stats):
            bad.append(f"{aid}: {variant_sums(stats)}")
        if stored is None:
            continue
        sold = variant_sold(stats)
        for vid in sorted(set(sold) | set(stored)):
            if sold.get(vid) != stored.get(vid, 0):
                bad.append(f"{aid}/{vid}: sold {sold.get(vid)} in Redis, "
                           f"{stored.get(vid, 0)} units in its live stored orders")
    for aid, body in sorted(with_variants.items()):
        seen = _orders_seen(ev, aid)
        bare = sorted(oid for oid, (items, _) in seen.items() if not items)
        if bare:
            bad.append(f"{aid}: {len(bare)} orders answered without their items, e.g. {bare[0]}")
        if body.get("payment_window"):
            continue  # expired holds give units back: a variant may be sold again
        created = {str(v["id"]): int(v["total"]) for v in body["variants"]}
        answered = _units_by_variant([items for items, _ in seen.values()])
        bad += [f"{aid}/{vid}: {n} units answered 200, {created.get(vid, 0)} in stock"
                for vid, n in sorted(answered.items()) if n > created.get(vid, 0)]
    checked = ", ".join(["the end", *(label for label, _ in ev.snapshots)])
    shown = []
    for aid, s in sorted(ev.stats.items()):
        if aid in with_variants and isinstance(s.get("variants"), dict):
            shown.append(f"{aid}: " + ", ".join(
                f"{vid} {v.get('sold')}/{v.get('total')}" for vid, v in s["variants"].items()
                if isinstance(v, dict)))
    books = ("; once still: they add up to the activity's counters, and each one's sold == "
             "the units of its live stored orders" if ev.variant_books is not None else
             "; they add up to the activity's counters (the database not read)")
    return Invariant(NAMES[5], not bad, "; ".join(bad[:5]) or
                     f"{sum(len(b['variants']) for b in with_variants.values())} variants of "
                     f"{len(with_variants)} activities, at {checked}{books}; sold/total: "
                     + "; ".join(shown))


def _per_person(ev: Evidence) -> Invariant:
    limited = {aid: int(b.get("per_user_limit", 1)) for aid, b in ev.activities.items()
               if b.get("limit_by") == "person"}
    if not limited:
        return Invariant(NAMES[6], None, "no activity limited by person here")
    person = {r.uid: r.person for r in ev.records if r.person}
    bad, said = [], []
    for aid, limit in sorted(limited.items()):
        accounts: dict[str, set[str]] = {}
        for r in ev.records:
            if r.aid == aid:
                accounts.setdefault(r.person, set()).add(r.uid)
                if r.endpoint == "buy" and r.status == 200 and not r.person:
                    bad.append(f"{aid}: account {r.uid} (no person) answered 200")
        orders: dict[str, dict[str, int]] = {}  # person -> order id -> units (the crowd's)
        for oid, (items, who) in _orders_seen(ev, aid).items():
            units = sum(_units_by_variant([items]).values()) if items else 1
            orders.setdefault(who, {})[oid] = units
        for r in ev.records:  # a 409 already_purchased names the person's order
            if r.aid == aid and r.error == "already_purchased" and r.order_id:
                orders.setdefault(r.person, {}).setdefault(r.order_id, 0)
        for who, got in sorted(orders.items()):
            if len(got) > 1 or sum(got.values()) > limit:
                bad.append(f"{aid}: person {who} ({len(accounts.get(who, ()))} accounts) got "
                           f"{len(got)} orders, {sum(got.values())} units (limit {limit}): "
                           + ", ".join(sorted(got))[:200])
        most = max((sum(got.values()) for got in orders.values()), default=0)
        farms = sum(1 for who, uids in accounts.items() if who and len(uids) > 1)
        refused = sum(1 for r in ev.records if r.aid == aid and r.error == "already_purchased")
        line = (f"{aid}: {len([p for p in accounts if p])} persons ({farms} with several "
                f"accounts), limit {limit}: {len(orders)} bought (crowd: at most {most} units; "
                f"{refused} answers 409 already_purchased)")
        if ev.stored is not None:
            line += "; database: " + _stored_per_person(aid, ev.stored.get(aid, []), limit,
                                                         person, bad)
        said.append(line)
    return Invariant(NAMES[6], not bad, "; ".join(bad[:5]) or "; ".join(said))


def _stored_per_person(aid: str, rows: list[StoredRow], limit: int, person: dict[str, str],
                       bad: list[str]) -> str:
    """The stored orders of a person-limited activity by person (each order's account
    mapped to the person the drill gave it): at most one live order and ``limit`` units
    each; never the raw person id as the buyer. Adds to ``bad``; a summary."""
    live: dict[str, list[StoredRow]] = {}
    keys: dict[str, set[str]] = {}
    for row in rows:
        who = person.get(row.account)
        if who is None:
            bad.append(f"{aid}: stored order {row.order_id} names account {row.account!r}, "
                       "not one of the crowd's")
            continue
        if row.uid == who:
            bad.append(f"{aid}: stored order {row.order_id} keeps the raw person id")
        keys.setdefault(row.uid, set()).add(who)
        if row.status == "confirmed":
            live.setdefault(who, []).append(row)
    for who, held in sorted(live.items()):
        units = sum(r.units for r in held)
        if len(held) > 1 or units > limit:
            bad.append(f"{aid}: person {who} holds {len(held)} stored orders, {units} units "
                       f"(limit {limit}): " + ", ".join(r.order_id for r in held)[:200])
    bad += [f"{aid}: persons {sorted(whos)} stored under one key {key}"
            for key, whos in sorted(keys.items()) if len(whos) > 1]
    most = max((sum(r.units for r in held) for held in live.values()), default=0)
    return f"{len(live)} persons with a live order, at most {most} units"


def failed(invariants: list[Invariant]) -> bool:
    """Whether any invariant that could be checked failed."""
    return any(inv.ok is False for inv in invariants)
