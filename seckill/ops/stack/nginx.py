"""Rendering ``nginx/nginx.conf.template`` into a complete nginx.conf for some backends, and
the few facts about the local nginx that ``seckill up`` needs (where it is, whether its
workers can read what they serve)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from seckill.config import nginx_path
from seckill.domain.sizes import OPERATOR_MAX_BODY, OPERATOR_PREFIX, PUBLIC_MAX_BODY, size_words
from seckill.resources import resource_dir

_RATE = re.compile(r"[1-9][0-9]{0,6}r/[sm]")
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}")
_LISTEN_HOST = re.compile(r"[A-Za-z0-9.\-:\[\]]+")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_MIME_CANDIDATES = ("/etc/nginx/mime.types", "/usr/local/nginx/conf/mime.types")
_FALLBACK_MIME = """types {
    text/html html;
    text/css css;
    application/javascript js;
    application/json json;
    image/png png;
    image/svg+xml svg;
    image/x-icon ico;
}
"""

INSTALL_HINT = "sudo apt-get install nginx (Debian/Ubuntu)"

# What nginx itself answers, as the gateway would: (status, contract code, message, extras).
# 502/503/504 stay what they are (nginx could not reach an instance / none is available / an
# instance did not answer in time); for a purchase each means "ask for your order status
# before buying again": the purchase may or may not have been decided.
_OWN_ERRORS: tuple[tuple[int, str, str, dict[str, int]], ...] = (
    (400, "bad_request", "the request is malformed", {}),
    (403, "forbidden", "this resource is not served here", {}),
    (404, "not_found", "no such resource", {}),
    (405, "method_not_allowed", "this method is not allowed here", {}),
    (408, "timeout", "the request was not received in time", {}),
    (411, "bad_request", "a request with a body needs a Content-Length or chunks", {}),
    (413, "too_large", f"the request body is larger than its route takes: "
     f"{size_words(PUBLIC_MAX_BODY)}, {size_words(OPERATOR_MAX_BODY)} on {OPERATOR_PREFIX}", {}),
    (414, "too_large", "the request line is too long", {}),
    (429, "rate_limited", "too many requests from this address", {"retry_after": 1}),
    # nginx's own status for a header over its buffers; answered as 431, as the gateway does
    # and the contract says (error_page's "=431": without it nginx answers such a page 400).
    (494, "too_large", "a request header is too large", {}),
    (500, "internal", "unexpected failure in the proxy", {}),
    (502, "bad_gateway",
     "no gateway instance answered; check your order status before buying again", {}),
    (503, "unavailable",
     "the gateway is unavailable; check your order status before buying again",
     {"retry_after": 1}),
    (504, "gateway_timeout",
     "the gateway did not answer in time; check your order status before buying again", {}),
    (501, "not_implemented", "this transfer coding is not supported", {}),
    (505, "http_version_not_supported", "this HTTP version is not supported here", {}),
)


ERROR_PAGES = "/.seckill-error/"  # internal locations only: a client asking for one gets 404
# What nginx answers itself that the OpenAPI document lists on every operation (413 ``TooLarge``,
# 414 ``UriTooLong``) or the gateway answers alike (431): with the headers the document marks
# required on those, as the gateway's own answers carry them.
_DOCUMENTED = frozenset({413, 414, 494})


class RenderError(ValueError):
    """The options cannot make a valid nginx.conf."""


@dataclasses.dataclass(frozen=True)
class NginxOptions:
    """What goes into a rendered nginx.conf: backends, ports, per-IP limits, paths, user."""

    backends: Sequence[str]
    port: int = 8080
    admin_port: int = 8081
    ip_rate: str = "20r/s"  # or "off"
    ip_burst: int = 40
    ip_connections: int = 50
    listen_host: str = "0.0.0.0"
    run_dir: Path = Path("/tmp/seckill-nginx")
    static_root: Path | None = None
    # The `user` directive (workers' account when the master runs as root). None: no
    # directive, nginx's built-in default (nobody) or the packager's applies.
    user: str | None = None
    user_reason: str = ""  # written as a comment above a `user` directive
    daemon: bool = False
    access_log: bool = False
    # Where the access log goes (default <run_dir>/access.log), and in which of the stack's
    # formats; the port of the exporter of nginx's counts (seckill.ops.stack.nginx_metrics), which
    # the operator listener then serves at /metrics/nginx.
    access_log_path: Path | None = None
    log_json: bool = False
    metrics_port: int | None = None
    read_timeout: int = 10  # seconds an instance has to answer (and to take a request body)
    # Seconds an instance has to answer a hot GET (the clock, the activity view, the queue's
    # state, the signed URL) before nginx asks another: well under read_timeout, so that a
    # hung instance's GETs move instead of waiting out the purchase's timeout (at most it).
    get_timeout: int = 3
    client_timeout: int = 10  # seconds a client has to send its headers, and its body
    max_fails: int = 1  # failures that take an instance out for fail_timeout; 0: never
    fail_timeout: int = 2
    # The edge cache of activity-level refusals (seckill/web/edge_cache.py); off: every URL
    # and purchase request reaches the gateway (a benchmark's "before", or a shop's choice).
    edge_cache: bool = True


def nginx_binary() -> str | None:
    """The nginx to run: ``SECKILL_NGINX`` if set (a path; it must exist), else the PATH's, else
    the usual install locations. None when there is none."""
    chosen = nginx_path()
    if chosen:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/nginx/sbin/nginx") if Path(p).exists()), None
    )


def _json_errors() -> str:
    # A page per status at an internal URI (not a named @location: nginx cannot redirect a
    # request whose request line it could not parse to a named location, "empty URI", and
    # answered those with its HTML 500).
    lines = []
    for status, _code, _message, _extra in _OWN_ERRORS:
        answered = "=431 " if status == 494 else ""
        lines.append(f"        error_page {status} {answered}{ERROR_PAGES}{status};")
    for status, code, message, extra in _OWN_ERRORS:
        body = json.dumps({"error": code, "message": message, **extra}, separators=(",", ":"))
        assert "'" not in body  # the body goes between single quotes
        lines.append(f"        location = {ERROR_PAGES}{status} {{")
        lines.append("            internal;")
        # A request sent here may carry what its own location took and this one would not (a
        # chunked body of 200 KiB on /admin/ so far): nginx checks it again on the way in, and
        # a second 413 here would be its HTML page.
        lines.append("            client_max_body_size 0;")
        # No types: the type must not follow the asked-for file's extension (/x.html).
        lines.append("            types { }")
        lines.append("            default_type application/json;")
        if "retry_after" in extra:
            lines.append(f"            add_header Retry-After {extra['retry_after']} always;")
        if status == 405:  # only the page's files answer 405 here
            lines.append('            add_header Allow "GET, HEAD" always;')
        if status in _DOCUMENTED:
            lines.append("            add_header X-Seckill-Instance nginx always;")
            lines.append(f"            add_header X-Seckill-Outcome {code} always;")
        lines.append(f"            return {431 if status == 494 else status} '{body}';")
        lines.append("        }")
    return "\n".join(lines)


def _user_line(options: NginxOptions) -> str:
    if options.user is None:
        return ""
    if not _USER.fullmatch(options.user):
        raise RenderError(f"user {options.user!r} is not an account name")
    comment = "".join(
        f"# {line}\n" for line in options.user_reason.splitlines() if line.strip()
    )
    return f"{comment}user {options.user};"


# The edge cache's directives, shared by the URL and purchase locations (the template says why).
_EDGE_CACHE = """            proxy_cache edge;
            proxy_cache_bypass $seckill_edge_uncached;
            proxy_no_cache $seckill_edge_uncached;
            # Only the gateway's X-Accel-Expires decides what is stored, and for how long.
            proxy_ignore_headers Cache-Control Expires;
            proxy_hide_header X-Seckill-Now-Ms;
            add_header X-Cache $upstream_cache_status always;
            sub_filter_types application/json;
            sub_filter $seckill_now_ms_was $seckill_now_ms_is;"""


def _access_log(options: NginxOptions, path: Path) -> str:
    if not options.access_log:
        return "off"
    # Buffered: a sale-day flood costs one write per 64 KiB, at most a second late.
    return f"{path} {'seckill_json' if options.log_json else 'seckill'} buffer=64k flush=1s"


def render(options: NginxOptions) -> str:
    """The complete nginx.conf for ``options``; RenderError if an option is invalid."""
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
    if not _LISTEN_HOST.fullmatch(options.listen_host):
        raise RenderError(f"listen address {options.listen_host!r} is not a host")
    for name, number, low in (
        ("ip burst", options.ip_burst, 0), ("ip connections", options.ip_connections, 1),
        ("read timeout", options.read_timeout, 1), ("client timeout", options.client_timeout, 1),
        ("GET timeout", options.get_timeout, 1),
        ("max fails", options.max_fails, 0),
        ("fail timeout", options.fail_timeout, 1),
    ):
        if not low <= number <= 1_000_000:
            raise RenderError(f"{name} must be between {low} and 1000000, got {number}")

    run_dir = options.run_dir.resolve()
    static_root = (options.static_root or default_static_root()).resolve()
    access_log = (options.access_log_path or run_dir / "access.log").resolve()
    for path in (run_dir, static_root, *([access_log] if options.access_log else [])):
        if re.search(r"[\s;{}'\"$]", str(path)):
            raise RenderError(f"{path} holds characters an nginx.conf path cannot")
    mime = next((p for p in _MIME_CANDIDATES if Path(p).exists()), None)
    backends = "\n".join(
        f"        server {b} max_fails={options.max_fails} fail_timeout={options.fail_timeout}s;"
        for b in options.backends
    )
    # The operator listener's: never taken out of the pool (see the template).
    admin_backends = "\n".join(f"        server {b} max_fails=0;" for b in options.backends)
    if options.ip_rate == "off":
        limit = "            # per-IP limits: off (--ip-rate off)"
        limit_conn = "        # per-IP connection limit: off (--ip-rate off)"
        rate = "1000r/s"  # the zone must still parse; nothing refers to it
    else:
        burst = f" burst={options.ip_burst} nodelay" if options.ip_burst else ""
        limit = f"            limit_req zone=per_ip{burst};"
        limit_conn = f"        limit_conn per_ip_conn {options.ip_connections};"
        rate = options.ip_rate
    listen_host = options.listen_host
    if ":" in listen_host and not listen_host.startswith("["):
        listen_host = f"[{listen_host}]"  # IPv6
    values: dict[str, str] = {
        "USER": _user_line(options),
        "DAEMON": "on" if options.daemon else "off",
        "RUN_DIR": str(run_dir),
        "ACCESS_LOG": _access_log(options, access_log),
        "NGINX_METRICS": (
            f"        location = /metrics/nginx {{\n"
            f"            proxy_pass http://127.0.0.1:{options.metrics_port}/metrics;\n"
            f"        }}" if options.metrics_port else "        # no exporter of nginx's counts"),
        "MIME_TYPES": mime or f"{run_dir}/mime.types",
        "BACKENDS": backends,
        "ADMIN_BACKENDS": admin_backends,
        "IP_RATE": rate,
        "LIMIT_REQ": limit,
        "LIMIT_CONN": limit_conn,
        "READ_TIMEOUT": f"{options.read_timeout}s",
        # A hot GET never waits longer than any other request.
        "GET_TIMEOUT": f"{min(options.get_timeout, options.read_timeout)}s",
        # A first try's connect (1 s) and read timeouts, and a second: any timed-out GET moves.
        "NEXT_UPSTREAM_TIMEOUT": f"{options.read_timeout + 2}s",
        "CLIENT_TIMEOUT": f"{options.client_timeout}s",
        "LISTEN": f"{listen_host}:{options.port}",
        "ADMIN_LISTEN": f"127.0.0.1:{options.admin_port}",
        "STATIC_ROOT": str(static_root),
        "JSON_ERRORS": _json_errors(),
        "PUBLIC_MAX_BODY": f"{PUBLIC_MAX_BODY // 1024}k",
        "OPERATOR_MAX_BODY": f"{OPERATOR_MAX_BODY // 1024}k",
        "EDGE_CACHE": _EDGE_CACHE if options.edge_cache else "            # edge cache: off",
    }
    text = (resource_dir("nginx") / "nginx.conf.template").read_text(encoding="utf-8")
    for key, filling in values.items():
        text = text.replace(f"@@{key}@@", filling)
    leftover = re.findall(r"@@[A-Z_]+@@", text)
    if leftover:
        raise RenderError(f"template placeholders left unfilled: {leftover}")
    return text


def default_static_root() -> Path:
    """The sale page's folder shipped with the package (``frontends/sale_page``)."""
    return resource_dir("frontends") / "sale_page"


