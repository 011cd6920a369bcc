"""Configuration from the environment: no production secret has a default, keys are long
enough for HS256, development makes up secrets and says so, every value is coerced or refused
with the variable's name."""

from __future__ import annotations

from typing import Any

import pytest

from edge.identity import mint_user_token
from seckill.config import MIN_KEY_BYTES, SECRET_VARS, ConfigError, Settings
from seckill.web.app import create_app
from tests.support.api import expect
from tests.support.tokens import ADMIN_TOKEN, JWT_SECRET, URL_KEY

SECRETS = {
    "SECKILL_SECRET_KEY": URL_KEY,
    "SECKILL_JWT_SECRET": JWT_SECRET,
    "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
}


def production(**overrides: str) -> dict[str, str]:
    env = {"SECKILL_ENV": "production", **SECRETS, "REDIS_URL": "redis://127.0.0.1:1/0"}
    env.update(overrides)
    return env


def refused(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as error:
        Settings.from_env(env)
    return str(error.value)


@pytest.mark.parametrize("name", SECRET_VARS)
@pytest.mark.parametrize("how", ["unset", "empty", "blank"])
def test_production_refuses_to_start_without_each_secret(name, how):
    env = production()
    if how == "unset":
        del env[name]
    else:
        env[name] = "" if how == "empty" else "   "
    assert name in refused(env)


@pytest.mark.parametrize("name", SECRET_VARS)
def test_production_is_the_default(name):
    env = production()
    del env["SECKILL_ENV"]
    del env[name]
    assert name in refused(env)


def test_create_app_refuses_too(tmp_path):
    env = production(SECKILL_DATA_DIR=str(tmp_path))
    del env["SECKILL_JWT_SECRET"]
    with pytest.raises(ConfigError, match="SECKILL_JWT_SECRET"):
        create_app(env)


@pytest.mark.parametrize("name", ["SECKILL_SECRET_KEY", "SECKILL_JWT_SECRET"])
def test_short_keys_are_refused(name):
    short = "k" * (MIN_KEY_BYTES - 1)
    assert name in refused(production(**{name: short}))
    # Bytes, not characters: 16 two-byte characters are 32 bytes.
    assert Settings.from_env(production(**{name: "\u00e9" * 16}))
    assert Settings.from_env(production(**{name: "k" * MIN_KEY_BYTES}))


def test_every_rotated_url_key_must_be_long_enough():
    good = "n" * MIN_KEY_BYTES
    assert "SECKILL_SECRET_KEY" in refused(production(SECKILL_SECRET_KEY=f"{good},short"))
    assert "SECKILL_SECRET_KEY" in refused(production(SECKILL_SECRET_KEY=" , ,"))


def test_key_rotation_list_newest_first():
    new, old = "n" * 40, "o" * 40
    settings = Settings.from_env(production(SECKILL_SECRET_KEY=f" {new} , {old} ,"))
    assert settings.secret_keys == (new, old)


def test_development_generates_secrets_and_says_so(capsys, tmp_path):
    env = {"SECKILL_ENV": "development", "SECKILL_DATA_DIR": str(tmp_path)}
    first = Settings.from_env(env)
    second = Settings.from_env(env)
    # The scraper's token too (optional in production: the operator token opens /metrics).
    assert set(first.generated) == {*SECRET_VARS, "SECKILL_METRICS_TOKEN"}
    assert first.metrics_token and first.metrics_token != first.admin_token
    for value in (first.jwt_secret, first.admin_token, *first.secret_keys):
        assert len(value.encode()) >= MIN_KEY_BYTES
    assert first.jwt_secret != first.admin_token
    assert first.jwt_secret != second.jwt_secret  # random, not a hidden default
    first.announce_generated()
    printed = capsys.readouterr().err
    for name in first.generated:
        assert f"{name}={first.secret_for(name)}" in printed


def test_the_metrics_token_is_optional_in_production():
    # Unset, only the operator token opens /metrics; production still starts.
    assert Settings.from_env(production()).metrics_token is None
    assert Settings.from_env(production(SECKILL_METRICS_TOKEN=" scrape ")).metrics_token \
        == "scrape"


def test_development_keeps_the_secrets_it_is_given(capsys):
    env = {"SECKILL_ENV": "development", "SECKILL_JWT_SECRET": JWT_SECRET}
    settings = Settings.from_env(env)
    assert settings.jwt_secret == JWT_SECRET
    assert set(settings.generated) == {"SECKILL_SECRET_KEY", "SECKILL_ADMIN_TOKEN",
                                       "SECKILL_METRICS_TOKEN"}
    settings.announce_generated()
    assert JWT_SECRET not in capsys.readouterr().err


def test_production_prints_nothing(capsys):
    Settings.from_env(production()).announce_generated()
    assert capsys.readouterr().err == ""


def test_a_development_gateway_works_with_what_it_printed(env, capsys):
    dev = {k: v for k, v in env.items() if k not in SECRET_VARS}
    dev["SECKILL_ENV"] = "development"
    app = create_app(dev)
    try:
        printed = dict(
            line.strip().split("=", 1) for line in capsys.readouterr().err.splitlines()
            if line.strip().startswith("SECKILL_")
        )
        assert set(printed) == set(SECRET_VARS)
        client = app.test_client()
        token = mint_user_token("alice", printed["SECKILL_JWT_SECRET"])
        expect(client.get("/seckill/nosuch/order", headers={"Authorization": f"Bearer {token}"}),
               404, "unknown_activity")
        admin = {"Authorization": f"Bearer {printed['SECKILL_ADMIN_TOKEN']}"}
        expect(client.get("/admin/activities/nosuch/stats", headers=admin), 404,
               "unknown_activity")
    finally:
        app.extensions["seckill"].close()


def test_defaults():
    settings = Settings.from_env(production())
    assert settings.env == "production"
    assert settings.url_ttl == 60
    assert settings.user_rate == "5/second"
    assert settings.user_rates == ((5, 1000),)
    assert (settings.status_rate, settings.admin_rate) == ("10/second", "100/second")
    assert (settings.worker_batch, settings.worker_block_ms,
            settings.worker_claim_idle_ms) == (500, 500, 30_000)
    assert settings.generated == ()
    assert settings.behind_proxy is False


@pytest.mark.parametrize(("name", "raw", "attribute", "value"), [
    ("SECKILL_URL_TTL", "30", "url_ttl", 30),
    ("SECKILL_META_TTL", "0.25", "meta_ttl", 0.25),
    ("SECKILL_REDIS_TIMEOUT", "2", "redis_timeout", 2.0),
    ("SECKILL_REDIS_MAX_CONNECTIONS", "64", "redis_max_connections", 64),
    ("SECKILL_CLOCK_SKEW", "0", "clock_skew", 0),
    ("SECKILL_BEHIND_PROXY", "yes", "behind_proxy", True),
    ("SECKILL_BEHIND_PROXY", "0", "behind_proxy", False),
    ("SECKILL_USER_RATE", "10/second;100/minute", "user_rate", "10/second;100/minute"),
    ("SECKILL_USER_RATE", "10/second;100/minute", "user_rates", ((10, 1000), (100, 60000))),
    ("SECKILL_STATUS_RATE", "2/second", "status_rate", "2/second"),
    ("SECKILL_ADMIN_RATE", "30/minute", "admin_rate", "30/minute"),
    ("SECKILL_WORKER_BATCH", "25", "worker_batch", 25),
    ("SECKILL_WORKER_BLOCK_MS", "100", "worker_block_ms", 100),
    ("SECKILL_WORKER_CLAIM_IDLE_MS", "300", "worker_claim_idle_ms", 300),
    ("SECKILL_ENV", " Production ", "env", "production"),
    ("SECKILL_KEY_PREFIX", "shop1", "key_prefix", "shop1"),
])
def test_typed_values(name, raw, attribute, value):
    settings = Settings.from_env(production(**{name: raw}))
    got: Any = getattr(settings, attribute)
    assert got == value
    assert type(got) is type(value)


@pytest.mark.parametrize(("name", "raw"), [
    ("SECKILL_URL_TTL", "sixty"),
    ("SECKILL_URL_TTL", "1.5"),
    ("SECKILL_URL_TTL", "0"),
    ("SECKILL_URL_TTL", "-5"),
    ("SECKILL_META_TTL", "soon"),
    ("SECKILL_META_TTL", "0"),
    ("SECKILL_META_TTL", "-1"),
    ("SECKILL_META_TTL", "nan"),
    ("SECKILL_META_TTL", "inf"),
    ("SECKILL_REDIS_TIMEOUT", "-inf"),
    ("SECKILL_REDIS_TIMEOUT", "1s"),
    ("SECKILL_REDIS_MAX_CONNECTIONS", "0"),
    ("SECKILL_REDIS_MAX_CONNECTIONS", "many"),
    ("SECKILL_CLOCK_SKEW", "-1"),
    ("SECKILL_BEHIND_PROXY", "maybe"),
    ("SECKILL_ENV", "staging"),
    ("SECKILL_USER_RATE", "lots"),
    ("SECKILL_USER_RATE", "5 a second"),
    ("SECKILL_USER_RATE", "-1/second"),
    ("SECKILL_STATUS_RATE", "often"),
    ("SECKILL_ADMIN_RATE", "5 per fortnight"),
    ("SECKILL_WORKER_BATCH", "0"),
    ("SECKILL_WORKER_BATCH", "lots"),
    ("SECKILL_WORKER_BLOCK_MS", "-1"),
    ("SECKILL_WORKER_CLAIM_IDLE_MS", "1.5"),
])
def test_coercion_errors_name_the_variable(name, raw):
    assert name in refused(production(**{name: raw}))


def test_the_names_read_without_settings_are_read_by_config_with_their_defaults() -> None:
    """What `seckill up`, `seckill drill`, `seckill token` and gunicorn's worker read before or
    without a gateway's Settings: each name in seckill.config, typed, with its default."""
    from seckill import config

    assert config.nginx_path({}) is None
    assert config.nginx_path({"SECKILL_NGINX": "/opt/nginx"}) == "/opt/nginx"
    assert config.own_redis_url({"REDIS_URL": ""}) is None
    assert config.own_redis_url({"REDIS_URL": "redis://h:1/0"}) == "redis://h:1/0"
    assert config.operator_secrets({}) == ("", "")
    assert config.operator_secrets({"SECKILL_JWT_SECRET": " j ", "SECKILL_ADMIN_TOKEN": "a\n"}) \
        == ("j", "a")
    assert config.graceful_timeout({}) == 10
    assert config.graceful_timeout({"GUNICORN_GRACEFUL_TIMEOUT": "3"}) == 3
    with pytest.raises(ConfigError, match="GUNICORN_GRACEFUL_TIMEOUT must be seconds"):
        config.graceful_timeout({"GUNICORN_GRACEFUL_TIMEOUT": "1.5"})
    assert config.read_deadlines({}) == (10.0, 10.0)
    assert config.read_deadlines({"GUNICORN_BODY_TIMEOUT": "0.5"}) == (10.0, 0.5)
    with pytest.raises(ValueError, match="GUNICORN_HEADER_TIMEOUT must be a number of seconds"):
        config.read_deadlines({"GUNICORN_HEADER_TIMEOUT": "0"})
    assert config.log_component({}) == "gunicorn"
    assert config.log_component({"SECKILL_INSTANCE": "gunicorn-2"}) == "gunicorn-2"
    copied = config.environment({"A": "1"})
    copied["B"] = "2"
    assert config.environment({"A": "1"}) == {"A": "1"}
