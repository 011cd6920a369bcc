"""``seckill up``: the whole stack in the foreground, as children of a small supervisor.

What runs, in start order (stopped in reverse):

1. the embedded Valkey (unless ``REDIS_URL`` is set): AOF on, data in ``<data>/valkey``;
2. the orders worker (``python -m seckill.worker``): stopped after the gateway, so it stores
   the last orders the gateway decided;
3. the gateway: gunicorn with gevent workers serving ``wsgi:app``. Until nginx is put in
   front (the production-shape issue), one instance listens on ``--port`` itself.

Secrets: in development they are made up once, here, and handed to every child in its
environment, so that all workers sign and verify with the same keys.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from seckill.config import SECRET_VARS, ConfigError, Settings


def project_root() -> Path:
    """The source tree holding ``wsgi.py`` and ``gunicorn.conf.py`` (an editable install)."""
    root = Path(__file__).resolve().parent.parent
    missing = [n for n in ("wsgi.py", "gunicorn.conf.py") if not (root / n).is_file()]
    if missing:
        raise ConfigError(
            f"`seckill up` runs from a source checkout; {', '.join(missing)} not found in "
            f"{root} (install with `pip install -e .`)"
        )
    return root


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


@contextmanager
def _data_dir_lock(data_dir: Path) -> Iterator[None]:
    """One ``seckill up`` per data folder: two would share (and corrupt) one Valkey's files."""
    with open(data_dir / "up.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another `seckill up` is running with the data folder {data_dir}"
            ) from None
        yield


def _nginx_note(args: argparse.Namespace) -> str:
    from seckill.nginx import nginx_binary

    if args.no_nginx:
        return "nginx: off (--no-nginx)"
    if nginx_binary() is None:
        return "nginx is not installed (sudo apt-get install nginx)"
    return "nginx is installed, but `seckill up` does not put it in front yet (coming)"


def _seckill_command() -> str:
    beside = Path(sys.executable).parent / "seckill"
    return str(beside) if beside.exists() else "seckill"


