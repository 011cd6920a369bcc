"""Each process's copies of the activities: what lets the edge answer without Redis."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from seckill.domain import errors
from seckill.domain.activities import Activity, is_activity_id, with_remaining
from seckill.domain.variants import Items
from seckill.store.plumbing.connection import background_client, close_client
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.meta import activity_from_meta

log = logging.getLogger(__name__)


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
    process already has a copy of**: only an id with no copy is loaded by a request. An old
    copy is harmless: the purchase script re-checks the window, the stock and the buyer on
    Redis's own data. How copies are loaded, refreshed and dropped: docs/internals.md.
    """

    def __init__(
        self, store: ActivityStore, interval: float, restore: Callable[[str], bool] | None = None
    ) -> None:
        self.store = store
        self.interval = interval
        # Called when Redis has no meta for an id: rebuilds it from the database if the
        # database knows it (see seckill.store.sale.activity.recovery); returns whether it exists.
        self.restore = restore
        self._copies: dict[str, _Copy] = {}
        self._first_loads: dict[str, _FirstLoad] = {}
        self._lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._closed = threading.Event()
        self._background = background_client(store.client, "activities")
        # Called once a copy is first made: so that what the operator changes (a creation for
        # an unknown id, a pause, an end) is heard at once (the sold-out listener, whose
        # messages forget copies) rather than waited for a refresh round.
        self.on_first_load: Callable[[], None] | None = None

    def get(self, aid: str) -> Activity | None:
        """The copy of the activity (None: unknown id); an id with no copy is loaded now."""
        copy = self._copies.get(aid)
        if copy is None:
            return self._first_sight(aid)
        copy.read = True
        if self._refresher is None:
            self._start_refresher()
        return copy.activity

    def has_copy(self, aid: str) -> bool:
        """Whether this process holds a copy of a known activity ``aid`` (never loads one)."""
        copy = self._copies.get(aid)
        return copy is not None and copy.activity is not None

    def require(self, aid: str) -> Activity:
        """The copy of the activity; UnknownActivity if the id is malformed or unknown."""
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
            copy.activity = with_remaining(copy.activity, remaining)

    def note_sold(self, aid: str, quantity: int) -> None:
        """Count a sale of ``quantity`` units off the copy (a sharded activity, whose script
        tells only one part's stock); the next refresh reads the whole again."""
        copy = self._copies.get(aid)
        if copy is not None and copy.activity is not None and copy.activity.remaining:
            left = max(0, copy.activity.remaining - quantity)
            copy.activity = with_remaining(copy.activity, left)

    def note_variants(self, aid: str, sold: Items = (), left: tuple[str, int] | None = None
                      ) -> None:
        """Fold a purchase of variants into the copy: ``sold`` units counted off their
        variants, or ``left``, (variant, units) the script said remain; the next refresh reads
        them all again."""
        copy = self._copies.get(aid)
        if copy is None or copy.activity is None or not copy.activity.variants:
            return
        taken = dict(sold)
        variants = tuple(
            dataclasses.replace(v, remaining=max(0, v.remaining - taken.get(v.id, 0)))
            if left is None or v.id != left[0] else dataclasses.replace(v, remaining=left[1])
            for v in copy.activity.variants)
        copy.activity = dataclasses.replace(copy.activity, variants=variants)

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
        """Stop the refresher and close its connections."""
        self._closed.set()
        refresher = self._refresher
        if refresher is not None:
            refresher.join(timeout=3)
        close_client(self._background)

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
        if self.on_first_load is not None:
            self.on_first_load()
        return activity

    def _load(self, aid: str) -> Activity | None:
        activity = self.store.load(aid)
        if activity is None and self.restore is not None and self.restore(aid):
            activity = self.store.load(aid)
        elif activity is not None and activity.unflagged and self.restore is not None:
            # Stored before the unlimited flag: the restorer asks the database which it is
            # (seckill.store.sale.activity.recovery.Restorer.migrate), once, on this process's
            # first copy.
            try:
                self.restore(aid)
                activity = self.store.load(aid)
            except Exception as exc:  # the scripts refuse ("unmigrated") until it is done
                log.warning("activity %s: could not give its meta hash the unlimited flag: "
                            "%s: %s", aid, type(exc).__name__, exc)
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
            loaded: dict[str, Activity | None] = {}
            for (aid, _), fields in zip(batch, replies, strict=True):
                if not fields:
                    continue
                try:
                    loaded[aid] = activity_from_meta(aid, fields)
                except (KeyError, ValueError) as exc:
                    log.warning("activity %s has a malformed meta hash: %s", aid, exc)
                    loaded[aid] = None
            found = [a for a in loaded.values() if a is not None]
            summed = {a.id: w for a, w in
                      zip(found, self.store.whole(found, self._background), strict=True)}
            with self._lock:
                for aid, copy in batch:
                    copy.read = False
                    if self._copies.get(aid) is not copy:
                        continue  # forgotten (and maybe loaded again) meanwhile: not ours
                    activity = summed.get(aid)
                    if activity is None:
                        if copy.activity is not None:
                            # Lost by Redis (all of it, or a part of a sharded activity), or
                            # malformed: the next request loads it, which rebuilds it from the
                            # database. (An unknown id stays unknown.)
                            del self._copies[aid]
                        continue
                    copy.activity = activity
        return len(due)
