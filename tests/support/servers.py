"""Start real servers from tests (and benchmarks): gunicorn serving ``wsgi:app``, nginx.

Each server is our child process on a free port, with its stderr in a temp file that is shown
when it fails to come up. It is stopped by its PID: SIGTERM, a bounded wait, then SIGKILL.
Linux SIGTERMs it too if the process that started it dies (``die_with_parent``), so a killed
test run leaves no server behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from seckill.ops.stack.embedded import die_with_parent
from seckill.ops.stack.ports import free_listen_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class ServerFailed(RuntimeError):
    """A server exited or did not become healthy in time."""


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "<no output>"
    return text[-limit:] if text else "<no output>"


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The status of ``GET url``, or None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process by its PID, wait, then SIGKILL it if it is still there."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


@contextlib.contextmanager
def running_server(
    command: Sequence[str],
    health_url: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str = REPO_ROOT,
    startup_timeout: float = 30.0,
    stop_timeout: float = 15.0,
    name: str | None = None,
    log_file: Path | None = None,
    ready_status: int = 200,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command`` until the block ends; first wait until ``GET health_url`` answers
    ``ready_status`` (200).

    ``env`` is added to ``os.environ``. The server's stdout and stderr go to ``log_file`` (kept)
    or to a temp file (removed); on a failed start their tail is in the exception message.
    """
    label = name or Path(command[0]).name
    full_env = {**os.environ, **(env or {})}
    with tempfile.TemporaryDirectory(prefix=f"{label}-") as folder:
        output = log_file or Path(folder) / "output.log"
        with output.open("wb") as sink:
            process = subprocess.Popen(
                list(command),
                cwd=str(cwd),
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal is for pytest, not for it
                preexec_fn=die_with_parent,
            )
        try:
            deadline = time.monotonic() + startup_timeout
            last: int | None = None
            while True:
                if process.poll() is not None:
                    raise ServerFailed(
                        f"{label} exited with {process.returncode} before answering "
                        f"{health_url}; its output:\n{_tail(output)}"
                    )
                last = http_status(health_url, timeout=1.0)
                if last == ready_status:
                    break
                if time.monotonic() > deadline:
                    raise ServerFailed(
                        f"{label} did not answer {ready_status} on {health_url} within "
                        f"{startup_timeout}s "
                        f"(last answer: {last}); its output:\n{_tail(output)}"
                    )
                time.sleep(0.1)
            yield process
        finally:
            stop_process(process, stop_timeout)


def gunicorn_command(bind: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "gunicorn",
        "-c", "gunicorn.conf.py",
        "wsgi:app",
        "--bind", bind,
        *extra,
    ]


@contextlib.contextmanager
def gunicorn_server(
    env: Mapping[str, str],
    workers: int = 2,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 30.0,
    log_file: Path | None = None,
) -> Iterator[str]:
    """A real gunicorn (gevent workers, ``gunicorn.conf.py``) serving ``wsgi:app`` on
    127.0.0.1; yields its base URL, e.g. ``http://127.0.0.1:40123``.

    ``env`` is the gateway's configuration (REDIS_URL, the secrets, SECKILL_KEY_PREFIX, ...),
    added to ``os.environ``; ``GUNICORN_WORKERS`` is set from ``workers``.
    """
    port = port or free_listen_port()
    base = f"http://127.0.0.1:{port}"
    server_env = {
        "GUNICORN_GRACEFUL_TIMEOUT": "5",
        **env,
        "GUNICORN_WORKERS": str(workers),
    }
    with running_server(
        gunicorn_command(f"127.0.0.1:{port}", *extra_args),
        f"{base}/healthz",
        env=server_env,
        startup_timeout=startup_timeout,
        name="gunicorn",
        log_file=log_file,
    ):
        yield base


# -- nginx -----------------------------------------------------------------------------


def require(binary: str | None, what: str, install: str) -> str:
    """``binary``, or stop the test: a failure when ``CI`` is set (CI installs it, so missing
    means a broken CI), else a skip that says how to install it."""
    if binary is not None:
        return binary
    import pytest

    message = f"{what} is not installed; install it with: {install}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (.ci/run installs it; in CI this test must run)", pytrace=False)
    pytest.skip(message)


def require_nginx() -> str:
    from seckill.ops.stack.nginx import nginx_binary

    return require(nginx_binary(), "nginx", "sudo apt-get install -y nginx")


@dataclasses.dataclass
class NginxFront:
    base: str  # the public listener
    admin_base: str  # the loopback operator listener
    conf: Path
    run_dir: Path
    process: subprocess.Popen[bytes]

    def error_log(self) -> str:
        return _tail(self.run_dir / "error.log", 20000)


@contextlib.contextmanager
def nginx_server(backends: Sequence[str], run_dir: Path, **options: object) -> Iterator[NginxFront]:
    """A real nginx in the foreground on free loopback ports, in front of ``backends``, with
    the config ``seckill nginx render`` would write (``options`` are :class:`NginxOptions`
    fields). Ready once it serves the sale page."""
    from seckill.ops.stack import nginx

    binary = require_nginx()
    port, admin_port = free_listen_port(), free_listen_port()
    nginx.prepare_run_dir(run_dir)
    user, reason = nginx.worker_user(nginx.default_static_root(), run_dir)
    settings = nginx.NginxOptions(
        backends=list(backends), port=port, admin_port=admin_port, listen_host="127.0.0.1",
        run_dir=run_dir, user=user, user_reason=reason, **options,  # type: ignore[arg-type]
    )
    conf = run_dir / "nginx.conf"
    conf.write_text(nginx.render(settings), encoding="utf-8")
    problem = nginx.check_config(binary, run_dir, conf)
    if problem is not None:
        raise ServerFailed(f"nginx -t refused {conf}: {problem}")
    base = f"http://127.0.0.1:{port}"
    with running_server(
        nginx.command(binary, run_dir, conf), f"{base}/", name="nginx", startup_timeout=15,
    ) as process:
        yield NginxFront(base, f"http://127.0.0.1:{admin_port}", conf, run_dir, process)
