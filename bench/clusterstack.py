"""What ``python -m bench.cluster`` starts and reads: one embedded Valkey and a 3-master
embedded Valkey Cluster, a gateway on each, and the counters read before and after a run.

Both backends are ``EmbeddedValkey`` processes with the same AOF setting; both gateways are the
same gunicorn (``bench.stack.server_env``: same workers, worker_connections and pool, durability
``local``), one with ``SECKILL_REDIS_CLUSTER=off`` and one with ``=on``, each with its own data
folder. Every process is our child, stopped by PID.

Per node, before and after a run: ``INFO commandstats`` (EVALSHA's calls and µs, and the µs
of every command a client sent; the commands the purchase script runs inside Redis are left
out of that sum, since EVALSHA's own time already contains them), ``INFO cpu`` (user + sys
of the process and of its main thread) and ``INFO stats`` (socket reads). Per gateway: the CPU
seconds its gunicorn workers used (``/proc/<pid>/stat``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.machine import processes
from bench.stack import Server, server_env, start_gunicorn
from seckill.ops.stack.cluster import EmbeddedCluster
from seckill.ops.stack.embedded import EmbeddedValkey
from seckill.store.plumbing.connection import Client, Cluster
from seckill.store.plumbing.routing import slot_of
from seckill.store.plumbing.scripts import lua_source

# The commands lua/purchase.lua runs inside Redis (its includes too): counted by
# commandstats on their own *and* inside EVALSHA's time.
SCRIPT_INNER = frozenset(
    name.lower() for name in re.findall(r"redis\.p?call\(\s*['\"]([A-Za-z]+)['\"]",
                                        lua_source("purchase"))
)


@dataclass(frozen=True)
class NodeSample:
    """One node's counters at one moment."""

    evalsha_calls: int
    evalsha_usec: int
    sent_usec: int  # µs of every command clients sent (script-internal commands left out)
    sent_calls: int
    cpu: float  # used_cpu_user + used_cpu_sys, seconds (the whole process)
    cpu_main: float  # the same, main thread only
    reads: int  # total_reads_processed
    at: float  # time.monotonic()
    run_s: float  # the main thread's time on a CPU (/proc/<pid>/schedstat), seconds
    queued_s: float  # ... and its time runnable but waiting for a CPU (others had it)


def schedstat(pid: int) -> tuple[float, float]:
    """(on-CPU, waiting-for-a-CPU) seconds of the process ``pid``'s main thread, from the
    kernel's scheduler statistics; zeros where it keeps none (or the process is not local)."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
            run_ns, wait_ns, _ = stat.read().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def sample_node(client: redis.Redis) -> NodeSample:
    """The counters of the node ``client`` talks to (one INFO call), and its main thread's
    scheduler statistics (the node runs on this machine)."""
    info: Any = client.info("commandstats", "cpu", "stats", "server")
    run, queued = schedstat(int(info["process_id"]))
    stats = {k.removeprefix("cmdstat_"): v for k, v in info.items() if k.startswith("cmdstat_")}
    sent = {k: v for k, v in stats.items() if k not in SCRIPT_INNER and k != "info"}
    evalsha = stats.get("evalsha", {})
    return NodeSample(
        evalsha_calls=int(evalsha.get("calls", 0)), evalsha_usec=int(evalsha.get("usec", 0)),
        sent_usec=sum(int(v["usec"]) for v in sent.values()),
        sent_calls=sum(int(v["calls"]) for v in sent.values()),
        cpu=float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
        cpu_main=float(info.get("used_cpu_user_main_thread", 0.0))
        + float(info.get("used_cpu_sys_main_thread", 0.0)),
        reads=int(info["total_reads_processed"]), at=time.monotonic(), run_s=run,
        queued_s=queued,
    )


def node_delta(before: NodeSample, after: NodeSample) -> dict[str, float]:
    """What a node did between two samples (the later sample's own INFO left out)."""
    return {
        "evalsha_calls": after.evalsha_calls - before.evalsha_calls,
        "evalsha_usec": after.evalsha_usec - before.evalsha_usec,
        "sent_usec": after.sent_usec - before.sent_usec,
        "sent_calls": after.sent_calls - before.sent_calls,
        "cpu_s": after.cpu - before.cpu,
        "cpu_main_s": after.cpu_main - before.cpu_main,
        "reads": max(0, after.reads - before.reads - 1),
        "seconds": after.at - before.at,
        "run_s": after.run_s - before.run_s,
        "queued_s": after.queued_s - before.queued_s,
    }


def workers_cpu(master_pid: int) -> float:
    """CPU seconds (user + sys) the children of ``master_pid`` (gunicorn's workers) used."""
    ticks = sum(used for parent, used in processes().values() if parent == master_pid)
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class Backend:
    """One side of the comparison: its Redis nodes, its gateway, a client to read data."""

    name: str  # "single" or "cluster"
    url: str
    masters: dict[int, redis.Redis]  # port -> a plain client of that master (INFO)
    slots: dict[int, int]  # slot -> port of its master (empty: one server owns everything)
    gateway: Server
    data: Client  # reads activities' keys, wherever they live
    pids: list[int]  # the Valkey processes (every node of the cluster)

    def master_of(self, aid: str) -> int:
        """The port of the master that holds the activity's keys."""
        if not self.slots:
            return next(iter(self.masters))
        return self.slots[slot_of(f"{{{aid}}}")]

    def samples(self) -> dict[int, NodeSample]:
        """Every master's counters now."""
        return {port: sample_node(client) for port, client in self.masters.items()}


def slot_map(cluster: EmbeddedCluster) -> dict[int, int]:
    """Slot -> port of the master that owns it."""
    owners: dict[int, int] = {}
    for node in cluster.nodes:
        if node.role == "master":
            for low, high in node.slots:
                owners.update(dict.fromkeys(range(low, high + 1), node.port))
    return owners


def spread_ids(slots: dict[int, int], per_master: int, prefix: str = "g") -> list[str]:
    """New activity ids, ``per_master`` on each master of ``slots``, interleaved (one per master
    in turn), so that a request file that cycles through them spreads the load evenly."""
    ports = sorted(set(slots.values()))
    found: dict[int, list[str]] = {port: [] for port in ports}
    for _ in range(100_000):
        aid = f"{prefix}{uuid.uuid4().hex[:10]}"
        bucket = found[slots[slot_of(f"{{{aid}}}")]]
        if len(bucket) < per_master:
            bucket.append(aid)
        if all(len(ids) == per_master for ids in found.values()):
            return [found[port][i] for i in range(per_master) for port in ports]
    raise RuntimeError("could not find activity ids on every master")


def _pids(servers: Iterable[EmbeddedValkey]) -> list[int]:
    return [s.process.pid for s in servers if s.process is not None]


def _pin_tree(pid: int, cores: set[int]) -> None:
    """Every thread of ``pid`` and of its children onto ``cores``."""
    children = [child for child, (parent, _) in processes().items() if parent == pid]
    for each in [pid, *children]:
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{each}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), cores)