def prepare_run_dir(run_dir: Path) -> None:
    """nginx wants its temp folders' parent to exist; mime.types may be missing on a minimal
    install, in which case a small one (the page's types) is written here."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not any(Path(p).exists() for p in _MIME_CANDIDATES):
        (run_dir / "mime.types").write_text(_FALLBACK_MIME)


def command(binary: str, run_dir: Path, conf: Path) -> list[str]:
    """nginx in the foreground on ``conf``: ``-e`` so that not even startup messages go to the
    packaged /var/log/nginx, ``-p`` so that nothing relative resolves outside ``run_dir``."""
    run_dir = run_dir.resolve()
    return [binary, "-p", f"{run_dir}/", "-e", str(run_dir / "error.log"), "-c",
            str(conf.resolve())]


def check_config(binary: str, run_dir: Path, conf: Path) -> str | None:
    """``nginx -t`` on ``conf``: None when it passes, else nginx's own words."""
    result = subprocess.run([*command(binary, run_dir, conf), "-t", "-q"], capture_output=True,
                            text=True, timeout=30, check=False)
    if result.returncode == 0:
        return None
    return (result.stderr or result.stdout).strip() or f"nginx -t exited {result.returncode}"


def blocked_for_others(paths: Iterable[Path]) -> Path | None:
    """The first path (or folder on the way to one) that an account other than its owner and
    group cannot reach: folders need o+x, files o+r. When nginx starts as root its workers run
    as an unprivileged account (nobody) and see the files as such an "other"."""
    for path in paths:
        path = path.resolve()
        for folder in reversed(path.parents):
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return folder
        mode = os.stat(path).st_mode
        needed = stat.S_IXOTH | stat.S_IROTH if stat.S_ISDIR(mode) else stat.S_IROTH
        if mode & needed != needed:
            return path
    return None


def worker_user(static_root: Path, run_dir: Path) -> tuple[str | None, str]:
    """The ``user`` directive for a local run, and why: none (nginx's default) unless this
    process is root and the workers' account (nobody) could not read the sale page or reach
    the run folder, e.g. under a private (0700) home or temp folder. Then the workers run as
    root, for this local run only; `seckill nginx render` never writes that line."""
    if os.geteuid() != 0:
        return None, ""  # nginx ignores `user` then: the workers run as we do
    files = sorted(p for p in static_root.iterdir() if p.is_file())
    blocked = blocked_for_others([static_root, *files, run_dir])
    if blocked is None:
        return None, ""
    reason = (
        f"Started as root, and {blocked} is closed to other accounts, so nginx's\n"
        "workers (nobody) could not read the sale page or use their temp folders: for this\n"
        "local run they run as root. A production config (`seckill nginx render`) has no\n"
        "user line; serve from folders the workers' account can read instead."
    )
    return "root", reason
