"""Activities: what is on sale, when, and how much of it; validated, stored, and cached."""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from seckill import errors, packets
from seckill.store import KeySpace, Scripts, background_client

log = logging.getLogger("seckill.activities")

ACTIVITY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
USER_ID = re.compile(r"[A-Za-z0-9_.@-]{1,64}")

RESERVED_IDS = frozenset({"activities", "url", "time"})
MAX_TOTAL = 1_000_000_000
MAX_PER_USER = 10_000
MAX_NAME = 200
UNLIMITED = -1

STOCK = "stock"
PACKETS = "packets"
KINDS = (STOCK, PACKETS)

_COMMON_FIELDS = {"id", "name", "starts_at", "ends_at", "kind"}
_CREATE_FIELDS = {
    STOCK: _COMMON_FIELDS | {"total", "per_user_limit"},
    PACKETS: _COMMON_FIELDS | {"amount", "count"},
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def iso_from_ms(ms: int) -> str:
    stamp = _EPOCH + timedelta(milliseconds=ms)  # exact: no float seconds
    text = stamp.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def ms_from_iso(value: Any, field: str) -> int:
    if not isinstance(value, str) or len(value) > 64:
        raise errors.BadRequest(f"{field} must be an ISO 8601 time with an offset", field=field)
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise errors.BadRequest(
            f"{field} is not an ISO 8601 time: {value!r}", field=field
        ) from None
    if stamp.tzinfo is None:
        raise errors.BadRequest(
            f"{field} needs an offset (e.g. 2026-11-21T12:00:00Z)", field=field
        )
    ms = (stamp - _EPOCH) // _ONE_MS  # exact; float seconds would lose a millisecond
    if not 0 <= ms <= _LAST_MS:
        # An offset can push 9999-12-31 past year 9999 (or 0001-01-01 before year 1): such a
        # time could not be written back as ISO 8601 in the activity's body.
        raise errors.BadRequest(f"{field} must be between 1970 and 9999 (UTC)", field=field)
    return ms


def is_activity_id(value: object) -> bool:
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

    def state(self, at_ms: int) -> str:
        if at_ms >= self.ends_ms:
            return "ended"
        if at_ms < self.starts_ms:
            return "upcoming"
        if self.remaining == 0:
            return "sold_out"
        return "open"

    def public(self, at_ms: int) -> dict[str, Any]:
        body = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "starts_at": iso_from_ms(self.starts_ms),
            "ends_at": iso_from_ms(self.ends_ms),
            "total": self.total,
            "remaining": self.remaining,
            "per_user_limit": self.per_user_limit,
            "state": self.state(at_ms),
        }
        if self.kind == PACKETS:
            body["amount"] = self.amount
            body["count"] = self.total
        return body

    def redis_fields(self, created_ms: int) -> list[str | int]:
        total = UNLIMITED if self.total is None else self.total
        remaining = UNLIMITED if self.remaining is None else self.remaining
        fields: list[str | int] = [
            "name", self.name, "kind", self.kind,
            "starts_ms", self.starts_ms, "ends_ms", self.ends_ms,
            "total", total, "remaining", remaining,
            "per_user_limit", self.per_user_limit, "sold", 0, "seq", 0, "created_ms", created_ms,
        ]
        if self.kind == PACKETS:
            assert self.amount is not None
            fields += ["amount", self.amount, "amount_given", 0]
        return fields

    @classmethod
    def from_redis(cls, aid: str, fields: dict[str, str]) -> Activity:
        total = int(fields["total"])
        remaining = int(fields["remaining"])
        return cls(
            id=aid,
            name=fields.get("name", aid),
            starts_ms=int(fields["starts_ms"]),
            ends_ms=int(fields["ends_ms"]),
            total=None if total == UNLIMITED else total,
            remaining=None if remaining == UNLIMITED else remaining,
            per_user_limit=int(fields.get("per_user_limit", 1)),
            kind=fields.get("kind", STOCK),
            amount=int(fields["amount"]) if "amount" in fields else None,
        )


