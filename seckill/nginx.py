"""Rendering ``nginx/nginx.conf.template`` into a complete nginx.conf for some backends."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from seckill.store import resource_dir

_RATE = re.compile(r"[1-9][0-9]{0,6}r/[sm]")
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")
_MIME_CANDIDATES = ("/etc/nginx/mime.types", "/usr/local/nginx/conf/mime.types")


class RenderError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class NginxOptions:
    backends: Sequence[str]
    port: int = 8080
    admin_port: int = 8081
    ip_rate: str = "20r/s"  # or "off"
    ip_burst: int = 40
    ip_connections: int = 50
    listen_host: str = "0.0.0.0"
    run_dir: Path = Path("/tmp/seckill-nginx")
    static_root: Path | None = None
    user: str | None = None
    daemon: bool = False
    access_log: bool = False


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/nginx/sbin/nginx") if Path(p).exists()), None
    )


def render(options: NginxOptions) -> str:
    if not options.backends:
        raise RenderError("at least one --backend host:port is needed")
    for backend in options.backends:
        if not _HOST_PORT.fullmatch(backend):
            raise RenderError(f"backend {backend!r} is not host:port")
    if options.ip_rate != "off" and not _RATE.fullmatch(options.ip_rate):
        raise RenderError(f"--ip-rate must look like 20r/s or 600r/m, or be 'off' "
                          f"(got {options.ip_rate!r})")
    for name, port in (("port", options.port), ("admin port", options.admin_port)):
        if not 0 < port < 65536:
            raise RenderError(f"{name} {port} is not a TCP port")
    if options.port == options.admin_port:
        raise RenderError("the public and admin ports must differ")

    run_dir = options.run_dir.resolve()
    static_root = (options.static_root or resource_dir("nginx") / "static").resolve()
    mime = next((p for p in _MIME_CANDIDATES if Path(p).exists()), None)
    backends = "\n".join(
        f"        server {b} max_fails=1 fail_timeout=2s;" for b in options.backends
    )
    if options.ip_rate == "off":
        limit = "            # per-IP limits: off (--ip-rate off)"
        rate = "1000r/s"  # the zone must still parse; nothing refers to it
    else:
        limit = (
            f"            limit_req zone=per_ip burst={options.ip_burst} nodelay;\n"
            f"            limit_conn per_ip_conn {options.ip_connections};"
        )
        rate = options.ip_rate
    values = {
        "USER": f"user {options.user};" if options.user else "",
        "DAEMON": "on" if options.daemon else "off",
        "RUN_DIR": str(run_dir),
        "ACCESS_LOG": f"{run_dir}/access.log" if options.access_log else "off",
        "MIME_TYPES": mime or f"{run_dir}/mime.types",
        "BACKENDS": backends,
        "IP_RATE": rate,
        "LIMIT_REQ": limit,
        "LISTEN": f"{options.listen_host}:{options.port}",
        "ADMIN_LISTEN": f"127.0.0.1:{options.admin_port}",
        "STATIC_ROOT": str(static_root),
    }
    text = (resource_dir("nginx") / "nginx.conf.template").read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.findall(r"@@[A-Z_]+@@", text)
    if leftover:
        raise RenderError(f"template placeholders left unfilled: {leftover}")
    return text


def prepare_run_dir(run_dir: Path) -> None:
    """nginx wants its temp folders' parent to exist; mime.types may be missing on a
    minimal install, in which case an empty one is enough (every answer here is JSON)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not any(Path(p).exists() for p in _MIME_CANDIDATES):
        (run_dir / "mime.types").write_text("types {\n    text/html html;\n}\n")
