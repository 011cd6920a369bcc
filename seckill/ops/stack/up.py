"""``seckill up``: the whole stack in the foreground, as children of a small supervisor.

What runs, in start order (stopped in reverse):

1. the embedded Valkey (unless ``REDIS_URL`` is set): AOF on, data in ``<data>/valkey``; with
   ``--redis-nodes``, the nodes of an embedded cluster (:mod:`seckill.ops.stack.cluster`);
2. the orders worker (``python -m seckill.worker``): stopped after the gateway, so that it
   stores the last orders the gateway decided;
3. the webhooks' dispatcher (``python -m seckill.webhooks``): stopped before the worker, its
   SIGTERM letting the attempts in flight finish;
4. the gateway: ``--instances`` gunicorn instances (gevent workers serving ``wsgi:app``), each
   on a free loopback port, trusting exactly one proxy hop (``SECKILL_BEHIND_PROXY=1``);
5. the exporter of nginx's counts (``seckill nginx exporter``), while the access log is on;
6. nginx in front (``nginx/nginx.conf.template`` rendered into ``<data>/nginx``, in the
   foreground): ``--port`` public, ``--admin-port`` loopback-only for operators. Stopped first,
   gracefully (SIGQUIT), so the instances behind it see no new request while they stop.

Without nginx (not installed, or ``--no-nginx``) one gunicorn instance listens on ``--port``
itself, operator endpoints included, and trusts no proxy header. The children's commands:
:mod:`seckill.ops.stack.children`.

Development secrets are made up once, here, and handed to every child in its environment, so
that every worker signs and verifies with the same keys. While the stack is up,
``<data>/up.json`` tells the operator's commands where its Redis and database are.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from seckill import logs
from seckill.config import (
    SECRET_VARS,
    ConfigError,
    Settings,
    environment,
    graceful_timeout,
    own_redis_url,
    redact_url,
    webhook_dispatch,
    webhook_nice,
)
from seckill.ops.stack.children import (
    access_log_path,
    exporter_spec,
    gunicorn_spec,
    loopback,
    metrics_dir,
    nginx_note,
    render_nginx,
)
from seckill.ops.stack.cluster import up_cluster
from seckill.ops.stack.embedded import (
    PASSWORD_FILE,
    EmbeddedValkey,
    FsyncKeeper,
    embedded_password,
)
from seckill.ops.stack.nginx import command as nginx_command
from seckill.ops.stack.nginx import nginx_binary
from seckill.ops.stack.ports import backend_ports
from seckill.ops.stack.scrape_token import scrape_token, write_token_file
from seckill.ops.stack.supervisor import (
    COMPONENT,
    ChildSpec,
    Stopping,
    Supervisor,
    SupervisorError,
    http_ready,
    log,
    redis_ready,
)
from seckill.sql.engine import make_engine
from seckill.sql.schema import ensure_schema
from seckill.sql.sealed_rows import reseal
from seckill.sql.sealing import DataKeyError, Keyring


def project_root() -> Path:
    """The source tree holding ``wsgi.py`` and ``gunicorn.conf.py`` (an editable install)."""
    root = Path(__file__).resolve().parents[3]
    missing = [n for n in ("wsgi.py", "gunicorn.conf.py") if not (root / n).is_file()]
    if missing:
        raise ConfigError(
            f"`seckill up` runs from a source checkout; {', '.join(missing)} not found in "
            f"{root} (install with `pip install -e .`)"
        )
    return root


# -- <data>/up.json: how the operator's commands find the running `seckill up` -------------

UP_FILE = "up.json"


@dataclasses.dataclass(frozen=True)
class RunningUp:
    """What a running ``seckill up`` tells about itself in ``<data>/up.json``. It holds no
    secret: a URL's password is written ``***`` (the command must then be given the URL,
    unless the Redis is the embedded one, whose password is kept in the data folder:
    ``embedded``)."""

    path: Path
    pid: int
    redis_url: str
    database_url: str
    key_prefix: str
    embedded: bool = False


def write_up_file(data_dir: Path, redis_url: str, settings: Settings,
                  embedded: bool = False) -> Path:
    """Write ``<data>/up.json`` (mode 0600, atomically) for this process; returns its path.
    ``embedded``: the Redis is the Valkey ``seckill up`` runs (its password in the folder)."""
    path = data_dir / UP_FILE
    partial = path.with_name(UP_FILE + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        json.dump({"pid": os.getpid(), "redis_url": redact_url(redis_url),
                   "database_url": redact_url(settings.database_url),
                   "key_prefix": settings.key_prefix, "embedded": embedded}, out)
    os.replace(partial, path)
    return path


def find_running_up(data_dir: Path) -> tuple[RunningUp | None, str]:
    """The ``seckill up`` running with ``data_dir``, or None and why there is none. Reads
    only: a stale file (its pid gone, after a kill -9) is left where it is."""
    path = data_dir / UP_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        found = RunningUp(path, int(raw["pid"]), str(raw["redis_url"]),
                          str(raw["database_url"]), str(raw["key_prefix"]),
                          raw.get("embedded") is True)
    except FileNotFoundError:
        return None, f"it has no {UP_FILE}" if data_dir.is_dir() else "there is no such folder"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{path} cannot be read: {type(exc).__name__}: {exc}"
    if not _alive(found.pid):
        return None, f"the one that wrote {path}, pid {found.pid}, is not running"
    return found, ""


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another account's process
    try:  # a zombie is gone too, only not reaped yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def make_private(data_dir: Path) -> None:
    """The data folder and everything in it closed to other accounts (0700 folders, 0600
    files), whatever the umask of the run that made them: it holds the database (webhook
    secrets, person salts, draw seeds), Valkey's files and its password. What this process
    and its children make from now on is private by their umask (0077, set by ``run``)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in [data_dir, *data_dir.rglob("*")]:
        with contextlib.suppress(FileNotFoundError):  # a file of a run that is ending
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                path.chmod(stat.S_IMODE(mode) & 0o700)


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


