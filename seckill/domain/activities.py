"""Activities: what is on sale, when, and how much of it; validated and stored (each
process's copies of them: ``seckill.store.sale.activity.cache``)."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Iterable
from typing import Any

from seckill.domain import admission as admissions
from seckill.domain import bodies, errors, packets, people, product
from seckill.domain import variants as variant_rules
from seckill.domain.clock import iso_from_ms, ms_from_iso, now_ms
from seckill.domain.product import Product
from seckill.domain.variants import Variant

ACTIVITY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
USER_ID = re.compile(r"[A-Za-z0-9_.@-]{1,64}")

RESERVED_IDS = frozenset({"activities", "url", "time"})
MAX_TOTAL = 1_000_000_000
MAX_PER_USER = 10_000
MAX_NAME = 200
MAX_SHARDS = 64
MAX_PAYMENT_WINDOW = 86_400  # seconds: a day
UNLIMITED = -1  # what an unlimited activity's total and remaining hold (its flag says so)

# The states an operator filters by (Activity.console_state): the activity's, and paused.
CONSOLE_STATES = ("upcoming", "open", "sold_out", "ended", "paused")

STOCK = "stock"
PACKETS = "packets"
KINDS = (STOCK, PACKETS)

_COMMON_FIELDS = {"id", "name", "starts_at", "ends_at", "kind", "payment_window", "admission",
                  "queue_opens_at", "challenge", "rehearsal"} | product.FIELDS
_CREATE_FIELDS = {
    STOCK: _COMMON_FIELDS | {"total", "per_user_limit", "shards", "variants", "limit_by"},
    PACKETS: _COMMON_FIELDS | {"amount", "count"},
}


def is_activity_id(value: object) -> bool:
    """Whether ``value`` is a well-formed activity id (``[A-Za-z0-9_-]{1,64}``)."""
    return isinstance(value, str) and ACTIVITY_ID.fullmatch(value) is not None


def _int_field(body: dict[str, Any], field: str, default: int | None, minimum: int, maximum: int,
               nullable: bool = False) -> int | None:
    if field not in body:
        if default is None and not nullable:
            raise errors.BadRequest(f"{field} is required", field=field)
        return default
    value = body[field]
    if value is None and nullable:
        return None
    # bool is an int in Python; true/false is never a count.
    if not isinstance(value, int) or isinstance(value, bool):
        raise errors.BadRequest(f"{field} must be an integer", field=field)
    if not minimum <= value <= maximum:
        raise errors.BadRequest(f"{field} must be between {minimum} and {maximum}", field=field)
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class Activity:
    """An activity: what is on sale (units, or red-envelope packets), when, and how much."""

    id: str
    name: str
    starts_ms: int
    ends_ms: int
    total: int | None  # None: unlimited
    remaining: int | None
    per_user_limit: int = 1
    kind: str = STOCK
    # packets: the amount split (cents; ``total`` is then the number of packets) and the
    # split's seed (secret: it tells every packet's amount; never in a response or a log).
    amount: int | None = None
    seed: int | None = dataclasses.field(default=None, repr=False)
    # stock: the number of parts the stock is split into, each in its own hash slot
    # (seckill/store/plumbing/parts.py); the activity's numbers are always the whole's.
    shards: int = 1
    # Seconds a buyer has to pay after a purchase (0: a purchase is final). An order unpaid
    # at its pay_by expires and its units go back on sale (seckill/store/sale/orders/payments.py).
    payment_window: int = 0
    # Who may buy, in which order (seckill/domain/admission.py): first_come, queue or draw;
    # when the queue opens; whether joining needs a solved proof-of-work challenge; and the
    # order's seed (secret until the sale starts: only its commitment is shown before).
    admission: str = admissions.FIRST_COME
    queue_opens_ms: int | None = None
    challenge: bool = False
    draw_seed: str | None = dataclasses.field(default=None, repr=False)
    admission_factor: float = 1.0  # admitted at once <= units left x this (the operator's)
    # The operator's pause: no URL is issued and nothing is sold until resumed (the purchase
    # script refuses too). What the sale page shows of the product. Units sold so far (None
    # when not read: a copy from the database).
    paused: bool = False
    product: Product = dataclasses.field(default_factory=Product)
    sold: int | None = None
    # Read from a meta hash written before its ``unlimited`` flag (``remaining -1`` meant
    # unlimited then): the copy shows its raw counters until the database has been asked
    # (seckill.store.sale.activity.recovery.Restorer.migrate).
    unflagged: bool = False
    # A rehearsal (``seckill drill --target``): sells like any other, but is left out of the
    # metrics, the console's totals and anything sent to the shop.
    rehearsal: bool = False
    # Stock in variants (seckill/domain/variants.py): total, remaining and sold are then
    # the sums of theirs; () for one item.
    variants: tuple[Variant, ...] = ()
    # Whom the one-purchase rule and per_user_limit count (seckill/domain/people.py): "user"
    # (accounts) or "person" (the verified person behind them); a person-limited activity's
    # secret salt keys its people (never in a response or a log).
    limit_by: str = people.BY_USER
    person_salt: str | None = dataclasses.field(default=None, repr=False)

    @property
    def queued(self) -> bool:
        """Whether purchase URLs are handed out by a queue (``queue`` or ``draw``)."""
        return self.admission != admissions.FIRST_COME

    @property
    def sharded(self) -> bool:
        """Whether the stock is split into parts (``shards`` > 1), each in its own slot."""
        return self.shards > 1

    def state(self, at_ms: int) -> str:
        """The state at ``at_ms``: ``upcoming``, ``open``, ``sold_out`` or ``ended``."""
        if at_ms >= self.ends_ms:
            return "ended"
        if at_ms < self.starts_ms:
            return "upcoming"
        if self.remaining == 0:
            return "sold_out"
        return "open"

    def console_state(self, at_ms: int) -> str:
        """The state an operator filters by: ``paused`` while paused and not ended, else
        :meth:`state`."""
        state = self.state(at_ms)
        return "paused" if self.paused and state != "ended" else state

    def listed(self, at_ms: int) -> dict[str, Any]:
        """The activity as the operator's list shows it: its view and the units sold."""
        return {**self.public(at_ms), "sold": self.sold or 0}

    def public(self, at_ms: int) -> dict[str, Any]:
        """The activity's public JSON body at ``at_ms`` (never the packets' seed)."""
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "starts_at": iso_from_ms(self.starts_ms),
            "ends_at": iso_from_ms(self.ends_ms),
            "total": self.total,
            # Never below 0 (the contract's range): a counter read negative is an inconsistent
            # activity, which refuses purchases; it is never shown as "unlimited" either.
            "remaining": None if self.remaining is None else max(self.remaining, 0),
            "per_user_limit": self.per_user_limit,
            "state": self.state(at_ms),
            "paused": self.paused,
            **self.product.body(),
        }
        if self.rehearsal:
            body["rehearsal"] = True
        if self.limit_by != people.BY_USER:
            body["limit_by"] = self.limit_by
        if self.variants:
            body["variants"] = [v.public(body["state"]) for v in self.variants]
        if self.kind == PACKETS:
            body["amount"] = self.amount
            body["count"] = self.total
        if self.sharded:
            body["shards"] = self.shards
        if self.payment_window:
            body["payment_window"] = self.payment_window
        if self.queued:
            body.update(admission=self.admission, challenge=self.challenge,
                        queue_opens_at=iso_from_ms(self.queue_opens_ms or 0),
                        admission_factor=self.admission_factor)
            if self.admission == admissions.DRAW and self.draw_seed:
                body["draw_commitment"] = admissions.commitment(self.draw_seed)
                if at_ms >= self.starts_ms:
                    body["draw_seed"] = self.draw_seed
        return body


