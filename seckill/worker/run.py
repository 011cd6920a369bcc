"""Running the orders worker: ``seckill worker`` (or ``python -m seckill.worker``)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

import redis

from seckill import logs
from seckill.config import Settings
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.sql.sealing import Keyring
from seckill.store.plumbing.connection import Client, is_cluster, make_cluster, make_pool
from seckill.store.plumbing.keys import KeySpace
from seckill.store.plumbing.scripts import Scripts
from seckill.store.sale.activity.levers import LeverRecords
from seckill.worker.expiry import Expirer
from seckill.worker.levers import LeverCatchUp
from seckill.worker.options import WorkerOptions
from seckill.worker.orders import OrdersWorker
from seckill.worker.stop import StopFlag

log = logging.getLogger(__name__)


def worker_options(settings: Settings, **overrides: Any) -> WorkerOptions:
    """The worker's options from the settings; ``overrides`` (a field each) win (tests)."""
    return dataclasses.replace(WorkerOptions(
        batch=settings.worker_batch, block_ms=settings.worker_block_ms,
        claim_idle_ms=settings.worker_claim_idle_ms,
        replicas=1 if settings.durability == "replica" else 0,
        replica_timeout_ms=settings.durability_timeout_ms,
    ), **overrides)


def build_worker(settings: Settings, **overrides: Any) -> OrdersWorker:
    """A worker with its own Redis connections (its socket timeout must outlast BLOCK): one
    server's, or a cluster client (``SECKILL_REDIS_CLUSTER``), with :func:`worker_options`."""
    options = worker_options(settings, **overrides)
    own = dataclasses.replace(
        settings,
        redis_timeout=max(settings.redis_timeout, options.block_ms / 1000 + 2.0),
        redis_max_connections=4,
    )
    client: Client = (make_cluster(own) if is_cluster(own)
                      else redis.Redis(connection_pool=make_pool(own)))
    book = OrderBook(make_engine(settings.database_url), Keyring.of(settings)).ready()
    return OrdersWorker(client, KeySpace(settings.key_prefix), book, options)


def main(settings: Settings) -> int:
    """``seckill worker``: run until SIGTERM/SIGINT; the payment window's expiry and the
    levers' catch-up run alongside, each in a thread of its own (``seckill.worker.expiry``,
    ``seckill.worker.levers``)."""
    logs.configure("orders-worker")
    stop = StopFlag()
    stop.install()
    worker = build_worker(settings)
    expirer = Expirer(worker.client, worker.keys, worker.book, batch=settings.expiry_batch)
    expiry = threading.Thread(target=expirer.run, args=(stop,), name="expiry", daemon=True)
    expiry.start()
    catch_up = LeverCatchUp(LeverRecords(worker.client, worker.keys, Scripts(worker.client),
                                         worker.book))
    levers = threading.Thread(target=catch_up.run, args=(stop,), name="levers", daemon=True)
    levers.start()
    worker.run(stop)
    expiry.join(timeout=5)
    levers.join(timeout=5)
    return 0