def _seckill_command() -> str:
    beside = Path(sys.executable).parent / "seckill"
    return str(beside) if beside.exists() else "seckill"


def try_it(
    settings: Settings, base: str, embedded_redis_url: str | None, admin_base: str | None = None,
    page: bool = False,
) -> str:
    """The "Try it" commands printed once the stack is up: create, token, URL, buy, status."""
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
        exports += [f"{name}={shlex.quote(settings.secret_for(name))}"
                    for name in (*SECRET_VARS, "SECKILL_METRICS_TOKEN")]
    lines = ["Try it, in another terminal:"]
    if exports:
        lines.append("  export " + " ".join(exports))
    if not settings.development:
        lines.append("  # and SECKILL_JWT_SECRET, SECKILL_ADMIN_TOKEN as the gateway has them")
    lines += [
        f"  curl -s -X POST {admin_base or base}/admin/activities \\",
        '    -H "Authorization: Bearer $SECKILL_ADMIN_TOKEN" '
        "-H 'Content-Type: application/json' \\",
        f"    -d {shlex.quote(body)}",
        f"  TOKEN=$({shlex.quote(_seckill_command())} token alice)",
        f'  URL=$(curl -s -H "Authorization: Bearer $TOKEN" "{base}/seckill/url?activity={aid}"'
        " | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"url\"])')",
        f'  curl -s -X POST -H "Authorization: Bearer $TOKEN" "{base}$URL"',
        f'  curl -s -H "Authorization: Bearer $TOKEN" {base}/seckill/{aid}/order',
    ]
    if page:
        lines.append(f'  echo "{base}/#activity={aid}&token=$TOKEN"   # the sale page')
    return "\n".join(lines)


def _check_cluster_args(args: argparse.Namespace, environ: dict[str, str]) -> None:
    """``--redis-nodes N [--replicas R]``: N >= 3, R >= 0, and no REDIS_URL beside them."""
    nodes, replicas = args.redis_nodes, args.replicas
    if nodes is None and replicas is not None:
        raise ConfigError("--replicas goes with --redis-nodes N (an embedded cluster)")
    if nodes is not None and nodes < 3:
        raise ConfigError(f"--redis-nodes must be at least 3 (a cluster's masters), got {nodes}")
    if replicas is not None and replicas < 0:
        raise ConfigError(f"--replicas must be 0 or more, got {replicas}")
    if nodes is not None and own_redis_url(environ):
        raise ConfigError("--redis-nodes with REDIS_URL: unset REDIS_URL, or drop --redis-nodes")


def _create_schema(url: str) -> None:
    """The tables made once, before the children start: otherwise every gunicorn worker, the
    orders worker and the dispatcher race to create them. A database not reachable yet is
    left to the children, which create what is missing when it comes."""
    engine = make_engine(url)
    try:
        ensure_schema(engine)
    except sa.exc.DBAPIError as exc:
        log(f"database not ready ({type(exc.orig).__name__}); the children create the tables",
            "WARNING")
    finally:
        engine.dispose()


