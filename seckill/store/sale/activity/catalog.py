"""Creating activities: the database first (the source of truth), then the stock into Redis
(for red-envelope packets: the split, pushed in chunks, then the meta hash)."""

from __future__ import annotations

import redis

from seckill.domain import errors
from seckill.domain.activities import Activity
from seckill.domain.packets import Progress
from seckill.sql.book import OrderBook
from seckill.store.sale.activity.activities import ActivityStore


def create_activity(
    book: OrderBook, store: ActivityStore, activity: Activity, progress: Progress | None = None
) -> None:
    """Save a new activity in the database, then put its stock (or packets) into Redis."""
    try:
        held = store.exists(activity.id)
    except redis.RedisError:
        held = False  # said below, once the database has it
    if held:
        # Redis holds state for this id that the database does not know (a database reset
        # under a live Redis): keep Redis's, refuse the new one.
        raise errors.ActivityExists(activity=activity.id)
    book.save_activity(activity)  # 409 activity_exists if the database has it
    try:
        store.create(activity, progress)
    except redis.RedisError as exc:
        # Stored but not warmed: the first request for it rebuilds it from the database.
        raise errors.Unavailable(
            "the activity is stored, but its stock could not be put into Redis yet; it will "
            "be on first use", activity=activity.id,
        ) from exc
    # If Redis had the activity by then, a request for it arrived while the stock (or the
    # packets) was being pushed, and rebuilt it from the row just saved: the same activity,
    # the same split, so there is nothing to undo.
