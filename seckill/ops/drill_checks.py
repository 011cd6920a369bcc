"""The drill's invariants, checked on what it gathered (a pure function: the unit tests feed it
crafted evidence that must fail).

- every activity's counters agree: ``sold + remaining == total`` and ``remaining >= 0``, at the
  end and at each snapshot (before the clean stop, after the start on the same data);
- every purchase answered 200 (and every unknown outcome that went through) is stored;
- no buyer holds two orders of one activity, nor was answered 200 twice there;
- nothing is left pending once the worker has drained (a bounded wait);
- ``seckill reconcile`` finds no difference for any activity.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from seckill.ops.drill_crowd import Record


@dataclasses.dataclass(frozen=True)
class StoredRow:
    """An order as the database (or, against a deployment, the order status) tells it."""

    order_id: str
    aid: str
    uid: str
    status: str


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
            f"that went through (unknown outcomes, repeats), all in {ev.stored_from}"))

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
    return found


def failed(invariants: list[Invariant]) -> bool:
    """Whether any invariant that could be checked failed."""
    return any(inv.ok is False for inv in invariants)
