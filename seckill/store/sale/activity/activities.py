"""Activities as Redis holds them: the meta hash (the stock's home too) and the packets list."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence

from seckill.domain import errors, packets
from seckill.domain.activities import PACKETS, Activity
from seckill.domain.clock import now_ms
from seckill.store.plumbing.connection import Client
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.parts import part_tags, split_units
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.meta import activity_from_meta, meta_fields, part_fields

# What each part of a sharded activity adds to the whole: the activity's total is the sum of
# (total + lent - borrowed) over the parts (units in transit between two parts count), and
# what remains is that total less the units sold. Then what says whether a part's counters
# agree (total = remaining + held + sold: lua/purchase.lua): held, and the unlimited flag.
PART_FIELDS = ("total", "remaining", "sold", "lent", "borrowed", "held", "unlimited")

PUSH_CHUNK = 1000  # packets per RPUSH
PIPELINE_CHUNKS = 10  # RPUSHes per round trip (and per progress report)
STAGING_TTL_MS = 600_000  # a creation that dies half-way leaves nothing behind for long


def push(
    client: Client, key: str, amounts: list[int], progress: packets.Progress | None = None
) -> None:
    """RPUSH the packets onto ``key`` (a staging key: see ``lua/create_activity.lua``), in
    chunks, a few chunks per round trip. The key expires unless it is published."""
    total = len(amounts)
    step = PUSH_CHUNK * PIPELINE_CHUNKS
    if progress is not None:
        progress(0, total)
    for start in range(0, total, step):
        pipe = client.pipeline(transaction=False)
        end = min(start + step, total)
        for chunk in range(start, end, PUSH_CHUNK):
            pipe.rpush(key, *amounts[chunk : min(chunk + PUSH_CHUNK, end)])
        pipe.pexpire(key, STAGING_TTL_MS)
        pipe.execute()
        if progress is not None:
            progress(end, total)


class ActivityStore:
    """Activities as Redis holds them (the meta hash is the stock's home too)."""

    def __init__(self, client: Client, keys: KeySpace, scripts: Scripts) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts

    def create(self, activity: Activity, progress: packets.Progress | None = None) -> bool:
        """Warm a new activity into Redis; False if Redis already holds one with this id.

        Packets are split and pushed first (``progress(done, total)`` follows the push), the
        meta hash last: until it exists nobody can grab from a half-filled list."""
        if activity.kind != PACKETS:
            created = now_ms()
            if activity.sharded:
                # Parts 1..n-1 first, part 0 (the activity's own meta) last: until it exists
                # the activity is unknown, so nobody buys from a half-created set of parts.
                tags = part_tags(activity.id, activity.shards)
                shares = ([None] * activity.shards if activity.total is None
                          else split_units(activity.total, activity.shards))
                for part in range(activity.shards - 1, 0, -1):
                    self.scripts.create_activity(
                        keys=[self.keys.meta(tags[part])],
                        args=part_fields(activity, part, shares[part], created))
                return bool(self.scripts.create_activity(
                    keys=[self.keys.meta(activity.id)],
                    args=part_fields(activity, 0, shares[0], created)))
            return bool(
                self.scripts.create_activity(
                    keys=[self.keys.meta(activity.id)], args=meta_fields(activity, created)
                )
            )
        assert activity.amount is not None and activity.total is not None
        assert activity.seed is not None
        split = packets.split(activity.amount, activity.total, activity.seed)
        return self.publish_packets(activity, split, meta_fields(activity, now_ms()), progress)

    def publish_packets(
        self, activity: Activity, unclaimed: list[int], fields: list[str | int],
        progress: packets.Progress | None = None,
    ) -> bool:
        """Push ``unclaimed`` to a staging list, then rename it into place and write the meta
        hash in one script (``lua/create_activity.lua``). False if the meta already exists."""
        # A push cut short leaves the staging list to expire (STAGING_TTL_MS), never in use.
        staging = self.keys.packets_staging(activity.id, secrets.token_hex(8))
        push(self.client, staging, unclaimed, progress)
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
        """Whether Redis holds the activity (its meta hash)."""
        return bool(self.client.exists(self.keys.meta(aid)))

    def load(self, aid: str) -> Activity | None:
        """The activity from its meta hash (a sharded one's numbers summed over its parts), or
        None if Redis does not hold it, or not all of it."""
        fields = self.client.hgetall(self.keys.meta(aid))
        if not fields:
            return None
        return self.whole([activity_from_meta(aid, fields)])[0]  # type: ignore[arg-type]

    def whole(self, found: Sequence[Activity], client: Client | None = None
              ) -> list[Activity | None]:
        """``found`` (each read from its part 0) with a sharded activity's numbers summed over
        its parts, in one round trip (on ``client``, default the store's); None for one Redis
        holds only some parts of."""
        sharded = [a for a in found if a.sharded]
        if not sharded:
            return list(found)
        pipe = (client or self.client).pipeline(transaction=False)
        for activity in sharded:
            for tag in part_tags(activity.id, activity.shards):
                pipe.hmget(self.keys.meta(tag), PART_FIELDS)
        replies = iter(pipe.execute())
        summed = {a.id: whole(a, [next(replies) for _ in range(a.shards)]) for a in sharded}
        return [summed[a.id] if a.sharded else a for a in found]


def whole(activity: Activity, parts: Sequence[Sequence[str | None]]) -> Activity | None:
    """The activity with the whole's total, remaining and sold, from its parts' ``PART_FIELDS``;
    None if a part is missing (Redis lost it: it is rebuilt from the database)."""
    if any(part[0] is None for part in parts):
        return None
    sold = sum(int(part[2] or 0) for part in parts)
    if activity.total is None:
        return dataclasses.replace(activity, sold=sold)  # unlimited: no stock to count
    total = sum(int(part[0] or 0) + int(part[3] or 0) - int(part[4] or 0) for part in parts)
    return dataclasses.replace(activity, total=total, remaining=total - sold, sold=sold)
