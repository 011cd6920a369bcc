"""What a benchmark run starts: one embedded Valkey and gunicorn servers, on free ports.

Every server is a real gunicorn with the project's ``gunicorn.conf.py`` (gevent workers) and
the **same** worker count and ``worker_connections``, whatever app it serves:

* ``gateway``: ``wsgi:app``, configured as ``seckill up`` runs it (production mode, durability
  ``local`` = WAITAOF after each purchase, the default per-user rate limit, Prometheus
  multiprocess files), minus nginx and the orders worker;
* ``hello``: ``bench.baselines:hello_app()``;
* ``seed``: ``bench.baselines:seed_app()`` (the script-only endpoint and the alternatives).

Everything listens on 127.0.0.1. Servers are our children, stopped by PID (SIGTERM, then
SIGKILL), and die with us (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import resource
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from seckill.ops.stack.embedded import EmbeddedValkey, free_port
from tests.support.servers import REPO_ROOT, running_server

JWT_SECRET = "bench-jwt-secret-93b1f0c2d4e6a8b0c1d3e5f7a9b2c4d6"
URL_KEY = "bench-url-key-6f1c2a9e4b7d8035a1c4e6f8092b3d5e"
ADMIN_TOKEN = "bench-admin-token-5a7c9e1b3d5f7a9c"
URL_TTL = 3600  # purchase URLs minted before a run must outlive it
GATEWAY_PREFIX = "bench"
SEED_PREFIX = "bseed"

APPS = {
    "gateway": "wsgi:app",
    "hello": "bench.baselines:hello_app()",
    "seed": "bench.baselines:seed_app()",
}


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE (children inherit it) towards ``wanted``;
    return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return int(soft)


@dataclass
class Server:
    name: str
    base: str
    process: subprocess.Popen[bytes]
    log_file: Path


@dataclass
class Stack:
    valkey: EmbeddedValkey
    client: redis.Redis  # for the harness: setup, checks, INFO
    folder: Path
    servers: dict[str, Server] = field(default_factory=dict)

    def base(self, name: str) -> str:
        return self.servers[name].base


def server_env(redis_url: str, folder: Path, name: str, workers: int,
               worker_connections: int) -> dict[str, str]:
    """The environment of one benchmark server: the same gunicorn settings for every app; the
    gateway's as ``seckill up`` sets it (its data and metrics files in ``folder``)."""
    env = {
        "GUNICORN_WORKERS": str(workers),
        "GUNICORN_WORKER_CONNECTIONS": str(worker_connections),
        "GUNICORN_GRACEFUL_TIMEOUT": "5",
        # gunicorn.conf.py's own default, set here so an inherited value cannot differ.
        "SECKILL_REDIS_MAX_CONNECTIONS": str(min(worker_connections, 500)),
        "REDIS_URL": redis_url,
        "GUNICORN_ACCESSLOG": "",
    }
    if name == "gateway":
        metrics_dir = folder / "prometheus"
        metrics_dir.mkdir(exist_ok=True)
        env.update({
            # Never a database named in the caller's environment.
            "DATABASE_URL": f"sqlite:///{folder / 'data' / 'orders.db'}",
            "SECKILL_ENV": "production",
            "SECKILL_SECRET_KEY": URL_KEY,
            "SECKILL_JWT_SECRET": JWT_SECRET,
            "SECKILL_ADMIN_TOKEN": ADMIN_TOKEN,
            "SECKILL_KEY_PREFIX": GATEWAY_PREFIX,
            "SECKILL_DATA_DIR": str(folder / "data"),
            "SECKILL_URL_TTL": str(URL_TTL),
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        })
    else:
        env["SECKILL_KEY_PREFIX"] = SEED_PREFIX
    return env


@contextlib.contextmanager
def started(names: list[str], workers: int, worker_connections: int,
            appendfsync: str = "always",
            gateway_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """Valkey and the named servers, up until the block ends. ``gateway_env`` is added to
    the gateway's environment (experiments: ``SECKILL_SOLD_OUT_TTL=60``, ...)."""
    with contextlib.ExitStack() as stop, \
            tempfile.TemporaryDirectory(prefix="seckill-bench-") as tmp:
        folder = Path(tmp)
        (folder / "data").mkdir()
        valkey = stop.enter_context(EmbeddedValkey(folder / "valkey", appendfsync=appendfsync))
        client = redis.Redis.from_url(valkey.url, decode_responses=True, socket_timeout=30)
        stop.callback(client.close)
        stack = Stack(valkey=valkey, client=client, folder=folder)
        for name in names:
            env = server_env(valkey.url, folder, name, workers, worker_connections)
            if name == "gateway":
                env.update(gateway_env or {})
            stack.servers[name] = start_gunicorn(stop, name, env, folder)
        yield stack


def start_gunicorn(stop: contextlib.ExitStack, name: str, env: dict[str, str], folder: Path,
                   app: str | None = None, cwd: Path = REPO_ROOT) -> Server:
    """A gunicorn serving ``app`` (default: ``APPS[name]``) with the ``gunicorn.conf.py`` of
    ``cwd`` (the repository; another checkout serves that checkout's code, since the current
    directory comes first on ``sys.path``) on a free 127.0.0.1 port, up (``/healthz``
    answers) until ``stop`` closes; its log in ``folder/<name>.log``."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_file = folder / f"{name}.log"
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
               app or APPS[name], "--bind", f"127.0.0.1:{port}"]
    process = stop.enter_context(running_server(
        command, f"{base}/healthz", env=env, cwd=cwd, name=f"gunicorn-{name}",
        log_file=log_file, startup_timeout=60,
    ))
    return Server(name, base, process, log_file)


def worker_rss(server: Server) -> list[int]:
    """Resident set size in bytes of each gunicorn worker of ``server`` (psutil)."""
    import psutil

    try:
        master = psutil.Process(server.process.pid)
        return sorted(child.memory_info().rss for child in master.children())
    except psutil.Error:
        return []


def server_problems(log_file: Path) -> list[str]:
    """Lines of a gunicorn log that say something went wrong (tracebacks, worker timeouts)."""
    try:
        lines = log_file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return [f"{log_file.name} could not be read"]
    flags = ("Traceback", "[ERROR]", "[CRITICAL]", "WORKER TIMEOUT", "Exception")
    return [line for line in lines if any(flag in line for flag in flags)]
