"""Every configuration name in one place, read from the environment with typed coercion.

No production secret has a default: in ``production`` (the default) a missing secret stops
the gateway with the variable's name; in ``development`` a random one is generated and
printed so that a person trying the project can still mint tokens.
"""

from __future__ import annotations

import base64
import dataclasses
import getpass
import math
import os
import re
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from limits import parse_many


class ConfigError(RuntimeError):
    """The environment does not describe a gateway that can run."""


MIN_KEY_BYTES = 32
SECRET_VARS = ("SECKILL_SECRET_KEY", "SECKILL_JWT_SECRET", "SECKILL_ADMIN_TOKEN")
# The gateway's and the worker's Redis when REDIS_URL is not set. The operator's commands never
# use it: they take the running `seckill up`'s (seckill/ops/cli/store.py) or refuse.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (each node's, in a cluster's
    comma-separated list): how a URL is written in a log line, an error or a file."""
    if "," in url:
        return ",".join(redact_url(part) for part in url.split(","))
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=_netloc(parts, "***")))


def with_password(url: str, password: str) -> str:
    """``url`` (each node's, in a cluster's comma-separated list) with ``password`` in it."""
    return ",".join(urlunsplit(parts._replace(netloc=_netloc(parts, password)))
                    for parts in map(urlsplit, url.split(",")))


def _netloc(parts: SplitResult, password: str) -> str:
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.username or ''}:{password}@{host}" + (f":{parts.port}" if parts.port else "")


def data_dir_from(env: Mapping[str, str]) -> Path:
    """The data folder ``SECKILL_DATA_DIR`` names (default ``./.seckill-data``), absolute.
    Nothing is created: the commands that need it make it."""
    return Path(env.get("SECKILL_DATA_DIR") or ".seckill-data").resolve()


def _int(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _instances(raw: str) -> tuple[str, ...]:
    found = tuple(part.strip() for part in raw.split(",") if part.strip())
    for part in found:
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"SECKILL_INSTANCES must be host:port,... (got {part!r})")
    return found


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not 0 < value < math.inf:  # also refuses nan and inf, which float() accepts
        raise ConfigError(f"{name} must be a finite number > 0, got {raw!r}")
    return value


Rate = tuple[int, int]  # (requests, window in milliseconds): one fixed window


def _rates(env: Mapping[str, str], name: str, default: str) -> tuple[str, tuple[Rate, ...]]:
    """Rates in the limits/flask-limiter syntax (``5/second``, or ``5/second;100/minute``),
    parsed once, here, at start-up: a typo must stop the gateway, not switch the limit off."""
    raw = env.get(name) or default
    try:
        parsed = parse_many(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a rate like '5/second', got {raw!r}") from None
    return raw, tuple((item.amount, item.get_expiry() * 1000) for item in parsed)


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


# The claims a login service's token uses for something else: none of them names a person.
_NOT_PERSON_CLAIMS = frozenset({"sub", "exp", "nbf", "iat", "iss", "aud", "jti"})


def _person_claim(env: Mapping[str, str]) -> str | None:
    raw = (env.get("SECKILL_PERSON_CLAIM") or "").strip()
    if not raw:
        return None
    if raw in _NOT_PERSON_CLAIMS:
        raise ConfigError(f"SECKILL_PERSON_CLAIM must name a claim of its own, not {raw!r}: the "
                          "token's registered claims say other things than who the person is")
    return raw


MIN_WEBHOOK_SECRET_BYTES = 24  # the Standard Webhooks specification: 24 to 64 bytes


def _webhook_secret(env: Mapping[str, str], name: str) -> str | None:
    """A Standard Webhooks secret, ``whsec_`` and base64 of 24..64 bytes; None when unset."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    key = raw.removeprefix("whsec_")
    try:
        decoded = base64.b64decode(key + "=" * (-len(key) % 4), validate=True)
    except ValueError:
        decoded = b""
    if not raw.startswith("whsec_") or not MIN_WEBHOOK_SECRET_BYTES <= len(decoded) <= 64:
        raise ConfigError(f"{name} must be a Standard Webhooks secret: whsec_ followed by the "
                          f"base64 of {MIN_WEBHOOK_SECRET_BYTES} to 64 random bytes")
    return raw


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    raw = (env.get(name) or default).strip().lower()
    if raw not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {raw!r}")
    return raw