def pin(nodes: list[int], others: list[int]) -> str:
    """Valkey ``nodes`` (pids) onto the last core this process may use; the ``others``
    (gateways, with their workers) and this process (so wrk, which it starts) onto the rest:
    the gateways' CPU is then not taken by Redis, as on separate hosts. Returns what it did."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise RuntimeError("--pin needs at least 2 cores")
    redis_cores, rest = {cores[-1]}, set(cores[:-1])
    for pid in nodes:
        _pin_tree(pid, redis_cores)
    for pid in others:
        _pin_tree(pid, rest)
    os.sched_setaffinity(0, rest)
    return (f"every Valkey node on core {cores[-1]}; the gateways' gunicorn processes, wrk "
            f"and the harness on core(s) {', '.join(map(str, sorted(rest)))}")


@contextlib.contextmanager
def started_backends(folder: Path, workers: int, worker_connections: int, appendfsync: str,
                     masters: int = 3, replicas: int = 0,
                     gateway_env: dict[str, str] | None = None) -> Iterator[dict[str, Backend]]:
    """One embedded Valkey and an embedded cluster (``masters`` x (1 + ``replicas``) nodes),
    same ``appendfsync``, each with a gateway; all stopped when the block ends. The Valkey
    processes are in ``backends[...].pids``."""
    with contextlib.ExitStack() as stop:
        single = stop.enter_context(EmbeddedValkey(folder / "single", appendfsync=appendfsync))
        cluster = EmbeddedCluster(folder / "cluster", masters=masters, replicas=replicas,
                                  appendfsync=appendfsync)
        stop.enter_context(cluster)
        slots = slot_map(cluster)
        plain = redis.Redis.from_url(single.url, decode_responses=True, socket_timeout=30)
        stop.callback(plain.close)
        spread = Cluster(url=cluster.url, decode_responses=True, socket_timeout=30)
        stop.callback(spread.close)
        clients: dict[int, redis.Redis] = {}
        for port in sorted(set(slots.values())):
            clients[port] = cluster.client(port)
            stop.callback(clients[port].close)
        backends = {}
        for name, url, mode in (("single", single.url, "off"), ("cluster", cluster.url, "on")):
            side = folder / f"gateway-{name}"
            (side / "data").mkdir(parents=True)
            env = server_env(url, side, "gateway", workers, worker_connections)
            env.update({"SECKILL_REDIS_CLUSTER": mode, **(gateway_env or {})})
            server = start_gunicorn(stop, f"gateway-{name}", env, side, app="wsgi:app")
            if name == "single":
                backends[name] = Backend(name, url, {single.port: plain}, {}, server, plain,
                                         _pids([single]))
            else:
                backends[name] = Backend(name, url, clients, slots, server, spread,
                                         _pids(cluster.servers.values()))
        yield backends