def try_it(settings: Settings, base: str, embedded_redis_url: str | None) -> str:
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC).replace(microsecond=0)
    aid = f"demo-{int(now.timestamp())}"
    body = json.dumps({
        "id": aid, "name": "Demo phone", "total": 100,
        "starts_at": now.isoformat().replace("+00:00", "Z"),
        "ends_at": (now + timedelta(days=1)).isoformat().replace("+00:00", "Z"),
    })
    # REDIS_URL for `seckill activity ...`; a REDIS_URL of your own you have already.
    exports = [] if embedded_redis_url is None else [f"REDIS_URL={embedded_redis_url}"]
    exports.append(f"SECKILL_DATA_DIR={shlex.quote(str(settings.data_dir))}")
    if settings.development:
        exports.append("SECKILL_ENV=development")
        exports += [f"{name}={shlex.quote(settings.secret_for(name))}" for name in SECRET_VARS]
    lines = ["Try it, in another terminal:"]
    if exports:
        lines.append("  export " + " ".join(exports))
    if not settings.development:
        lines.append("  # and SECKILL_JWT_SECRET, SECKILL_ADMIN_TOKEN as the gateway has them")
    lines += [
        f"  curl -s -X POST {base}/admin/activities \\",
        '    -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" '
        "-H 'Content-Type: application/json' \\",
        f"    -d {shlex.quote(body)}",
        f"  TOKEN=$({shlex.quote(_seckill_command())} token alice)",
        f'  URL=$(curl -s -H "Authorization: Bearer $TOKEN" "{base}/seckill/url?activity={aid}"'
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"url\"])')",
        f'  curl -s -X POST -H "Authorization: Bearer $TOKEN" "{base}$URL"',
        f'  curl -s -H "Authorization: Bearer $TOKEN" {base}/seckill/{aid}/order',
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from seckill.embedded import EmbeddedValkey
    from seckill.supervisor import (
        ChildSpec,
        Stopping,
        Supervisor,
        SupervisorError,
        http_ready,
        log,
        redis_ready,
    )

    environ = dict(os.environ)
    settings = Settings.from_env(environ)  # no production secret missing, all values valid
    from seckill.worker import options_from_env

    options_from_env(environ)  # the worker's own settings: refused here, not in a crash loop
    root = project_root()
    _check_port_free(args.host, args.port)
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)

    with _data_dir_lock(data_dir):
        settings.announce_generated()
        # Secrets made up once, here, so that every worker of every instance agrees on them.
        env = {**environ, "SECKILL_ENV": settings.env, "SECKILL_DATA_DIR": str(data_dir)}
        env.update({name: settings.secret_for(name) for name in SECRET_VARS})
        specs: list[ChildSpec] = []

        embedded_url: str | None = None
        if environ.get("REDIS_URL"):
            redis_url = environ["REDIS_URL"]
            redis_note = f"{redact_url(redis_url)} (REDIS_URL)"
        else:
            valkey = EmbeddedValkey(data_dir / "valkey")
            valkey.data_dir.mkdir(parents=True, exist_ok=True)
            redis_url = embedded_url = valkey.url
            redis_note = f"{redis_url} (embedded Valkey, AOF on, data in {valkey.data_dir})"
            specs.append(ChildSpec("valkey", valkey.command(), env=environ,
                                   ready=redis_ready(redis_url), stop_timeout=10))
        env["REDIS_URL"] = redis_url

        metrics_dir = data_dir / "prometheus"  # per-worker files; stale ones would be summed
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

        # Stopped after the gateway (reverse order), so it stores the last orders it was given.
        specs.append(ChildSpec("orders-worker", [sys.executable, "-m", "seckill.worker"],
                               env=env, cwd=root, stop_timeout=15))

        # Until nginx is put in front, one gunicorn instance listens on --port itself.
        graceful_raw = env.get("GUNICORN_GRACEFUL_TIMEOUT") or "10"
        if not graceful_raw.isdigit():
            raise ConfigError(f"GUNICORN_GRACEFUL_TIMEOUT must be seconds, got {graceful_raw!r}")
        graceful = int(graceful_raw)
        name = "gunicorn-1"
        specs.append(ChildSpec(
            name,
            [sys.executable, "-m", "gunicorn", "-c", str(root / "gunicorn.conf.py"),
             "--chdir", str(root), "--bind", f"{args.host}:{args.port}",
             # gunicorn 27's control socket defaults to one path in $HOME for every instance.
             "--no-control-socket", "wsgi:app"],
            env={**env, "GUNICORN_WORKERS": str(args.workers), "SECKILL_INSTANCE": name},
            cwd=root,
            ready=http_ready(args.host, args.port),
            ready_timeout=60,
            stop_timeout=graceful + 5,
        ))
        log(
            f"{_nginx_note(args)}; one gunicorn instance serves {args.host}:{args.port} "
            "directly (operator endpoints included); --instances, --admin-port and --ip-rate "
            "take effect once nginx is in front"
        )

        supervisor = Supervisor(specs)
        supervisor.install_signal_handlers()
        base = f"http://{'127.0.0.1' if args.host == '0.0.0.0' else args.host}:{args.port}"
        try:
            supervisor.start()
            if supervisor.stop_requested:
                raise Stopping()
            print(
                f"seckill is up on {base} (gunicorn, {args.workers} gevent worker(s))\n"
                f"  Redis:    {redis_note}\n"
                f"  Database: {redact_url(settings.database_url)}\n"
                f"  Health:   {base}/healthz    Metrics: {base}/metrics\n"
                "  Stop:     Ctrl-C\n\n" + try_it(settings, base, embedded_url),
                flush=True,
            )
            supervisor.run()
        except Stopping:
            pass
        except SupervisorError as exc:
            supervisor.failure = str(exc)
            log(str(exc))
        finally:
            supervisor.stop()
        log("stopped")
    return 1 if supervisor.failure else 0