# The algorithms a key of the shop's identity provider may verify (edge/jwks.py's FITS):
# asymmetric only. HS256 is the login service's, with SECKILL_JWT_SECRET; "none" is never.
ISSUER_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
# Claims that say something else than who the user is (the person claim has its own list).
_NOT_USER_CLAIMS = frozenset({"exp", "nbf", "iat", "iss", "aud", "jti"})
_ISSUER_VARS = ("SECKILL_JWT_ISSUER", "SECKILL_JWT_AUDIENCE", "SECKILL_JWT_ALGORITHMS",
                "SECKILL_JWT_USER_CLAIM", "SECKILL_JWT_JWKS_REFRESH_MIN")


@dataclasses.dataclass(frozen=True)
class IssuerSettings:
    """The shop's identity provider, whose published keys (a JWKS) verify buyers' tokens."""

    jwks_url: str | None  # SECKILL_JWT_JWKS_URL
    jwks_file: Path | None  # SECKILL_JWT_JWKS_FILE (with the URL: the union of both sets)
    issuer: str  # SECKILL_JWT_ISSUER: the tokens' "iss", exactly
    audience: tuple[str, ...]  # SECKILL_JWT_AUDIENCE: a token's "aud" must name one of these
    algorithms: tuple[str, ...]  # SECKILL_JWT_ALGORITHMS
    user_claim: str = "sub"  # SECKILL_JWT_USER_CLAIM
    # SECKILL_JWT_JWKS_REFRESH_MIN: the shortest a fetched set stays fresh, whatever its
    # Cache-Control says (seconds; the longest is a day).
    refresh_min: int = 60


def issuer_settings(env: Mapping[str, str]) -> IssuerSettings | None:
    """The identity provider ``SECKILL_JWT_JWKS_URL`` / ``SECKILL_JWT_JWKS_FILE`` name, with
    its issuer, audience, algorithms and user claim; None when neither is set. ConfigError for
    a setting that cannot be right, or one set without a JWKS to go with it."""
    url = (env.get("SECKILL_JWT_JWKS_URL") or "").strip() or None
    file = (env.get("SECKILL_JWT_JWKS_FILE") or "").strip() or None
    if url is None and file is None:
        stray = [name for name in _ISSUER_VARS if (env.get(name) or "").strip()]
        if stray:
            raise ConfigError(f"{', '.join(stray)} set, but neither SECKILL_JWT_JWKS_URL nor "
                              "SECKILL_JWT_JWKS_FILE: no key would verify those tokens")
        return None
    development = (env.get("SECKILL_ENV") or "").strip().lower() == "development"
    if url is not None:
        _check_jwks_url(url, development)
    path = None if file is None else Path(file).resolve()
    if path is not None and not path.is_file():
        raise ConfigError(f"SECKILL_JWT_JWKS_FILE names no file: {file}")
    issuer = (env.get("SECKILL_JWT_ISSUER") or "").strip()
    audience = tuple(a.strip() for a in (env.get("SECKILL_JWT_AUDIENCE") or "").split(",")
                     if a.strip())
    for name, value in (("SECKILL_JWT_ISSUER", issuer), ("SECKILL_JWT_AUDIENCE", audience)):
        if not value:
            raise ConfigError(f"{name} is required with a JWKS: the identity provider signs "
                              "the tokens of the shop's other applications with the same keys, "
                              "and those must not buy here")
    algorithms = tuple(a.strip() for a in
                       (env.get("SECKILL_JWT_ALGORITHMS") or "RS256,ES256").split(",")
                       if a.strip())
    for alg in algorithms:
        if alg not in ISSUER_ALGORITHMS:
            raise ConfigError(f"SECKILL_JWT_ALGORITHMS may hold only {', '.join(ISSUER_ALGORITHMS)}"
                              f", got {alg!r} (HS256 tokens are verified with SECKILL_JWT_SECRET; "
                              "'none' never is)")
    if not algorithms:
        raise ConfigError("SECKILL_JWT_ALGORITHMS holds no algorithm")
    user_claim = (env.get("SECKILL_JWT_USER_CLAIM") or "sub").strip()
    if user_claim in _NOT_USER_CLAIMS:
        raise ConfigError(f"SECKILL_JWT_USER_CLAIM must name the claim of the user id, not "
                          f"{user_claim!r}")
    refresh_min = _int(env, "SECKILL_JWT_JWKS_REFRESH_MIN", 60, minimum=1)
    if refresh_min > 86_400:
        raise ConfigError(f"SECKILL_JWT_JWKS_REFRESH_MIN must be <= 86400, got {refresh_min}")
    return IssuerSettings(url, path, issuer, audience, algorithms, user_claim, refresh_min)


