"""The secrets the database holds, sealed at rest (seckill/sql/sealing.py, sealed_rows.py).

A webhook's signing secret, a person-limited activity's salt, a draw's seed and a red-envelope
split's seed are stored sealed under a key from the environment: a copy of the database
gives none of them away. Rows written before sealing are read as they are and sealed by
``seckill secrets rotate`` (and ``seckill up``'s start); a rotation keeps the old key opening
until the sweep has sealed every row under the new one, then the old key can go; a key that
does not open the stored secrets is refused with a message that names key ids, never keys.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from seckill.config import ConfigError, Settings, data_keys
from seckill.domain.activities import Activity
from seckill.ops.cli import main
from seckill.ops.stack.up import seal_at_start
from seckill.sql.book import OrderBook
from seckill.sql.engine import make_engine
from seckill.sql.sealed_rows import PLAIN, census, check, reseal
from seckill.sql.sealing import (
    DataKeyError,
    Keyring,
    derive_key,
    is_sealed,
    key_id,
    open_sealed,
    seal,
)
from seckill.sql.webhooks import WebhookBook
from seckill.webhooks.run import run_dispatcher
from tests.support.api import create_activity, expect
from tests.support.tokens import ADMIN, URL_KEY

pytestmark = pytest.mark.database

SECRET = "whsec_" + "c2VhbGVkLWF0LXJlc3QtdGVzdC1zZWNyZXQtMDEyMzQ1Njc="  # 36 bytes
KEY_A = "data-key-a-0123456789abcdef0123456789abcdef"
KEY_B = "data-key-b-0123456789abcdef0123456789abcdef"
KEY_C = "data-key-c-0123456789abcdef0123456789abcdef"
DRAW_SEED = "d" * 64
SALT = "5a" * 32


def _loaded(book: OrderBook, aid: str) -> Activity:
    found = book.load_activity(aid)
    assert found is not None
    return found


def _files(database_url: str) -> bytes:
    """Every byte SQLite keeps of the database (the file, its WAL)."""
    path = Path(sa.engine.make_url(database_url).database or "")
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def _rows(database_url: str) -> dict[str, Any]:
    """The stored secrets, as the database holds them: column -> value, every row."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            found: dict[str, Any] = {}
            for row in conn.execute(sa.text("SELECT id, draw_seed, person_salt, seed, "
                                            "sealed_seed FROM seckill_activities")):
                found.update({f"{row.id}.draw_seed": row.draw_seed,
                              f"{row.id}.person_salt": row.person_salt,
                              f"{row.id}.seed": row.seed, f"{row.id}.sealed_seed": row.sealed_seed})
            if sa.inspect(engine).has_table("seckill_webhook_endpoints"):
                for row in conn.execute(
                        sa.text("SELECT id, secret FROM seckill_webhook_endpoints")):
                    found[f"{row.id}.secret"] = row.secret
        return found
    finally:
        engine.dispose()


def _plain_rows(database_url: str) -> None:
    """Rows as a version before sealing wrote them: every secret in plain text."""
    engine = make_engine(database_url)
    OrderBook(engine, Keyring.from_material([KEY_A])).ready()
    WebhookBook(engine, Keyring.from_material([KEY_A])).page(None, 1)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO seckill_activities (id, name, kind, starts_ms, ends_ms, total, "
            "per_user_limit, created_ms, admission, draw_seed, limit_by, person_salt) VALUES "
            "('old-draw', 'Old', 'stock', 1, 2, 5, 1, 1, 'draw', :seed, 'person', :salt)"),
            {"seed": DRAW_SEED, "salt": SALT})
        conn.execute(sa.text(
            "INSERT INTO seckill_activities (id, name, kind, starts_ms, ends_ms, total, "
            "per_user_limit, created_ms, amount, packet_count, seed) VALUES "
            "('old-packets', 'Old', 'packets', 1, 2, 5, 1, 1, 500, 5, 4242424242424242)"))
        conn.execute(sa.text(
            "INSERT INTO seckill_webhook_endpoints (id, url, events, secret, created_ms) "
            "VALUES ('ep_old', 'http://10.0.0.7/h', '[\"*\"]', :secret, 1)"), {"secret": SECRET})
    engine.dispose()


def _sealed_under_a(database_url: str) -> tuple[sa.Engine, str]:
    """The rows of :func:`_plain_rows`, sealed under KEY_A; an engine, and KEY_A's id."""
    _plain_rows(database_url)
    engine = make_engine(database_url)
    keys = Keyring.from_material([KEY_A])
    reseal(engine, keys)
    return engine, keys.current