def seal_at_start(settings: Settings) -> None:
    """``seckill up``'s sweep before its children start: the rows written before sealing, or
    under an older key, sealed under the current one. ConfigError (the start refused) when a
    sealed secret does not open with the environment's keys. A database not reachable yet is
    left to the next start, or ``seckill secrets rotate``."""
    engine = make_engine(settings.database_url)
    try:
        ensure_schema(engine)
        reseal(engine, Keyring.of(settings))
    except DataKeyError as exc:
        raise ConfigError(str(exc)) from None
    except sa.exc.DBAPIError:
        pass  # the children wait for the database, and check the keys when it comes
    finally:
        engine.dispose()


def run(args: argparse.Namespace) -> int:
    """Run ``seckill up``: start the stack and supervise it until stopped; the exit code."""

    environ = environment()  # whole: what the children get
    _check_cluster_args(args, environ)
    # No production secret missing, every value valid (the worker's options too): refused
    # here, not in a crash loop of a child.
    settings = Settings.from_env(environ)
    webhook_dispatch(environ)  # the dispatcher's settings, which Settings does not read
    webhook_nice(environ)
    own_redis = own_redis_url(environ)
    if settings.durability == "replica" and not own_redis and args.redis_nodes is None:
        # Every purchase would be refused (no_replica): say so now, not on the first buyer.
        raise ConfigError("SECKILL_DURABILITY=replica: the single embedded Valkey has no "
                          "replica; use --redis-nodes 3 --replicas 1, or REDIS_URL")
    root = project_root()
    nginx_bin = None if args.no_nginx else nginx_binary()
    _check_port_free(args.host, args.port)
    if nginx_bin is not None:
        if args.admin_port == args.port:
            raise ConfigError("--admin-port must differ from --port")
        _check_port_free("127.0.0.1", args.admin_port)
    base = f"http://{loopback(args.host)}:{args.port}"
    data_dir = settings.data_dir
    # Every file of the stack (the database and its -wal/-shm, Valkey's AOF and nodes.conf,
    # the logs) is made by this process or a child, which inherits the umask.
    os.umask(0o077)
    make_private(data_dir)

    with _data_dir_lock(data_dir):
        settings.announce_generated()
        _create_schema(settings.database_url)
        seal_at_start(settings)  # rows written before sealing, or under an older key
        # Secrets made up once, here, so that every worker of every instance agrees on them.
        env = {**environ, "SECKILL_ENV": settings.env, "SECKILL_DATA_DIR": str(data_dir)}
        env.update({name: settings.secret_for(name) for name in SECRET_VARS})
        # The scraper's token (/metrics), the same for every instance; Prometheus reads it
        # from a file of the data folder (seckill.ops.stack.scrape_token).
        env["SECKILL_METRICS_TOKEN"] = scrape_token(settings)
        token_file = write_token_file(data_dir, env["SECKILL_METRICS_TOKEN"])
        specs: list[ChildSpec] = []

        embedded_url: str | None = None
        if own_redis:
            redis_url = own_redis
            redis_note = f"{redact_url(redis_url)} (REDIS_URL)"
        elif args.redis_nodes is not None:
            redis_url, redis_note, nodes = up_cluster(data_dir / "cluster", args.redis_nodes,
                                                      args.replicas or 0, environ,
                                                      embedded_password(data_dir))
            embedded_url = redis_url
            specs += nodes
            env["SECKILL_REDIS_CLUSTER"] = "on"
        else:
            valkey = EmbeddedValkey(data_dir / "valkey", password=embedded_password(data_dir))
            valkey.prepare()
            redis_url = embedded_url = valkey.url
            redis_note = (f"{redact_url(redis_url)} (embedded Valkey, AOF on, password in "
                          f"{data_dir / PASSWORD_FILE}, data in {valkey.data_dir})")
            specs.append(ChildSpec("valkey", valkey.command(), env=environ,
                                   ready=redis_ready(redis_url), stop_timeout=10,
                                   tend=FsyncKeeper(redis_url, valkey.data_dir, log)))
        env["REDIS_URL"] = redis_url

        metrics = metrics_dir(data_dir)  # per-worker files, off the data disk
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)

        # Stopped after the gateway (reverse order), so it stores the last orders it was given.
        specs.append(ChildSpec("orders-worker", [sys.executable, "-m", "seckill.worker"],
                               env=env, cwd=root, stop_timeout=15))
        # The webhooks' dispatcher: stopped before the worker; SIGTERM lets the
        # attempts in flight (10 s at most) finish.
        specs.append(ChildSpec("webhooks", [sys.executable, "-m", "seckill.webhooks"],
                               env=env, cwd=root, stop_timeout=15))

        graceful = graceful_timeout(env)

        access_log = None if args.no_access_log else access_log_path(data_dir)
        if access_log is not None:
            access_log.parent.mkdir(parents=True, exist_ok=True)
        if nginx_bin is None:
            # Today's shape without nginx: one gunicorn instance on --port, operator endpoints
            # included, trusting no proxy header; its own access log.
            specs.append(gunicorn_spec("gunicorn-1", args.host, args.port, args.workers, env,
                                       root, graceful, behind_proxy=False,
                                       access_log=access_log))
            log(
                f"{nginx_note(args)}; one gunicorn instance serves {args.host}:{args.port} "
                "directly (operator endpoints included); --instances, --admin-port and "
                "--ip-rate take effect with nginx in front"
            )
            admin_base = base
            shape = f"gunicorn directly, {args.workers} gevent worker(s)"
            where = f"  Health:    {base}/healthz    Metrics: {base}/metrics\n"
        else:
            ports, exporter_port = backend_ports(args.instances, (args.port, args.admin_port))
            backends = [f"127.0.0.1:{port}" for port in ports]
            env["SECKILL_INSTANCES"] = ",".join(backends)
            for number, port in enumerate(ports, start=1):
                specs.append(gunicorn_spec(f"gunicorn-{number}", "127.0.0.1", port,
                                           args.workers, env, root, graceful, behind_proxy=True))
            metrics_port = None
            if access_log is not None:
                metrics_port = exporter_port
                specs.append(exporter_spec(access_log, metrics_port, env))
            conf, run_dir = render_nginx(args, nginx_bin, data_dir, backends, metrics_port)
            specs.append(ChildSpec(
                "nginx", nginx_command(nginx_bin, run_dir, conf), env=environ,
                ready=http_ready(loopback(args.host), args.port), ready_timeout=30,
                # SIGQUIT: nginx's graceful stop (requests in flight are finished).
                stop_signal=signal.SIGQUIT, stop_timeout=graceful + 5,
            ))
            admin_base = f"http://127.0.0.1:{args.admin_port}"
            shape = (
                f"nginx in front of {args.instances} gunicorn instance(s), {args.workers} "
                f"gevent worker(s) each; per-IP rate {args.ip_rate}"
            )
            instances = ", ".join(
                f"gunicorn-{n} {b}" for n, b in enumerate(backends, start=1)
            )
            where = (
                f"  Sale page: {base}/#activity=<id>&token=<user JWT>\n"
                f"  Operator:  {admin_base}/admin/ (the console; loopback only: /admin/*, "
                "/metrics, /metrics/nginx, /healthz)\n"
                f"  Instances: {instances}\n"
                f"  nginx:     {conf} (error log in {run_dir})\n"
            )
        where += f"  Scraper:   /metrics wants Authorization: Bearer <the token in {token_file}>\n"
        if access_log is not None:
            where += f"  Access log: {access_log}\n"

        supervisor = Supervisor(specs, data_dir=data_dir)
        supervisor.install_signal_handlers()
        try:
            supervisor.start()
            if supervisor.stop_requested:
                raise Stopping()
            # The operator's commands find this stack through it (removed on the way out).
            write_up_file(data_dir, redis_url, settings, embedded=embedded_url is not None)
            banner = (
                f"seckill is up on {base} ({shape})\n"
                f"  Redis:     {redis_note}\n"
                f"  Database:  {redact_url(settings.database_url)}\n"
                + where
                + "  Stop:      Ctrl-C\n\n"
                + try_it(settings, base, embedded_url, admin_base,
                         page=nginx_bin is not None))
            # Its first line framed like every log line (in JSON: all of it, one object).
            as_json = logs.json_wanted()
            print(logs.line(COMPONENT, "INFO", banner if as_json else banner.split("\n", 1)[0],
                            as_json) + ("" if as_json else "\n" + banner.split("\n", 1)[1]),
                  flush=True)
            supervisor.run()
        except Stopping:
            pass
        except SupervisorError as exc:
            supervisor.failure = str(exc)
            log(str(exc))
        finally:
            with contextlib.suppress(FileNotFoundError):
                (data_dir / UP_FILE).unlink()
            supervisor.stop()
            shutil.rmtree(metrics, ignore_errors=True)
        log("stopped")
    return 1 if supervisor.failure else 0
