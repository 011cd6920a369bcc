"""Redis key names. Every key of one activity shares the hash tag ``{<aid>}`` (Redis Cluster)."""

from __future__ import annotations

CONFIRMED_SUFFIX = "|c"


def split_buyer_entry(value: str) -> tuple[str, bool]:
    """A buyers-hash value is the order id, suffixed once the order is in the database."""
    if value.endswith(CONFIRMED_SUFFIX):
        return value[: -len(CONFIRMED_SUFFIX)], True
    return value, False


def hash_tag(key: str) -> str:
    """What ``key``'s slot is computed from: the text between its first ``{`` and the next
    ``}`` (an activity id, in this key space)."""
    start = key.find("{")
    return key[start + 1 : key.find("}", start + 1)]


class KeySpace:
    """Key names. Every key of one activity shares the hash tag ``{<aid>}`` (Redis Cluster)."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def levers_pending(self) -> str:
        """Hash: activity id -> token, the activities whose database may lag their levers."""
        return f"{self.prefix}:levers:pending"

    def meta(self, aid: str) -> str:
        """Hash: the activity's metadata and its stock (remaining, sold, seq)."""
        return f"{self.prefix}:{{{aid}}}:meta"

    def buyers(self, aid: str) -> str:
        """Hash: user id -> their live order id (suffixed once it is in the database)."""
        return f"{self.prefix}:{{{aid}}}:buyers"

    def orders(self, aid: str) -> str:
        """Stream: the activity's decided orders and cancellations, for the orders worker."""
        return f"{self.prefix}:{{{aid}}}:orders"

    def cancelled(self, aid: str) -> str:
        """Hash: user id -> their latest cancelled order id."""
        return f"{self.prefix}:{{{aid}}}:cancelled"

    def packets(self, aid: str) -> str:
        """List: the unclaimed red-envelope packets (amounts in cents), grabbed from the left."""
        return f"{self.prefix}:{{{aid}}}:packets"

    def packets_staging(self, aid: str, token: str) -> str:
        """Where packets are pushed before ``create_activity.lua`` renames them into place."""
        return f"{self.prefix}:{{{aid}}}:packets-staging:{token}"

    def amounts(self, aid: str) -> str:
        """Hash: user id -> the amount of their live grab (packets activities)."""
        return f"{self.prefix}:{{{aid}}}:amounts"

    def holds(self, aid: str) -> str:
        """Sorted set (a payment window's): the held orders' ids, scored by their pay_by (ms)."""
        return f"{self.prefix}:{{{aid}}}:holds"

    def payments(self, aid: str) -> str:
        """Hash (a payment window's): order id -> ``due|<qty>|<user>``,
        ``paid|<paid ms>|<pay_by>|<ref>|<qty>|<user>`` or ``expired|<pay_by>|<qty>|<user>``."""
        return f"{self.prefix}:{{{aid}}}:payments"

    def expired(self, aid: str) -> str:
        """Hash (a payment window's): user id -> their order that expired unpaid (they may
        not buy again: ``hold_expired``)."""
        return f"{self.prefix}:{{{aid}}}:expired"

    def queue(self, aid: str) -> str:
        """Sorted set (a queue or draw's): the waiting users by place, lowest first."""
        return f"{self.prefix}:{{{aid}}}:queue"

    def admitted(self, aid: str) -> str:
        """Sorted set (a queue or draw's): the admitted users by when their admission lapses."""
        return f"{self.prefix}:{{{aid}}}:admitted"

    def lapsed(self, aid: str) -> str:
        """Hash (a queue or draw's): user id -> when their admission lapsed unused (ms)."""
        return f"{self.prefix}:{{{aid}}}:lapsed"

    def joined(self, aid: str) -> str:
        """Hash (a person-limited queue or draw's): person key -> the account that joined for
        the person (their one place; the person's other accounts may not join)."""
        return f"{self.prefix}:{{{aid}}}:joined"

    def items(self, aid: str) -> str:
        """Hash (an activity with variants): order id -> its items, ``<vid>:<n>,...``: which
        variant each unit of the order came from, for its cancel and its expiry."""
        return f"{self.prefix}:{{{aid}}}:items"

    def variant_purchase_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/purchase.lua`` on an activity with variants (never sharded)."""
        return [self.meta(aid), self.buyers(aid), self.orders(aid), self.items(aid)]

    def payment_keys(self, aid: str) -> list[str]:
        """The KEYS a sale script adds for an activity with a payment window
        (``lua/include/payment_hold.lua``)."""
        return [self.holds(aid), self.payments(aid), self.expired(aid)]

    def expire_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/expire.lua``."""
        return [self.meta(aid), self.buyers(aid), self.cancelled(aid), self.orders(aid),
                self.packets(aid), self.amounts(aid), *self.payment_keys(aid), self.items(aid)]

    def pay_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/pay.lua``."""
        return [self.meta(aid), self.holds(aid), self.payments(aid), self.orders(aid)]

    def dead_letters(self, aid: str) -> str:
        """Stream: the entries the orders worker could not store, each with the reason."""
        return f"{self.prefix}:{{{aid}}}:dead"

    def rebuild_lock(self, aid: str) -> str:
        """String: the lock held by the one gateway rebuilding the activity from the database."""
        return f"{self.prefix}:{{{aid}}}:rebuild-lock"

    def replication_mark(self, aid: str) -> str:
        """String (short-lived): written by the orders worker just before it asks, with WAIT,
        whether a replica has everything it read (seckill/worker/replicas.py)."""
        return f"{self.prefix}:{{{aid}}}:replicated"

    def claims(self, tag: str) -> str:
        """Hash (a part of a sharded activity): user id -> their claim while they borrow units
        from the other parts, ``<claim id>|<units held>`` (``lua/purchase.lua``)."""
        return f"{self.prefix}:{{{tag}}}:claims"

    def transfers(self, tag: str) -> str:
        """Hash (a part of a sharded activity): claim id -> ``<units>|<home tag>|<user>``, the
        units this part lent (``lua/lend.lua``)."""
        return f"{self.prefix}:{{{tag}}}:transfers"

    def received(self, tag: str) -> str:
        """Hash (a part of a sharded activity): ``<claim id>@<donor part>`` -> the units this
        home part took in from that donor for that claim (each counted once)."""
        return f"{self.prefix}:{{{tag}}}:received"

    def activity_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/purchase.lua`` (``aid``: a part's tag, for a sharded activity's
        part; :meth:`part_keys` adds the claims)."""
        return [self.meta(aid), self.buyers(aid), self.orders(aid)]

    def part_keys(self, tag: str) -> list[str]:
        """The KEYS of ``lua/purchase.lua`` on a part of a sharded activity."""
        return [self.meta(tag), self.buyers(tag), self.orders(tag), self.claims(tag)]

    def settle_keys(self, tag: str) -> list[str]:
        """The KEYS of ``lua/settle.lua``."""
        return [*self.part_keys(tag), self.received(tag)]

    def grab_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/grab.lua``."""
        return [*self.activity_keys(aid), self.packets(aid), self.amounts(aid)]

    def cancel_keys(self, aid: str) -> list[str]:
        """The KEYS of ``lua/cancel.lua``."""
        return [self.meta(aid), self.buyers(aid), self.cancelled(aid), self.orders(aid),
                self.packets(aid), self.amounts(aid), self.holds(aid), self.payments(aid),
                self.items(aid)]

    def metrics_kept(self) -> str:
        """String: ``<taken ms>\n<text>``, the store's numbers as /metrics shows them, read by
        one process of the deployment and shared by all (seckill.store.audit.shared)."""
        return f"{self.prefix}:{{metrics}}:kept"

    def metrics_reading(self) -> str:
        """String with a lease: the process reading the numbers of ``metrics_kept`` now (same
        hash tag: both are written in one pipeline on a cluster)."""
        return f"{self.prefix}:{{metrics}}:reading"

    def issuer_keys(self) -> str:
        """Hash: JWKS URL -> the last good key set it answered (``SECKILL_JWT_JWKS_URL``), what
        a gateway verifies buyers' tokens with when it starts while the provider is down."""
        return f"{self.prefix}:{{jwks}}:keys"

    def stock_returned_channel(self) -> str:
        """Pub/sub: an activity id is published here when units come back (cancel, restock),
        so that every process drops its sold-out flag for it."""
        return f"{self.prefix}:stock-returned"

    def rate(self, tag: str, endpoint: str, uid: str, window_ms: int) -> str:
        """A user's request counter on one endpoint for one fixed window. ``tag`` is the hash
        tag the counter lives under: the activity's for a purchase (its script counts it),
        the user's for the other hot routes (one script counts all of a user's rates)."""
        return f"{self.prefix}:{{{tag}}}:rate:{endpoint}:{uid}:{window_ms}"

    def challenges_issued(self, aid: str, second: int) -> str:
        """Counter (a few seconds' life): the proof-of-work challenges issued for the activity
        in one second of the gateway's clock; their rate sets the next ones' difficulty
        (``seckill/store/sale/admission/challenge.py``)."""
        return f"{self.prefix}:{{{aid}}}:altcha-issued:{second}"

    def challenge_used(self, aid: str, signature: str) -> str:
        """String (until its challenge expires): the solution of the challenge with this
        signature has been accepted; it is not accepted again."""
        return f"{self.prefix}:{{{aid}}}:altcha-used:{signature}"