# The fields in order, read in one C call (operator.attrgetter): see with_remaining.
_FIELDS = tuple(field.name for field in dataclasses.fields(Activity))
_VALUES = operator.attrgetter(*_FIELDS)
_REMAINING = _FIELDS.index("remaining")


def with_remaining(activity: Activity, remaining: int | None) -> Activity:
    """``dataclasses.replace(activity, remaining=remaining)``, the same object, at a fraction
    of the cost: each process's copy of an activity takes the script's ``remaining`` after
    every purchase (``seckill.store.sale.activity.cache``), and replace checks each field again
    (bench/results/domain-fast-paths.md)."""
    values = list(_VALUES(activity))
    values[_REMAINING] = remaining
    return Activity(*values)


def checked_name(name: Any) -> str:
    """An activity's name if it is one (1..200 characters, not only whitespace)."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise errors.BadRequest(f"name must be a non-empty string of at most {MAX_NAME} characters",
                                field="name")
    return name


EDITABLE = frozenset({"name"}) | product.FIELDS


def parse_edit(body: Any) -> dict[str, str | int | None]:
    """An operator's edit of a live activity (``PATCH``): the meta fields (and database
    columns) to set, None for one to remove. Only what no sale decision reads may change."""
    if not isinstance(body, dict) or not body:
        raise errors.BadRequest("the body must be a JSON object with some of: "
                                + ", ".join(sorted(EDITABLE)))
    unknown = sorted(set(body) - EDITABLE)
    if unknown:
        raise errors.BadRequest(f"only {', '.join(sorted(EDITABLE))} can change on a live "
                                f"activity (not: {', '.join(unknown)})", fields=unknown)
    changes: dict[str, str | int | None] = {}
    if "name" in body:
        changes["name"] = checked_name(body["name"])
    parsed = product.parse(body)
    for field, value in dataclasses.asdict(parsed).items():
        if ("price" if field.startswith("price_") else field) in body:
            changes[field] = value  # None (the body's null): the field is removed
    return changes


def parse_new_activity(body: Any, at_ms: int | None = None, seed: int | None = None) -> Activity:
    """Validate an operator's ``POST /admin/activities`` body; raise BadRequest on anything off.

    A packets activity gets a fresh secret seed for its split (``seed`` is for tests)."""
    body = bodies.json_object(body)
    kind = body.get("kind", STOCK)
    if kind not in KINDS:
        raise errors.BadRequest(f"kind must be 'stock' or 'packets' (got {str(kind)[:40]!r})",
                                field="kind")
    _refuse_other_kinds_fields(body, kind)
    bodies.known_fields(body, _CREATE_FIELDS[kind])
    aid = body.get("id")
    if not is_activity_id(aid):
        raise errors.BadRequest("id must match [A-Za-z0-9_-]{1,64}", field="id")
    assert isinstance(aid, str)
    if aid in RESERVED_IDS:
        # /seckill/activities/<aid> and /seckill/<aid>/order would shadow each other.
        raise errors.BadRequest(f"id {aid!r} is reserved", field="id")
    name = checked_name(body.get("name"))
    amount: int | None = None
    stock: tuple[Variant, ...] = ()
    if kind == PACKETS:
        amount = _int_field(body, "amount", None, 1, packets.MAX_AMOUNT)
        total = _int_field(body, "count", None, 1, packets.MAX_PACKETS)
        assert amount is not None and total is not None
        if amount < total:
            raise errors.BadRequest(
                f"amount ({amount} cents) must be at least count ({total}): every packet holds "
                "at least 1 cent", field="amount")
        per_user, shards = 1, 1
        seed = packets.new_seed() if seed is None else seed
    else:
        if "variants" in body:
            if "total" in body:
                raise errors.BadRequest("give total or variants, not both: an activity with "
                                        "variants totals its variants' units", field="total")
            stock = variant_rules.parse_variants(body["variants"])
            total = sum(v.total for v in stock)
        elif "total" not in body:
            raise errors.BadRequest("total is required (an integer >= 0, or null for unlimited)",
                                    field="total")
        else:
            total = _int_field(body, "total", None, 0, MAX_TOTAL, nullable=True)
        per_user_limit = _int_field(body, "per_user_limit", 1, 1, MAX_PER_USER)
        assert per_user_limit is not None
        per_user, seed = per_user_limit, None
        parts = _int_field(body, "shards", 1, 1, MAX_SHARDS)
        assert parts is not None
        shards = parts
        if stock and shards > 1:
            raise errors.BadRequest("variants need an unsharded activity (shards 1): a "
                                    "sharded activity cannot have variants", field="shards")
    window = _int_field(body, "payment_window", 0, 0, MAX_PAYMENT_WINDOW)
    assert window is not None
    starts_ms = ms_from_iso(body.get("starts_at"), "starts_at")
    ends_ms = ms_from_iso(body.get("ends_at"), "ends_at")
    if ends_ms <= starts_ms:
        raise errors.BadRequest("ends_at must be after starts_at", field="ends_at")
    if ends_ms <= (now_ms() if at_ms is None else at_ms):
        raise errors.BadRequest("ends_at is in the past", field="ends_at")
    admission, opens_ms, challenge = admissions.parse_admission(body, starts_ms, ms_from_iso)
    limit_by = people.parse_limit_by(body)
    rehearsal = body.get("rehearsal", False)
    if not isinstance(rehearsal, bool):
        raise errors.BadRequest("rehearsal must be true or false", field="rehearsal")
    if admission != admissions.FIRST_COME and shards > 1:
        # The queue bounds admissions by the units left, read in one slot: a sharded
        # activity's units are in many.
        raise errors.BadRequest("a queue or a draw needs an unsharded activity (shards 1)",
                                field="admission")
    return Activity(
        id=aid, name=name, starts_ms=starts_ms, ends_ms=ends_ms,
        total=total, remaining=total, per_user_limit=per_user, kind=kind,
        amount=amount, seed=seed, shards=shards, payment_window=window,
        admission=admission, queue_opens_ms=opens_ms, challenge=challenge,
        draw_seed=None if admission == admissions.FIRST_COME else admissions.new_seed(),
        product=product.parse(body), rehearsal=rehearsal, variants=stock,
        limit_by=limit_by,
        person_salt=people.new_salt() if limit_by == people.BY_PERSON else None,
    )


def _refuse_other_kinds_fields(body: dict[str, Any], kind: str) -> None:
    """Say which kind a misplaced field belongs to, rather than just "unknown field"."""
    if kind == PACKETS:
        if "limit_by" in body:
            raise errors.BadRequest("limit_by applies to kind 'stock' only: each user grabs "
                                    "one packet", field="limit_by")
        for field in ("total", "per_user_limit", "shards", "variants"):
            if field in body:
                raise errors.BadRequest(
                    f"{field} does not apply to kind 'packets': give amount (cents) and count "
                    "(packets); each user grabs one packet", field=field)
    else:
        for field in ("amount", "count"):
            if field in body:
                raise errors.BadRequest(
                    f"{field} applies to kind 'packets' only (add \"kind\": \"packets\")",
                    field=field)


def units_in_parts(parts: Iterable[tuple[str | None, str | None, str | None, str | None]]
                   ) -> tuple[int, int]:
    """A sharded activity's units (free, in flight), from each part's (remaining, held, lent,
    borrowed): free ones are in some part's stock; in flight, held by a borrowing purchase's
    claim or lent and not yet received. Units in flight come back to some part's stock unless
    their purchase sells them, so no refusal for lack of stock is final while there are any:
    it is sold out only at (0, 0)."""
    free = held = in_transit = 0
    for left, claimed, lent, borrowed in parts:
        free += int(left or 0)
        held += int(claimed or 0)
        in_transit += int(lent or 0) - int(borrowed or 0)
    return free, held + in_transit


def counters_disagree(total: str | None, remaining: str | None, sold: str | None,
                      held: str | None, unlimited: str | None) -> bool:
    """Whether one meta hash's counters disagree (``lua/purchase.lua`` refuses to sell then):
    a counted activity (or part) needs total = remaining + held + sold, none negative (held is
    a sharded part's; 0 elsewhere). Unlimited stock has nothing to agree; a hash from before
    the ``unlimited`` flag that reads -1/-1 is that era's unlimited, awaiting its migration."""
    whole, left, gone, claimed = (int(v or 0) for v in (total, remaining, sold, held))
    if unlimited == "1" or total is None or (unlimited is None and whole == left == UNLIMITED):
        return False
    return min(left, gone, claimed) < 0 or left + claimed + gone != whole