def _check_jwks_url(url: str, development: bool) -> None:
    """The keys that say who a buyer is come over TLS; plain HTTP only from this machine
    (a sidecar, the tests) or in development."""
    parts = urlsplit(url)
    loopback = parts.hostname in {"localhost", "::1"} or (parts.hostname or "").startswith("127.")
    if not parts.hostname or parts.scheme not in {"https", "http"} or (
            parts.scheme == "http" and not (loopback or development)):
        raise ConfigError(f"SECKILL_JWT_JWKS_URL must be an https:// URL (http:// only to a "
                          f"loopback address, or in development), got {url!r}")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The gateway's whole configuration, as read from the environment (see ``from_env``)."""

    env: str
    redis_url: str
    database_url: str
    data_dir: Path
    # Newest first: the first key signs purchase URLs, every key verifies them.
    secret_keys: tuple[str, ...]
    jwt_secret: str  # "" when an identity provider's keys alone verify buyers (issuer below)
    admin_token: str
    url_ttl: int
    # SECKILL_USER_RATE as written, and parsed: the hot routes' per-user limit.
    user_rate: str
    user_rates: tuple[Rate, ...]
    # flask-limiter's limits of the cold routes (order status; operator calls).
    status_rate: str
    admin_rate: str
    key_prefix: str
    meta_ttl: float
    sold_out_ttl: float
    redis_timeout: float
    redis_max_connections: int
    clock_skew: int
    behind_proxy: bool
    instance: str
    durability: str = "local"
    # SECKILL_INSTANCES: every gateway instance's host:port (``seckill up`` sets it), whose
    # health the operator console shows; empty: this process's alone.
    instances: tuple[str, ...] = ()
    # SECKILL_REDIS_CLUSTER: "auto" (ask the server), "on" (a Redis/Valkey Cluster) or "off".
    redis_cluster: str = "auto"
    durability_timeout_ms: int = 1500
    # SECKILL_DURABILITY_UNGUARDED: start in production with ``replica`` although a node's
    # min-replicas-to-write is 0 (seckill.store.plumbing.durability.check_guard).
    durability_unguarded: bool = False
    # SECKILL_DATABASE_TIMEOUT: the bound of every wait on the database (connecting, a
    # statement, a lock, a free pooled connection), seconds (seckill.sql.engine).
    database_timeout: float = 3.0
    # SECKILL_PURCHASE_BUDGET_MS: how long after its arrival (nginx's stamp, or this process's
    # receipt) a purchase may still be decided; shorter than nginx's read timeout, so that no
    # buyer is told "failed" (504) about a purchase decided afterwards.
    purchase_budget_ms: int = 5000
    # The orders worker (``seckill worker``).
    worker_batch: int = 500
    expiry_batch: int = 200  # payment window: held orders expired per script call
    worker_block_ms: int = 500
    worker_claim_idle_ms: int = 30_000
    # SECKILL_JWT_MAX_TTL: the longest a user token may live, seconds (0: no bound). A login
    # service mints tokens for hours; one for ever (exp up to 2**53) is a stolen key for ever.
    jwt_max_ttl: int = 30 * 86_400
    # SECKILL_PERSON_CLAIM: the user token's claim naming the verified person behind the
    # account (limit_by person activities, seckill/domain/people.py); None: no such claim.
    person_claim: str | None = None
    # SECKILL_PERSON_CANON: the form person ids are compared in (seckill/domain/people.py's
    # canonical_person): "exact" (byte for byte) or "nfkc_casefold".
    person_canon: str = "exact"
    # SECKILL_PAYMENT_WEBHOOK_SECRET: the payment provider's Standard Webhooks secret
    # ("whsec_<base64>") that signs POST /payments/webhook; None: that route takes nothing.
    payment_webhook_secret: str | None = None
    # SECKILL_METRICS_TOKEN: a token that opens GET /metrics and nothing else, so that the
    # scraper does not hold the operator token (which opens /metrics too); None: unset.
    metrics_token: str | None = None
    # SECKILL_METRICS_INTERVAL: the longest a /metrics body is kept by a process, and the
    # store's numbers shared by the deployment, before they are read again (seconds).
    metrics_interval: float = 1.0
    # Where the key that seals the secrets the database holds comes from (data_keys below).
    data_keys: DataKeys | None = None
    # SECKILL_JWT_JWKS_*: the shop's identity provider, whose keys verify buyers' tokens
    # beside (or instead of) SECKILL_JWT_SECRET; None: HS256 tokens only.
    issuer: IssuerSettings | None = None
    generated: tuple[str, ...] = ()

    @property
    def development(self) -> bool:
        """Whether the gateway runs in development mode (``SECKILL_ENV=development``)."""
        return self.env == "development"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read the settings from ``environ`` (os.environ if None); ConfigError if one is bad."""
        env = dict(os.environ if environ is None else environ)
        mode = env.get("SECKILL_ENV", "production").strip().lower() or "production"
        if mode not in {"production", "development"}:
            raise ConfigError(f"SECKILL_ENV must be 'production' or 'development', got {mode!r}")

        data_dir = data_dir_from(env)
        issuer = issuer_settings(env)
        generated: list[str] = []
        found: dict[str, str] = {}
        for name in SECRET_VARS:
            value = env.get(name, "").strip()
            if not value and name == "SECKILL_JWT_SECRET" and issuer is not None \
                    and mode != "development":
                found[name] = ""  # the identity provider's keys alone verify buyers
                continue
            if not value:
                if mode != "development":
                    instead = (" (or an identity provider's keys: SECKILL_JWT_JWKS_URL or "
                               "SECKILL_JWT_JWKS_FILE)" if name == "SECKILL_JWT_SECRET" else "")
                    raise ConfigError(
                        f"{name} is not set{instead}; it is required when SECKILL_ENV=production "
                        "(set SECKILL_ENV=development to generate throw-away secrets)"
                    )
                value = secrets.token_urlsafe(32)
                generated.append(name)
            found[name] = value

        metrics_token = env.get("SECKILL_METRICS_TOKEN", "").strip() or None
        if metrics_token is None and mode == "development":
            metrics_token = secrets.token_urlsafe(32)
            generated.append("SECKILL_METRICS_TOKEN")
        keys = tuple(k.strip() for k in found["SECKILL_SECRET_KEY"].split(",") if k.strip())
        if not keys:
            raise ConfigError("SECKILL_SECRET_KEY holds no key")
        # RFC 7518 section 3.2: an HS256 key must be at least as long as the hash (32 bytes).
        jwt_secret = found["SECKILL_JWT_SECRET"]
        for name, values in (("SECKILL_SECRET_KEY", keys),
                             ("SECKILL_JWT_SECRET", (jwt_secret,) if jwt_secret else ())):
            if any(len(v.encode()) < MIN_KEY_BYTES for v in values):
                raise ConfigError(f"{name} must be at least {MIN_KEY_BYTES} bytes (HS256 key)")

        default_db = f"sqlite:///{data_dir / 'seckill.db'}"
        user_rate, user_rates = _rates(env, "SECKILL_USER_RATE", "5/second")
        settings = cls(
            env=mode,
            redis_url=env.get("REDIS_URL") or DEFAULT_REDIS_URL,
            database_url=env.get("DATABASE_URL") or default_db,
            data_dir=data_dir,
            secret_keys=keys,
            jwt_secret=found["SECKILL_JWT_SECRET"],
            admin_token=found["SECKILL_ADMIN_TOKEN"],
            url_ttl=_int(env, "SECKILL_URL_TTL", 60, minimum=1),
            user_rate=user_rate,
            user_rates=user_rates,
            status_rate=_rates(env, "SECKILL_STATUS_RATE", "10/second")[0],
            admin_rate=_rates(env, "SECKILL_ADMIN_RATE", "100/second")[0],
            key_prefix=env.get("SECKILL_KEY_PREFIX") or "seckill",
            meta_ttl=_float(env, "SECKILL_META_TTL", 1.0),
            sold_out_ttl=_float(env, "SECKILL_SOLD_OUT_TTL", 2.0),
            redis_timeout=_float(env, "SECKILL_REDIS_TIMEOUT", 1.0),
            redis_max_connections=_int(env, "SECKILL_REDIS_MAX_CONNECTIONS", 200, minimum=1),
            clock_skew=_int(env, "SECKILL_CLOCK_SKEW", 5),
            jwt_max_ttl=_int(env, "SECKILL_JWT_MAX_TTL", 30 * 86_400),
            person_claim=_person_claim(env),
            person_canon=_choice(env, "SECKILL_PERSON_CANON", "exact", ("exact", "nfkc_casefold")),
            payment_webhook_secret=_webhook_secret(env, "SECKILL_PAYMENT_WEBHOOK_SECRET"),
            metrics_token=metrics_token,
            metrics_interval=_float(env, "SECKILL_METRICS_INTERVAL", 1.0),
            data_keys=data_keys(env),
            issuer=issuer,
            behind_proxy=_bool(env, "SECKILL_BEHIND_PROXY", False),
            instance=instance_name(env),
            durability=_choice(env, "SECKILL_DURABILITY", "local", ("none", "local", "replica")),
            durability_timeout_ms=_int(env, "SECKILL_DURABILITY_TIMEOUT_MS", 1500, minimum=1),
            durability_unguarded=_bool(env, "SECKILL_DURABILITY_UNGUARDED", False),
            database_timeout=database_timeout(env),
            purchase_budget_ms=_int(env, "SECKILL_PURCHASE_BUDGET_MS", 5000, minimum=1),
            redis_cluster=_choice(env, "SECKILL_REDIS_CLUSTER", "auto", ("auto", "on", "off")),
            worker_batch=_int(env, "SECKILL_WORKER_BATCH", 500, minimum=1),
            expiry_batch=_int(env, "SECKILL_EXPIRY_BATCH", 200, minimum=1),
            worker_block_ms=_int(env, "SECKILL_WORKER_BLOCK_MS", 500, minimum=1),
            worker_claim_idle_ms=_int(env, "SECKILL_WORKER_CLAIM_IDLE_MS", 30_000, minimum=1),
            generated=tuple(generated),
            instances=_instances(env.get("SECKILL_INSTANCES", "")),
        )
        if overrides:
            settings = dataclasses.replace(settings, **overrides)
        return settings

    @property
    def socket_timeout(self) -> float:
        """Reads must outlast a WAITAOF: on an ``everysec`` server the fsync can take a second."""
        if self.durability == "none":
            return self.redis_timeout
        return self.redis_timeout + self.durability_timeout_ms / 1000

    def announce_generated(self) -> None:
        """Tell the person running a development gateway which secrets were made up."""
        if not self.generated:
            return
        lines = [f"  {name}={self.secret_for(name)}" for name in self.generated]
        print(
            "seckill: development mode, generated throw-away secrets "
            "(export them to keep tokens valid across restarts):\n" + "\n".join(lines),
            file=sys.stderr,
        )

    def secret_for(self, name: str) -> str:
        """The value of the secret variable ``name``, as written in the environment."""
        return {
            "SECKILL_SECRET_KEY": ",".join(self.secret_keys),
            "SECKILL_JWT_SECRET": self.jwt_secret,
            "SECKILL_ADMIN_TOKEN": self.admin_token,
            "SECKILL_METRICS_TOKEN": self.metrics_token or "",
        }[name]


# -- names read without a gateway's Settings ---------------------------------------------
# The commands that start or drive a stack (`seckill up`, `seckill drill`, `seckill token`)
# and gunicorn's worker read these before a gateway's Settings exist, or without them
# (Settings.from_env refuses a production environment that lacks secrets these do not need).
# Each name is read here, by one function; ``environ`` None is the process's environment,
# and what starts children takes it whole from :func:`environment`. Only seckill.logs and
# seckill.metrics, which the import layers keep independent of this module, read a name of
# their own (SECKILL_LOG_FORMAT, and prometheus_client's PROMETHEUS_MULTIPROC_DIR):
# tests/test_architecture.py holds the list.


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment (``environ``, or the process's), whole: what a command that
    starts children hands on to them (``seckill up``, ``seckill drill``), or reads Settings
    from with a change of its own."""
    return dict(_environ(environ))


