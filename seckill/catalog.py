"""Creating activities: the database first (the source of truth), then the stock into Redis."""

from __future__ import annotations

import redis

from seckill import errors
from seckill.activities import Activity, ActivityStore
from seckill.orders import OrderBook


def create_activity(book: OrderBook, store: ActivityStore, activity: Activity) -> None:
    book.save_activity(activity)  # 409 activity_exists if the database has it
    try:
        warmed = store.create(activity)
    except redis.RedisError as exc:
        # Stored but not warmed: the first request for it rebuilds it from the database.
        raise errors.Unavailable(
            "the activity is stored, but its stock could not be put into Redis yet; it will "
            "be on first use", activity=activity.id,
        ) from exc
    if not warmed:
        # Redis holds state for this id that the database does not know (a database reset
        # under a live Redis): keep Redis's, refuse the new one.
        book.delete_activity(activity.id)
        raise errors.ActivityExists(activity=activity.id)
