"""The order database (SQLAlchemy Core). SQLite by default, PostgreSQL in production."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url


def make_engine(url: str) -> sa.Engine:
    """An engine for ``url``: SQLite (its folder created), or pooled (PostgreSQL via psycopg 3)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return sa.create_engine(url, connect_args={"timeout": 5})
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, not psycopg2
    return sa.create_engine(parsed, pool_pre_ping=True, pool_size=5, max_overflow=5)


def ping(engine: sa.Engine) -> None:
    """Run ``SELECT 1``: raises if the database cannot be reached."""
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
