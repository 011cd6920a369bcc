"""The drill's activities and its crowd: who buys what, with which body, as which person.

On a stack of its own, four activities:

- ``a`` plain, sells out near the end (the one paused, and whose Valkey master is killed);
- ``b`` with a payment window and three **variants** of uneven stock (every other winner
  pays; the others' holds expire and give their units back to their own variant, so a
  variant sold out early may come back);
- ``c`` small, sells out at once;
- ``d`` a **drop**: four variants of uneven stock, ``limit_by: person``, two units per
  person; its buyers buy one variant, two units of one, or ``items`` of two, and some of them
  are **farms**: three accounts of one person released together (they race).

Against a deployment (``--target``) one plain rehearsal activity, as before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from seckill.ops.drill.crowd import Buyer

# Each user's activity, by the user's place in a cycle of 20: a and b 35 % each, the drop
# 20 % (four accounts in a row: a farm's three race each other), c 10 %.
CYCLE = "ab" * 7 + "dddd" + "cc"
WINDOW_VARIANTS = (("red", 45), ("green", 35), ("blue", 20))  # (id, % of b's stock)
DROP_VARIANTS = (("s", 1), ("m", 3), ("l", 3), ("xl", 1))  # (id, eighths of d's stock)
DROP_LIMIT = 2  # units per person on the drop
# The drop's accounts by eight: the first three are one person's (a farm), the other five
# one person each; so 3/8 of its accounts belong to farms, 6 persons per 8 accounts.
FARM = 3
PERSON_OF_EIGHT = (0, 0, 0, 1, 2, 3, 4, 5)


def _iso(at: datetime) -> str:
    return at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def drop_person(j: int) -> int:
    """The person (a number) behind the drop's ``j``-th account."""
    return (j // 8) * 6 + PERSON_OF_EIGHT[j % 8]


def _split(units: int, shares: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    """``units`` over the variants by their shares, each at least 1 (named by its id)."""
    whole = sum(share for _, share in shares)
    return [{"id": vid, "name": f"Drill {vid}", "total": max(1, units * share // whole)}
            for vid, share in shares]


def plan_activities(run: str, users: int, duration: float, target: bool) -> list[dict[str, Any]]:
    """The bodies the drill creates its activities with (see the module's doc)."""
    now = datetime.now(UTC)
    window = {"starts_at": _iso(now - timedelta(seconds=5)),
              "ends_at": _iso(now + timedelta(seconds=duration + 900))}
    if target:
        return [{"id": f"drill-{run}", "name": "Sale-day drill (rehearsal)",
                 "total": max(1, users * 9 // 10), "rehearsal": True, **window}]
    count = {letter: sum(1 for n in range(users) if CYCLE[n % len(CYCLE)] == letter)
             for letter in "abcd"}
    people = drop_person(count["d"] - 1) + 1 if count["d"] else 1
    return [
        {"id": f"drill-{run}-a", "name": "Drill: plain", "total": max(1, count["a"] * 9 // 10),
         **window},
        {"id": f"drill-{run}-b", "name": "Drill: payment window, variants",
         "variants": _split(max(3, count["b"]), WINDOW_VARIANTS),
         "payment_window": max(5, int(duration / 4)), **window},
        {"id": f"drill-{run}-c", "name": "Drill: sells out", "total": max(1, count["c"] // 5),
         **window},
        # A unit per person in stock (~1.7 asked by each, but a purchase naming a variant
        # that is gone fails whole and only a farm's next account tries again): s and xl (an
        # eighth each) sell out about half-way, the rest near the end.
        {"id": f"drill-{run}-d", "name": "Drill: drop, one per person",
         "variants": _split(max(4, people), DROP_VARIANTS),
         "per_user_limit": DROP_LIMIT, "limit_by": "person", **window},
    ]


def _terms(body: dict[str, Any], in_query: bool) -> dict[str, Any]:
    """A buyer's terms (:class:`Buyer`'s ``body`` or ``query``): ``body`` as it is, or one
    variant's in the query as the sale page names it (several variants take the body)."""
    if not in_query or "items" in body:
        return {"body": body}
    return {"query": f"?variant={body['variant']}&quantity={body.get('quantity', 1)}"}


def _drop_body(j: int) -> dict[str, Any]:
    """The drop's ``j``-th account buys one unit of a variant, two of one, or one each of two
    (``items``); a farm's three accounts ask for different things."""
    ids = [vid for vid, _ in DROP_VARIANTS]
    first, second = ids[j % len(ids)], ids[(j + 1) % len(ids)]
    if j % 3 == 0:
        return {"variant": first}
    if j % 3 == 1:
        return {"items": [{"variant": first, "quantity": 1},
                          {"variant": second, "quantity": 1}]}
    return {"variant": ids[(j + 2) % len(ids)], "quantity": DROP_LIMIT}


def plan_buyers(run: str, users: int, activities: list[dict[str, Any]]) -> list[Buyer]:
    """Distinct accounts over the activities by :data:`CYCLE` (one activity: all on it)."""
    if len(activities) == 1:
        return [Buyer(f"drill-{run}-u{n}", str(activities[0]["id"]), False)
                for n in range(users)]
    aid = {letter: str(body["id"]) for letter, body in zip("abcd", activities, strict=True)}
    seen = dict.fromkeys("abcd", 0)
    buyers = []
    for n in range(users):
        letter = CYCLE[n % len(CYCLE)]
        k = seen[letter]
        seen[letter] += 1
        uid = f"drill-{run}-u{n}"
        if letter == "b":
            vid = WINDOW_VARIANTS[k % len(WINDOW_VARIANTS)][0]
            # Half name the variant in the body, half in the query as the sale page does.
            buyers.append(Buyer(uid, aid["b"], k % 2 == 0,
                                **_terms({"variant": vid}, in_query=k % 4 >= 2)))
        elif letter == "d":
            buyers.append(Buyer(uid, aid["d"], False, person=f"drill-{run}-p{drop_person(k)}",
                                **_terms(_drop_body(k), in_query=True)))
        else:
            buyers.append(Buyer(uid, aid[letter], False))
    return buyers