def parse_new_activity(body: Any, at_ms: int | None = None, seed: int | None = None) -> Activity:
    """Validate an operator's ``POST /admin/activities`` body; raise BadRequest on anything off.

    A packets activity gets a fresh secret seed for its split (``seed`` is for tests)."""
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object")
    kind = body.get("kind", STOCK)
    if kind not in KINDS:
        raise errors.BadRequest(f"kind must be 'stock' or 'packets' (got {str(kind)[:40]!r})",
                                field="kind")
    _refuse_other_kinds_fields(body, kind)
    unknown = sorted(set(body) - _CREATE_FIELDS[kind])
    if unknown:
        raise errors.BadRequest(f"unknown fields: {', '.join(unknown)}", fields=unknown)
    aid = body.get("id")
    if not is_activity_id(aid):
        raise errors.BadRequest("id must match [A-Za-z0-9_-]{1,64}", field="id")
    assert isinstance(aid, str)
    if aid in RESERVED_IDS:
        # /seckill/activities/<aid> and /seckill/<aid>/order would shadow each other.
        raise errors.BadRequest(f"id {aid!r} is reserved", field="id")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise errors.BadRequest(f"name must be a non-empty string of at most {MAX_NAME} characters",
                                field="name")
    amount: int | None = None
    if kind == PACKETS:
        amount = _int_field(body, "amount", None, 1, packets.MAX_AMOUNT)
        total = _int_field(body, "count", None, 1, packets.MAX_PACKETS)
        assert amount is not None and total is not None
        if amount < total:
            raise errors.BadRequest(
                f"amount ({amount} cents) must be at least count ({total}): every packet holds "
                "at least 1 cent", field="amount")
        per_user = 1
        seed = packets.new_seed() if seed is None else seed
    else:
        if "total" not in body:
            raise errors.BadRequest("total is required (an integer >= 0, or null for unlimited)",
                                    field="total")
        total = _int_field(body, "total", None, 0, MAX_TOTAL, nullable=True)
        per_user_limit = _int_field(body, "per_user_limit", 1, 1, MAX_PER_USER)
        assert per_user_limit is not None
        per_user, seed = per_user_limit, None
    starts_ms = ms_from_iso(body.get("starts_at"), "starts_at")
    ends_ms = ms_from_iso(body.get("ends_at"), "ends_at")
    if ends_ms <= starts_ms:
        raise errors.BadRequest("ends_at must be after starts_at", field="ends_at")
    if ends_ms <= (now_ms() if at_ms is None else at_ms):
        raise errors.BadRequest("ends_at is in the past", field="ends_at")
    return Activity(
        id=aid, name=name, starts_ms=starts_ms, ends_ms=ends_ms,
        total=total, remaining=total, per_user_limit=per_user, kind=kind,
        amount=amount, seed=seed,
    )


def _refuse_other_kinds_fields(body: dict[str, Any], kind: str) -> None:
    """Say which kind a misplaced field belongs to, rather than just "unknown field"."""
    if kind == PACKETS:
        for field in ("total", "per_user_limit"):
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


