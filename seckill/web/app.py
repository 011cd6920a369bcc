"""The application factory. Nothing connects to Redis or builds an app at import time."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from flask import Flask, Response, g, request

from edge import Edge
from edge.blocks import NotBlocked
from edge.identity import Identity
from edge.operators import Operators, RoleCheck
from edge.purchase_url import PurchaseUrls, PurchaseUrlSigner
from edge.ratelimit import UserRateLimit
from edge.soldout import SoldOutFlag
from edge.window import SaleWindow
from seckill.config import Settings
from seckill.operator import trail
from seckill.services import Services
from seckill.store.plumbing.storage import DiskWatch
from seckill.web import routes
from seckill.web.errors import JsonErrors
from seckill.web.finish import Finish
from seckill.web.hot import HotRoutes
from seckill.web.issuer import buyers_issuer
from seckill.web.jsonio import OrjsonProvider
from seckill.web.limits import ColdLimits


def create_app(config: Settings | Mapping[str, str] | None = None) -> Flask:
    """The gateway: Flask for the cold routes, with the hot routes answered in front of it."""
    settings = config if isinstance(config, Settings) else Settings.from_env(config)
    settings.announce_generated()
    app = Flask(__name__, static_folder=None)  # no /static/ route: the sale page is nginx's
    app.json = OrjsonProvider(app)
    # No redirects of werkzeug's: a doubled slash (/seckill//activities/p1) answered 308 with
    # an HTML body and a Location built from the client's Host header. A path is matched as
    # sent, or it is the contract's JSON 404 (a leading "//", which werkzeug strips before
    # matching, is refused by seckill.web.errors). Set before any route is added: each rule
    # copies them. No rule ends in "/" but the console's, which takes /admin as well.
    app.url_map.merge_slashes = False
    app.url_map.redirect_defaults = False
    app.config["SECKILL_SETTINGS"] = settings
    services = Services.build(settings)
    services.check_durability_guard()
    app.extensions["seckill"] = services

    if settings.behind_proxy:
        from werkzeug.middleware.proxy_fix import ProxyFix

        # Exactly one trusted hop: nginx overwrites X-Forwarded-For with $remote_addr.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=1, x_proto=1)  # type: ignore[method-assign]

    @app.before_request
    def _start_clock() -> None:
        g.started = time.perf_counter()

    # The edge: JSON errors and the body-size guard, then one chain whose filters are added
    # in the order of the request path, cheapest first (see edge/__init__.py); the cold
    # routes' limits run after it, once the caller is known.
    JsonErrors().init_app(app)
    chain = Edge()
    chain.init_app(app)
    signer = PurchaseUrlSigner(settings.secret_keys, settings.url_ttl, settings.clock_skew)
    Identity(settings.jwt_secret, Operators(settings.admin_token, services.operators),
             settings.clock_skew, settings.jwt_max_ttl, settings.person_claim,
             settings.person_canon, settings.metrics_token,
             buyers_issuer(settings, services)).init_app(app)
    RoleCheck(routes.ROLES, trail.refused).init_app(app)  # an operator route's role: 403
    NotBlocked(services.blocks).init_app(app)  # needs the user (and person); no Redis
    SaleWindow(services.sale).init_app(app)
    SoldOutFlag(services.sale).init_app(app)
    PurchaseUrls(signer).init_app(app)
    UserRateLimit(services.sale).init_app(app)
    limits = ColdLimits(settings, services.client)
    services.closers.append(limits.close)
    limits.init_app(app)
    routes.register(app, limits)

    finish = Finish(settings.instance, services.cache.has_copy)

    @app.after_request
    def _finish(response: Response) -> Response:
        seconds = time.perf_counter() - g.get("started", time.perf_counter())
        for name, value in finish(request.endpoint or "unmatched", g.get("outcome", "ok"),
                                  seconds):
            response.headers[name] = value
        return response

    # The sale's two hot routes, answered before Flask's request machinery (seckill.web.hot).
    app.wsgi_app = HotRoutes(  # type: ignore[method-assign]
        app.wsgi_app, chain, services.sale, signer, finish, services.queue,
        services.challenges, settings.purchase_budget_ms, DiskWatch(settings.data_dir).full)

    for name in ("seckill", "edge"):  # edge: the issuer's keys (edge.jwks) say what changed
        logging.getLogger(name).setLevel(logging.INFO)
    return app
