"""The application factory. Nothing connects to Redis or builds an app at import time."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping

import redis
import sqlalchemy as sa
from flask import Flask, Response, g, request

from edge import Edge
from edge.identity import Identity
from edge.purchase_url import PurchaseUrls, PurchaseUrlSigner
from edge.ratelimit import UserRateLimit
from edge.window import SaleWindow
from seckill import metrics
from seckill.config import Settings
from seckill.sql import engine as db
from seckill.sql.book import OrderBook
from seckill.store.activities import ActivityStore
from seckill.store.cache import ActivityCache
from seckill.store.connection import Wire, make_pool
from seckill.store.durability import Durability
from seckill.store.keys import KeySpace
from seckill.store.recovery import Restorer
from seckill.store.scripts import Scripts
from seckill.store.soldout import SoldOutBoard
from seckill.store.stock import StockService
from seckill.web.errors import JsonErrors
from seckill.web.hot import PurchaseLane
from seckill.web.jsonio import OrjsonProvider


@dataclasses.dataclass
class Services:
    """What the views and the edge share, kept in ``app.extensions["seckill"]``."""

    settings: Settings
    pool: redis.BlockingConnectionPool
    client: redis.Redis
    keys: KeySpace
    scripts: Scripts
    activities: ActivityStore
    cache: ActivityCache
    stock: StockService
    signer: PurchaseUrlSigner
    engine: sa.Engine
    book: OrderBook
    restorer: Restorer
    board: SoldOutBoard
    wire: Wire

    @classmethod
    def build(cls, settings: Settings) -> Services:
        # Lazy: no Redis or database connection is opened until the first request needs one.
        pool = make_pool(settings)
        client = redis.Redis(connection_pool=pool)
        keys = KeySpace(settings.key_prefix)
        scripts = Scripts(client)
        activities = ActivityStore(client, keys, scripts)
        engine = db.make_engine(settings.database_url)
        book = OrderBook(engine)
        restorer = Restorer(client, keys, scripts, book)
        cache = ActivityCache(activities, settings.meta_ttl, restore=restorer.ensure)
        board = SoldOutBoard(client, keys, ttl=settings.sold_out_ttl)
        board.on_clear.append(cache.forget)
        wire = Wire(pool, limit=settings.redis_max_connections, wait=settings.redis_timeout)
        return cls(
            settings=settings,
            pool=pool,
            client=client,
            keys=keys,
            scripts=scripts,
            activities=activities,
            cache=cache,
            stock=StockService(
                client, keys, scripts, book, restorer,
                Durability(settings.durability, settings.durability_timeout_ms),
                wire,
                rates=settings.purchase_rates,
            ),
            signer=PurchaseUrlSigner(settings.secret_keys, settings.url_ttl, settings.clock_skew),
            engine=engine,
            book=book,
            restorer=restorer,
            board=board,
            wire=wire,
        )

    def close(self) -> None:
        self.board.close()
        self.cache.close()
        self.wire.close()
        self.pool.disconnect()
        self.engine.dispose()


def _settings(config: Settings | Mapping[str, str] | None) -> Settings:
    if isinstance(config, Settings):
        return config
    return Settings.from_env(config)


def create_app(config: Settings | Mapping[str, str] | None = None) -> Flask:
    settings = _settings(config)
    settings.announce_generated()
    app = Flask(__name__)
    app.json = OrjsonProvider(app)
    app.config["SECKILL_SETTINGS"] = settings
    services = Services.build(settings)
    app.extensions["seckill"] = services

    if settings.behind_proxy:
        from werkzeug.middleware.proxy_fix import ProxyFix

        # Exactly one trusted hop: nginx overwrites X-Forwarded-For with $remote_addr.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1)  # type: ignore[method-assign]

    instance = settings.instance

    @app.before_request
    def _start_clock() -> None:
        g.started = time.perf_counter()

    # The edge: JSON errors and the body-size guard, then one chain whose filters are added
    # in the order of the request path, cheapest first (see edge/__init__.py).
    JsonErrors().init_app(app)
    Edge().init_app(app)
    Identity().init_app(app)
    SaleWindow().init_app(app)
    PurchaseUrls().init_app(app)
    UserRateLimit().init_app(
        app, services.wire, services.scripts.rate_limit, services.keys.user_rate,
        settings.user_rate,
    )

    from seckill.web.routes import admin_blueprint, service_blueprint, user_blueprint

    app.register_blueprint(user_blueprint())
    app.register_blueprint(admin_blueprint())
    app.register_blueprint(service_blueprint())

    @app.after_request
    def _observe(response: Response) -> Response:
        outcome = g.get("outcome", "ok")
        endpoint = request.endpoint or "unmatched"
        metrics.answered(endpoint, outcome)
        if endpoint == "user.purchase":
            metrics.purchase_took(outcome, time.perf_counter() - g.started)
        response.headers["X-Seckill-Instance"] = instance
        response.headers["X-Seckill-Outcome"] = outcome
        return response

    # The sale's hot route, answered before Flask's request machinery (see seckill/lane.py).
    app.wsgi_app = PurchaseLane(app, app.wsgi_app)  # type: ignore[method-assign]

    logging.getLogger("seckill").setLevel(logging.INFO)
    return app
