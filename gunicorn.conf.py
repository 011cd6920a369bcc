"""gunicorn settings for the gateway: ``gunicorn -c gunicorn.conf.py wsgi:app``.

Every value can be overridden from the environment (``GUNICORN_*`` below) or the command line.

* gevent workers: a flash sale is thousands of short, I/O-bound requests (one Redis round trip
  each); greenlets keep them all in flight without a thread each. gunicorn's gevent worker
  monkey-patches in the worker before the app is imported, and ``preload_app`` stays off so
  nothing (Redis pool, sockets) is created before the patch or shared across a fork. The
  worker class is gevent's with read deadlines and JSON answers for what gunicorn refuses
  itself (``seckill/web/server.py``): ``GUNICORN_HEADER_TIMEOUT`` / ``GUNICORN_BODY_TIMEOUT``
  (seconds, default 10 each) bound how long a client may take to send a request's headers
  (from its first byte) and its body.
* workers: one per core by default; the work is CPU-bound Python between Redis calls, so more
  workers than cores only adds context switches.
* worker_connections: greenlets per worker; the app sizes its Redis pool from
  ``SECKILL_REDIS_MAX_CONNECTIONS`` (set below to match, so a greenlet waits for a connection
  instead of failing with MaxConnectionsError).
* keepalive longer than nginx's upstream keepalive_timeout, so nginx's pool is reused rather
  than closed under it.
"""

from __future__ import annotations

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "seckill.web.server.GatewayWorker")
workers = int(os.environ.get("GUNICORN_WORKERS", str(multiprocessing.cpu_count())))
worker_connections = int(os.environ.get("GUNICORN_WORKER_CONNECTIONS", "1000"))
keepalive = int(os.environ.get("GUNICORN_KEEPALIVE", "75"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "10"))
backlog = int(os.environ.get("GUNICORN_BACKLOG", "2048"))
preload_app = False
# gunicorn 27's control socket defaults to one path in $HOME shared by every instance.
control_socket_disable = True
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
# Every line in the stack's one format (seckill/logs.py): gunicorn's, the access log's, the app's.
logger_class = "seckill.web.server.GatewayLogger"
# One line per request, e.g. (gunicorn 27, gevent worker; checked in tests/test_nginx.py):
#   127.0.0.1 [21/Nov/2026:18:45:05 +0000] "POST /seckill/a/<token>/buy HTTP/1.1" 410 64 3ms
#   fwd=127.0.0.1 outcome=sold_out instance=gunicorn-1 worker=<4242>
# %(h)s is the client: behind nginx (SECKILL_BEHIND_PROXY=1, ProxyFix) the address nginx saw;
# fwd= is X-Forwarded-For as received (nginx overwrites it: never what the client sent);
# outcome= is the contract outcome (ok, sold_out, already_purchased, rate_limited, ...) from
# the X-Seckill-Outcome response header; %(M)s is the time taken in milliseconds; worker= the
# worker process that answered (each has its own sold-out flags and activity copies).
access_log_format = (
    '%(h)s %(t)s "%(r)s" %(s)s %(b)s %(M)sms fwd=%({x-forwarded-for}i)s '
    "outcome=%({x-seckill-outcome}o)s instance=%({x-seckill-instance}o)s worker=%(p)s"
)

os.environ.setdefault("SECKILL_REDIS_MAX_CONNECTIONS", str(min(worker_connections, 500)))


def child_exit(server: object, worker: object) -> None:
    """Drop a dead worker's metric files (prometheus multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(getattr(worker, "pid", 0))


# Fairness between keep-alive connections. gevent's socket reads do not yield when data is
# already there, so under CPU saturation a greenlet whose client answers fast serves request
# after request while the other connections wait: the bench counted connections served 13
# times in 8 s next to others served 3,507 times, and a bare hello app had p99 ~1.3 s with 2 s
# timeouts at 100 connections. So after each request the greenlet waits until the event loop
# has nothing else to do (gevent.idle): every connection with a request waiting is served
# once before any is served twice. Measured (bench/results/fairness.md), bare hello, wrk
# -c100 / -c1000 on the same 2 cores: no yield p99 1.3 s / timeouts; gevent.sleep(0) p99
# 59-336 ms / 1.5-2.2 s with timeouts; gevent.idle p99 29-59 ms / 330-490 ms, no timeouts,
# the same req/s. (A yield bounded by a timer brought the c1000 tail back: 3-3.4 s.)
# GUNICORN_YIELD_AFTER_REQUEST=0 turns it off.
if os.environ.get("GUNICORN_YIELD_AFTER_REQUEST", "1") != "0":
    def post_request(worker: object, req: object, environ: object, resp: object) -> None:
        from gevent import idle, monkey

        if monkey.is_module_patched("socket"):  # a gevent worker (not `-k sync` or gthread)
            idle()