def _env(database_url: str, tmp_path: Path, **keys: str) -> dict[str, str]:
    return {"SECKILL_ENV": "production", "DATABASE_URL": database_url,
            "SECKILL_DATA_DIR": str(tmp_path / "data"), **keys}


def _command(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str) -> int:
    for name in ("SECKILL_DATA_KEY", "SECKILL_DATA_KEY_PREVIOUS", "SECKILL_SECRET_KEY",
                 "SECKILL_ENV", "DATABASE_URL", "SECKILL_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return main(list(argv))


# -- the pure functions -----------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(plain=st.text(max_size=200), context=st.text(min_size=1, max_size=80),
       other=st.text(min_size=1, max_size=80))
def test_a_sealed_value_opens_with_its_key_and_context_only(plain, context, other):
    key, wrong = derive_key(KEY_A), derive_key(KEY_B)
    stored = seal(key, plain, context)
    assert is_sealed(stored) and stored.isascii()
    assert open_sealed({key_id(key): key}, stored, context) == plain
    if len(plain) >= 8:
        assert plain not in stored
    if other != context:
        with pytest.raises(DataKeyError):
            open_sealed({key_id(key): key}, stored, other)
    with pytest.raises(DataKeyError):  # another key under the same id does not open it
        open_sealed({key_id(key): wrong}, stored, context)
    with pytest.raises(DataKeyError, match=key_id(key)):  # its key missing: named by id
        open_sealed({key_id(wrong): wrong}, stored, context)


def test_the_key_is_derived_never_the_configured_material():
    assert derive_key(URL_KEY) != URL_KEY.encode()[:32]
    assert len(derive_key(URL_KEY)) == 32
    assert seal(derive_key(KEY_A), "x", "c") != seal(derive_key(KEY_A), "x", "c")  # nonces
    assert Keyring.from_material([KEY_A]).open("whsec_plain", "c") == "whsec_plain"


def test_where_the_key_comes_from():
    signing = data_keys({"SECKILL_SECRET_KEY": f"{URL_KEY},{KEY_C}"})
    assert signing.material == (URL_KEY, KEY_C) and signing.source == "SECKILL_SECRET_KEY"
    own = data_keys({"SECKILL_SECRET_KEY": URL_KEY, "SECKILL_DATA_KEY": KEY_B,
                     "SECKILL_DATA_KEY_PREVIOUS": KEY_A})
    assert own.material == (KEY_B, KEY_A, URL_KEY) and own.source == "SECKILL_DATA_KEY"
    with pytest.raises(ConfigError, match="SECKILL_DATA_KEY must be at least 32 bytes"):
        data_keys({"SECKILL_DATA_KEY": "short"})
    with pytest.raises(ConfigError, match="SECKILL_DATA_KEY_PREVIOUS"):
        data_keys({"SECKILL_DATA_KEY": KEY_A, "SECKILL_DATA_KEY_PREVIOUS": "short"})
    with pytest.raises(DataKeyError, match="SECKILL_DATA_KEY"):
        Keyring(data_keys({})).seal("x", "c")


def test_a_development_folder_keeps_its_throw_away_key(tmp_path):
    env = {"SECKILL_ENV": "development", "SECKILL_DATA_DIR": str(tmp_path / "d")}
    first, second = Keyring(data_keys(env)), Keyring(data_keys(env))
    stored = first.seal("secret", "c")
    assert second.open(stored, "c") == "secret"
    made = tmp_path / "d" / "data.key"
    assert made.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in made.parent.iterdir()] == ["data.key"]


# -- through the gateway ----------------------------------------------------------------


