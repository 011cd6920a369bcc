"""The children ``seckill up`` starts besides Redis: gunicorn instances, nginx and the exporter
of nginx's counts; each a :class:`~seckill.ops.stack.supervisor.ChildSpec`, with where its
logs go."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

from seckill.config import ConfigError, nginx_path
from seckill.ops.stack.nginx import INSTALL_HINT
from seckill.ops.stack.supervisor import ChildSpec, http_ready, log


def loopback(host: str) -> str:
    """Where this machine reaches a server listening on ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def nginx_note(args: argparse.Namespace) -> str:
    """Why nginx is not in front, and how to put it there."""
    if args.no_nginx:
        return "nginx: off (--no-nginx)"
    chosen = nginx_path()
    if chosen:
        return (f"nginx not found at SECKILL_NGINX={chosen}; install it with {INSTALL_HINT} "
                "or point SECKILL_NGINX at its binary")
    return f"nginx is not installed; install it with {INSTALL_HINT} to put it in front"


def gunicorn_spec(
    name: str, host: str, port: int, workers: int, env: dict[str, str], root: Path,
    graceful: int, behind_proxy: bool, access_log: Path | None = None,
) -> ChildSpec:
    """One gunicorn instance serving ``wsgi:app`` (its access log to ``access_log``, if any)."""
    return ChildSpec(
        name,
        [sys.executable, "-m", "gunicorn", "-c", str(root / "gunicorn.conf.py"),
         "--chdir", str(root), "--bind", f"{host}:{port}",
         # gunicorn 27's control socket defaults to one path in $HOME for every instance.
         "--no-control-socket", "wsgi:app"],
        env={**env, "GUNICORN_WORKERS": str(workers), "SECKILL_INSTANCE": name,
             "SECKILL_BEHIND_PROXY": "1" if behind_proxy else "0",
             **({"GUNICORN_ACCESSLOG": str(access_log)} if access_log else {})},
        cwd=root,
        ready=http_ready(loopback(host), port),
        ready_timeout=60,
        stop_timeout=graceful + 5,
    )


def metrics_dir(data_dir: Path) -> Path:
    """A fresh, private folder for the gunicorn workers' metrics files
    (``PROMETHEUS_MULTIPROC_DIR``), one per data folder, in memory (``/dev/shm``) where there
    is one. Not in the data folder: prometheus_client maps its files into memory and grows
    them sparse, so on a full data disk a worker's first store to a new page dies of SIGBUS."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    tag = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    folder = base / f"seckill-metrics-{os.getuid()}-{tag}"
    shutil.rmtree(folder, ignore_errors=True)  # stale files would be summed
    folder.mkdir(mode=0o700)  # fails if another account made it in the meantime
    return folder


def access_log_path(data_dir: Path) -> Path:
    """Where ``seckill up`` writes the access log (nginx's, or the one instance's)."""
    return data_dir / "logs" / "access.log"


def exporter_spec(log_file: Path, port: int, env: dict[str, str]) -> ChildSpec:
    """The exporter of nginx's counts (``seckill nginx exporter``), on ``port``."""
    return ChildSpec(
        "nginx-metrics",
        [sys.executable, "-m", "seckill.ops.cli", "nginx", "exporter", "--log", str(log_file),
         "--port", str(port)],
        env=env, ready=http_ready("127.0.0.1", port, "/metrics"), ready_timeout=30,
    )


def render_nginx(
    args: argparse.Namespace, binary: str, data_dir: Path, backends: list[str],
    metrics_port: int | None = None,
) -> tuple[Path, Path]:
    """Write ``<data>/nginx/nginx.conf`` for ``backends`` and check it with ``nginx -t``."""
    from seckill.ops.stack import nginx

    run_dir = (data_dir / "nginx").resolve()
    nginx.prepare_run_dir(run_dir)
    static_root = nginx.default_static_root().resolve()
    user, reason = nginx.worker_user(static_root, run_dir)
    if user is not None:
        log("nginx workers run as root: " + " ".join(reason.split()))
    options = nginx.NginxOptions(
        backends=backends, port=args.port, admin_port=args.admin_port, ip_rate=args.ip_rate,
        listen_host=args.host, run_dir=run_dir, static_root=static_root, user=user,
        user_reason=reason, access_log=not args.no_access_log,
        access_log_path=access_log_path(data_dir), log_json=args.log_json,
        metrics_port=metrics_port,
    )
    try:
        text = nginx.render(options)
    except nginx.RenderError as exc:
        raise ConfigError(str(exc)) from None
    conf = run_dir / "nginx.conf"
    conf.write_text(text, encoding="utf-8")
    problem = nginx.check_config(binary, run_dir, conf)
    if problem is not None:
        raise ConfigError(f"nginx refuses {conf}: {problem}")
    return conf, run_dir
