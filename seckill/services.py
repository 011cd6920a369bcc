"""Everything a gateway process uses, built from the settings in one place, typed.

The web layer and the operator's commands both take their parts from here, so a command takes
the admin API's own path. Nothing connects at build time: the pools and engines open
connections on first use.
"""

from __future__ import annotations

import dataclasses

import redis
import sqlalchemy as sa

from seckill.config import Settings
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.store.activities import ActivityStore
from seckill.store.cache import ActivityCache
from seckill.store.connection import Wire, make_pool
from seckill.store.durability import Durability
from seckill.store.keys import KeySpace
from seckill.store.recovery import Restorer
from seckill.store.sale import SaleState
from seckill.store.scripts import Scripts
from seckill.store.soldout import SoldOutBoard
from seckill.store.stock import StockService


@dataclasses.dataclass
class Services:
    """The parts of one gateway process."""

    settings: Settings
    pool: redis.BlockingConnectionPool
    client: redis.Redis
    keys: KeySpace
    scripts: Scripts
    activities: ActivityStore
    cache: ActivityCache
    stock: StockService
    engine: sa.Engine
    book: OrderBook
    restorer: Restorer
    board: SoldOutBoard
    wire: Wire
    sale: SaleState

    @classmethod
    def build(cls, settings: Settings) -> Services:
        """Wire every part from ``settings``; no connection is opened yet."""
        pool = make_pool(settings)
        client = redis.Redis(connection_pool=pool)
        keys = KeySpace(settings.key_prefix)
        scripts = Scripts(client)
        activities = ActivityStore(client, keys, scripts)
        engine = make_engine(settings.database_url)
        book = OrderBook(engine)
        restorer = Restorer(client, keys, scripts, book)
        cache = ActivityCache(activities, settings.meta_ttl, restore=restorer.ensure)
        board = SoldOutBoard(client, keys, ttl=settings.sold_out_ttl)
        board.on_clear.append(cache.forget)
        wire = Wire(pool, limit=settings.redis_max_connections, wait=settings.redis_timeout)
        stock = StockService(
            client, keys, scripts, book, restorer,
            Durability(settings.durability, settings.durability_timeout_ms),
            wire, rates=settings.user_rates,
        )
        sale = SaleState(cache, board, stock, wire, keys, scripts.rate_limit,
                         settings.user_rates)
        return cls(settings=settings, pool=pool, client=client, keys=keys, scripts=scripts,
                   activities=activities, cache=cache, stock=stock, engine=engine, book=book,
                   restorer=restorer, board=board, wire=wire, sale=sale)

    def close(self) -> None:
        """Stop the background threads and close every connection."""
        self.board.close()
        self.cache.close()
        self.wire.close()
        self.pool.disconnect()
        self.engine.dispose()