def test_a_copy_of_the_database_holds_no_secret(make_app, database_url: str):
    client = make_app(SECKILL_PERSON_CLAIM="https://shop.example/person").test_client()
    made = expect(client.post("/admin/webhooks", headers=ADMIN, json={
        "url": "http://10.0.0.7:8000/hooks", "events": ["*"], "secret": SECRET}), 201)
    assert made["secret"] == SECRET
    draw = create_activity(client, admission="draw", queue_opens_at="2030-01-01T00:00:00Z",
                           starts_at="2030-01-02T00:00:00Z", ends_at="2030-01-03T00:00:00Z")
    person = create_activity(client, limit_by="person")
    packets = create_activity(client, kind="packets", amount=1000, count=10)
    book = client.application.extensions["seckill"].book
    secrets = [SECRET, _loaded(book, draw["id"]).draw_seed,
               _loaded(book, person["id"]).person_salt]
    seed = _loaded(book, packets["id"]).seed
    assert None not in secrets and seed is not None
    stored = _rows(database_url)
    assert all(is_sealed(stored[k]) for k in (
        f"{made['id']}.secret", f"{draw['id']}.draw_seed", f"{person['id']}.person_salt",
        f"{packets['id']}.sealed_seed"))
    assert stored[f"{packets['id']}.seed"] is None
    assert not {str(seed)} & {str(v) for v in stored.values()}
    if database_url.startswith("sqlite"):
        raw = _files(database_url)
        for secret in secrets:
            assert secret is not None and secret.encode() not in raw
        assert str(seed).encode() not in raw
        assert SECRET.removeprefix("whsec_").encode() not in raw
    # Read back through the API and the books: the secret as registered.
    assert WebhookBook(book.engine, book.keys).find(made["id"]).secret == SECRET


def test_an_endpoint_and_an_activity_never_show_a_secret_in_their_repr(client, settings):
    expect(client.post("/admin/webhooks", headers=ADMIN, json={
        "url": "http://10.0.0.7:8000/hooks", "events": ["*"], "secret": SECRET}), 201)
    book = client.application.extensions["seckill"].book
    found, _ = WebhookBook(book.engine, book.keys).page(None, 10)
    assert SECRET not in repr(found)


# -- rows written before sealing, rotation, a wrong key ----------------------------------


def test_rows_written_before_sealing_are_read_then_sealed_by_the_rotation(
        database_url, tmp_path, monkeypatch, capsys):
    _plain_rows(database_url)
    keys = Keyring.from_material([KEY_A])
    engine = make_engine(database_url)
    book = OrderBook(engine, keys).ready()
    old = _loaded(book, "old-draw")
    assert (old.draw_seed, old.person_salt) == (DRAW_SEED, SALT)
    assert _loaded(book, "old-packets").seed == 4242424242424242
    assert WebhookBook(engine, keys).find("ep_old").secret == SECRET
    assert census(engine) == {PLAIN: 4}

    env = _env(database_url, tmp_path, SECKILL_DATA_KEY=KEY_A)
    assert _command(monkeypatch, env, "secrets", "rotate") == 0
    assert "sealed 4 stored secret(s)" in capsys.readouterr().out
    stored = _rows(database_url)
    assert stored["old-packets.seed"] is None
    assert all(is_sealed(stored[k]) for k in ("old-draw.draw_seed", "old-draw.person_salt",
                                              "old-packets.sealed_seed", "ep_old.secret"))
    assert census(engine) == {keys.current: 4}
    if database_url.startswith("sqlite"):  # the plain text is gone from the file too
        raw = _files(database_url)
        assert not any(s.encode() in raw for s in (DRAW_SEED, SALT, SECRET))
    fresh = OrderBook(engine, Keyring.from_material([KEY_A]))
    assert _loaded(fresh, "old-draw").draw_seed == DRAW_SEED
    assert _loaded(fresh, "old-packets").seed == 4242424242424242
    # Idempotent: a second run finds nothing to do.
    assert _command(monkeypatch, env, "secrets", "rotate") == 0
    assert "sealed 0 stored secret(s)" in capsys.readouterr().out
    engine.dispose()


def test_a_rotation_moves_every_row_to_the_new_key_and_the_old_key_can_go(
        database_url, tmp_path, monkeypatch, capsys):
    engine, old_id = _sealed_under_a(database_url)
    # The new key, the old one kept as previous: everything still opens.
    rotating = Keyring.from_material([KEY_B, KEY_A])
    OrderBook(engine, rotating).ready()
    assert _loaded(OrderBook(engine, rotating), "old-draw").draw_seed == DRAW_SEED
    env = _env(database_url, tmp_path, SECKILL_DATA_KEY=KEY_B, SECKILL_DATA_KEY_PREVIOUS=KEY_A)
    assert _command(monkeypatch, env, "secrets", "status") == 0
    assert f"{old_id}: 4 secret(s), an older key" in capsys.readouterr().out
    assert _command(monkeypatch, env, "secrets", "rotate") == 0
    capsys.readouterr()
    new_id = rotating.current
    assert census(engine) == {new_id: 4}
    # The old key removed: the new one alone opens every row.
    alone = Keyring.from_material([KEY_B])
    OrderBook(engine, alone).ready()
    assert _loaded(OrderBook(engine, alone), "old-draw").person_salt == SALT
    assert WebhookBook(engine, alone).find("ep_old").secret == SECRET
    env = _env(database_url, tmp_path, SECKILL_DATA_KEY=KEY_B)
    assert _command(monkeypatch, env, "secrets", "status") == 0
    assert f"{new_id}: 4 secret(s), the current key" in capsys.readouterr().out
    engine.dispose()


