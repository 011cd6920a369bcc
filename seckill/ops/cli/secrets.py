"""``seckill secrets status|rotate``: the secrets the database holds, sealed at rest
(seckill/sql/sealing.py), seen by key, and sealed again under the current key.

``rotate`` is the last step of a key's rotation (docs/deployment.md, "Secrets at rest") and
what seals the rows written before sealing existed; ``seckill up`` runs the same sweep at
start (:func:`seckill.ops.stack.up.seal_at_start`). Safe beside a running gateway,
idempotent, one row per transaction (seckill/sql/sealed_rows.py). Neither prints a key or a
secret: key ids only.
"""

from __future__ import annotations

import argparse
from typing import Any

from seckill import config
from seckill.config import ConfigError


def _database_and_keys(environ: dict[str, str] | None = None) -> tuple[str, Any]:
    """The database a command works on and the environment's keyring; ConfigError when the
    environment names no key (a rotation must not seal with a made-up one)."""
    from seckill.sql.sealing import Keyring

    env = config.environment(environ)
    keys = config.data_keys(env)
    if not keys.material and keys.dev_file is None:
        raise ConfigError("set SECKILL_DATA_KEY (or SECKILL_SECRET_KEY) as the gateway has it")
    url = env.get("DATABASE_URL") or f"sqlite:///{config.data_dir_from(env) / 'seckill.db'}"
    return url, Keyring(keys)


def cmd_status(args: argparse.Namespace) -> int:
    """``seckill secrets status``: the stored secrets by the key that sealed them (reads
    only); exit 1 when some do not open with the environment's keys."""
    from seckill.sql.engine import make_engine
    from seckill.sql.sealed_rows import PLAIN, census

    url, keys = _database_and_keys()
    engine = make_engine(url)
    try:
        counts = census(engine)
    finally:
        engine.dispose()
    print(f"sealing key: {keys.current} (from {keys.source})")
    for kid, count in sorted(counts.items()):
        if kid == keys.current:
            state = "the current key"
        elif kid == PLAIN:
            state = "written before sealing: run `seckill secrets rotate`"
        elif kid in keys.ids:
            state = "an older key: run `seckill secrets rotate`"
        else:
            state = "NO KEY OF THE ENVIRONMENT OPENS THEM"
        print(f"  {kid}: {count} secret(s), {state}")
    if not counts:
        print("  (no stored secret)")
    return 1 if any(k != PLAIN and k not in keys.ids for k in counts) else 0


def cmd_rotate(args: argparse.Namespace) -> int:
    """``seckill secrets rotate``: seal every stored secret under the current key."""
    from seckill.sql.engine import make_engine
    from seckill.sql.schema import ensure_schema
    from seckill.sql.sealed_rows import reseal
    from seckill.sql.sealing import DataKeyError

    url, keys = _database_and_keys()
    engine = make_engine(url)
    try:
        ensure_schema(engine)  # the sealed columns, wide enough (an older database's)
        done = reseal(engine, keys)
    except DataKeyError as exc:
        raise ConfigError(str(exc)) from None
    finally:
        engine.dispose()
    print(f"sealed {done.sealed} stored secret(s) under key {keys.current} "
          f"({done.current} already were); every stored secret now opens with it alone")
    return 0


def add_secret_commands(commands: Any) -> None:
    """``seckill secrets ...`` on the command's subparsers."""
    group = commands.add_parser(
        "secrets", help="the secrets the database holds, sealed at rest (SECKILL_DATA_KEY)")
    verbs = group.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser("status", help="the stored secrets by the key that sealed them")
    status.set_defaults(handler=cmd_status)
    rotate = verbs.add_parser(
        "rotate", help="seal every stored secret under the current key (after a key change, "
        "and for rows written before sealing); safe while the gateway runs")
    rotate.set_defaults(handler=cmd_rotate)