class ActivityStore:
    """Activities as Redis holds them (the meta hash is the stock's home too)."""

    def __init__(self, client: redis.Redis, keys: KeySpace, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    def create(self, activity: Activity, progress: packets.Progress | None = None) -> bool:
        """Warm a new activity into Redis; False if Redis already holds one with this id.

        Packets are split and pushed first (``progress(done, total)`` follows the push), the
        meta hash last: until it exists nobody can grab from a half-filled list."""
        if activity.kind != PACKETS:
            return bool(
                self.scripts.create_activity(
                    keys=[self.keys.meta(activity.id)], args=activity.redis_fields(now_ms())
                )
            )
        assert activity.amount is not None and activity.total is not None
        assert activity.seed is not None
        split = packets.split(activity.amount, activity.total, activity.seed)
        return self.publish_packets(activity, split, activity.redis_fields(now_ms()), progress)

    def publish_packets(
        self, activity: Activity, unclaimed: list[int], fields: list[str | int],
        progress: packets.Progress | None = None,
    ) -> bool:
        """Push ``unclaimed`` to a staging list, then rename it into place and write the meta
        hash in one script (``lua/create_activity.lua``). False if the meta already exists."""
        # A push cut short leaves the staging list to expire (STAGING_TTL_MS), never in use.
        staging = self.keys.packets_staging(activity.id, secrets.token_hex(8))
        packets.push(self.client, staging, unclaimed, progress)
        created = int(self.scripts.create_activity(
            keys=[self.keys.meta(activity.id), staging, self.keys.packets(activity.id)],
            args=fields,
        ))
        if created < 0:
            raise errors.SeckillError(
                "the packets list was incomplete when it was to be published (a push cut short "
                "or expired); nothing was created", activity=activity.id)
        return created == 1

    def exists(self, aid: str) -> bool:
        return bool(self.client.exists(self.keys.meta(aid)))

    def load(self, aid: str) -> Activity | None:
        fields = self.client.hgetall(self.keys.meta(aid))
        if not fields:
            return None
        return Activity.from_redis(aid, fields)  # type: ignore[arg-type]


_MAX_COPIES = 10_000  # unknown ids are copied too: a flood of random ids must not grow this
_REFRESH_BATCH = 500  # copies reloaded per round trip
_IDLE_ROUNDS = 60  # rounds with no copy read before the refresher stops (a read restarts it)
_FIRST_LOAD_WAIT = 10.0  # seconds a request waits for another's load of the same new id


class _Copy:
    """One activity as this process last loaded it (None: Redis did not know the id), and
    whether a request read it since the refresher's last round."""

    __slots__ = ("activity", "read")

    def __init__(self, activity: Activity | None) -> None:
        self.activity = activity
        self.read = False


class _FirstLoad:
    """A request's load of an id this process has no copy of; the next ones wait for it."""

    __slots__ = ("activity", "done", "loaded")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.activity: Activity | None = None
        self.loaded = False


class ActivityCache:
    """In-process copies of activity metadata, refreshed in the background.

    They let the edge answer unknown-activity, before-start, after-end and sold-out requests
    with no Redis round trip, and **no request ever waits on Redis for an activity this
    process already has a copy of**:

    * a request is answered from the copy this process has, however old;
    * only an id this process has no copy of (first sight, or after :meth:`forget`) is loaded
      by a request: one HGETALL, plus the rebuild from the database when Redis has lost the
      activity (``restore``, see seckill.recovery). Requests for the same id meanwhile wait for
      that one load instead of repeating it. Unknown ids get a copy too (None), at most
      10,000 copies in all (the unknown ones go first);
    * a background thread reloads, every ``interval`` seconds (``SECKILL_META_TTL``), the
      copies that requests read since its previous round, pipelined (a round trip per 500),
      on connections of its own (``seckill-background-activities``). It starts with the first
      read of a copy, stops after 60 rounds with none read (the next read starts it again),
      and on :meth:`close`. A copy whose activity Redis no longer holds is dropped, so that
      the next request rebuilds it;
    * :meth:`forget` drops copies at once, and the next request loads fresh data: this
      process's operator changes call it, and so does the sold-out board whenever units come
      back or its listener reconnects (so returned units are offered again at once, not a
      round later). :meth:`note_remaining` folds in what the purchase script just said.

    An old copy is harmless: the purchase script re-checks the window, the stock and the
    buyer on Redis's own data and clock, so a stale copy can refuse early or let a request
    through to the script, never sell what should not be sold. An activity's window does not
    change once created, and its stock reaches this process through its own purchases, the
    sold-out board and the refresher: a copy in use is at most about two rounds old while
    Redis answers, and a copy that nobody read for a while is refreshed the round after it is
    read again.
    """

    def __init__(
        self, store: ActivityStore, interval: float, restore: Callable[[str], bool] | None = None
    ) -> None:
        self.store = store
        self.interval = interval
        # Called when Redis has no meta for an id: rebuilds it from the database if the
        # database knows it (see seckill.recovery); returns whether it exists.
        self.restore = restore
        self._copies: dict[str, _Copy] = {}
        self._first_loads: dict[str, _FirstLoad] = {}
        self._lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._closed = threading.Event()
        self._background = background_client(store.client, "activities")

    def get(self, aid: str) -> Activity | None:
        copy = self._copies.get(aid)
        if copy is None:
            return self._first_sight(aid)
        copy.read = True
        if self._refresher is None:
            self._start_refresher()
        return copy.activity

    def require(self, aid: str) -> Activity:
        if not is_activity_id(aid):
            raise errors.UnknownActivity(activity=aid[:80])
        activity = self.get(aid)
        if activity is None:
            raise errors.UnknownActivity(activity=aid)
        return activity

    def note_remaining(self, aid: str, remaining: int | None) -> None:
        """Fold what the purchase script just said into the copy (no extra round trip), so
        that the sold-out state shows in this process the moment the script sees it."""
        copy = self._copies.get(aid)
        if copy is not None and copy.activity is not None and copy.activity.remaining != remaining:
            copy.activity = dataclasses.replace(copy.activity, remaining=remaining)

    def forget(self, aid: str | None = None) -> None:
        """Drop the copy of ``aid`` (of every activity: None); the next request loads it."""
        with self._lock:
            if aid is None:
                self._copies.clear()
                self._first_loads.clear()
            else:
                self._copies.pop(aid, None)
                self._first_loads.pop(aid, None)  # a load begun before the change: not kept

    def close(self) -> None:
        self._closed.set()
        refresher = self._refresher
        if refresher is not None:
            refresher.join(timeout=3)
        self._background.connection_pool.disconnect()

    # -- first sight ---------------------------------------------------------------------

    def _first_sight(self, aid: str) -> Activity | None:
        with self._lock:
            copy = self._copies.get(aid)
            if copy is not None:
                return copy.activity
            load = self._first_loads.get(aid)
            mine = load is None
            if load is None:
                load = self._first_loads[aid] = _FirstLoad()
        if not mine:
            # A crowd arriving for a new (or just forgotten) activity: one HGETALL, not one each.
            if load.done.wait(_FIRST_LOAD_WAIT) and load.loaded:
                return load.activity
            return self._load(aid)  # that load failed (its request got the error): try again
        try:
            activity = self._load(aid)
        except BaseException:
            with self._lock:
                if self._first_loads.get(aid) is load:
                    del self._first_loads[aid]
            load.done.set()
            raise
        load.activity, load.loaded = activity, True
        with self._lock:
            if self._first_loads.get(aid) is load:  # else forgotten meanwhile: not kept
                del self._first_loads[aid]
                self._make_room()
                self._copies[aid] = _Copy(activity)
        load.done.set()
        return activity

    def _load(self, aid: str) -> Activity | None:
        activity = self.store.load(aid)
        if activity is None and self.restore is not None and self.restore(aid):
            activity = self.store.load(aid)
        return activity

    def _make_room(self) -> None:
        """Under the lock: keep at most ``_MAX_COPIES``, dropping unknown ids first."""
        if len(self._copies) < _MAX_COPIES:
            return
        for aid in [aid for aid, copy in self._copies.items() if copy.activity is None]:
            del self._copies[aid]
        if len(self._copies) >= _MAX_COPIES:
            self._copies.clear()

    # -- the refresher -------------------------------------------------------------------

    def _start_refresher(self) -> None:
        with self._lock:
            if self._refresher is not None or self._closed.is_set():
                return
            refresher = self._refresher = threading.Thread(
                target=self._refresh_loop, name="seckill-activity-refresher", daemon=True
            )
        refresher.start()

    def _refresh_loop(self) -> None:
        idle, failing = 0, False
        try:
            while idle < _IDLE_ROUNDS and not self._closed.wait(self.interval):
                try:
                    idle = 0 if self.refresh() else idle + 1
                    failing = False
                except Exception as exc:  # Redis unreachable: keep the copies, try next round
                    log.log(logging.DEBUG if failing else logging.WARNING,
                            "could not refresh the activity copies: %s: %s",
                            type(exc).__name__, exc)
                    failing = True
        finally:
            with self._lock:
                self._refresher = None  # only this thread clears it: the next read restarts one

    def refresh(self) -> int:
        """One round of the refresher: reload the copies read since the last round; returns
        how many."""
        with self._lock:
            due = [(aid, copy) for aid, copy in self._copies.items() if copy.read]
        for start in range(0, len(due), _REFRESH_BATCH):
            batch = due[start : start + _REFRESH_BATCH]
            pipe = self._background.pipeline(transaction=False)
            for aid, _ in batch:
                pipe.hgetall(self.store.keys.meta(aid))
            replies = pipe.execute()
            with self._lock:
                for (aid, copy), fields in zip(batch, replies, strict=True):
                    copy.read = False
                    if self._copies.get(aid) is not copy:
                        continue  # forgotten (and maybe loaded again) meanwhile: not ours
                    if not fields:
                        if copy.activity is not None:
                            # Lost by Redis: the next request loads it, which rebuilds it
                            # from the database. (An unknown id stays unknown.)
                            del self._copies[aid]
                        continue
                    try:
                        copy.activity = Activity.from_redis(aid, fields)
                    except (KeyError, ValueError) as exc:
                        log.warning("activity %s has a malformed meta hash: %s", aid, exc)
                        del self._copies[aid]
        return len(due)
