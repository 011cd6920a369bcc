"""Everything a gateway process uses, built from the settings in one place, typed.

The web layer and the operator's commands both take their parts from here, so a command takes
the admin API's own path. Nothing connects at build time: the pools and engines open
connections on first use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable

import redis
import sqlalchemy as sa

from seckill.config import ConfigError, Settings
from seckill.sql.blocks import BlockBook
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.sql.operators import OperatorBook
from seckill.sql.sealing import Keyring
from seckill.store.audit.census import CensusTaker
from seckill.store.operators import OperatorWatch
from seckill.store.plumbing.connection import (
    Client,
    ScriptWire,
    Wire,
    close_client,
    is_cluster,
    make_cluster,
    make_pool,
)
from seckill.store.plumbing.durability import Durability, check_guard
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.readonly import read_only_connection, read_only_engine
from seckill.store.plumbing.routing import ClusterWire
from seckill.store.plumbing.scripts import Scripts
from seckill.store.plumbing.writes import DurableRunner
from seckill.store.sale.activity.activities import ActivityStore
from seckill.store.sale.activity.cache import ActivityCache
from seckill.store.sale.activity.controls import SaleControls
from seckill.store.sale.activity.levers import LeverRecords
from seckill.store.sale.activity.recovery import Restorer
from seckill.store.sale.activity.restocks import Restocks
from seckill.store.sale.admission.blocks import BlockWatch
from seckill.store.sale.admission.challenge import Challenges
from seckill.store.sale.admission.queue import AdmissionQueue
from seckill.store.sale.orders.orders import Orders
from seckill.store.sale.orders.payments import Payments
from seckill.store.sale.orders.stats import StockStats
from seckill.store.sale.purchase.borrowing import ShardedPurchases
from seckill.store.sale.purchase.part_counts import Parts
from seckill.store.sale.purchase.soldout import SoldOutBoard
from seckill.store.sale.purchase.stock import Purchases
from seckill.store.sale.state import SaleState


def challenge_secret(settings: Settings) -> str:
    """The proof-of-work challenges' HMAC key, derived from the URL signing key (no secret of
    its own to configure; rotating SECKILL_SECRET_KEY voids the challenges out, for at most
    their 5 minutes: users solve another)."""
    return hmac.new(settings.secret_keys[0].encode(), b"seckill-altcha-v1",
                    hashlib.sha256).hexdigest()


@dataclasses.dataclass
class Services:
    """The parts of one gateway process."""

    settings: Settings
    client: Client
    keys: KeySpace
    scripts: Scripts
    activities: ActivityStore
    cache: ActivityCache
    purchases: Purchases  # the purchase decision (the hot path's one round trip)
    orders: Orders  # a buyer's order status, the operator's cancel
    restocks: Restocks  # the operator's restock; "units came back"
    stats: StockStats  # an activity's numbers
    engine: sa.Engine
    book: OrderBook
    restorer: Restorer
    board: SoldOutBoard
    wire: ScriptWire
    sale: SaleState
    payments: Payments
    queue: AdmissionQueue
    challenges: Challenges
    controls: SaleControls
    census: CensusTaker
    blocks: BlockWatch  # the operator's blocks: this process's copy, and their writes
    operators: OperatorWatch  # the named operators: this process's copy, and their writes
    # Also run by close(): parts the web layer adds (the cold routes' limiter's client).
    closers: list[Callable[[], None]] = dataclasses.field(default_factory=list)

    @property
    def cluster(self) -> bool:
        """Whether Redis is a cluster (``SECKILL_REDIS_CLUSTER``, asked of the server)."""
        return not isinstance(self.client, redis.Redis)

    @classmethod
    def build(cls, settings: Settings, read_only: bool = False) -> Services:
        """Wire every part from ``settings``; no connection is opened yet. ``read_only``: every
        Redis command that is not a read is refused before it is sent (:class:`ReadOnlyRefused`)
        and the database refuses writes (:func:`read_only_engine`)."""
        client: Client
        wire: ScriptWire
        if is_cluster(settings):
            client = make_cluster(
                settings, read_only_connection(redis.Connection) if read_only else None)
            wire = ClusterWire(client, limit=settings.redis_max_connections,
                               wait=settings.redis_timeout)
        else:
            pool = make_pool(settings)
            if read_only:
                pool.connection_class = read_only_connection(pool.connection_class)
            client = redis.Redis(connection_pool=pool)
            wire = Wire(pool, limit=settings.redis_max_connections, wait=settings.redis_timeout)
        keys = KeySpace(settings.key_prefix)
        scripts = Scripts(client)
        activities = ActivityStore(client, keys, scripts)
        if read_only:
            engine = read_only_engine(settings.database_url)
        else:
            engine = make_engine(settings.database_url, timeout=settings.database_timeout)
        book = OrderBook(engine, Keyring.of(settings))
        restorer = Restorer(client, keys, scripts, book)
        cache = ActivityCache(activities, settings.meta_ttl, restore=restorer.ensure)
        board = SoldOutBoard(client, keys, ttl=settings.sold_out_ttl)
        board.on_clear.append(cache.forget)
        cache.on_first_load = lambda: board.ensure_listening(wait=False)
        # Every decision on Redis runs through one runner (the durability wait, failures,
        # rebuilds); the parts of sharded activities are remembered once for all.
        runner = DurableRunner(client, wire,
                               Durability(settings.durability, settings.durability_timeout_ms),
                               restorer.ensure)
        parts = Parts(client, keys, book)
        sharded = ShardedPurchases(runner.run, keys, scripts, runner.restore, client)
        purchases = Purchases(runner, keys, scripts, sharded, rates=settings.user_rates)
        levers = LeverRecords(client, keys, scripts, book, settings.database_timeout)
        restocks = Restocks(client, keys, scripts, book, runner, parts, sharded, levers)
        orders = Orders(client, keys, scripts, book, runner, parts, sharded,
                        restocks.announce_stock_returned)
        stats = StockStats(client, keys, book, parts, sharded, restorer.ensure)
        queue = AdmissionQueue(client, wire, keys, scripts, restorer, settings.url_ttl)
        controls = SaleControls(activities, book, restorer, levers)
        payments = Payments(client, keys, scripts, book, runner, parts, orders)
        sale = SaleState(cache, board, purchases, wire, keys, scripts.rate_limit,
                         settings.user_rates, queue)
        return cls(settings=settings, client=client, keys=keys, scripts=scripts,
                   activities=activities, cache=cache, purchases=purchases, orders=orders,
                   restocks=restocks, stats=stats, engine=engine, book=book,
                   restorer=restorer, board=board, wire=wire, sale=sale,
                   payments=payments, queue=queue,
                   challenges=Challenges(client, keys, challenge_secret(settings)),
                   controls=controls,
                   census=CensusTaker(client, keys, controls, stats, payments, queue),
                   blocks=BlockWatch(BlockBook(engine, read_only=read_only)),
                   operators=OperatorWatch(OperatorBook(engine, read_only=read_only)))

    def check_durability_guard(self) -> None:
        """At a gateway's start, with ``SECKILL_DURABILITY=replica``: ConfigError (every part
        closed) in production where a node takes writes with no replica online, unless
        SECKILL_DURABILITY_UNGUARDED=1; said in the log otherwise (:func:`check_guard`)."""
        if self.settings.durability != "replica":
            return
        try:
            check_guard(self.client, production=not self.settings.development,
                        accepted=self.settings.durability_unguarded)
        except ConfigError:
            self.close()
            raise

    def close(self) -> None:
        """Stop the background threads and close every connection."""
        for closer in self.closers:
            closer()
        self.board.close()
        self.cache.close()
        self.blocks.close()
        self.operators.close()
        self.wire.close()
        close_client(self.client)
        self.engine.dispose()