def nginx_path(environ: Mapping[str, str] | None = None) -> str | None:
    """``SECKILL_NGINX``: the nginx binary ``seckill up`` runs (a path), or None (unset: the
    PATH's, else the usual install locations)."""
    return _environ(environ).get("SECKILL_NGINX") or None


def own_redis_url(environ: Mapping[str, str] | None = None) -> str | None:
    """``REDIS_URL`` when the operator names a Redis of their own (``seckill up`` then starts
    none, ``seckill drill --target`` reconciles on it); None when unset."""
    return _environ(environ).get("REDIS_URL") or None


def operator_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """``SECKILL_JWT_SECRET`` and ``SECKILL_ADMIN_TOKEN`` as set, stripped ("" when unset):
    what a command that signs user tokens or calls the operator API uses, checked by it."""
    env = _environ(environ)
    return (env.get("SECKILL_JWT_SECRET", "").strip(),
            env.get("SECKILL_ADMIN_TOKEN", "").strip())


def cli_operator(environ: Mapping[str, str] | None = None) -> str:
    """Who the ``seckill`` command acts as in the audit trail and in the events its actions
    cause: ``cli:`` and ``SECKILL_OPERATOR`` (a name, ``[A-Za-z0-9_.@-]{1,64}``), or the
    login name of the user running it when unset. ConfigError for a malformed name."""
    name = _environ(environ).get("SECKILL_OPERATOR", "").strip()
    if not name:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no login name (a container's bare uid)
            name = f"uid{os.getuid()}"
    if re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", name, re.ASCII) is None:
        raise ConfigError("SECKILL_OPERATOR must match [A-Za-z0-9_.@-]{1,64} (who the command "
                          f"acts as in the audit), got {name[:80]!r}")
    return f"cli:{name}"


def graceful_timeout(environ: Mapping[str, str] | None = None) -> int:
    """``GUNICORN_GRACEFUL_TIMEOUT``: the seconds gunicorn gives the requests in flight on a
    stop (default 10; ``gunicorn.conf.py`` reads it for gunicorn itself)."""
    raw = _environ(environ).get("GUNICORN_GRACEFUL_TIMEOUT") or "10"
    if not raw.isdigit():
        raise ConfigError(f"GUNICORN_GRACEFUL_TIMEOUT must be seconds, got {raw!r}")
    return int(raw)


def read_deadlines(environ: Mapping[str, str] | None = None) -> tuple[float, float]:
    """``GUNICORN_HEADER_TIMEOUT`` and ``GUNICORN_BODY_TIMEOUT``: the seconds a client has to
    send a request's headers (from its first byte), and its body (default 10 each;
    ``seckill.web.server``). ValueError unless each is a number above 0."""
    env = _environ(environ)
    found = []
    for name in ("GUNICORN_HEADER_TIMEOUT", "GUNICORN_BODY_TIMEOUT"):
        value = float(env.get(name) or 10.0)
        if not value > 0:
            raise ValueError(f"{name} must be a number of seconds above 0, got {value}")
        found.append(value)
    return found[0], found[1]


def instance_name(environ: Mapping[str, str] | None = None) -> str:
    """``SECKILL_INSTANCE`` as the application names its process (Settings.instance), for
    what answers before or without the application (gunicorn's worker): the host and PID
    when unset."""
    return _environ(environ).get("SECKILL_INSTANCE") or f"{os.uname().nodename}:{os.getpid()}"


def log_component(environ: Mapping[str, str] | None = None) -> str:
    """``SECKILL_INSTANCE`` as gunicorn's log lines name the process (``seckill up`` sets
    ``gunicorn-1``...), ``gunicorn`` when unset."""
    return _environ(environ).get("SECKILL_INSTANCE") or "gunicorn"


DATA_KEY_FILE = "data.key"  # development only: the throw-away data key, in the data folder


@dataclasses.dataclass(frozen=True)
class DataKeys:
    """The keys that seal the secrets the database holds (seckill/sql/sealing.py), as
    written: ``material`` newest first, the first seals and every one opens; ``source`` names
    where the sealing key comes from, for messages. ``dev_file``: in development without
    SECKILL_DATA_KEY, the file whose key seals (made on first use), before ``material``."""

    material: tuple[str, ...]
    source: str
    dev_file: Path | None = None


def _key_list(raw: str) -> list[str]:
    return [k.strip() for k in raw.split(",") if k.strip()]


def data_keys(environ: Mapping[str, str] | None = None) -> DataKeys:
    """``SECKILL_DATA_KEY`` seals; without it, a key derived from the first
    ``SECKILL_SECRET_KEY`` (in development: a throw-away key kept in the data folder, so that a
    folder outlives the made-up secrets). ``SECKILL_DATA_KEY_PREVIOUS`` (comma-separated) and
    every ``SECKILL_SECRET_KEY`` only open: what a rotation keeps until ``seckill secrets
    rotate`` has sealed every row again. ConfigError for a key under 32 bytes."""
    env = _environ(environ)
    own = _key_list(env.get("SECKILL_DATA_KEY", ""))
    previous = _key_list(env.get("SECKILL_DATA_KEY_PREVIOUS", ""))
    signing = _key_list(env.get("SECKILL_SECRET_KEY", ""))
    if len(own) > 1:
        raise ConfigError("SECKILL_DATA_KEY holds one key; older ones go in "
                          "SECKILL_DATA_KEY_PREVIOUS")
    for name, values in (("SECKILL_DATA_KEY", own), ("SECKILL_DATA_KEY_PREVIOUS", previous)):
        if any(len(v.encode()) < MIN_KEY_BYTES for v in values):
            raise ConfigError(f"{name} must be at least {MIN_KEY_BYTES} bytes")
    if own:
        return DataKeys((own[0], *previous, *signing), "SECKILL_DATA_KEY")
    if (env.get("SECKILL_ENV") or "").strip().lower() == "development":
        file = data_dir_from(env) / DATA_KEY_FILE
        return DataKeys((*previous, *signing), f"the development key {file}", dev_file=file)
    if not signing:  # an operator's command that may touch no secret: refused if it does
        return DataKeys((), "nowhere: neither SECKILL_DATA_KEY nor SECKILL_SECRET_KEY is set")
    return DataKeys((signing[0], *previous, *signing[1:]), "SECKILL_SECRET_KEY")


def database_timeout(environ: Mapping[str, str] | None = None) -> float:
    """``SECKILL_DATABASE_TIMEOUT``: seconds any wait on the database may take (connecting, a
    statement, a lock, a free pooled connection); default 3. Then the caller gets an error,
    which a route answers with 503 ``unavailable`` (``"detail": "database"``)."""
    return _float(_environ(environ), "SECKILL_DATABASE_TIMEOUT", 3.0)


def webhook_nice(environ: Mapping[str, str] | None = None) -> int:
    """``SECKILL_WEBHOOK_NICE``: how many steps the webhooks' dispatcher lowers its own CPU
    priority (``nice``) at start, 0..19; default 10. Under a sale's crowd the gateway keeps
    the CPU and the shop hears of the orders a little later; when the crowd is gone, the
    dispatcher has the CPU to itself."""
    nice = _int(_environ(environ), "SECKILL_WEBHOOK_NICE", 10)
    if nice > 19:
        raise ConfigError(f"SECKILL_WEBHOOK_NICE must be <= 19, got {nice}")
    return nice


def webhook_dispatch(environ: Mapping[str, str] | None = None) -> tuple[float, int]:
    """The webhooks' dispatcher: ``SECKILL_WEBHOOK_RETRY_HOURS`` (a delivery still
    failing this long after its first attempt is marked failed; default 24) and
    ``SECKILL_WEBHOOK_RETENTION`` (seconds delivered events are kept; default 604800)."""
    env = _environ(environ)
    return (_float(env, "SECKILL_WEBHOOK_RETRY_HOURS", 24.0),
            _int(env, "SECKILL_WEBHOOK_RETENTION", 7 * 86_400, minimum=1))


def port_slice(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``SECKILL_PORT_SLICE`` as ``n/m``: the free ports this process draws for the servers
    it starts (Valkey, gunicorn, nginx, the exporter) are only those of slice ``n`` of ``m``
    (:func:`seckill.ops.stack.embedded.in_slice`), so that ``m`` runs on one machine drawing ports
    at the same moment never draw the same one (the test suite's parallel workers set it;
    also two drills side by side). Unset: ``(0, 1)``, every port. ConfigError unless
    ``0 <= n < m`` and ``m`` divides 5000 (a cluster node's bus port, its port + 10000, is
    then in its node's slice)."""
    raw = _environ(environ).get("SECKILL_PORT_SLICE") or "0/1"
    index, _, count = raw.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)
            and 5_000 % int(count) == 0):
        raise ConfigError(f"SECKILL_PORT_SLICE must be n/m with 0 <= n < m and m dividing "
                          f"5000 (e.g. 1/2), got {raw!r}")
    return int(index), int(count)