def test_a_rotation_beside_writers_loses_nothing(database_url):
    """The sweep's compare-and-set: rows written and sealed again by others meanwhile."""
    _plain_rows(database_url)
    engine = make_engine(database_url)
    new = Keyring.from_material([KEY_B, KEY_A])
    writers = [threading.Thread(target=reseal, args=(engine, new)) for _ in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert census(engine) == {new.current: 4}
    assert _loaded(OrderBook(engine, new), "old-draw").draw_seed == DRAW_SEED
    engine.dispose()


def test_a_key_that_does_not_open_the_stored_secrets_is_refused_clearly(
        database_url, tmp_path, monkeypatch, capsys):
    engine, sealed_by = _sealed_under_a(database_url)
    wrong = Keyring.from_material([KEY_C])
    with pytest.raises(DataKeyError, match=f"key\\(s\\) {sealed_by} \\(4 values\\)") as refused:
        check(engine, wrong)
    message = str(refused.value)
    assert "SECKILL_DATA_KEY_PREVIOUS" in message
    assert not any(s in message for s in (KEY_A, KEY_C, DRAW_SEED, SALT, SECRET))
    with pytest.raises(DataKeyError):
        OrderBook(engine, wrong).ready()
    with pytest.raises(DataKeyError):
        WebhookBook(engine, wrong).page(None, 10)
    with pytest.raises(DataKeyError):  # the dispatcher refuses to start
        run_dispatcher(database_url, stop=threading.Event(), keys=wrong)
    settings = Settings.from_env({**_env(database_url, tmp_path, SECKILL_DATA_KEY=KEY_C),
                                  "SECKILL_SECRET_KEY": URL_KEY, "SECKILL_JWT_SECRET": URL_KEY,
                                  "SECKILL_ADMIN_TOKEN": "admin-token"})
    with pytest.raises(ConfigError, match=sealed_by):  # seckill up refuses to start
        seal_at_start(settings)
    env = _env(database_url, tmp_path, SECKILL_DATA_KEY=KEY_C)
    assert _command(monkeypatch, env, "secrets", "rotate") == 2
    assert sealed_by in capsys.readouterr().err
    assert _command(monkeypatch, env, "secrets", "status") == 1
    assert "NO KEY OF THE ENVIRONMENT OPENS THEM" in capsys.readouterr().out
    # Nothing was written under the wrong key.
    assert census(engine) == {sealed_by: 4}
    engine.dispose()


def test_an_older_database_s_narrow_secret_columns_are_widened(database_url):
    """Before sealing, the seeds and salts were VARCHAR(64), the webhook secret (128): a
    sealed value is longer, and PostgreSQL enforces the length."""
    engine = make_engine(database_url)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "CREATE TABLE seckill_activities (id VARCHAR(64) PRIMARY KEY, name VARCHAR(200) "
            "NOT NULL, kind VARCHAR(16) NOT NULL DEFAULT 'stock', starts_ms BIGINT NOT NULL, "
            "ends_ms BIGINT NOT NULL, total BIGINT, per_user_limit INTEGER NOT NULL DEFAULT 1, "
            "created_ms BIGINT NOT NULL, draw_seed VARCHAR(64), person_salt VARCHAR(64))"))
        conn.execute(sa.text(
            "INSERT INTO seckill_activities (id, name, starts_ms, ends_ms, total, created_ms, "
            "draw_seed) VALUES ('old', 'Old', 1, 2, 5, 1, :seed)"), {"seed": DRAW_SEED})
    keys = Keyring.from_material([KEY_A])
    OrderBook(engine, keys).ready()
    columns = {c["name"]: c["type"] for c in sa.inspect(engine).get_columns("seckill_activities")}
    if engine.dialect.name == "postgresql":
        assert getattr(columns["draw_seed"], "length", None) == 255
        assert getattr(columns["person_salt"], "length", None) == 255
    assert reseal(engine, keys).sealed == 1
    assert _loaded(OrderBook(engine, keys), "old").draw_seed == DRAW_SEED
    engine.dispose()
